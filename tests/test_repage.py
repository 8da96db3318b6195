"""The page-size rewrite a Writer runs at close (store/journal.py ``_repage``): rowids kept, other writers' commits kept."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

import reportdb
from reportdb import Writer
from reportdb.store import engine, journal


def _legacy_table_with_gaps(db: Path) -> list[tuple[int, ...]]:
    """A keyless, index-less legacy table whose rowids have gaps (rows deleted), the case a plain VACUUM renumbers."""
    con = sqlite3.connect(db, isolation_level=None)
    try:
        con.execute("BEGIN")  # one commit, not 3000 (each an fsync of the file)
        con.execute("CREATE TABLE captures (note TEXT, value REAL)")
        con.executemany("INSERT INTO captures VALUES (?, ?)", [(f"row {i}", i / 7) for i in range(3000)])
        con.execute("DELETE FROM captures WHERE rowid % 3 = 0")
        con.execute("COMMIT")
        return con.execute("SELECT rowid, * FROM captures ORDER BY rowid").fetchall()
    finally:
        con.close()


def test_a_repage_keeps_the_rowids_of_a_keyless_table_with_gaps(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    with Writer(tmp_path, batch_seconds=0) as w:
        w.put_tensor(1, np.arange(1024, dtype=np.float32))
    rows = _legacy_table_with_gaps(db)
    with Writer(tmp_path, batch_seconds=0, append=True) as w:  # written again: 64 KiB pages back, 4 KiB at close
        w.put_tensor(2, np.arange(2048, dtype=np.float32))
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA page_size").fetchone()[0] == 4096
        assert con.execute("SELECT rowid, * FROM captures ORDER BY rowid").fetchall() == rows
        assert con.execute("SELECT name FROM sqlite_master WHERE name LIKE 'rdb_keep_rowids_%'").fetchall() == []
    finally:
        con.close()
    assert reportdb.verify(db).ok


def test_a_commit_of_another_connection_is_never_overwritten_by_a_repage(tmp_path: Path) -> None:
    """The rewrite is one VACUUM: another connection's commit lands before it (and is copied) or after it. The earlier
    way (a copy made aside, then copied back) lost a commit made in between: the test runs a commit at each step of
    the rewrite's own statements and checks every one survives."""
    db = tmp_path / "db.sqlite"
    with Writer(tmp_path, batch_seconds=0) as w:
        w.put_tensor(1, np.arange(1024, dtype=np.float32))
        w.add_operation(1, "ttnn.add", outputs=[1])
    _legacy_table_with_gaps(db)
    other = sqlite3.connect(db, isolation_level=None, timeout=0)  # a locked commit fails at once (not counted)
    other.execute("CREATE TABLE probe (id INTEGER PRIMARY KEY, note TEXT)")
    conn = engine.connect(db, readonly=False)
    commits = 0

    def commit_between(*_: object) -> int:
        nonlocal commits
        if not conn.in_transaction:  # between the rewrite's statements, as another process could
            try:
                other.execute("INSERT INTO probe (note) VALUES ('another writer')")
                commits += 1
            except sqlite3.OperationalError:
                pass  # locked by the rewrite: it lands after, or not at all (not counted)
        return 0

    try:
        conn.execute("PRAGMA page_size").fetchone()
        conn.set_trace_callback(lambda sql: commit_between())
        journal._repage(conn, 65536)
        conn.set_trace_callback(None)
        assert commits > 0
        assert other.execute("SELECT count(*) FROM probe").fetchone()[0] == commits
        assert conn.execute("PRAGMA page_size").fetchone()[0] == 65536
    finally:
        conn.close()
        other.close()


def test_a_file_the_rewrite_cannot_copy_is_written_as_it_is(tmp_path: Path) -> None:
    """A table with a collation this process has not registered (a hand-made file): the VACUUM fails, so the page
    size stays and nothing else changes; writing and closing still work."""
    db = tmp_path / "db.sqlite"
    with Writer(tmp_path, batch_seconds=0) as w:
        w.put_tensor(1, np.arange(1024, dtype=np.float32))
    con = sqlite3.connect(db, isolation_level=None)
    con.create_collation("reverse", lambda a, b: (a < b) - (a > b))
    con.execute("CREATE TABLE notes (note TEXT COLLATE reverse)")
    con.executemany("INSERT INTO notes VALUES (?)", [("a",), ("b",)])
    con.close()
    with Writer(tmp_path, batch_seconds=0, append=True) as w:  # the repage to 64 KiB pages (and back) is skipped
        w.put_tensor(2, np.arange(2048, dtype=np.float32))
    with reportdb.open(db) as r:
        assert r.tensor_ids() == [1, 2]
        np.testing.assert_array_equal(r.tensor(2), np.arange(2048, dtype=np.float32))
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA page_size").fetchone()[0] == 4096
        assert con.execute("SELECT count(*) FROM notes").fetchone()[0] == 2
        assert con.execute("SELECT name FROM sqlite_master WHERE name LIKE 'rdb_keep_rowids_%'").fetchall() == []
    finally:
        con.close()
