"""Fuzz the team commands with hostile inputs: rank reports for ``merge``, stores tampered in PostgreSQL for ``pull``.

``merge``: a real rank report (written by the Writer, sharing a replicated tensor's content addresses with the honest
rank) is mutated as an attacker would: reportdb's tables renamed to case-folded names (SQLite's names are
case-insensitive), chunk bytes changed with their crc32 kept or not, lone chunk rows under the honest rank's
addresses, tensor, blob and meta rows changed or deleted. Merged with the honest rank, only two outcomes are allowed:
a ReportDBError with nothing left behind, or a merged report whose honest-rank tensors are exactly the honest values
and which ``verify`` passes.

``pull``: a pushed report's rows in a real PostgreSQL store are changed as anyone with write access to the store could:
chunk bytes (flipped, or forged with their crc32 kept), swapped chunk references, edited, dropped or added row parts,
table definitions, column lists, rowid flags, file facts, the digest. Pulled, the store must either be refused with
a ReportDBError leaving nothing at the destination, or give back exactly the pushed report; a remote read of each
tensor must give a ReportDBError or the pushed values.

Each loop runs in a subprocess whose address space is capped at 2 GiB, each case under a time limit (a hang is a
failure), as ``test_fuzz.py`` runs its readers. Tampering is the harness's own work, outside the time limit.
"""

from __future__ import annotations

import json
import os
import random
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # run as a script (the worker), conftest is not on the path
from tamper import keep_crc

MERGE_CASES, PULL_CASES = 40, 40
SEED = 20261201
CASE_SECONDS = 30.0  # generous: the machine is shared; a hang runs into it, a slow case does not
ADDRESS_SPACE = 2 << 30
OWN_TABLES = ["rdb_chunk", "rdb_blob", "rdb_blob_chunk", "rdb_tensor", "rdb_shard", "rdb_stats", "rdb_meta",
              "rdb_chunk_crc", "reportdb_alembic_version"]


class _Hang(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _Hang()


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _timed(run: Callable[[], None]) -> str | None:
    """Run one case's code under the time limit: None when it succeeded or raised a ReportDBError, else the failure."""
    from reportdb.errors import ReportDBError

    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    try:
        run()
        return None
    except ReportDBError:
        return None
    except BaseException as exc:  # the point is to catch anything else
        traceback.print_exc(limit=6)
        return "hang" if isinstance(exc, _Hang) else f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


# --- merge --------------------------------------------------------------------------------------------------------


def write_ranks(folder: Path) -> tuple[Path, Path]:
    """The honest rank 0 and the rank 1 the cases mutate: the Writer's files, tensor 3 replicated (one address on both
    ranks), tensor 5 big enough for block crcs, tensor 6 zstd-compressed."""
    import reportdb

    x = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)
    paths = []
    for rank in range(2):
        (folder / f"rank{rank}").mkdir(parents=True)
        path = folder / f"rank{rank}" / "db.sqlite"
        with reportdb.Writer(path, rank=rank, chunk_size=8192) as w:
            w.put_tensor(3, x)
            w.put_tensor(4, x * (rank + 2))
            w.put_tensor(5, np.linspace(0, 1, 64 * 64, dtype=np.float32).reshape(64, 64) + rank)
            w.add_operation(1, "ttnn.add", inputs=[3, 4], outputs=[5])
        with reportdb.open(path, "a", compression="zstd") as r:
            r.put_tensor(6, np.zeros((64, 64), np.float32) + rank, rank=rank)
        paths.append(path)
    return paths[0], paths[1]


def _case_variant(name: str, rng: random.Random) -> str:
    while True:
        variant = "".join(c.upper() if rng.random() < 0.5 else c for c in name)
        if variant != name:
            return variant


def _rename(conn: sqlite3.Connection, rng: random.Random, honest: list[bytes]) -> str:
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    table = rng.choice([t for t in OWN_TABLES if t in tables])
    variant = _case_variant(table, rng)
    conn.execute(f'ALTER TABLE "{table}" RENAME TO fuzz_tmp')
    conn.execute(f'ALTER TABLE fuzz_tmp RENAME TO "{variant}"')
    return f"rename {variant}"


def _forge(conn: sqlite3.Connection, rng: random.Random, honest: list[bytes]) -> str:
    chunk_id, data, crc = rng.choice(conn.execute("SELECT id, data, crc32 FROM rdb_chunk").fetchall())
    changed = bytearray(data)
    changed[:4] = b"\x00\x00\x80\x44"  # 1024.0
    kept = len(changed) >= 8 and rng.random() < 0.7
    if kept:
        keep_crc(changed, 4, crc)
    conn.execute("UPDATE rdb_chunk SET data = ? WHERE id = ?", (bytes(changed), chunk_id))
    return f"forge chunk {chunk_id}{' crc kept' if kept else ''}"


def _lone(conn: sqlite3.Connection, rng: random.Random, honest: list[bytes]) -> str:
    import zlib

    bad = np.full(rng.choice([1024, 2048]), 1024.0, np.float32).tobytes()
    address = rng.choice(honest)
    conn.execute("DELETE FROM rdb_chunk WHERE digest = ? AND id NOT IN (SELECT chunk_id FROM rdb_blob_chunk)", (address,))
    conn.execute("INSERT OR REPLACE INTO rdb_chunk (digest, nbytes, crc32, data) VALUES (?, ?, ?, ?)",
                 (address, len(bad), zlib.crc32(bad), bad))
    return "chunk under an honest address"


def _rows(conn: sqlite3.Connection, rng: random.Random, honest: list[bytes]) -> str:
    table, column, value = rng.choice([
        ("rdb_tensor", "tensor_id", 3), ("rdb_tensor", "rank", 0), ("rdb_tensor", "nbytes", "x"),
        ("rdb_tensor", "dtype", "float64"), ("rdb_tensor", "shape", "[2, 2]"), ("rdb_shard", "blob_id", 1),
        ("rdb_shard", "shape", "[1048576]"), ("rdb_blob", "nbytes", 1 << 40), ("rdb_blob", "digest", b"\0" * 32),
        ("rdb_blob_chunk", "chunk_id", 1), ("rdb_chunk", "nbytes", 4), ("rdb_chunk", "codec", "zstd"),
        ("rdb_meta", "value", "sha256"), ("rdb_chunk_crc", "crcs", b"\0" * 8), ("report_metadata", "value", "0"),
    ])
    keys = [str(c[1]) for c in conn.execute(f"PRAGMA table_info({table})") if c[5]] or ["rowid"]  # WITHOUT ROWID too
    found = conn.execute(f"SELECT {', '.join(keys)} FROM {table}").fetchall()
    if not found:
        return f"no {table} row"
    key = rng.choice(found)
    where = " AND ".join(f"{k} = ?" for k in keys)
    if rng.random() < 0.2:
        conn.execute(f"DELETE FROM {table} WHERE {where}", key)
        return f"delete {table} {key}"
    changed = conn.execute(f"UPDATE OR IGNORE {table} SET {column} = ? WHERE {where}", (value, *key))
    return f"{table}.{column} = {value!r}" + ("" if changed.rowcount else " (ignored)")


MUTATIONS = [_rename, _forge, _lone, _rows]


def merge_worker(honest: Path, base: Path, cases: int, seed: int, scratch: Path) -> int:
    """Merge ``cases`` mutations of rank report ``base`` with ``honest``; print each failure; return how many."""
    import reportdb
    from reportdb import team

    rng = random.Random(seed)
    with reportdb.open(honest) as r:
        values = {k: r.tensor(*k) for k in r.tensor_keys()}
    conn = sqlite3.connect(honest)
    addresses = [bytes(a) for (a,) in conn.execute("SELECT digest FROM rdb_chunk")]
    conn.close()
    signal.signal(signal.SIGALRM, _alarm)
    failures = refused = 0
    for case in range(cases):
        folder = scratch / f"case{case}"
        folder.mkdir()
        hostile = folder / "rank1.sqlite"
        shutil.copyfile(base, hostile)
        conn = sqlite3.connect(hostile)
        with conn:
            what = ", ".join(m(conn, rng, addresses) for m in rng.sample(MUTATIONS, rng.randint(1, 3)))
        conn.close()
        out = folder / "merged"

        def run() -> None:
            nonlocal refused
            try:
                team.merge([honest, hostile], out, ranks=[0, 1])
            except reportdb.ReportDBError:
                refused += 1
                left = sorted(p.name for p in folder.iterdir() if p.name != hostile.name)
                assert not left, f"a refused merge left {left}"
                raise
            with reportdb.open(out) as merged:
                for (tensor_id, _), array in values.items():
                    got = merged.tensor(tensor_id, 0)
                    assert got.dtype == array.dtype and np.array_equal(got, array), f"honest tensor {tensor_id} changed"
            assert reportdb.verify(out).ok, "the merged report fails verify"

        failure = _timed(run)
        if failure is not None:
            failures += 1
            print(f"case {case} ({what}): {failure}", file=sys.stderr, flush=True)
        shutil.rmtree(folder, ignore_errors=True)
    print(f"{cases} merge cases: {cases - refused} merged, {refused} refused, {failures} failures", flush=True)
    return failures


# --- pull ---------------------------------------------------------------------------------------------------------

_TABLES = ["team_report", "team_table", "team_rows", "team_report_chunk", "team_chunk", "team_history"]


def _one(conn: Any, sql: str, params: Any = ()) -> Any:
    return conn.execute(sql.encode(), params).fetchone()


def _chunk_bytes(pg: Any, rng: random.Random) -> str:
    digest, data, crc = _one(pg, "SELECT digest, data, crc32 FROM team_chunk ORDER BY random() LIMIT 1")
    changed = bytearray(data)
    at = rng.randrange(len(changed) - 8)
    kept = rng.random() < 0.6
    changed[at] ^= 1 << rng.randrange(8)
    if kept:
        keep_crc(changed, at + 1 if at + 5 <= len(changed) else at - 4, crc)
    pg.execute("UPDATE team_chunk SET data = %s WHERE digest = %s", (bytes(changed), digest))
    return f"chunk byte {at}{' crc kept' if kept else ''}"


def _swap_refs(pg: Any, rng: random.Random) -> str:
    rows = pg.execute("SELECT chunk_id, digest, crc32, codec, nbytes FROM team_report_chunk ORDER BY random() LIMIT 2").fetchall()
    (a, da, ca, xa, na), (b, db, cb, xb, nb) = rows
    pg.execute("UPDATE team_report_chunk SET digest = %s, crc32 = %s, codec = %s, nbytes = %s WHERE chunk_id = %s",
               (db, cb, xb, nb, a))
    pg.execute("UPDATE team_report_chunk SET digest = %s, crc32 = %s, codec = %s, nbytes = %s WHERE chunk_id = %s",
               (da, ca, xa, na, b))
    return f"chunk refs {a} <-> {b}"


def _edit_cell(value: Any, rng: random.Random) -> Any:
    if isinstance(value, bool) or value is None:
        return rng.choice([0, "x", None if value is not None else 1])
    if isinstance(value, int):
        return value + rng.choice([1, -1, 1 << 40])
    if isinstance(value, float):
        return value * 2 + 1
    if isinstance(value, str):
        return value + "x"
    return {"b": "AAAA"}


def _rows_part(pg: Any, rng: random.Random) -> str:
    ord_, part, data = _one(pg, "SELECT table_ord, part, data FROM team_rows ORDER BY random() LIMIT 1")
    rows = json.loads(bytes(data))
    kind = rng.choice(["cell", "drop row", "add row", "drop part"])
    if kind == "drop part":
        pg.execute("DELETE FROM team_rows WHERE table_ord = %s AND part = %s", (ord_, part))
        return f"rows of table #{ord_}: part dropped"
    if kind == "cell" and rows and rows[0]:
        row = rng.choice(rows)
        at = rng.randrange(len(row))
        row[at] = _edit_cell(row[at], rng)
    elif kind == "drop row" and rows:
        rows.pop(rng.randrange(len(rows)))
    elif rows:
        extra = list(rng.choice(rows))
        extra[0] = extra[0] + 100_000 if isinstance(extra[0], int) else extra[0]
        rows.append(extra)
    pg.execute("UPDATE team_rows SET data = %s WHERE table_ord = %s AND part = %s",
               (json.dumps(rows).encode(), ord_, part))
    return f"rows of table #{ord_}: {kind}"


def _table_def(pg: Any, rng: random.Random) -> str:
    sql, what = rng.choice([
        ("UPDATE team_table SET ddl = regexp_replace(ddl, '\\(', '(planted INTEGER DEFAULT 7, ') WHERE ord = %s",
         "column added"),
        ("UPDATE team_table SET columns = (SELECT jsonb_agg(c ORDER BY n DESC) FROM jsonb_array_elements(columns)"
         " WITH ORDINALITY AS t(c, n)) WHERE ord = %s AND jsonb_array_length(columns) > 1", "columns reversed"),
        ("UPDATE team_table SET has_rowid = NOT has_rowid WHERE ord = %s", "rowid flag flipped"),
        ("UPDATE team_table SET kind = 'index' WHERE ord = %s AND kind = 'table'", "kind changed"),
    ])
    (count,) = _one(pg, "SELECT COUNT(*) FROM team_table")
    ord_ = rng.randrange(count)
    pg.execute(sql.encode(), (ord_,))
    return f"table #{ord_}: {what}"


def _facts(pg: Any, rng: random.Random) -> str:
    sql, what = rng.choice([
        ("UPDATE team_report SET info = info || '{\"page_size\": 65536}'::jsonb", "page size"),
        ("UPDATE team_report SET info = info || '{\"user_version\": 5}'::jsonb", "user_version"),
        ("UPDATE team_report SET digest = overlay(digest placing '\\xff'::bytea from 3 for 1)", "digest"),
        ("UPDATE team_report_chunk SET nbytes = nbytes - 1 WHERE chunk_id = (SELECT min(chunk_id) FROM"
         " team_report_chunk)", "chunk size"),
        ("DELETE FROM team_report_chunk WHERE chunk_id = (SELECT max(chunk_id) FROM team_report_chunk)", "chunk ref dropped"),
    ])
    pg.execute(sql.encode())
    return what


TAMPERS = [_chunk_bytes, _swap_refs, _rows_part, _table_def, _facts]


def _restore(pg: Any) -> None:
    """The store as pushed again, from the ``fuzz_*`` copies the test made of its tables."""
    with pg.transaction():
        pg.execute(f"TRUNCATE {', '.join(_TABLES)} CASCADE".encode())
        for table in _TABLES:
            pg.execute(f"INSERT INTO {table} SELECT * FROM fuzz_{table}".encode())


def pull_worker(url: str, original: Path, cases: int, seed: int, scratch: Path) -> int:
    """Pull ``cases`` tamperings of report ``r`` of store ``url`` (pushed from ``original``); print each failure."""
    import psycopg

    import reportdb
    from reportdb import team
    from pg_server import dump

    rng = random.Random(seed)
    expected = dump(original)
    with reportdb.open(original) as r:
        values = {k: r.tensor(*k) for k in r.tensor_keys()}
    signal.signal(signal.SIGALRM, _alarm)
    failures = refused = 0
    with psycopg.connect(url, autocommit=True) as pg:
        for case in range(cases):
            _restore(pg)
            with pg.transaction():
                what = ", ".join(t(pg, rng) for t in rng.sample(TAMPERS, rng.randint(1, 2)))
            out = scratch / f"case{case}"

            def run() -> None:
                nonlocal refused
                try:
                    pulled = team.pull(url, "r", out)
                except reportdb.ReportDBError:
                    refused += 1
                    assert not out.exists(), "a refused pull left its destination behind"
                    raise
                assert dump(Path(pulled.path)) == expected, "pulled, and not the report that was pushed"

            def remote() -> None:
                with reportdb.open(team.report_url(url, "r")) as report:
                    for key, array in values.items():
                        try:
                            got = report.tensor(*key)
                        except reportdb.ReportDBError:
                            continue
                        assert np.array_equal(got, array), f"tensor {key} read remotely, and not as pushed"

            for name, check in (("pull", run), ("remote", remote)):
                failure = _timed(check)
                if failure is not None:
                    failures += 1
                    print(f"case {case} ({what}), {name}: {failure}", file=sys.stderr, flush=True)
            shutil.rmtree(out, ignore_errors=True)
    print(f"{cases} pull cases: {cases - refused} pulled as pushed, {refused} refused, {failures} failures", flush=True)
    return failures


# --- the tests ----------------------------------------------------------------------------------------------------


def _run_worker(args: list[str], what: str) -> None:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    started = time.monotonic()
    proc = subprocess.run([sys.executable, __file__, *args], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=900, preexec_fn=_limit_memory)
    assert proc.returncode == 0, f"{what} fuzz failures:\n{proc.stdout}\n{proc.stderr[-6000:]}"
    print(proc.stdout.strip(), f"in {time.monotonic() - started:.1f} s")


@pytest.mark.process
def test_fuzz_hostile_rank_reports_for_merge(tmp_path: Path) -> None:
    honest, hostile = write_ranks(tmp_path / "ranks")
    (tmp_path / "scratch").mkdir()
    _run_worker(["merge", str(honest), str(hostile), str(MERGE_CASES), str(SEED), str(tmp_path / "scratch")], "merge")


@pytest.mark.process
@pytest.mark.service
def test_fuzz_stores_tampered_in_postgresql_for_pull(team_url: str, tmp_path: Path) -> None:
    import psycopg

    import reportdb
    from pg_server import make_report
    from reportdb import team

    src = make_report(tmp_path / "src", seed=1)
    with reportdb.open(src, "a", compression="zstd") as report:
        report.put_tensor(7, np.zeros((64, 64), np.float32))  # compressed, in the same report
    team.push(src, team_url, name="r")
    with psycopg.connect(team_url, autocommit=True) as pg:
        for table in _TABLES:
            pg.execute(f"CREATE TABLE fuzz_{table} AS SELECT * FROM {table}".encode())
    (tmp_path / "scratch").mkdir()
    _run_worker(["pull", team_url, str(src / "db.sqlite"), str(PULL_CASES), str(SEED), str(tmp_path / "scratch")], "pull")


def _main(argv: list[str]) -> int:
    if argv[0] == "merge":
        return 1 if merge_worker(Path(argv[1]), Path(argv[2]), int(argv[3]), int(argv[4]), Path(argv[5])) else 0
    return 1 if pull_worker(argv[1], Path(argv[2]), int(argv[3]), int(argv[4]), Path(argv[5])) else 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
