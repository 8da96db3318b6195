"""Starting a report file's writeback early (store/writeback.py): a durable Writer does it after each large tensor,
through the descriptors SQLite holds, and never opens or closes one, so SQLite's locks stay where they are."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import reportdb
from reportdb.store.writeback import start_writeback
from reportdb.writer import Writer, batches

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")


def _locked_by_another_process(db: Path) -> bool:
    other = subprocess.run([sys.executable, "-c", "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], timeout=0);"
                            " c.execute('BEGIN IMMEDIATE')", str(db)], capture_output=True, text=True, timeout=60)
    return other.returncode != 0 and "locked" in other.stderr


@pytest.mark.process
def test_it_uses_sqlites_own_descriptors_and_keeps_its_locks(tmp_path: Path) -> None:
    """In a rollback journal SQLite's write lock is a POSIX lock on the database file, which closing any descriptor
    of the file would drop: after the call the lock still holds, and the data commits."""
    db = tmp_path / "db.sqlite"
    with reportdb.open(db, "a") as report:
        report.put_tensor(1, np.ones(1 << 18, np.float32))
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO rdb_meta(key, value) VALUES ('k', 'v')")
        assert start_writeback(db) == 1
        assert _locked_by_another_process(db)
        conn.execute("COMMIT")
        assert not _locked_by_another_process(db)
    finally:
        conn.close()
    assert start_writeback(db) == 0  # closed: no descriptor of the file is left
    assert start_writeback(tmp_path / "missing.sqlite") == 0
    with reportdb.open(db) as report:
        np.testing.assert_array_equal(report.tensor(1), np.ones(1 << 18, np.float32))


@pytest.mark.parametrize("durable", [True, False])
def test_a_durable_writer_starts_it_after_each_large_tensor(tmp_path: Path, durable: bool,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[int] = []

    def spied(path: Path) -> int:
        used.append(start_writeback(path))
        return used[-1]

    monkeypatch.setattr(batches, "start_writeback", spied)
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal(1 << 19).astype(np.float32) for _ in range(3)]  # 2 MiB each: prepared ahead
    with Writer(tmp_path, batch_seconds=0, durable=durable) as w:
        for i, a in enumerate(arrays):
            w.put_tensor(i, a)
        w.put_tensor(10, np.zeros(16, np.float32))  # small: no writeback of its own
    # each large tensor used this process's descriptors of the file (the Writer's connection, its run lock)
    assert (len(used) == 3 and all(n >= 1 for n in used)) if durable else used == []
    with reportdb.open(tmp_path) as r:
        for i, a in enumerate(arrays):
            np.testing.assert_array_equal(r.tensor(i), a)
