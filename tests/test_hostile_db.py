"""A report database is untrusted input: read-only opens change nothing, a hostile schema cannot run, hang or mislead
reportdb, stored sizes are checked before they size an allocation, and every malformed value is a ReportDBError.

Each test builds its hostile file in tmp_path from a report reportdb wrote, then changes it with plain sqlite3.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest

import reportdb
from reportdb.errors import CorruptionError, ReportDBError, SchemaTooNewError, UnsafeReportError
from reportdb.store import engine, schema

from conftest import ROOT, built_once

ARRAY = np.arange(6 * 1024, dtype=np.float32).reshape(6, 1024)  # 24 KiB: 3 chunks of 8 KiB


def _report(path: Path, *, compression: str = "none", array: np.ndarray = ARRAY) -> Path:
    """Two tensors in 8 KiB chunks (built once per process for each compression and array, copied to ``path``)."""

    def build(made: Path) -> None:
        with reportdb.open(made, "a", chunk_size=8192, compression=compression) as report:  # type: ignore[arg-type]
            report.put_tensor(1, array, ttnn_dtype="FLOAT32", layout="TILE", tile_shape=(32, 32))
            report.put_tensor(2, array + 1)

    return built_once(path, build, compression, array.dtype.str, array.shape, array.tobytes())


def _sql(path: Path, *statements: str, params: tuple = ()) -> None:
    con = sqlite3.connect(path, isolation_level=None)
    for statement in statements:
        con.execute(statement, params if "?" in statement else ())
    con.close()


def _files(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.iterdir())}


# --- 1. read-only opens change nothing ------------------------------------------------------------------------------


def _wal_report(folder: Path) -> Path:
    """A report left in WAL mode with no side files (as a crashed-then-recovered or copied writer output is)."""
    path = _report(folder / "db.sqlite")
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.close()  # the last connection checkpoints and removes -wal and -shm; the header stays WAL
    assert path.read_bytes()[18:20] == b"\x02\x02" and sorted(p.name for p in folder.iterdir()) == ["db.sqlite"]
    return path


def test_reading_a_wal_report_creates_and_changes_no_file(tmp_path: Path) -> None:
    path = _wal_report(tmp_path)
    before = _files(tmp_path)
    with reportdb.open(path) as report:
        np.testing.assert_array_equal(report.tensor(1), ARRAY)
        assert report.summary().tensors == 2
    assert _files(tmp_path) == before  # no -wal or -shm appeared, no byte or mtime changed


def test_read_only_connections_refuse_writes(tmp_path: Path) -> None:
    path = _report(tmp_path / "db.sqlite")
    with reportdb.open(path) as report, report.connection() as conn:
        assert conn.execute("PRAGMA query_only").fetchone()[0] == 1
        with pytest.raises(sqlite3.OperationalError):
            conn.execute("DELETE FROM rdb_tensor")


@pytest.mark.process
def test_reader_sees_what_a_live_writer_committed_and_touches_nothing(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    read = f"import reportdb; r = reportdb.open({str(path)!r}); print([float(r.tensor(t).sum()) for t in r.tensor_ids()])"
    with reportdb.open(path, "a", chunk_size=8192) as writer:
        with writer.connection() as conn:
            conn.execute("PRAGMA wal_autocheckpoint=0")  # keep the commits in the -wal
        writer.put_tensor(1, ARRAY)
        assert Path(f"{path}-wal").stat().st_size > 0
        before = _files(tmp_path)
        reader = _run(read)  # another process, as a reader of a running writer's report is
        assert reader.stdout.strip() == f"[{float(ARRAY.sum())}]", reader.stderr
        assert _files(tmp_path) == before
        writer.put_tensor(2, ARRAY + 1)
        reader = _run(read)
        assert reader.stdout.strip() == f"[{float(ARRAY.sum())}, {float((ARRAY + 1).sum())}]", reader.stderr


def test_committed_wal_content_without_shm_is_refused_not_dropped(tmp_path: Path) -> None:
    live = tmp_path / "live"
    live.mkdir()
    path = live / "db.sqlite"
    copy = tmp_path / "copy"
    copy.mkdir()
    with reportdb.open(path, "a") as writer:
        with writer.connection() as conn:
            conn.execute("PRAGMA wal_autocheckpoint=0")
        writer.put_tensor(1, ARRAY)
        shutil.copy(path, copy / "db.sqlite")  # a copy taken while the writer runs, without its -shm
        shutil.copy(f"{path}-wal", copy / "db.sqlite-wal")
    before = _files(copy)
    with pytest.raises(ReportDBError, match=r"db.sqlite-wal holds \d+ bytes of committed changes.*reportdb upgrade"):
        reportdb.open(copy)
    assert _files(copy) == before
    with reportdb.open(copy, "a"):  # with write access it folds them in
        pass
    with reportdb.open(copy) as report:
        np.testing.assert_array_equal(report.tensor(1), ARRAY)


# --- 2. a finished report is one file ---------------------------------------------------------------------------------


def test_closing_the_last_writer_leaves_one_self_contained_file(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    first = reportdb.open(path, "a")
    second = reportdb.open(path, "a")
    first.put_tensor(1, ARRAY)
    second.put_tensor(2, ARRAY + 1)
    first.close()  # another connection is open: the file stays in WAL, silently
    assert Path(f"{path}-wal").exists()
    second.close()
    assert path.read_bytes()[18:20] == b"\x01\x01"  # rollback journal
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db.sqlite"]
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(path, alone / "db.sqlite")
    with reportdb.open(alone) as report:
        np.testing.assert_array_equal(report.tensor(2), ARRAY + 1)


def test_an_append_open_that_writes_nothing_changes_nothing(tmp_path: Path) -> None:
    path = _report(tmp_path / "db.sqlite")
    before = _files(tmp_path)
    with reportdb.open(path, "a") as report:
        assert report.tensor_ids() == [1, 2]
    assert _files(tmp_path) == before


# --- 3. hostile schema ------------------------------------------------------------------------------------------------


def _run(code: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter, bounded: a hang fails the test instead of stalling the suite."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout)


@pytest.mark.process
def test_a_recursive_view_under_a_reportdb_name_is_refused_not_spun_on(tmp_path: Path) -> None:
    path = _report(tmp_path / "db.sqlite")
    _sql(
        path,
        "ALTER TABLE rdb_shard RENAME TO real_shard",
        "CREATE VIEW rdb_shard AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n)"
        " SELECT s.id, s.tensor_pk, s.shard_index, s.mesh_coordinate, s.dtype, s.shape, s.blob_id FROM real_shard s, n",
    )
    result = _run(f"""
        import reportdb
        for mode in ("r", "a"):
            try:
                reportdb.open({str(path)!r}, mode).tensor(1)
            except reportdb.ReportDBError as exc:
                print(type(exc).__name__, exc)
    """)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("UnsafeReportError") and "view 'rdb_shard'" in line for line in lines)


@pytest.mark.parametrize("statement, named", [
    ("CREATE TABLE x(a); DROP TABLE rdb_chunk; CREATE VIEW rdb_chunk AS SELECT * FROM x", "view 'rdb_chunk'"),
    ("ALTER TABLE reportdb_alembic_version RENAME TO v; CREATE VIEW reportdb_alembic_version AS SELECT * FROM v",
     "view 'reportdb_alembic_version'"),
    ("CREATE TRIGGER steal AFTER INSERT ON rdb_blob BEGIN UPDATE rdb_blob SET digest = NULL; END", "'steal' on rdb_blob"),
])
def test_views_and_triggers_on_reportdb_tables_are_refused_in_both_modes(tmp_path: Path, statement: str, named: str) -> None:
    path = _report(tmp_path / "db.sqlite")
    con = sqlite3.connect(path)
    con.executescript(statement)
    con.close()
    before = _files(tmp_path)
    for mode in ("r", "a"):
        with pytest.raises(UnsafeReportError, match=named):
            reportdb.open(path, mode)
    assert _files(tmp_path) == before


def test_any_trigger_is_refused_for_writing_and_harmless_for_reading(tmp_path: Path) -> None:
    """Triggers in a report made a later put_tensor read back another tensor's values: reportdb never writes
    through report-supplied SQL."""
    path = _report(tmp_path / "db.sqlite")
    _sql(path, "CREATE TRIGGER swap AFTER INSERT ON operations BEGIN UPDATE rdb_shard SET blob_id = 1; END")
    with reportdb.open(path) as report:
        np.testing.assert_array_equal(report.tensor(2), ARRAY + 1)
    with pytest.raises(UnsafeReportError, match=r"'swap' on operations.*reportdb migrate"):
        reportdb.open(path, "a")


def test_report_schema_cannot_call_application_functions(tmp_path: Path) -> None:
    """trusted_schema=OFF: a view may not call a function with side effects that the application registered."""
    path = _report(tmp_path / "db.sqlite")
    _sql(path, "CREATE VIEW leak AS SELECT side_effect() AS x")
    calls = []
    with reportdb.open(path) as report, report.connection() as conn:
        conn.create_function("side_effect", 0, lambda: calls.append(1) or 1)
        assert conn.execute("SELECT side_effect()").fetchone() == (1,)  # direct use is the caller's own SQL
        with pytest.raises(sqlite3.OperationalError, match="unsafe use"):
            conn.execute("SELECT x FROM leak").fetchall()
    assert calls == [1]


@pytest.mark.process
def test_a_spinning_query_is_stopped_with_a_clear_error(tmp_path: Path) -> None:
    path = _report(tmp_path / "db.sqlite")
    _sql(
        path,
        "DROP TABLE operations",
        "CREATE VIEW operations AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n)"
        " SELECT i AS operation_id, 'op' AS name, 0 AS duration, 0 AS rank FROM n",
    )
    result = _run(f"""
        import reportdb, reportdb.store.engine as engine
        from sqlalchemy import select
        from reportdb import models
        engine.STATEMENT_TIMEOUT = 0.5
        with reportdb.open({str(path)!r}) as report:
            for how in ("raw", "orm"):
                try:
                    if how == "raw":
                        with report.connection() as conn:
                            conn.execute("SELECT COUNT(*) FROM operations").fetchone()
                    else:
                        with report.session() as session:
                            session.scalars(select(models.Operation.operation_id)).all()
                except reportdb.ReportDBError as exc:
                    print(how, type(exc).__name__, exc)
            print(report.tensor(1).shape)  # the connection still works
    """)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("raw QueryTimeoutError") and "longer than 0.5 s" in lines[0], result.stdout
    assert lines[1].startswith("orm QueryTimeoutError"), result.stdout
    assert lines[2] == "(6, 1024)"


def test_the_statement_bound_is_per_call_not_per_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "STATEMENT_TIMEOUT", 0.2)
    path = _report(tmp_path / "db.sqlite")
    with reportdb.open(path) as report:
        with report.connection() as conn:
            rows = conn.execute("SELECT tensor_id FROM rdb_tensor")
            time.sleep(0.4)  # the caller's own time between fetches does not count
            assert [r[0] for r in rows] == [1, 2]
        np.testing.assert_array_equal(report.tensor(1), ARRAY)


# --- 4. stored sizes are checked before they size an allocation ------------------------------------------------------


def _peak_during(action) -> int:  # type: ignore[no-untyped-def]
    tracemalloc.start()
    try:
        action()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize("tamper, message", [
    ("UPDATE rdb_shard SET shape = '[4294967296]' WHERE blob_id = 1", r"rdb_blob says blob 1 holds 24576 bytes.*need 17179869184"),
    ("UPDATE rdb_blob SET nbytes = 17179869184, n_chunks = 2097152 WHERE id = 1", "holds 17179869184 bytes.*need 24576"),
    ("UPDATE rdb_chunk SET nbytes = 8589934592", r"claims 8589934592 bytes"),
    ("UPDATE rdb_blob SET chunk_size = 8589934592", "impossible sizes"),
    ("UPDATE rdb_blob SET chunk_size = 0", "impossible sizes"),
    ("DELETE FROM rdb_blob_chunk WHERE idx = 1", r"lists chunks \[0, 2\].*needs chunks 0..2"),
    ("DELETE FROM rdb_chunk WHERE id = 2", "chunk 1 of blob 1 is missing from table rdb_chunk"),
    ("UPDATE rdb_chunk SET data = zeroblob(100000) WHERE id = 1", "chunk 0 holds 100000 bytes, not 8192"),
])
def test_stored_sizes_are_checked_before_allocating(tmp_path: Path, tamper: str, message: str) -> None:
    path = _report(tmp_path / "db.sqlite")
    _sql(path, tamper)
    with reportdb.open(path) as report:
        def read() -> None:
            with pytest.raises(CorruptionError, match=f"tensor 1 .*{message}"):
                report.tensor(1)
        assert _peak_during(read) < 4 << 20
    assert not reportdb.verify(path).ok


def test_a_zstd_frame_must_declare_the_size_it_claims(tmp_path: Path) -> None:
    zstandard = pytest.importorskip("zstandard")
    zeros = np.zeros(8192, np.uint8)
    path = _report(tmp_path / "db.sqlite", compression="zstd", array=np.zeros((6, 1024), np.float32))
    for n, frame in enumerate((
        zstandard.ZstdCompressor(write_content_size=False).compress(zeros.tobytes()),  # no declared size
        zstandard.ZstdCompressor().compress(np.zeros(1 << 20, np.uint8).tobytes()),  # declares 1 MiB, not 8 KiB
    )):
        copy = tmp_path / f"{n}.sqlite"
        shutil.copy(path, copy)
        _sql(copy, "UPDATE rdb_chunk SET data = ?, crc32 = ? WHERE codec = 'zstd'", params=(frame, zlib.crc32(frame)))
        with reportdb.open(copy) as report, pytest.raises(CorruptionError, match="does not declare its size|decompresses to 1048576"):
            report.tensor(1)


# --- 5. every malformed value is a ReportDBError -------------------------------------------------------------------------


@pytest.mark.parametrize("tamper, message", [
    ("UPDATE rdb_shard SET shape = '[-6, -1024]'", "rdb_shard: column shape must not be negative"),
    ("UPDATE rdb_shard SET shape = '[6, 1024'", "rdb_shard: column shape is not valid JSON"),
    ("UPDATE rdb_shard SET shape = '{\"a\": 1}'", "rdb_shard: column shape must be a list of integers"),
    ("UPDATE rdb_shard SET shape = '[6.5, 1024]'", "rdb_shard: column shape must be an integer"),
    ("UPDATE rdb_shard SET shape = x'00ff'", "rdb_shard: column shape holds bytes"),
    ("UPDATE rdb_shard SET mesh_coordinate = '[\"a\"]'", "rdb_shard: column mesh_coordinate must be an integer"),
    ("UPDATE rdb_tensor SET memory_config = '" + "[" * 200_000 + "]" * 200_000 + "'", "memory_config is not valid JSON .*RecursionError"),
    ("UPDATE rdb_tensor SET tile_shape = '\"abc\"'", "tile_shape must be a list of integers"),
    ("UPDATE rdb_tensor SET tile_shape = '5'", "tile_shape must be a list of integers"),
    ("UPDATE rdb_tensor SET distribution = '[]'", "distribution must be a mapping"),
    ("UPDATE rdb_tensor SET distribution = '{\"mesh_shape\": \"x\"}'", "mesh_shape must be a list of integers"),
    ("UPDATE rdb_tensor SET distribution = '{\"mesh_shape\": [2], \"placements\": [{\"kind\": 3}]}'", "placement kind"),
    ("UPDATE rdb_tensor SET memory_config = '7'", "memory_config must be a mapping"),
    ("UPDATE rdb_tensor SET layout = x'07'", "layout must be a string"),
    ("UPDATE rdb_shard SET dtype = 'complex256'", "unknown stored dtype name 'complex256'"),
    ("UPDATE rdb_tensor SET n_shards = 2", r"has shards \[0\] of the 2"),
    # found by the database fuzz: list(range(n_shards)) took all memory, LIMIT n_shards + 1 overflowed int64
    ("UPDATE rdb_tensor SET n_shards = 4294967296", "n_shards is 4294967296, not a count from 1 to 65536"),
    ("UPDATE rdb_tensor SET n_shards = 9223372036854775807", "n_shards is 9223372036854775807, not a count"),
    ("UPDATE rdb_tensor SET n_shards = 0", "n_shards is 0, not a count"),
    ("UPDATE rdb_shard SET blob_id = 999", "points at blob 999, which is missing"),
])
def test_malformed_values_are_corruption_naming_tensor_and_table(tmp_path: Path, tamper: str, message: str) -> None:
    path = _report(tmp_path / "db.sqlite")
    _sql(path, tamper.replace("UPDATE rdb_shard SET", "UPDATE rdb_shard SET", 1) + (
        " WHERE tensor_pk = 1" if tamper.startswith("UPDATE rdb_shard") else " WHERE tensor_id = 1" if tamper.startswith("UPDATE rdb_tensor") else ""
    ))
    with reportdb.open(path) as report:
        for read in (report.tensor_info, report.tensor, report.verify_tensor):
            with pytest.raises(CorruptionError, match=f"tensor 1 \\(rank 0\\).*{message}") as caught:
                read(1)
            assert "damaged" in str(caught.value)
        np.testing.assert_array_equal(report.tensor(2), ARRAY + 1)  # the others still read
    verified = reportdb.verify(path)
    assert not verified.ok and 1 in [p.tensor_id for p in verified.problems]
    assert 2 not in [p.tensor_id for p in verified.problems]


def _damage_tensor_table(path: Path) -> None:
    """Overwrite the b-tree page headers of ``rdb_tensor`` and its indexes."""
    con = sqlite3.connect(path)
    page_size = con.execute("PRAGMA page_size").fetchone()[0]
    roots = [r[0] for r in con.execute("SELECT rootpage FROM sqlite_master WHERE tbl_name='rdb_tensor' AND rootpage")]
    con.close()
    with path.open("r+b") as f:
        for root in roots:
            f.seek((root - 1) * page_size)
            f.write(b"\xff" * 64)


def test_a_damaged_page_is_corruption(tmp_path: Path) -> None:
    path = _report(tmp_path / "db.sqlite")
    _damage_tensor_table(path)
    with reportdb.open(path) as report:
        with pytest.raises(CorruptionError, match="rdb_tensor.*damaged.*malformed"):
            report.tensor_ids()
        with pytest.raises(CorruptionError, match="tensor 1 .*malformed"):
            report.tensor(1)


def _handles(path: Path) -> int:
    """This process's file descriptors on ``path`` (Linux ``/proc``)."""
    import os

    fds = Path("/proc/self/fd")
    return sum(os.readlink(fd) == str(path) for fd in fds.iterdir() if fd.exists())


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts file descriptors through Linux /proc")
def test_closing_frees_the_file_at_once_while_an_error_keeps_a_cursor_alive(tmp_path: Path) -> None:
    """Python 3.11+ leaves a closed connection's file open while a cursor of it lives, and a failed read's traceback
    holds one (the fuzz harness saw handles left on a damaged report): close() must free the file anyway."""
    import gc

    path = _report(tmp_path / "db.sqlite")
    _damage_tensor_table(path)
    gc.disable()  # the garbage collector would free the cursor by chance; the point is that close() does
    try:
        report = reportdb.open(path)
        with pytest.raises(CorruptionError) as failed:
            report.tensor(1)
        kept = failed.value  # its traceback's frames hold the cursor of the failed statement
        assert _handles(path) == 1
        report.close()
        assert _handles(path) == 0, "the closed report still holds its file"
        with pytest.raises(CorruptionError) as failed_verify:
            reportdb.verify(path)
        assert _handles(path) == 0, "verify left the file open"
        del kept, failed_verify
    finally:
        gc.enable()


def _super_journal_naming(db: Path, victim: Path, page_size: int = 65536) -> None:
    """A hot rollback journal beside ``db`` whose super-journal record (SQLite's pager.c layout: the locking page's
    number, the name, its length and byte sum, the journal magic) names ``victim``."""
    import struct

    magic = bytes.fromhex("d9d505f920a163d7")
    header = (magic + struct.pack(">IIIII", 0, 0, 2, 512, page_size)).ljust(512, b"\0")
    name = str(victim).encode()
    record = struct.pack(">I", 0x40000000 // page_size + 1) + name + struct.pack(">II", len(name), sum(name)) + magic
    Path(f"{db}-journal").write_bytes(header + record)


@pytest.mark.parametrize("how", ["append", "upgrade", "read"])
def test_a_journal_naming_a_super_journal_cannot_delete_a_file_elsewhere(tmp_path: Path, how: str) -> None:
    """Rolling back a journal that names a super-journal makes SQLite read that file and delete it: a report from
    someone else could delete any file its reader can write. Every open refuses such a journal first."""
    (tmp_path / "report").mkdir()
    db = _report(tmp_path / "report" / "db.sqlite")
    victim = tmp_path / "elsewhere" / "precious.txt"
    victim.parent.mkdir()
    victim.write_text("precious")
    page_size = sqlite3.connect(db).execute("PRAGMA page_size").fetchone()[0]
    _super_journal_naming(db, victim, page_size)
    opening = {"append": lambda: reportdb.open(db, "a"), "upgrade": lambda: reportdb.upgrade(db),
               "read": lambda: reportdb.open(db)}[how]
    with pytest.raises(UnsafeReportError, match="names .*precious.txt.* as its super-journal"):
        opening()
    assert victim.read_text() == "precious"
    Path(f"{db}-journal").unlink()  # what the message says to do: the committed report is intact
    with reportdb.open(db) as report:
        np.testing.assert_array_equal(report.tensor(1), ARRAY)


# --- 6. completeness --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tamper, found", [
    ("DELETE FROM rdb_chunk", "rdb_blob rows whose chunk list"),
    ("UPDATE rdb_shard SET blob_id = blob_id + 100", "rdb_shard rows whose blob is missing"),
    ("UPDATE rdb_chunk SET nbytes = 1000000000000 WHERE id = 1", "rdb_chunk rows whose stored bytes do not fit"),
    ("DELETE FROM rdb_shard WHERE tensor_pk = 2", "rdb_tensor rows whose shard rows are not all there"),
    ("UPDATE rdb_blob SET chunk_size = 0", "rdb_blob rows with impossible sizes"),
])
def test_check_store_and_verify_find_incomplete_stores(tmp_path: Path, tamper: str, found: str) -> None:
    path = _report(tmp_path / "db.sqlite")
    with reportdb.open(path) as report:
        assert report.check_store() == []
    _sql(path, tamper)
    with reportdb.open(path) as report:
        problems = report.check_store()
    assert any(found in p for p in problems), problems
    assert not reportdb.verify(path).ok


def test_verify_tensor_checks_the_blob_address(tmp_path: Path) -> None:
    """Identical content is found by the blob's address: a blob whose address is not its chunks' would make a
    later put of that content read back these chunks instead."""
    path = _report(tmp_path / "db.sqlite")
    con = sqlite3.connect(path)
    other = con.execute("SELECT digest FROM rdb_blob WHERE id = 2").fetchone()[0]
    con.execute("UPDATE rdb_blob SET digest = ? WHERE id = 1", (other[::-1],))
    con.commit()
    con.close()
    with reportdb.open(path) as report, pytest.raises(CorruptionError, match="address does not match its chunks"):
        report.verify_tensor(1)


# --- 7. smaller ones ----------------------------------------------------------------------------------------------------


def test_summary_quotes_table_names(tmp_path: Path) -> None:
    path = _report(tmp_path / "db.sqlite")
    _sql(path, 'CREATE TABLE "odd ""name" (x)', 'INSERT INTO "odd ""name" VALUES (1)')
    with reportdb.open(path) as report:
        assert report.summary().tables['odd "name'] == 1


def test_a_newer_schema_from_this_very_version_asks_for_a_newer_one(tmp_path: Path) -> None:
    path = _report(tmp_path / "db.sqlite")
    _sql(path, f"UPDATE {schema.VERSION_TABLE} SET version_num = '9999'")
    with pytest.raises(SchemaTooNewError, match=f"install a reportdb newer than {reportdb.__version__}") as caught:
        reportdb.open(path)
    assert ">=" not in str(caught.value)


def test_migrations_are_found_beside_the_package_when_not_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A source tree imported ahead of a non-editable install has no reportdb.migrations package."""
    monkeypatch.setitem(sys.modules, "reportdb.migrations", None)  # `import reportdb.migrations` now fails
    assert (ROOT / "migrations" / "env.py").is_file()
    with reportdb.open(tmp_path / "db.sqlite", "a") as report:
        assert report.schema_revision == schema.head_revision()


def test_chunk_size_is_checked_on_open(tmp_path: Path) -> None:
    for bad in (0, -1, 1 << 40):
        with pytest.raises(ReportDBError, match="chunk_size"):
            reportdb.open(tmp_path / "db.sqlite", "a", chunk_size=bad)
    assert not (tmp_path / "db.sqlite").exists()


@pytest.mark.process
def test_escape_sequences_in_a_report_never_reach_the_terminal(tmp_path: Path) -> None:
    """A table name, a stored text and a path carrying terminal escape sequences (clear the screen, move the cursor,
    a carriage return) are printed by the CLI as visible escapes, on stdout and in one-line errors."""
    db = tmp_path / "r.sqlite"
    with reportdb.open(db, "a") as report:
        report.put_tensor(1, np.arange(4, dtype=np.float32))
    hostile = "evil\x1b[2J\x1b[H\rname\x9b31m"
    with sqlite3.connect(db) as conn:
        conn.execute(f'CREATE TABLE "{hostile}" (x)')
        conn.execute("UPDATE rdb_meta SET value = ? WHERE key = 'chunk_address'", (hostile,))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "reportdb", *args], capture_output=True, text=True, timeout=120)

    info = cli("info", str(db))
    assert info.returncode == 0, info.stderr
    assert "evil\\x1b[2J\\x1b[H\\x0dname\\x9b31m" in info.stdout and "chunks addressed by unknown" in info.stdout
    verify = cli("verify", str(db))  # the unknown address kind is the error, one line
    missing = cli("info", str(tmp_path / hostile))
    for out in (info.stdout, info.stderr, verify.stdout, verify.stderr, missing.stdout, missing.stderr):
        assert not any(ch in out for ch in "\x1b\r\x9b"), out
    assert verify.returncode != 0 and "unknown content address kind" in verify.stderr
    assert missing.returncode != 0 and "\\x1b[2J" in missing.stderr


# --- 5. second round: FIFOs and devices, case-folded names, generated columns, bad values (issue 22) ----------------


def _limit_child() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def _bounded(args: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """``args`` in a child under a 2 GiB address space and ``timeout`` seconds: a hang fails the test as such."""
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout, preexec_fn=_limit_child, cwd=ROOT,
                              env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OPENBLAS_NUM_THREADS": "1"})
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(args[-3:])}: still running after {timeout:g} s (a hang)")


def _special_file(folder: Path, case: str) -> Path:
    """A good report in ``folder`` with the special file of ``case`` at one of the paths SQLite opens."""
    import os

    db = _report(folder / "db.sqlite")
    if case == "fifo-journal":
        os.mkfifo(f"{db}-journal")
    elif case == "fifo-wal":
        os.mkfifo(f"{db}-wal")
    elif case == "fifo-shm-beside-wal":
        _sql(db, "PRAGMA journal_mode=WAL")
        Path(f"{db}-wal").write_bytes(b"")
        os.mkfifo(f"{db}-shm")
    elif case == "journal-to-device":
        os.symlink("/dev/zero", f"{db}-journal")
    elif case == "fifo-db":
        db.unlink()
        os.mkfifo(db)
    else:
        assert case == "db-to-device"
        db.unlink()
        os.symlink("/dev/zero", db)
    return db


SPECIAL_FILES = ["fifo-journal", "fifo-wal", "fifo-shm-beside-wal", "journal-to-device", "fifo-db", "db-to-device"]


@pytest.mark.process
def test_fifos_and_devices_where_sqlite_opens_are_refused_by_every_open(tmp_path: Path) -> None:
    """A FIFO named ``db.sqlite-journal`` (or ``-wal``, or ``-shm`` beside a WAL file), ``db.sqlite`` a FIFO or a link to
    ``/dev/zero``: every open through the API, read or append, and ``verify``, ends at once with UnsafeReportError
    (they hung in the open, or read /dev/zero as an empty report)."""
    folders = {case: tmp_path / case for case in SPECIAL_FILES}
    for case, folder in folders.items():
        folder.mkdir()
        _special_file(folder, case)
    result = _bounded([sys.executable, "-c", textwrap.dedent(f"""
        import reportdb
        for folder in {[str(f) for f in folders.values()]!r}:
            for what, call in (("open r", lambda: reportdb.open(folder)), ("open a", lambda: reportdb.open(folder, "a")),
                               ("verify", lambda: reportdb.verify(folder))):
                try:
                    call()
                    print(folder, what, "opened")
                except reportdb.ReportDBError as exc:
                    print(folder, what, type(exc).__name__, "not a regular file" in str(exc))
    """)], timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert len(lines) == 3 * len(SPECIAL_FILES), result.stdout
    assert all(line.endswith(" UnsafeReportError True") for line in lines), result.stdout


@pytest.mark.process
@pytest.mark.parametrize("case", ["fifo-journal", "fifo-shm-beside-wal", "fifo-db", "db-to-device"])
def test_fifos_and_devices_end_every_command_in_seconds(tmp_path: Path, case: str) -> None:
    """``info``, ``ls``, ``verify``, ``compare`` and ``serve`` each exit 1 with one line naming the special file."""
    db = _special_file(tmp_path, case)
    folder = str(tmp_path)
    for command in (["info"], ["ls"], ["verify"], ["compare", folder], ["serve", "--port", "0"]):
        result = _bounded([sys.executable, "-m", "reportdb", command[0], folder, *command[1:]])
        assert result.returncode == 1, (command, result.stdout, result.stderr)
        assert "not a regular file" in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert str(db.name) in result.stderr


@pytest.mark.parametrize("statement, named", [
    ("ALTER TABLE rdb_shard RENAME TO real_shard; CREATE VIEW RDB_SHARD AS SELECT * FROM real_shard", "view 'RDB_SHARD'"),
    ("ALTER TABLE rdb_chunk RENAME TO c; CREATE VIEW Rdb_Chunk AS SELECT * FROM c", "view 'Rdb_Chunk'"),
    ("ALTER TABLE reportdb_alembic_version RENAME TO v; CREATE VIEW REPORTDB_ALEMBIC_VERSION AS SELECT * FROM v",
     "view 'REPORTDB_ALEMBIC_VERSION'"),
    ("CREATE TRIGGER steal AFTER INSERT ON RDB_BLOB BEGIN UPDATE rdb_blob SET digest = NULL; END", "'steal' on RDB_BLOB"),
])
def test_reportdb_names_are_compared_case_folded(tmp_path: Path, statement: str, named: str) -> None:
    """SQLite's names are case-insensitive: a view ``RDB_SHARD`` is read as ``rdb_shard`` (one spun ``verify`` 10 s a
    tensor), so it is refused like the lower-case one."""
    path = _report(tmp_path / "db.sqlite")
    con = sqlite3.connect(path)
    con.executescript(statement)
    con.close()
    for mode in ("r", "a"):
        with pytest.raises(UnsafeReportError, match=named):
            reportdb.open(path, mode)


@pytest.mark.parametrize("column", [
    "evil TEXT GENERATED ALWAYS AS (printf('%.*c', 999000000, 'x')) VIRTUAL",
    "evil AS (length(zeroblob(1000000000)))",
    "evil  as/*hidden*/(1)",
])
@pytest.mark.parametrize("table", ["rdb_tensor", "rdb_chunk", "operations"])
def test_generated_columns_are_refused(tmp_path: Path, table: str, column: str) -> None:
    """A generated column in a table reportdb reads runs its SQL at every read: one calling ``printf('%.*c',
    999000000, 'x')`` made reading a 4 KiB tensor take 39 s and 1 GB, inside single SQLite steps."""
    path = _report(tmp_path / "db.sqlite")
    _sql(path, f"ALTER TABLE {table} ADD COLUMN {column}")
    for mode in ("r", "a"):
        with pytest.raises(UnsafeReportError, match=rf"generated columns \({table}\.evil\)"):
            reportdb.open(path, mode)


@pytest.mark.process
@pytest.mark.parametrize("expression, error", [
    ("printf('%.*c', 999000000, 'x')", "UnsafeReportError"),  # 28 s in one step, whatever its output's bound
    ("format('%.*c', 999000000, 'x')", "UnsafeReportError"),
    ("hex(zeroblob(200000000))", "ResourceLimitError"),  # 400 MB built in one step
])
def test_an_expensive_sql_function_in_a_view_is_bounded_in_one_step(tmp_path: Path, expression: str, error: str) -> None:
    """A view reportdb's models read (``operations``) computing a column in one long SQLite step, which the progress
    handler (between steps) cannot stop: ``printf``/``format`` called from the report's SQL are denied when the
    statement is prepared (an authorizer), and a read-only connection caps the values SQLite may build
    (SQLITE_LIMIT_LENGTH, Python 3.11+). Either way the read fails at once, in both modes."""
    if error == "ResourceLimitError" and not hasattr(sqlite3.Connection, "setlimit"):
        pytest.skip("sqlite3 exposes setlimit from Python 3.11")
    path = _report(tmp_path / "db.sqlite")
    _sql(path, "DROP TABLE operations", f"CREATE VIEW operations AS SELECT 1 AS operation_id, {expression} AS name")
    result = _bounded([sys.executable, "-c", textwrap.dedent(f"""
        import reportdb
        for mode in ("r",) if {error!r} == "ResourceLimitError" else ("r", "a"):
            with reportdb.open({str(path)!r}, mode) as report, report.connection() as conn:
                try:
                    conn.execute("SELECT length(name) FROM operations").fetchall()
                    print("read")
                except reportdb.ReportDBError as exc:
                    print(type(exc).__name__)
    """)], timeout=20)
    assert result.returncode == 0, result.stderr[-2000:]
    assert set(result.stdout.split()) == {error}, result.stdout


@pytest.mark.process
def test_a_bad_nbytes_is_corruption_naming_tensor_and_column(tmp_path: Path) -> None:
    """``rdb_tensor.nbytes = 'x'``: ``ls`` said "internal error ValueError"."""
    path = _report(tmp_path / "db.sqlite")
    _sql(path, "UPDATE rdb_tensor SET nbytes = 'x' WHERE tensor_id = 2")
    with reportdb.open(path) as report, pytest.raises(CorruptionError, match=r"tensor 2 .*rdb_tensor: column nbytes"):
        report.tensor_info(2)
    result = _bounded([sys.executable, "-m", "reportdb", "ls", str(tmp_path)])
    assert result.returncode == 1 and "internal error" not in result.stderr, result.stderr
    assert "tensor 2" in result.stderr and "column nbytes" in result.stderr, result.stderr
