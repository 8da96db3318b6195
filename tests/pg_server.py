"""A real PostgreSQL server for the team-store tests: ``initdb`` in a temporary folder, ``pg_ctl start`` listening on
a unix socket in that folder only (no TCP port to collide with), stopped after.

The Debian package's binaries are used (``/usr/lib/postgresql/*/bin``, or ``initdb`` on PATH; ``.ci/run`` installs
``postgresql`` where they are missing). PostgreSQL refuses to run as root, and CI runs as root: the server then runs
as ``nobody`` (``setpriv``, else ``runuser``), in a folder it owns; authentication is ``trust`` over the socket.
``fsync=off``: the tests need no durability across a power cut, and it keeps the 2-core machine free for them.
Below the server: helpers of the team-store tests (reports with chosen, overlapping tensors; an exact dump of a
database to compare a pulled report with the pushed one).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any, Iterator, Sequence
from urllib.parse import quote

import numpy as np
import pytest

import reportdb

SUPERUSER = "postgres"


def pg_bin() -> Path | None:
    """The folder of PostgreSQL's server binaries, newest version first; None when there is none."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]), reverse=True)
    if found:
        return Path(found[0]).parent
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


def _as_server_user() -> tuple[list[str], int | None]:
    """The command prefix that runs a program as an unprivileged user when we are root, and that user's uid."""
    if os.geteuid() != 0:
        return [], None
    nobody = pwd.getpwnam("nobody")
    setpriv = shutil.which("setpriv")
    if setpriv:
        return [setpriv, f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups", "--"], nobody.pw_uid
    return ["runuser", "-u", "nobody", "--"], nobody.pw_uid


class PgServer:
    """One PostgreSQL cluster in its own temporary folder; ``url(db)`` is a libpq URL over its socket."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin = bin_dir
        self.prefix, uid = _as_server_user()
        self.root = Path(tempfile.mkdtemp(prefix="rdbpg-", dir="/tmp"))  # short: a socket path has ~100 bytes
        if uid is not None:
            os.chown(self.root, uid, -1)
        self.data = self.root / "data"
        self._run("initdb", "-D", str(self.data), "--auth=trust", "-U", SUPERUSER, "-E", "UTF8", "--no-sync")
        self.running = False
        self.fsync = False  # as the server was last started

    def _run(self, tool: str, *args: str) -> None:
        result = subprocess.run([*self.prefix, str(self.bin / tool), *args], capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"{tool} failed ({result.returncode}): {result.stderr.strip() or result.stdout.strip()}")

    def start(self, *, fsync: bool = False) -> None:
        options = f"-k {self.root} -c listen_addresses='' -c fsync={'on' if fsync else 'off'} -c max_connections=60"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "log"), "-w", "-t", "60", "start")
        self.running, self.fsync = True, fsync

    def stop(self, mode: str = "fast") -> None:
        if self.running:
            self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")
            self.running = False

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@/{database}?host={quote(str(self.root), safe='/')}"

    def create_database(self) -> str:
        """A new empty database's URL (each test its own store)."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def close(self) -> None:
        try:
            self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def start_server() -> PgServer:
    """A running server, or a skip saying why there can be none here."""
    bin_dir = pg_bin()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server binaries (initdb): `apt-get install postgresql` (.ci/run does)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed: pip install 'reportdb[team]'")
    server = PgServer(bin_dir)
    try:
        server.start()
    except BaseException:
        server.close()
        raise
    return server


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One server for the whole session."""
    server = start_server()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def team_url(pg_server: PgServer) -> str:
    """A fresh, empty team store (its own database on the session's server)."""
    return pg_server.create_database()


# --- helpers of the team-store tests ----------------------------------------------------------------------------


def make_report(folder: Path, *, seed: int, shared: Sequence[np.ndarray] = (), own: int = 2,
                shape: tuple[int, ...] = (128, 256), chunk_size: int = 32 << 10, operations: int = 3) -> Path:
    """A report folder with the ``shared`` arrays (tensor ids 1..), ``own`` random ones of its own (ids 100..) cut
    into small chunks (many chunks without much data), and a few operations with golden comparison records."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    with reportdb.open(folder, "a", chunk_size=chunk_size) as report:
        for i, array in enumerate(shared):
            report.put_tensor(i + 1, array, layout="TILE", ttnn_dtype="FLOAT32")
        for j in range(own):
            report.put_tensor(100 + j, rng.standard_normal(shape).astype(np.float32))
        with report.connection() as conn:
            for op in range(1, operations + 1):
                conn.execute("INSERT INTO operations (operation_id, name, duration) VALUES (?, ?, ?)",
                             (op, f"ttnn.op{op}", 0.001 * op))
                conn.execute("INSERT INTO output_tensors (operation_id, output_index, tensor_id) VALUES (?, 0, ?)",
                             (op, 100 + op))
                conn.execute("INSERT INTO local_tensor_comparison_records (tensor_id, golden_tensor_id, matches,"
                             " desired_pcc, actual_pcc) VALUES (?, ?, 1, 0.99, ?)", (100 + op, 200 + op, 0.999 - seed * 1e-4))
    return folder


def shared_arrays(n: int, shape: tuple[int, ...] = (128, 256), seed: int = 12345) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


def dump(db: Path) -> dict[str, Any]:
    """Everything of a database that must come back from a pull: tables and indexes as created, every row with its
    rowid and each value's storage class, page size and user_version."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        out: dict[str, Any] = {
            "schema": sorted(conn.execute(
                "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE type IN ('table', 'index')").fetchall(),
                key=repr),
            "page_size": conn.execute("PRAGMA page_size").fetchone()[0],
            "user_version": conn.execute("PRAGMA user_version").fetchone()[0],
        }
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
            quoted = '"' + name.replace('"', '""') + '"'
            try:
                rows = conn.execute(f"SELECT rowid, * FROM {quoted} ORDER BY rowid").fetchall()
            except sqlite3.OperationalError:  # WITHOUT ROWID: its primary key orders it
                rows = conn.execute(f"SELECT * FROM {quoted}").fetchall()
            out[f"rows:{name}"] = [tuple((type(v).__name__, v) for v in row) for row in rows]
        return out
    finally:
        conn.close()


def chunk_keys(db: Path) -> set[tuple[bytes, str, int]]:
    """The (content address, codec, crc32) keys of a report's chunks, as the store keys them."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        has_codec = any(r[1] == "codec" for r in conn.execute("PRAGMA table_info(rdb_chunk)"))
        sql = f"SELECT digest, {'codec' if has_codec else 'NULL'}, crc32 FROM rdb_chunk"
        return {(bytes(d), c or "", crc) for d, c, crc in conn.execute(sql)}
    finally:
        conn.close()


def store_count(url: str, sql: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(sql.encode()).fetchone()
        return int(row[0]) if row else 0


#: The script :func:`start_pusher` runs.
PUSHER = r'''
import importlib, json, os, signal, sys, time
from reportdb import team
push_mod = importlib.import_module("reportdb.team.push")
push_mod.BATCH_BYTES = int(os.environ["BATCH_BYTES"])
mode = os.environ.get("MODE", "")
def progress(done, total):
    if mode == "kill" and done:
        os.kill(os.getpid(), signal.SIGKILL)  # a real SIGKILL, after the first batch committed
    if mode == "slow" and done:
        print("batch", flush=True)
        time.sleep(float(os.environ.get("PAUSE", "0.3")))
result = team.push(sys.argv[1], os.environ["STORE_URL"], name=sys.argv[2], jobs=int(os.environ.get("JOBS", "1")),
                   progress=progress)
print(json.dumps({"created": result.created, "uploaded": result.chunks_uploaded, "chunks": result.chunks}), flush=True)
'''


def start_pusher(tmp_path: Path, report: Path, url: str, name: str, *, batch: int = 1 << 20, mode: str = "", jobs: int = 1,
            pause: float = 0.3) -> subprocess.Popen[str]:
    """``team.push`` of ``report`` as ``name`` in a process of its own: ``mode`` "kill" SIGKILLs it after its first
    batch commits, "slow" pauses ``pause`` seconds after each batch (printing "batch")."""
    script = tmp_path / "pusher.py"
    if not script.exists():  # written once: a process starting while it is rewritten would read it empty
        script.write_text(PUSHER)
    env = dict(os.environ, STORE_URL=url, BATCH_BYTES=str(batch), MODE=mode, JOBS=str(jobs), PAUSE=str(pause))
    return subprocess.Popen([sys.executable, str(script), str(report), name], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
