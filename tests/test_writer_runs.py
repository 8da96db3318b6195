"""One report, one run: a second Writer run into a finished report is refused with the remedies named, or, with
``append=True``, added beside the first without changing it; never mixed. Writers open at the same time still write
one run together."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import reportdb

from conftest import ROOT, locked_from_elsewhere


def readme_writer_snippet() -> str:
    """The README's Writer example, as written there."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)
    found = [b for b in blocks if 'reportdb.Writer("reports/run"' in b]
    assert len(found) == 1, "the README's Writer example is gone"
    return found[0]


def run_snippet(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def contents(db: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every report row the Writer writes, and each stored tensor's values as bytes."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = ("operations", "operation_arguments", "stack_traces", "input_tensors", "output_tensors", "tensors")
        found = {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in tables}
    finally:
        conn.close()
    with reportdb.open(db) as report:
        found["values"] = [(t, report.tensor(t).tobytes()) for t in report.tensor_ids()]
    return found


@pytest.mark.process
def test_the_readme_writer_run_twice_is_refused_and_the_first_kept(tmp_path: Path) -> None:
    snippet = readme_writer_snippet()
    first = run_snippet(snippet, tmp_path)
    assert first.returncode == 0, first.stderr
    db = tmp_path / "reports" / "run" / "db.sqlite"
    before = contents(db)
    assert len(before["operations"]) == 1 and len(before["input_tensors"]) == 1
    for code in (snippet, snippet.replace("default_rng(0)", "default_rng(1)")):  # the same run again, a variant
        again = run_snippet(code, tmp_path)
        assert again.returncode == 1 and "ReportExistsError" in again.stderr, again.stderr
        message = again.stderr.strip().splitlines()[-1]
        assert str(Path("reports/run/db.sqlite")) in message and "finished run" in message
        assert "append=True" in message and "another path" in message and "remove" in message
        assert contents(db) == before


def test_append_adds_a_run_beside_the_first_and_changes_nothing_of_it(tmp_path: Path) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with reportdb.Writer(tmp_path, batch_seconds=0) as w:
        w.put_tensor(1, x)
        w.put_tensor(2, x + 1, role="output")
        w.add_operation(1, "ttnn.add", duration=0.5, arguments={"a": 1}, stack_trace="one", inputs=[1], outputs=[2])
    db = tmp_path / "db.sqlite"
    before = contents(db)
    with reportdb.Writer(tmp_path, append=True, batch_seconds=0) as w:
        with pytest.raises(reportdb.errors.TensorExistsError, match="tensor 1 .* earlier run"):
            w.put_tensor(1, x * 10)
        with pytest.raises(reportdb.errors.ReportExistsError, match="operation 1 .* earlier run"):
            w.add_operation(1, "ttnn.mul", duration=9.0, inputs=[1], outputs=[2])
        w.put_tensor(3, x * 3, role="output")
        w.add_operation(2, "ttnn.mul", duration=0.25, inputs=[1], outputs=[3])
    after = contents(db)
    for table, rows in before.items():  # every row and value of the first run is still there, as it was
        assert set(map(repr, rows)) <= set(map(repr, after[table])), table
    assert [r[:2] for r in after["operations"]] == [(1, "ttnn.add"), (2, "ttnn.mul")]
    assert len(after["input_tensors"]) == 2 and len(after["output_tensors"]) == 2
    with reportdb.open(tmp_path) as report:
        np.testing.assert_array_equal(report.tensor(1), x)
        np.testing.assert_array_equal(report.tensor(3), x * 3)


def test_writers_open_together_write_one_run_and_other_ranks_join_later(tmp_path: Path) -> None:
    """A second Writer opened while the first is open joins its run (no append needed); after both close, a Writer
    of another rank adds its rank's run, and one of rank 0 is refused."""
    first = reportdb.Writer(tmp_path, batch_seconds=0)
    first.add_operation(1, "ttnn.add")
    first.flush()
    with reportdb.Writer(tmp_path, batch_seconds=0) as second:
        second.add_operation(2, "ttnn.mul")
    first.close()
    with reportdb.Writer(tmp_path, rank=1, batch_seconds=0) as other:
        other.add_operation(1, "ttnn.add")
    with pytest.raises(reportdb.errors.ReportExistsError, match="rank 0: 2 operations"):
        reportdb.Writer(tmp_path)
    conn = sqlite3.connect(tmp_path / "db.sqlite")
    assert conn.execute("SELECT operation_id, rank FROM operations ORDER BY rank, operation_id").fetchall() == [
        (1, 0), (2, 0), (1, 1)]
    conn.close()


@pytest.mark.process
@pytest.mark.parametrize("refused", [False, True])
def test_letting_go_of_the_run_lock_keeps_this_process_sqlite_lock(tmp_path: Path, refused: bool) -> None:
    """RunLock.release closed its descriptor of the database, and closing any descriptor of a file drops every POSIX
    lock the process holds on it, SQLite's included: a connection of this process still in its transaction (the
    Writer's own when join refuses a finished run, or another one) lost its lock, and another process could write
    under it. The run lock itself is released (another process takes it)."""
    from reportdb.store import files
    from reportdb.writer.runs import RunLock

    db = tmp_path / "db.sqlite"
    with sqlite3.connect(db) as made:
        made.execute("CREATE TABLE operations (operation_id INTEGER, name TEXT)")
        made.execute("INSERT INTO operations VALUES (1, 'op')" if refused else "SELECT 1")
    made.close()
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # this process's write lock, as an open Writer's transaction holds one
        lock = RunLock(db)
        if refused:
            with pytest.raises(reportdb.errors.ReportExistsError):
                lock.join(holder, 0, append=False)
        else:
            lock.join(holder, 0, append=False)
            lock.release()
        assert locked_from_elsewhere(db) == "database is locked"
        flock = subprocess.run([sys.executable, "-c", (
            "import fcntl, os, sys\n"
            "fcntl.flock(os.open(sys.argv[1], os.O_RDONLY), fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        ), str(db)], capture_output=True, text=True, timeout=60)
        assert flock.returncode == 0, flock.stderr
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    files.let_go(os.open(db, os.O_RDONLY))  # the file is free now: what was kept of it is closed
    assert not files._KEPT


@pytest.mark.process
def test_a_forked_child_letting_go_keeps_the_parents_run_lock(tmp_path: Path) -> None:
    """A forked child shares the parent's descriptor, and with it the flock: the child's release must not unlock it
    (the parent's Writer still holds its run)."""
    import fcntl

    from reportdb.writer.runs import RunLock

    db = tmp_path / "db.sqlite"
    sqlite3.connect(db).close()
    holder = sqlite3.connect(db, isolation_level=None)
    lock = RunLock(db)
    lock.join(holder, 0, append=False)
    try:
        pid = os.fork()
        if pid == 0:  # the child: let go of its copy and leave at once
            try:
                lock.release()
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        probe = os.open(db, os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another description: the parent's lock is there
        finally:
            os.close(probe)
    finally:
        lock.release()
        holder.close()
