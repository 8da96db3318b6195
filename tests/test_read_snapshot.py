"""A read-only Report keeps one read transaction (a snapshot) open across its reads for a few milliseconds (issue 16:
SQLite's locking once per many reads instead of at every statement). These tests hold it to its contract: a writer
is never held back for longer than that, whether the reader reads on or sits idle, in this process or another; a read
after a commit sees the commit (the rows and checked blocks a Report remembers are forgotten with the old snapshot); a
file in WAL mode, being written, is read without one; the caller's own SQL (``connection()``, ``session()``) and
``close()`` end it; a chunk source that writes the file (``reportdb.chunk_source``, as a team store's report does)
is asked before a read takes its snapshot.

Each test builds its report in tmp_path with reportdb and writes to it with plain sqlite3 or a second Report.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import pytest

from conftest import flip_stored_byte
import reportdb
from reportdb.chunk_source import ChunkSource, ShardRead
import reportdb.report as report_mod
from reportdb.errors import CorruptionError

ARRAY = np.arange(64 * 1024, dtype=np.float32).reshape(64, 1024)  # 256 KiB: one chunk with block crcs
SMALL = np.arange(32, dtype=np.float32)
WIDTH_SHARDED = '{"memory_layout": "WIDTH_SHARDED", "buffer_type": "L1", "shard_spec": null}'


def _report(path: Path) -> Path:
    """A finished report (one rollback-journal file): tensor 1 large enough for windows, tensor 2 small."""
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, ARRAY)
        report.put_tensor(2, SMALL)
    return path


def _write(path: Path, sql: str, *params: object, timeout: float = 5.0) -> None:
    """One committed statement through a connection of its own (Python's sqlite3, its default busy timeout)."""
    conn = sqlite3.connect(path, timeout=timeout, isolation_level=None)
    try:
        conn.execute(sql, params)
    finally:
        conn.close()


@pytest.fixture
def long_snapshots(monkeypatch: pytest.MonkeyPatch) -> None:
    """Snapshots that outlive any test step, so what a held one does is seen whatever the machine's load."""
    monkeypatch.setattr(report_mod, "SNAPSHOT_SECONDS", 60.0)


def test_a_snapshot_is_held_and_an_idle_reader_lets_a_writer_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report_mod, "SNAPSHOT_SECONDS", 0.5)
    path = _report(tmp_path / "db.sqlite")
    with reportdb.open(path) as report:
        report.tensor(2)
        with pytest.raises(sqlite3.OperationalError, match="locked"):  # the snapshot is held: a commit must wait
            _write(path, "UPDATE rdb_tensor SET memory_config = ? WHERE tensor_id = 2", WIDTH_SHARDED, timeout=0)
        # The reader stays idle: the reaper ends its snapshot, and a writer that waits gets in.
        _write(path, "UPDATE rdb_tensor SET memory_config = ? WHERE tensor_id = 2", WIDTH_SHARDED, timeout=20)
        assert report.tensor_info(2).spec.memory_config == {"memory_layout": "WIDTH_SHARDED", "buffer_type": "L1",
                                                            "shard_spec": None}
        np.testing.assert_array_equal(report.tensor(2), SMALL)


def test_a_snapshot_ends_on_time_while_a_longer_one_is_held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reaper thread waits for the soonest end of all: a snapshot due later (here a minute away, on another file)
    must not delay one due sooner."""
    other, path = _report(tmp_path / "other.sqlite"), _report(tmp_path / "db.sqlite")
    with reportdb.open(other) as held:
        monkeypatch.setattr(report_mod, "SNAPSHOT_SECONDS", 60.0)
        held.tensor(2)
        monkeypatch.setattr(report_mod, "SNAPSHOT_SECONDS", 0.05)
        with reportdb.open(path) as report:
            report.tensor(2)
            _write(path, "UPDATE rdb_tensor SET memory_config = ? WHERE tensor_id = 2", WIDTH_SHARDED, timeout=10)
            assert report.tensor_info(2).spec.memory_config is not None


def test_a_reader_reading_on_does_not_starve_a_writer(tmp_path: Path) -> None:
    path = _report(tmp_path / "db.sqlite")
    stop = threading.Event()
    reads = [0]
    failed: list[BaseException] = []

    def read_on(report: reportdb.Report) -> None:
        try:
            while not stop.is_set():
                report.tensor(2)
                report.tensor(1, window=(slice(3, 5), slice(100, 200)))
                reads[0] += 1
        except BaseException as exc:  # handed to the test thread
            failed.append(exc)

    with reportdb.open(path) as report:
        reader = threading.Thread(target=read_on, args=(report,), daemon=True)
        reader.start()
        try:
            while reads[0] < 20 and reader.is_alive():
                time.sleep(0.01)
            before = reads[0]
            _write(path, "UPDATE rdb_tensor SET memory_config = ? WHERE tensor_id = 2", WIDTH_SHARDED, timeout=20)
            with reportdb.open(path, "a") as writer:  # a reportdb writer too: it switches the file to WAL, then back
                writer.put_tensor(3, SMALL + 1)
            while reads[0] < before + 20 and reader.is_alive():
                time.sleep(0.01)
        finally:
            stop.set()
            reader.join(20)
        assert not failed, failed
        assert not reader.is_alive()
        assert report.tensor_info(2).spec.memory_config is not None
        np.testing.assert_array_equal(report.tensor(3), SMALL + 1)


@pytest.mark.process
def test_a_writer_in_another_process_gets_in_while_a_report_reads(tmp_path: Path) -> None:
    path = _report(tmp_path / "db.sqlite")
    script = (
        "import sqlite3, sys\n"
        "conn = sqlite3.connect(sys.argv[1], timeout=15, isolation_level=None)\n"
        "for i in range(20):\n"
        "    conn.execute('UPDATE rdb_tensor SET memory_config = ? WHERE tensor_id = 2', (f'{{\"n\": {i}}}',))\n"
    )
    with reportdb.open(path) as report:
        writer = subprocess.Popen([sys.executable, "-c", script, str(path)], stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 20
        while writer.poll() is None and time.monotonic() < deadline:
            report.tensor(2)
            report.tensor(1, rows=slice(7, 9))
        if writer.poll() is None:
            writer.kill()
            pytest.fail("the writer did not finish its 20 commits within 20 s of a Report reading")
        assert writer.wait() == 0, writer.stderr.read() if writer.stderr else ""
        assert report.tensor_info(2).spec.memory_config == {"n": 19}


def test_a_read_after_a_commit_sees_it(tmp_path: Path) -> None:
    path = _report(tmp_path / "db.sqlite")
    window = (slice(10, 12), slice(0, 64))
    with reportdb.open(path) as report:
        for _ in range(2):  # the second time from what the Report remembers: rows, checked blocks
            np.testing.assert_array_equal(report.tensor(1, window=window), ARRAY[window])
            np.testing.assert_array_equal(report.tensor(2), SMALL)
        with reportdb.open(path, "a") as writer:
            writer.put_tensor(1, ARRAY * 2, if_exists="replace")
            writer.put_tensor(2, SMALL * 3, if_exists="replace")
            writer.put_tensor(4, SMALL)
        np.testing.assert_array_equal(report.tensor(1, window=window), ARRAY[window] * 2)
        np.testing.assert_array_equal(report.tensor(2), SMALL * 3)
        assert report.tensor_ids() == [1, 2, 4]


def test_bytes_changed_after_a_snapshot_checked_them_are_checked_again(tmp_path: Path) -> None:
    path = _report(tmp_path / "db.sqlite")
    with sqlite3.connect(path) as conn:
        (chunk_id,) = conn.execute("SELECT chunk_id FROM rdb_blob_chunk bc JOIN rdb_shard s ON s.blob_id = bc.blob_id"
                                   " JOIN rdb_tensor t ON t.id = s.tensor_pk WHERE t.tensor_id = 1").fetchone()
    window = (5, slice(0, 16))
    with reportdb.open(path) as report:
        for _ in range(2):
            np.testing.assert_array_equal(report.tensor(1, window=window), ARRAY[window])
        flip_stored_byte(path, chunk_id, 4 * (5 * 1024 + 3))  # element [5, 3], inside the window; waits for the reaper
        with pytest.raises(CorruptionError, match="failed its integrity check"):
            report.tensor(1, window=window)


@pytest.mark.usefixtures("long_snapshots")
def test_a_wal_file_being_written_is_read_without_a_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    with reportdb.open(path, "a") as writer:
        writer.put_tensor(1, ARRAY)
        with reportdb.open(path) as reader:
            np.testing.assert_array_equal(reader.tensor(1, rows=slice(0, 2)), ARRAY[:2])
            writer.put_tensor(2, SMALL)  # committed while the reader is open: it must see it at once
            np.testing.assert_array_equal(reader.tensor(2), SMALL)
            writer.put_tensor(1, ARRAY + 1, if_exists="replace")
            np.testing.assert_array_equal(reader.tensor(1, rows=slice(0, 2)), ARRAY[:2] + 1)


@pytest.mark.usefixtures("long_snapshots")
def test_the_callers_own_sql_and_close_end_the_snapshot(tmp_path: Path) -> None:
    from sqlalchemy import text

    path = _report(tmp_path / "db.sqlite")
    report = reportdb.open(path)
    try:
        report.tensor(2)
        with report.connection() as conn:  # a transaction of the caller's own, not nested in the snapshot
            conn.execute("BEGIN")
            assert conn.execute("SELECT COUNT(*) FROM rdb_tensor").fetchone()[0] == 2
            np.testing.assert_array_equal(report.tensor(2), SMALL)  # a read joins it
            conn.execute("COMMIT")
            np.testing.assert_array_equal(report.tensor(2), SMALL)  # a read in the block begins no snapshot...
            conn.execute("BEGIN")  # ...so the caller's next transaction is its own too
            conn.execute("COMMIT")
        report.tensor(2)
        with report.session() as session:
            assert session.execute(text("SELECT COUNT(*) FROM rdb_tensor")).scalar_one() == 2
            np.testing.assert_array_equal(report.tensor(1, rows=slice(1, 2)), ARRAY[1:2])
            session.commit()
        report.tensor(2)
    finally:
        report.close()
    _write(path, "UPDATE rdb_tensor SET memory_config = ? WHERE tensor_id = 2", WIDTH_SHARDED, timeout=0)


class _CopiedChunks(ChunkSource):
    """A chunk source of the test's own: the report's file holds its chunk rows with their bytes emptied, and a full
    copy of it the bytes, which ``fetch`` writes in through a connection of its own that never waits for a lock (it
    fails at once, "locked", if the Report still held its snapshot)."""

    complete = False
    layout_group = 1

    def __init__(self, path: Path, full: Path) -> None:
        self.fill = sqlite3.connect(path, timeout=0, isolation_level=None)
        self.full = sqlite3.connect(f"file:{full}?mode=ro", uri=True)
        self.asked: list[int] = []

    def missing(self, reads: Sequence[ShardRead]) -> list[int]:
        ids = {r[0] for blob_id, _, _ in reads for r in self.fill.execute(
            "SELECT bc.chunk_id FROM rdb_blob_chunk bc JOIN rdb_chunk c ON c.id = bc.chunk_id"
            " WHERE bc.blob_id = ? AND length(c.data) = 0", (blob_id,))}
        return sorted(ids)

    def fetch(self, chunk_ids: list[int], what: str) -> None:
        self.asked += chunk_ids
        for chunk_id in chunk_ids:
            (data,) = self.full.execute("SELECT data FROM rdb_chunk WHERE id = ?", (chunk_id,)).fetchone()
            self.fill.execute("UPDATE rdb_chunk SET data = ? WHERE id = ?", (data, chunk_id))

    def close(self) -> None:
        self.fill.close()
        self.full.close()


class _Filled(reportdb.Report):
    """A Report that reads through :class:`_CopiedChunks` (the extension point ``team.remote`` uses)."""

    def __init__(self, path: Path, full: Path) -> None:
        self._source = _CopiedChunks(path, full)
        super().__init__(path)


@pytest.mark.usefixtures("long_snapshots")
def test_a_chunk_source_fills_the_file_before_the_read_takes_its_snapshot(tmp_path: Path) -> None:
    """The seam's contract, with the snapshot a read-only Report keeps: a read asks its source for the chunks it
    lacks, the source writes them into the file through another connection (which would fail at once while the
    Report held its snapshot), and the read that follows sees them; chunks already there are not asked for again."""
    full = _report(tmp_path / "full.sqlite")
    path = tmp_path / "db.sqlite"
    path.write_bytes(full.read_bytes())
    _write(path, "UPDATE rdb_chunk SET data = zeroblob(0)")
    with _Filled(path, full) as report:
        source = report._source
        assert isinstance(source, _CopiedChunks)
        np.testing.assert_array_equal(report.tensor(2), SMALL)
        assert len(source.asked) == 1
        with pytest.raises(sqlite3.OperationalError, match="locked"):  # the Report keeps its snapshot, as ever
            _write(path, "UPDATE rdb_tensor SET memory_config = NULL WHERE tensor_id = 2", timeout=0)
        np.testing.assert_array_equal(report.tensor(1, rows=slice(3, 9)), ARRAY[3:9])  # ends it to fill tensor 1
        np.testing.assert_array_equal(report.tensor(2), SMALL)
        np.testing.assert_array_equal(report.shards(1)[0][1], ARRAY)
        assert report.verify_tensor(1) == ARRAY.nbytes
        assert len(source.asked) == 2 and report.check_store() == []
    with pytest.raises(sqlite3.ProgrammingError):  # the Report's close closed its source
        source.fill.execute("SELECT 1")


#: The race run by :func:`test_reads_and_the_reaper_racing_never_deadlock`, in a fresh interpreter: every Report is new
#: (so the reaper's first ROLLBACK prepares its statement, calling the authorizer back for the GIL), snapshots last
#: 0.2 ms, and each read is followed by a millisecond of the reads ``verify`` makes (the address kind, then the
#: chunks) while a thread reads the same Report. faulthandler prints every thread's stack and exits if it hangs.
_RACE = """
import faulthandler, sys, threading, time
import reportdb, reportdb.report as report_mod
faulthandler.dump_traceback_later(float(sys.argv[3]), exit=True)
report_mod.SNAPSHOT_SECONDS = 0.0002
for i in range(int(sys.argv[2])):
    with reportdb.open(sys.argv[1]) as report:
        report.tensor(i % 20)
        reader = threading.Thread(target=lambda: [report.tensor(j) for j in range(20)])
        reader.start()
        end = time.monotonic() + 0.001
        while time.monotonic() < end:
            report._address = None  # asked again: the query the deadlock was found in
            report.verify_tensor(i % 20)
        reader.join()
print("done")
"""


@pytest.mark.slow
@pytest.mark.process
def test_reads_and_the_reaper_racing_never_deadlock(tmp_path: Path) -> None:
    """No statement runs on a Report's connection outside its lock: a query outside it (the address kind ``verify``
    asked) held the GIL waiting for SQLite's mutex while the reaper's ROLLBACK held that mutex waiting for the GIL, a
    hang forever (before the fix: 2 of 3 runs of this race hung)."""
    path = tmp_path / "r.sqlite"
    with reportdb.open(path, "a") as report:
        report.put_tensors([{"tensor_id": i, "array": np.full((8, 8), i, np.float32)} for i in range(20)])
    out = subprocess.run([sys.executable, "-c", _RACE, str(path), "3000", "120"], capture_output=True, text=True,
                         timeout=180)
    assert out.returncode == 0 and out.stdout.strip() == "done", out.stderr[-4000:]


def _left_in_wal_without_shm(path: Path) -> None:
    """What a writer that put the file in WAL mode leaves when it closes as the last connection with the -shm open:
    everything folded into the file, -wal and -shm deleted, the header still saying WAL."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        assert conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
        conn.execute("UPDATE rdb_tensor SET memory_config = ? WHERE tensor_id = 2", (WIDTH_SHARDED,))
    finally:
        conn.close()
    assert not path.with_name(path.name + "-shm").exists() and path.read_bytes()[18:20] == b"\x02\x02"


def test_a_reader_goes_on_after_a_writer_leaves_the_file_in_wal_mode(tmp_path: Path) -> None:
    # a reader opened on a rollback-journal file cannot open it through its own connection any more (SQLite's
    # "unable to open database file" at every read, once a flaky failure of the test above): it opens it afresh
    path = _report(tmp_path / "db.sqlite")
    with reportdb.open(path) as report:
        assert report.tensor_info(2).spec.memory_config is None
        report._release()  # idle between clicks: the snapshot ended, so the writer's close deleted the -shm
        _left_in_wal_without_shm(path)
        assert np.array_equal(report.tensor(2), SMALL)
        assert report.tensor_info(2).spec.memory_config is not None  # the file as it now is
        np.testing.assert_array_equal(report.tensor(1, window=(slice(3, 5), slice(100, 200))), ARRAY[3:5, 100:200])


def test_a_read_without_a_snapshot_fails_once_clearly_and_the_next_one_reads(tmp_path: Path) -> None:
    # a Report reading a WAL file keeps no snapshot: the read that meets the deleted -shm cannot be run again
    # where it failed, so it says what happened; the Report reads on with a new connection
    path = _report(tmp_path / "db.sqlite")
    with reportdb.open(path) as report:
        report.tensor(2)
        report._release()
        report._hold = False  # as once it has seen the file in WAL mode (a live writer)
        _left_in_wal_without_shm(path)
        with pytest.raises(reportdb.ReportDBError, match="switched its journal mode while it was being read"):
            report.tensor(2)
        assert np.array_equal(report.tensor(2), SMALL)
