"""Fuzz the readers with mutated real inputs: only ReportDBError (or success) may come out.

Tensor files: every fixture file (``*/files/*`` and report ``tensors/*``, ``.pt`` included) is mutated
with bit flips, truncations, garbage and extreme values written over size-like fields, and byte
insertions/deletions, from a fixed seed. Report databases: a report migrated from a real legacy folder
is mutated page by page and byte by byte, in its schema (``sqlite_master`` rewritten: views in place of
tables, other column lists, triggers, broken SQL) and in reportdb's own rows (shapes, sizes, digests,
codecs, dtypes, deleted rows), then opened and read through the public API.

Each loop runs in a subprocess whose address space is capped at 2 GiB, so a reader that trusted a size
and allocated from it fails loudly instead of swapping the machine; each case has a time limit, so a
hang is reported as such. The harness's own I/O (writing a scratch file, copying a database) is kept
apart from the reader's: a disk-full there fails the test as an environment problem, never counts as a
reader failure.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import random
import resource
import selectors
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # run as a script (the worker), conftest is not on the path
from conftest import fixture_roots

CASES = 10_000
SEED = 20240405
CASE_SECONDS = 5.0
ADDRESS_SPACE = 2 << 30
EXTREMES = [0, 1, 7, 8, 9, 255, 2**16 - 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63, 2**64 - 1]


#: Exit status of a worker whose own I/O failed (disk full, unwritable scratch folder): not a reader failure.
ENVIRONMENT_EXIT = 3


def fixture_files() -> list[Path]:
    """Every real tensor file the readers accept, in every fixture root."""
    files = []
    for root in fixture_roots():
        files += sorted(root.glob("*/files/*")) + sorted(root.glob("*/report/tensors/*"))
    return [f for f in files if f.is_file()]


class HarnessIOError(Exception):
    """The fuzz harness itself could not write or copy a file: the environment, not the code under test."""


@contextlib.contextmanager
def harness_io(what: str) -> Any:
    """Turn an OSError (or SQLite's disk-full/I-O errors) of the harness's own file work into HarnessIOError."""
    try:
        yield
    except OSError as exc:
        raise HarnessIOError(f"{what}: {exc}") from exc
    except sqlite3.OperationalError as exc:
        if any(word in str(exc) for word in ("disk is full", "disk I/O", "unable to open")):
            raise HarnessIOError(f"{what}: {exc}") from exc
        raise


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One random corruption of ``data``."""
    buf = bytearray(data)
    kind = rng.randrange(6)
    if kind == 0 or not buf:  # truncate
        return bytes(buf[: rng.randrange(len(buf) + 1)])
    if kind == 1:  # flip a few bits, mostly in the header
        for _ in range(rng.randint(1, 8)):
            limit = len(buf) if rng.random() < 0.3 else min(len(buf), 512)
            buf[rng.randrange(limit)] ^= 1 << rng.randrange(8)
        return bytes(buf)
    if kind == 2:  # an extreme or random value over a size-like field
        width = rng.choice([1, 2, 4, 8])
        pos = rng.randrange(min(len(buf), 600))
        value = rng.choice(EXTREMES) if rng.random() < 0.6 else rng.getrandbits(8 * width)
        order = rng.choice(["little", "big"])
        buf[pos : pos + width] = (value % (1 << (8 * width))).to_bytes(width, order)  # type: ignore[arg-type]
        return bytes(buf)
    if kind == 3:  # garbage run
        pos = rng.randrange(len(buf))
        buf[pos : pos + rng.randint(1, 64)] = rng.randbytes(rng.randint(1, 64))
        return bytes(buf)
    if kind == 4:  # delete or insert bytes
        pos = rng.randrange(len(buf))
        if rng.random() < 0.5:
            del buf[pos : pos + rng.randint(1, 16)]
        else:
            buf[pos:pos] = rng.randbytes(rng.randint(1, 16))
        return bytes(buf)
    return bytes(buf) + rng.randbytes(rng.randint(1, 32))  # trailing garbage


class _Hang(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _Hang()


def worker(cases: int, seed: int) -> int:
    """Run the fuzz loop; print each failure; return the number of failures."""
    from reportdb.errors import ReportDBError
    from reportdb.formats import _parse, load_tensor_file

    rng = random.Random(seed)
    with harness_io("reading the fixtures"):
        files = [(path, path.read_bytes()) for path in fixture_files()]
    signal.signal(signal.SIGALRM, _alarm)
    failures = 0
    done = {"ok": 0, "error": 0}
    with harness_io("making a scratch folder"):
        scratch_dir = tempfile.TemporaryDirectory()
    with scratch_dir as tmp:
        scratch = Path(tmp) / "case"
        for case in range(cases):
            path, data = files[case % len(files)]
            mutated = mutate(data, rng)
            through_file = path.suffix == ".pt" or case % 10 == 0
            if through_file:
                with harness_io(f"writing the scratch file {scratch}"):
                    scratch.write_bytes(mutated)
            signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
            try:
                if through_file:
                    loaded = load_tensor_file(scratch)
                else:
                    loaded = _parse(np.frombuffer(mutated, dtype=np.uint8))
                loaded.array  # assembling may only fail with AssemblyError
                done["ok"] += 1
            except ReportDBError:
                done["error"] += 1
            except BaseException as exc:  # the point is to catch anything else
                failures += 1
                kind = "hang" if isinstance(exc, _Hang) else type(exc).__name__
                print(f"case {case} ({path.name}): {kind}", file=sys.stderr)
                traceback.print_exc(limit=4)
                if failures > 20:
                    break
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
    print(f"{cases} cases: {done['ok']} loaded, {done['error']} rejected, {failures} failures")
    return failures


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _environment_failure(proc_stdout: str, proc_stderr: str) -> None:
    """Fail the test as an environment problem, clearly apart from reader failures."""
    pytest.fail(
        "ENVIRONMENT PROBLEM, not a reader failure: the fuzz harness could not do its own file work "
        f"(disk full? scratch folder not writable?):\n{proc_stdout[-2000:]}\n{proc_stderr[-2000:]}",
        pytrace=False,
    )


@pytest.mark.process
def test_fuzz_mutated_fixtures() -> None:
    assert len(fixture_files()) > 100
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, __file__, "files", str(CASES), str(SEED)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_limit_memory,
    )
    elapsed = time.monotonic() - started
    if proc.returncode == ENVIRONMENT_EXIT:
        _environment_failure(proc.stdout, proc.stderr)
    assert proc.returncode == 0, f"fuzz failures:\n{proc.stdout}\n{proc.stderr[-6000:]}"
    assert f"{CASES} cases" in proc.stdout
    print(proc.stdout.strip(), f"in {elapsed:.1f} s")


@pytest.mark.process
def test_harness_disk_errors_are_not_reader_failures() -> None:
    """A scratch write the disk refuses (here: a 4 KiB file size limit, EFBIG) ends the worker with
    ENVIRONMENT_EXIT and says so; it is not counted as a reader failure."""

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, __file__, "files", "500", str(SEED)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120, preexec_fn=small_files)
    assert proc.returncode == ENVIRONMENT_EXIT, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    assert "ENVIRONMENT PROBLEM" in proc.stderr and "failures" not in proc.stdout


# ---------------------------------------------------------------------------------------------
# Report databases

DB_SOURCE = "ttnn-0.62.2-bin"
DB_CASES = 80  # the fast tier's share (about 7 s); CI also runs the slow 2000
DB_SLOW_CASES = 2000
DB_SEED = 20250611
DB_CASE_SECONDS = 5.0
#: reportdb stops a statement after 10 s; the worker lowers that (the real bound, set lower) to fit a case.
DB_STATEMENT_SECONDS = 1.0
_PAGE_HEADER = 12
_EXTREME_INTS = [0, -1, 1, 2**31 - 1, 2**31, 2**32, 2**53 + 1, 2**62, 2**63 - 1, -(2**63)]
_BAD_JSON = [
    "[-1, 4]", "[4294967296, 4294967296]", "[9223372036854775807, 2]", "[1e308]", "not json", "[[[[1]]]]",
    "[" * 100_000 + "]" * 100_000, "[" * 1_000_000, '{"a": 1}', "[1.5, 2]", "[true]", "[]", "null", None, '"[1, 2]"',
    "[0]", "[0, 4294967296]", 12345, b"\x00\xff", "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, "
    "20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, "
    "49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65]", "[" + ", ".join(["1"] * 5000) + "]",
]
_BAD_DTYPES = ["bogus", "object", "float128", "<V2", "", "O", "complex64", "int4", "uint64", "float8_e4m3fn", None, 7]
_BAD_CODECS = ["bogus", "zstd", "", "ZSTD", "none", None, 3]
_ROW_COLUMNS = {
    "rdb_tensor": {"shape": _BAD_JSON, "padded_shape": _BAD_JSON, "tile_shape": _BAD_JSON, "memory_config": _BAD_JSON,
                   "distribution": _BAD_JSON, "source": _BAD_JSON, "dtype": _BAD_DTYPES, "ttnn_dtype": _BAD_DTYPES,
                   "nbytes": [*_EXTREME_INTS, "x", 1.5, b"\x00"], "n_shards": _EXTREME_INTS, "rank": _EXTREME_INTS,
                   "layout": ["bogus", None, 5]},
    "rdb_shard": {"shape": _BAD_JSON, "mesh_coordinate": _BAD_JSON, "dtype": _BAD_DTYPES, "blob_id": _EXTREME_INTS,
                  "shard_index": _EXTREME_INTS},
    "rdb_blob": {"nbytes": _EXTREME_INTS, "chunk_size": _EXTREME_INTS, "n_chunks": _EXTREME_INTS,
                 "digest": [b"\x00" * 32, b"", "text", None]},
    "rdb_chunk": {"nbytes": _EXTREME_INTS, "crc32": _EXTREME_INTS, "codec": _BAD_CODECS,
                  "digest": [b"\x01" * 32, b"\x00", None], "data": [b"", b"\x00", "text", 0]},
    "rdb_blob_chunk": {"idx": _EXTREME_INTS, "chunk_id": _EXTREME_INTS},
    "rdb_stats": {"histogram": _BAD_JSON, "count": _EXTREME_INTS, "dtype": _BAD_DTYPES, "min": ["x", None, 1e308]},
    "rdb_meta": {"value": _BAD_JSON},
}


def _mutate_bytes(path: Path, rng: random.Random, page_size: int) -> str:
    """Damage the file: page headers, cell bytes, cell pointers, whole pages, the 100-byte file header, its length."""
    with harness_io(f"damaging {path}"):
        data = bytearray(path.read_bytes())
        pages = max(1, len(data) // page_size)
        page = rng.randrange(pages)
        start = page * page_size + (100 if page == 0 else 0)
        kind = rng.choice(["page-header", "cells", "cell-pointers", "zero-page", "copy-page", "file-header",
                           "truncate", "scatter"])
        if kind == "page-header":
            for _ in range(rng.randint(1, 4)):
                data[start + rng.randrange(_PAGE_HEADER)] ^= 1 << rng.randrange(8)
        elif kind == "cells":
            at = start + rng.randrange(page_size - (start % page_size) - 64)
            data[at : at + 64] = rng.randbytes(rng.randint(1, 64)).ljust(64, b"\x00")
        elif kind == "cell-pointers":
            cells = int.from_bytes(data[start + 3 : start + 5], "big")
            for _ in range(rng.randint(1, 3)):
                at = start + 8 + 2 * rng.randrange(max(1, min(cells, 64)))
                data[at : at + 2] = rng.choice([0, 1, 0xFFFF, page_size - 1, rng.randrange(1 << 16)]).to_bytes(2, "big")
        elif kind == "zero-page":
            data[page * page_size : (page + 1) * page_size] = bytes(page_size)
        elif kind == "copy-page":
            other = rng.randrange(pages)
            data[page * page_size : (page + 1) * page_size] = data[other * page_size : (other + 1) * page_size]
        elif kind == "file-header":
            at = rng.choice([16, 18, 19, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60, 64, 92, 96, rng.randrange(100)])
            data[at : at + 4] = rng.choice([0, 1, 2**31 - 1, 2**32 - 1, rng.getrandbits(32)]).to_bytes(4, "big")
        elif kind == "truncate":
            data = data[: rng.choice([page * page_size, rng.randrange(len(data)), 100, 0])]
        else:
            for _ in range(rng.randint(1, 32)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(data))
    return f"bytes:{kind}@page{page}"


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


def _mutate_schema(path: Path, rng: random.Random) -> str:
    """Rewrite ``sqlite_master``: a view in place of a table, another column list, triggers, broken SQL."""
    with harness_io(f"rewriting the schema of {path}"), contextlib.closing(sqlite3.connect(path)) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        rdb = [t for t in tables if t.startswith("rdb_")]
        table = rng.choice(rdb if rng.random() < 0.7 else tables)
        columns = _columns(conn, table)
        kind = rng.choice(["view", "endless-view", "columns-dropped", "columns-swapped", "column-added",
                           "no-rowid-alias", "trigger", "index", "broken-sql", "duplicate-name", "rootpage",
                           "case-folded-view", "case-folded-trigger", "generated-column", "expensive-view"])
        if kind in _HOSTILE_SQL_KINDS:
            return _hostile_sql(conn, rng, kind, tables)
        conn.execute("PRAGMA writable_schema=ON")
        if kind in ("view", "endless-view"):
            picked = ", ".join(f"{'x' if kind == 'endless-view' else repr(i)} AS {c}" for i, c in enumerate(columns))
            body = (f"WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT {picked} FROM n"
                    if kind == "endless-view" else f"SELECT {picked}")
            conn.execute("UPDATE sqlite_master SET type='view', rootpage=0, sql=? WHERE name=?",
                         (f"CREATE VIEW {table} AS {body}", table))
            conn.execute("DELETE FROM sqlite_master WHERE type='index' AND tbl_name=?", (table,))
        elif kind.startswith("column"):
            kept = columns[:-1] if kind == "columns-dropped" else columns
            if kind == "columns-swapped" and len(kept) > 1:
                i, j = rng.sample(range(len(kept)), 2)
                kept[i], kept[j] = kept[j], kept[i]
            if kind == "column-added":
                kept = [*kept, "extra TEXT DEFAULT 'x'"]
            conn.execute("UPDATE sqlite_master SET sql=? WHERE name=?", (f"CREATE TABLE {table} ({', '.join(kept)})", table))
        elif kind == "no-rowid-alias":
            sql = conn.execute("SELECT sql FROM sqlite_master WHERE name=?", (table,)).fetchone()[0]
            conn.execute("UPDATE sqlite_master SET sql=? WHERE name=?",
                         (sql.replace("INTEGER PRIMARY KEY", "INTEGER").replace("PRIMARY KEY (", "UNIQUE ("), table))
        elif kind == "trigger":
            when = rng.choice(["AFTER INSERT", "BEFORE DELETE", "AFTER UPDATE"])
            action = rng.choice(["DELETE FROM rdb_chunk", "UPDATE rdb_blob SET nbytes = 0",
                                 "SELECT * FROM (WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) "
                                 "SELECT count(*) FROM n)"])
            conn.execute("PRAGMA writable_schema=OFF")
            conn.execute(f"CREATE TRIGGER evil_{rng.randrange(1000)} {when} ON {table} BEGIN {action}; END")
        elif kind == "index":
            conn.execute("INSERT INTO sqlite_master VALUES ('index', 'evil_index', ?, ?, ?)",
                         (table, rng.randrange(1, 64), f"CREATE INDEX evil_index ON {table} ({rng.choice(columns)})"))
        elif kind == "broken-sql":
            conn.execute("UPDATE sqlite_master SET sql=? WHERE name=?",
                         (rng.choice(["CREATE TABLE x(", "garbage", "", f"CREATE TABLE {table} (a, a)"]), table))
        elif kind == "duplicate-name":
            rootpage = conn.execute("SELECT rootpage FROM sqlite_master WHERE name=?", (rng.choice(tables),)).fetchone()[0]
            conn.execute("INSERT INTO sqlite_master VALUES ('table', ?, ?, ?, ?)",
                         (table, table, rootpage, f"CREATE TABLE {table} ({', '.join(columns)})"))
        else:
            other = rng.choice(tables)
            conn.execute(
                "UPDATE sqlite_master SET rootpage = CASE name WHEN ? THEN (SELECT rootpage FROM sqlite_master WHERE name=?)"
                " ELSE (SELECT rootpage FROM sqlite_master WHERE name=?) END WHERE name IN (?, ?)",
                (table, other, table, table, other),
            )
        conn.commit()
    return f"schema:{kind}:{table}"


#: SQL that runs long or builds a huge value inside one SQLite step, where the progress handler cannot stop it.
_EXPENSIVE = ["printf('%.*c', 999000000, 'x')", "format('%.*c', 999000000, 'x')", "hex(zeroblob(500000000))",
              "length(randomblob(900000000))", "replace(hex(zeroblob(100000000)), '0', '00')"]
_HOSTILE_SQL_KINDS = ("case-folded-view", "case-folded-trigger", "generated-column", "expensive-view")


def _case_mix(name: str, rng: random.Random) -> str:
    """``name`` in another letter case (never the same): SQLite takes it for the same name."""
    while True:
        mixed = "".join(c.upper() if rng.random() < 0.5 else c.lower() for c in name)
        if mixed != name:
            return mixed


def _hostile_sql(conn: sqlite3.Connection, rng: random.Random, kind: str, tables: list[str]) -> str:
    """Ordinary SQL a hostile report holds: a view or trigger under a case-folded reportdb name (of its tables or of
    the version table), a generated column or a view column computing an expensive SQL function, in a table reportdb
    reads."""
    ours = [t for t in tables if t.startswith("rdb_") or t == "reportdb_alembic_version"]
    table = rng.choice(ours)
    if kind == "case-folded-view":
        conn.execute(f"ALTER TABLE {table} RENAME TO real_{table}")
        conn.execute(f"CREATE VIEW {_case_mix(table, rng)} AS SELECT * FROM real_{table}, "
                     "(WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n LIMIT 100000) SELECT x FROM n)")
    elif kind == "case-folded-trigger":
        conn.execute(f"CREATE TRIGGER evil_{rng.randrange(1000)} AFTER INSERT ON {_case_mix(table, rng)} "
                     "BEGIN DELETE FROM rdb_chunk; END")
    elif kind == "generated-column":
        table = rng.choice(ours + [t for t in tables if t not in ours])
        deterministic = [e for e in _EXPENSIVE if "random" not in e]  # SQLite refuses randomblob() in a generated column
        conn.execute(f"ALTER TABLE {table} ADD COLUMN evil AS ({rng.choice(deterministic)})")
    else:
        table = rng.choice([t for t in tables if t not in ours] or ours)
        columns = ", ".join(_columns(conn, table))
        conn.execute(f"ALTER TABLE {table} RENAME TO real_{table}")
        conn.execute(f"CREATE VIEW {table} AS SELECT {columns}, {rng.choice(_EXPENSIVE)} AS evil FROM real_{table}")
    conn.commit()
    return f"schema:{kind}:{table}"


#: Special files at the paths SQLite opens: the database itself, ``-journal``, ``-wal``, ``-shm`` beside a WAL file.
_SPECIAL_KINDS = ["fifo-journal", "fifo-wal", "fifo-shm", "device-journal", "fifo-db", "device-db", "device-shm"]


def _plant_special(path: Path, rng: random.Random) -> tuple[str, list[Path]]:
    """A FIFO or a link to a device at one of the paths SQLite opens for ``path``; the paths planted."""
    kind = rng.choice(_SPECIAL_KINDS)
    side = {"journal": Path(f"{path}-journal"), "wal": Path(f"{path}-wal"), "shm": Path(f"{path}-shm")}
    with harness_io(f"planting {kind} at {path}"):
        if kind.endswith("-shm"):
            with contextlib.closing(sqlite3.connect(path)) as conn:
                conn.execute("PRAGMA journal_mode=WAL")
            side["wal"].write_bytes(b"")
        target = path if kind.endswith("-db") else side[kind.rsplit("-", 1)[1]]
        target.unlink(missing_ok=True)
        if kind.startswith("fifo"):
            os.mkfifo(target)
        else:
            os.symlink(rng.choice(["/dev/zero", "/dev/null", "/dev/urandom"]), target)
    return f"special:{kind}", [p for p in (path, *side.values()) if p.is_symlink() or p.exists()]


_FRAMES: dict[int, bytes] = {}


def _zeros_frame(nbytes: int) -> bytes:
    """One zstd frame of ``nbytes`` zeros declaring its size (made a MiB at a time, kept for the worker's life)."""
    import zstandard

    if nbytes not in _FRAMES:
        compressor = zstandard.ZstdCompressor(level=1).compressobj(size=nbytes)
        _FRAMES[nbytes] = b"".join(compressor.compress(bytes(1 << 20)) for _ in range(nbytes >> 20)) + compressor.flush()
    return _FRAMES[nbytes]


def _mutate_frame(path: Path, rng: random.Random) -> str:
    """A compressed chunk whose frame declares a large size: over a chunk's row (which then disagrees), or a tensor
    made self-consistently of chunks of one such frame referenced again and again (a few GiB declared)."""
    import zlib

    with harness_io(f"planting a frame in {path}"), contextlib.closing(sqlite3.connect(path)) as conn:
        row = conn.execute("SELECT s.blob_id FROM rdb_shard s ORDER BY random() LIMIT 1").fetchone()
        if row is None:
            return "frame:no-tensor"
        blob_id = row[0]
        chunk_id = conn.execute("SELECT MIN(chunk_id) FROM rdb_blob_chunk WHERE blob_id=?", (blob_id,)).fetchone()[0]
        if chunk_id is None:
            return "frame:no-chunk"
        consistent = rng.random() < 0.5
        size = 64 << 20 if consistent else 1 << 30  # consistent: verify re-hashes it all, in the case's seconds
        frame = _zeros_frame(size)
        conn.execute("UPDATE rdb_chunk SET codec='zstd', data=?, crc32=? WHERE id=?", (frame, zlib.crc32(frame), chunk_id))
        conn.execute("DELETE FROM rdb_chunk_crc WHERE chunk_id=?", (chunk_id,))
        if consistent:
            chunks = rng.randint(2, 4)
            conn.execute("UPDATE rdb_chunk SET nbytes=? WHERE id=?", (size, chunk_id))
            conn.execute("DELETE FROM rdb_blob_chunk WHERE blob_id=?", (blob_id,))
            conn.executemany("INSERT INTO rdb_blob_chunk(blob_id, idx, chunk_id) VALUES (?, ?, ?)",
                             [(blob_id, i, chunk_id) for i in range(chunks)])
            conn.execute("UPDATE rdb_blob SET nbytes=?, chunk_size=?, n_chunks=? WHERE id=?",
                         (size * chunks, size, chunks, blob_id))
            shape = f"[{size * chunks // 4}]"
            conn.execute("UPDATE rdb_shard SET dtype='float32', shape=? WHERE blob_id=?", (shape, blob_id))
            conn.execute("UPDATE rdb_tensor SET dtype='float32', shape=?, nbytes=?, n_shards=1 WHERE id IN "
                         "(SELECT tensor_pk FROM rdb_shard WHERE blob_id=?)", (shape, size * chunks, blob_id))
        conn.commit()
    return f"frame:{'consistent' if consistent else 'declared'}:{size}"


def _mutate_rows(path: Path, rng: random.Random) -> str:
    """Lie in reportdb's own rows: bad JSON, extreme sizes, unknown dtypes and codecs, deleted rows."""
    done = []
    with harness_io(f"editing the rows of {path}"), contextlib.closing(sqlite3.connect(path)) as conn:
        for _ in range(rng.randint(1, 3)):
            table = rng.choice(list(_ROW_COLUMNS))
            rowid = conn.execute(f"SELECT rowid FROM {table} ORDER BY random() LIMIT 1").fetchone() if table not in (
                "rdb_blob_chunk",) else None
            if rng.random() < 0.15:
                if table == "rdb_blob_chunk":
                    conn.execute("DELETE FROM rdb_blob_chunk WHERE (blob_id, idx) IN (SELECT blob_id, idx FROM rdb_blob_chunk "
                                 "ORDER BY random() LIMIT 1)")
                elif rowid is not None:
                    conn.execute(f"DELETE FROM {table} WHERE rowid=?", rowid)
                done.append(f"delete:{table}")
                continue
            column, values = rng.choice(list(_ROW_COLUMNS[table].items()))
            value = rng.choice(values)
            if table == "rdb_blob_chunk":
                conn.execute(f"UPDATE OR IGNORE rdb_blob_chunk SET {column}=? WHERE (blob_id, idx) IN "
                             "(SELECT blob_id, idx FROM rdb_blob_chunk ORDER BY random() LIMIT 1)", (value,))
            elif rowid is not None:
                conn.execute(f"UPDATE OR IGNORE {table} SET {column}=? WHERE rowid=?", (value, rowid[0]))
            shown = value if not isinstance(value, (str, bytes)) or len(value) < 40 else f"{value[:20]!r}...({len(value)})"
            done.append(f"{table}.{column}={shown!r}")
        conn.commit()
    return "rows:" + "; ".join(done)


def _db_case(base: Path, scratch: Path, seed: int, case: int) -> tuple[str, list[Path]]:
    """Make the mutated copy of case ``case`` at ``scratch``; return what was done (reproducible from seed, case) and
    the special files planted (FIFOs, links to devices), which the harness must neither read nor count as left over."""
    rng = random.Random(f"{seed}-{case}")
    with harness_io(f"copying {base} to {scratch}"):
        scratch.write_bytes(base.read_bytes())
    kind = rng.choices(["bytes", "schema", "rows", "special", "frame"], weights=[4, 4, 4, 1, 1])[0]
    if kind == "bytes":
        return _mutate_bytes(scratch, rng, 65536), []
    if kind == "schema":
        return _mutate_schema(scratch, rng), []
    if kind == "special":
        return _plant_special(scratch, rng)
    if kind == "frame":
        return _mutate_frame(scratch, rng), []
    return _mutate_rows(scratch, rng), []


def _digest(path: Path) -> str | None:
    """The sha256 of a regular file (never opening a FIFO or following a link to a device); None for anything else."""
    import stat as stat_mod

    if path.is_symlink() or not path.exists() or not stat_mod.S_ISREG(path.stat().st_mode):
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _read_everything(path: Path) -> list[str]:
    """Every public read of the report at ``path``; the calls that raised something other than a ReportDBError."""
    import reportdb
    from reportdb.errors import ReportDBError

    wrong: list[str] = []

    def call(what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except ReportDBError:
            return None
        except Exception as exc:  # anything else is the failure looked for
            tail = traceback.extract_tb(exc.__traceback__)[-1]
            wrong.append(f"{what}: {type(exc).__name__}: {str(exc)[:200]} [{Path(tail.filename).name}:{tail.lineno}]")
            return None

    report = call("open", lambda: reportdb.open(path))
    if report is not None:
        call("summary", report.summary)
        call("tensor_ids", report.tensor_ids)
        keys = call("tensor_keys", report.tensor_keys) or []
        for tensor_id, rank in keys[:64]:
            for op in ("tensor_info", "tensor", "shards", "tensor_stats", "verify_tensor"):
                call(f"{op}({tensor_id}, {rank})", lambda: getattr(report, op)(tensor_id, rank))
        call("close", report.close)
    call("verify", lambda: reportdb.verify(path))
    return wrong


def db_worker(base: Path, first: int, last: int, seed: int, scratch_dir: Path) -> int:
    """Run DB cases first..last-1, one line per case on stdout: ``start N what`` then ``done N [problems]``."""
    from reportdb.store import engine

    engine.STATEMENT_TIMEOUT = DB_STATEMENT_SECONDS
    warm = scratch_dir / "warm-up.sqlite"  # the first reads import what they need: not charged to a case's time bound
    with harness_io(f"copying {base} to {warm}"):
        warm.write_bytes(base.read_bytes())
    _read_everything(warm)
    gc.collect()
    warm.unlink()
    for case in range(first, last):
        scratch = scratch_dir / f"case-{case}.sqlite"  # a new file (and inode) per case: no lock outlives its case
        what, planted = _db_case(base, scratch, seed, case)
        with harness_io(f"hashing {scratch}"):
            before = _digest(scratch)
        print(f"start {case} {what}", flush=True)
        wrong = _read_everything(scratch)
        gc.collect()
        left = _handles_left(scratch)
        if left:
            wrong.append(f"reading left {left} handles open on the report")
        with harness_io(f"hashing {scratch}"):
            if _digest(scratch) != before:
                wrong.append("reading the report changed its bytes")
            for side in scratch_dir.iterdir():
                if side != scratch and side not in planted:
                    wrong.append(f"reading the report left {side.name.replace(str(case), 'N')} behind")
                side.unlink()
        print(f"done {case} {json.dumps(wrong)}", flush=True)
    return 0


def _handles_left(path: Path) -> int:
    """How many descriptors of ``path`` stay open once reading is over: counted again for up to a second while any
    are, because SQLite defers closing a connection's descriptor while another connection of the process holds a lock
    on the file (closing it would drop that lock), and the snapshot reaper's thread may be the one to release it a
    moment later. A descriptor still open after that is left open for good."""
    deadline = time.monotonic() + 1.0
    while (count := _open_handles(path)) and time.monotonic() < deadline:
        time.sleep(0.01)
        gc.collect()
    return count


def _open_handles(path: Path) -> int:
    """How many of this process's file descriptors point at ``path`` (Linux ``/proc``; 0 elsewhere)."""
    fds = Path("/proc/self/fd")
    if not fds.is_dir():
        return 0
    count = 0
    for fd in fds.iterdir():
        with contextlib.suppress(OSError):
            count += os.readlink(fd) == str(path)
    return count


def run_db_fuzz(base: Path, cases: int, seed: int, scratch_dir: Path) -> dict[str, Any]:
    """Run ``cases`` DB cases in worker subprocesses (2 GiB address space); a case silent for longer than
    ``DB_CASE_SECONDS`` is retried once alone, then counted as a hang; a crash is counted and the run goes on."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    failures: dict[str, list[str]] = {}  # distinct failure -> the cases (and mutations) that showed it
    counted = {"cases": 0, "hangs": 0, "crashes": 0}
    cases_dir = scratch_dir / "cases"  # only the case's database (and what reading it might leave) goes here
    with harness_io(f"making {cases_dir}"):
        cases_dir.mkdir(exist_ok=True)
    retried: set[int] = set()
    case = 0
    while case < cases:
        log = scratch_dir / "worker.stderr"
        with harness_io("starting a worker"), log.open("w") as stderr:
            proc = subprocess.Popen(
                [sys.executable, __file__, "db", str(base), str(case), str(cases), str(seed), str(cases_dir)],
                stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, cwd=ROOT, preexec_fn=_limit_memory,
            )
        assert proc.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(proc.stdout, selectors.EVENT_READ)
        current, what = None, ""
        while True:
            ready = selector.select(timeout=DB_CASE_SECONDS if current is not None else 60)
            if not ready:  # silent too long: a hang (or a starved machine: retried once before it counts)
                proc.kill()
                proc.wait()
                for left in cases_dir.iterdir():  # the killed case's files, not the next case's leftovers
                    left.unlink()
                if current is None:
                    raise AssertionError(f"the DB fuzz worker printed nothing for 60 s: {log.read_text()[-3000:]}")
                if current not in retried:
                    retried.add(current)
                    case = current
                else:
                    counted["hangs"] += 1
                    failures.setdefault(f"hang over {DB_CASE_SECONDS:g} s", []).append(f"{current}: {what}")
                    case = current + 1
                break
            line = proc.stdout.readline()
            if not line:  # the worker ended
                status = proc.wait()
                if status == ENVIRONMENT_EXIT:
                    _environment_failure("", log.read_text())
                if current is not None:  # died inside a case
                    counted["crashes"] += 1
                    failures.setdefault(f"crash (exit {status}): {log.read_text()[-300:]}", []).append(f"{current}: {what}")
                    case = current + 1
                else:
                    assert status == 0, f"DB fuzz worker failed between cases ({status}): {log.read_text()[-3000:]}"
                    case = cases
                break
            tag, number, rest = (line.rstrip("\n").split(" ", 2) + ["", ""])[:3]
            if tag == "start":
                current, what = int(number), rest
            elif tag == "done":
                counted["cases"] += 1
                for problem in json.loads(rest):
                    key = problem.split(": ", 1)[0].split("(")[0] + ": " + problem.split(": ", 1)[-1]
                    failures.setdefault(key, []).append(f"{current}: {what}")
                current = None
        proc.stdout.close()
    return {"counted": counted, "failures": failures}


@pytest.fixture(scope="module")
def base_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small real report database: the ttnn 0.62.2 legacy report migrated into a temporary folder."""
    import reportdb

    roots = [root / DB_SOURCE / "report" for root in fixture_roots() if (root / DB_SOURCE / "report").is_dir()]
    assert roots, f"no {DB_SOURCE}/report in {fixture_roots()}"
    out = tmp_path_factory.mktemp("db-fuzz") / "report"
    reportdb.migrate(roots[0], out)
    return out / "db.sqlite"


def _db_fuzz(base: Path, cases: int, scratch: Path) -> None:
    result = run_db_fuzz(base, cases, DB_SEED, scratch)
    counted, failures = result["counted"], result["failures"]
    report = "\n".join(f"{len(where)}x {failure}\n    e.g. case {where[0]}" for failure, where in failures.items())
    print(f"{cases} DB cases: {counted}; {len(failures)} distinct failures\n{report}")
    assert counted["cases"] + counted["hangs"] + counted["crashes"] == cases, counted
    assert not failures, f"{len(failures)} distinct DB fuzz failures over {cases} cases:\n{report}"


@pytest.mark.process
def test_fuzz_mutated_report_databases(base_report: Path, tmp_path: Path) -> None:
    _db_fuzz(base_report, DB_CASES, tmp_path)


@pytest.mark.slow
def test_fuzz_mutated_report_databases_long(base_report: Path, tmp_path: Path) -> None:
    _db_fuzz(base_report, DB_SLOW_CASES, tmp_path)


def _main(argv: list[str]) -> int:
    try:
        if argv[0] == "db":
            return db_worker(Path(argv[1]), int(argv[2]), int(argv[3]), int(argv[4]), Path(argv[5]))
        return 1 if worker(int(argv[1]), int(argv[2])) else 0
    except HarnessIOError as exc:
        print(f"ENVIRONMENT PROBLEM (the harness's own I/O, not the reader): {exc}", file=sys.stderr, flush=True)
        return ENVIRONMENT_EXIT


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
