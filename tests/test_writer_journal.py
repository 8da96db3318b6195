"""The Writer's journal: a rollback journal while it writes alone, WAL once another writer appears, one file at close.

A rollback journal writes the pages a transaction appends once (WAL writes them twice: the log, then the
checkpoint). These tests pin what that must not cost: the hand-over to WAL when another connection writes, readers
that opened before the hand-over and read on without writing a byte, the finished file, and a SIGKILL mid-commit
(a hot journal: refused read-only with advice, rolled back by the next writable open, every committed batch kept).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import reportdb
from reportdb import Writer
from reportdb.errors import ReadOnlyError
from reportdb.store import journal

ROOT = Path(__file__).resolve().parents[1]


def _header_mode(db: Path) -> tuple[int, int]:
    with open(db, "rb") as f:
        header = f.read(20)
    return header[18], header[19]  # (1, 1): rollback journal, (2, 2): WAL


def _value(tid: int, n: int) -> np.ndarray:
    return np.arange(n, dtype=np.float32) + tid


def test_a_lone_writer_writes_in_a_rollback_journal(tmp_path: Path) -> None:
    """No WAL (no -wal, header says rollback) while one writer writes: each appended page is written once."""
    db = tmp_path / "db.sqlite"
    with Writer(tmp_path, batch_seconds=0) as w:
        for tid in range(3):
            w.put_tensor(tid, _value(tid, 300_000))
        w.flush()
        assert _header_mode(db) == (1, 1)
        assert not Path(f"{db}-wal").exists()
        with w._open().connection() as conn:
            assert journal.journal_mode(conn) == journal.SOLO_JOURNAL
        assert not _checkpoint_threads()  # no WAL to checkpoint: no thread for it
    assert _header_mode(db) == (1, 1)
    assert not Path(f"{db}-journal").exists()  # DELETE again: no side file stays
    with reportdb.open(tmp_path) as r:
        for tid in range(3):
            np.testing.assert_array_equal(r.tensor(tid), _value(tid, 300_000))


def test_wal_true_keeps_wal_while_writing(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    with Writer(tmp_path, batch_seconds=0, wal=True) as w:
        w.put_tensor(1, _value(1, 1000))
        w.flush()
        assert _header_mode(db) == (2, 2)
        assert _checkpoint_threads() == 1
    assert _header_mode(db) == (1, 1)
    assert not _checkpoint_threads()


def _checkpoint_threads() -> int:
    """Live WAL checkpoint threads (``store/checkpoint.py``) in this process."""
    return sum(t.name == "reportdb-checkpoint" for t in threading.enumerate())


def test_another_writer_hands_the_file_over_to_wal(tmp_path: Path) -> None:
    """A second connection holding a write transaction when the writer commits: the writer waits for it, puts the
    file in WAL and commits there; the file stays in WAL while the other connection is open, and the last to close
    returns it to one file holding both writers' rows."""
    db = tmp_path / "db.sqlite"
    w = Writer(tmp_path, batch_seconds=0)
    w.put_tensor(1, _value(1, 1000))
    w.flush()
    assert _header_mode(db) == (1, 1)
    other = sqlite3.connect(db, isolation_level=None, timeout=60, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO devices(device_id, rank) VALUES (7, 0)")
    release = threading.Timer(0.3, lambda: other.execute("COMMIT"))
    release.start()
    w.put_tensor(2, _value(2, 1000))
    assert not _checkpoint_threads()
    w.flush()  # the probe finds the other writer: WAL, after its COMMIT
    release.join()
    assert _header_mode(db) == (2, 2)
    assert _checkpoint_threads() == 1  # checkpoints from the first commit in WAL on
    w.put_tensor(3, _value(3, 1000))
    assert other.execute("SELECT device_id FROM devices").fetchall() == [(7,)]  # it follows the file into WAL
    w.close()  # the other connection has the WAL open: WAL stays, silently
    assert _header_mode(db) == (2, 2)
    other.close()
    with Writer(tmp_path, append=True) as last:  # the last writer to close finishes the file
        last.put_tensor(4, _value(4, 10))
    assert _header_mode(db) == (1, 1)
    assert not Path(f"{db}-wal").exists() and not Path(f"{db}-shm").exists()
    with reportdb.open(db) as r:
        assert r.tensor_ids() == [1, 2, 3, 4]
        np.testing.assert_array_equal(r.tensor(3), _value(3, 1000))
    con = sqlite3.connect(db)
    assert con.execute("SELECT device_id FROM devices").fetchall() == [(7,)]
    con.close()


READER_SCRIPT = r"""
import sys
import reportdb

with reportdb.open(sys.argv[1]) as r:
    print(r.tensor_ids(), flush=True)
    sys.stdin.readline()  # the file is handed over to WAL meanwhile
    print(r.tensor_ids(), float(r.tensor(2).sum()), flush=True)
"""


@pytest.mark.process
def test_a_reader_opened_before_the_hand_over_reads_on_without_writing(tmp_path: Path) -> None:
    """A reader (another process) that opened the file in rollback mode follows it into WAL at its next read,
    through the writer's -shm opened read-only: not a byte of it changes (plain ``mode=ro`` writes its read mark)."""
    db = tmp_path / "db.sqlite"
    script = tmp_path / "reader.py"
    script.write_text(READER_SCRIPT)
    w = Writer(tmp_path, batch_seconds=0, durable=False)
    w.put_tensor(1, _value(1, 1000))
    w.flush()
    reader = subprocess.Popen(
        [sys.executable, str(script), str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert reader.stdout is not None and reader.stdin is not None
    try:
        assert reader.stdout.readline().strip() == "[1]"
        other = sqlite3.connect(db, isolation_level=None, timeout=60, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")
        threading.Timer(0.2, lambda: other.execute("COMMIT")).start()
        w.put_tensor(2, _value(2, 1000))
        w.flush()
        assert _header_mode(db) == (2, 2)
        shm = Path(f"{db}-shm")
        before = shm.read_bytes()
        reader.stdin.write("go\n")
        reader.stdin.flush()
        assert reader.stdout.readline().strip() == f"[1, 2] {float(_value(2, 1000).sum())}"
        assert shm.read_bytes() == before
    finally:
        reader.kill()
        reader.wait(timeout=60)
    other.close()
    w.close()
    assert _header_mode(db) == (1, 1)


KILL_SCRIPT = r"""
import sys
import numpy as np
import reportdb

path, durable = sys.argv[1], sys.argv[2] == "1"
with reportdb.Writer(path, batch_seconds=0, durable=durable, sync_bytes=1 << 20) as w:
    tid = 0
    while True:
        n = (1 << 20) if tid % 3 else (48 << 20)  # 4 MiB or 192 MiB of float32: a commit long enough to hit
        w.put_tensor(tid, np.arange(n, dtype=np.float32) + tid)  # sync_bytes: committed when this returns
        w.add_operation(tid, "ttnn.op", outputs=[tid])
        w.flush()
        print("committed", tid, n, flush=True)
        tid += 1
"""


def _hot(journal: Path) -> bool:
    """Whether ``journal`` holds a transaction that changed the database file: its header's magic is written (with
    fsyncs on, SQLite writes it only once the journal is synced, just before the first database page)."""
    try:
        with open(journal, "rb") as f:
            return f.read(8) == bytes.fromhex("d9d505f920a163d7")
    except FileNotFoundError:
        return False


@pytest.mark.process
@pytest.mark.parametrize("durable", [True, False])
def test_sigkill_mid_commit_leaves_a_hot_journal_and_every_committed_batch(tmp_path: Path, durable: bool) -> None:
    """SIGKILL while a commit is writing (the journal holds content): a read-only open refuses with advice and
    changes nothing; the next writable open rolls the journal back; every tensor flush() returned for is intact."""
    script = tmp_path / "kill.py"
    script.write_text(KILL_SCRIPT)
    report = tmp_path / "report"
    db = report / "db.sqlite"
    journal = Path(f"{db}-journal")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(report), "1" if durable else "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    assert proc.stdout is not None
    committed: dict[int, int] = {}
    deadline = time.monotonic() + 60
    try:
        while len(committed) < 4:
            line = proc.stdout.readline()
            assert line, proc.stderr.read() if proc.stderr else ""
            _, tid, n = line.split()
            committed[int(tid)] = int(n)
        while not _hot(journal):  # a commit writing into the database file
            assert time.monotonic() < deadline, "no transaction seen in the journal"
            time.sleep(0.0005)
    finally:
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    for line in out.splitlines():
        _, tid, n = line.split()
        committed[int(tid)] = int(n)
    assert _hot(journal)  # the killed writer's transaction is still to be rolled back
    assert not Path(f"{db}-wal").exists()
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in report.iterdir()}
    with pytest.raises(ReadOnlyError, match=r"hot journal.*reportdb\.open\(path, 'a'\)"):
        reportdb.open(report)
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in report.iterdir()} == before
    with reportdb.open(report, "a"):  # rolls the hot journal back
        pass
    assert not journal.exists()
    with reportdb.open(report) as r:
        assert set(r.tensor_ids()) >= set(committed)
        for tid, n in committed.items():
            np.testing.assert_array_equal(r.tensor(tid), _value(tid, n))
    assert reportdb.verify(db).ok


# --- the page size a finished report keeps ------------------------------------------------------------------------


def test_a_small_tensor_report_closes_with_small_pages_and_the_same_rowids(tmp_path: Path) -> None:
    """1000 x 4 KiB tensors with operations: 8.8 MB with 64 KiB pages (a page per table and index), about 5.6 MB with
    4 KiB ones. The legacy tables' rowids (the rows' only identity) are the same after the rewrite."""
    db = tmp_path / "db.sqlite"
    rng = np.random.default_rng(5)
    with Writer(tmp_path, batch_seconds=0) as w:
        for tid in range(1000):
            w.put_tensor(tid, rng.standard_normal(1024).astype(np.float32))
            w.add_operation(tid, "ttnn.add", arguments={"memory_config": "DRAM"}, outputs=[tid])
        before = {t: w.query(f"SELECT rowid, * FROM {t} ORDER BY rowid") for t in ("tensors", "output_tensors")}
        assert db.stat().st_size > 8_000_000
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA page_size").fetchone()[0] == 4096
        for table, rows in before.items():
            assert con.execute(f"SELECT rowid, * FROM {table} ORDER BY rowid").fetchall() == rows
    finally:
        con.close()
    assert db.stat().st_size < 6_000_000
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("db.sqlite")) == ["db.sqlite"]  # no side file
    assert reportdb.verify(db).ok


def test_a_report_of_large_tensors_keeps_its_pages(tmp_path: Path) -> None:
    """Above 8 MiB, a report whose small pages would save under a tenth of it is not rewritten (the VACUUM would
    cost more than it gives back)."""
    db = tmp_path / "db.sqlite"
    with Writer(tmp_path, batch_seconds=0) as w:
        for tid in range(8):
            w.put_tensor(tid, _value(tid, 1 << 20))  # 4 MiB each: 32 MiB, of which small pages would save ~2 MB
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA page_size").fetchone()[0] == 65536
    con.close()


def test_the_journal_is_chosen_by_argument_or_environment() -> None:
    from reportdb.writer import WriterConfig

    assert WriterConfig().wal is False
    assert WriterConfig.from_env({"REPORTDB_WAL": "1"}).wal is True
    assert WriterConfig.from_env({"REPORTDB_WAL": "1"}, wal=False).wal is False
