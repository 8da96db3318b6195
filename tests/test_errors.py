"""Every error reportdb raises on purpose is a ReportDBError subclass defined in reportdb.errors, so a caller finds
them all in one place and catches each by name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import parsed
import reportdb
import reportdb.errors as errors

PACKAGE = Path(reportdb.__file__).parent


def test_every_error_class_lives_in_errors_py() -> None:
    elsewhere = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "errors.py":
            continue
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(base, ast.Name) and (base.id.endswith("Error") or base.id == "Exception") for base in node.bases
            ) and not node.name.startswith("_"):
                elsewhere.append(f"{path.relative_to(PACKAGE)}: {node.name}")
    assert elsewhere == []


def test_every_error_class_is_in_errors_and_the_top_level_keeps_the_base() -> None:
    """Each error class is imported from reportdb.errors; the top level keeps ReportDBError alone, and an error class it
    used to export still resolves there, warning where to import it from."""
    defined = {name for name, value in vars(errors).items() if isinstance(value, type) and issubclass(value, errors.ReportDBError)}
    assert len(defined) > 30
    assert [n for n in reportdb.__all__ if n.endswith("Error")] == ["ReportDBError"]
    assert reportdb.ReportDBError is errors.ReportDBError
    for name in sorted(defined - {"ReportDBError"}):
        with pytest.warns(DeprecationWarning, match="import it from reportdb.errors"):
            assert getattr(reportdb, name) is getattr(errors, name)


def test_the_top_level_holds_what_a_user_calls() -> None:
    """About 25 names: the functions and classes a user calls, the spec types, the base error and the version; every
    result type lives beside the function that returns it, and a name moved from the top level still resolves there
    with a DeprecationWarning naming its module."""
    assert len(reportdb.__all__) <= 26
    assert {"open", "compare", "replay", "Writer", "Policy", "ReportDBError"} <= set(reportdb.__all__)
    with pytest.warns(DeprecationWarning, match="reportdb.numeric.metrics"):
        from reportdb.numeric.metrics import Comparison

        assert reportdb.Comparison is Comparison
    with pytest.raises(AttributeError):
        getattr(reportdb, "no_such_name")


# --- SQLite's errors are named by their error code, never misdiagnosed (issue 23) ---------------------------------

import sqlite3

import numpy as np

from reportdb.store import engine


def _report(path: Path) -> Path:
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, np.arange(16, dtype=np.float32))
    return path


def test_a_closed_report_says_it_is_closed_not_damaged(tmp_path: Path) -> None:
    """Using a closed Report raised "CorruptionError: ... the database file is damaged": a user told that deletes a
    good file."""
    path = _report(tmp_path / "db.sqlite")
    for mode in ("r", "a"):
        report = reportdb.open(path, mode)
        report.close()
        report.close()  # closing twice is harmless
        for call in (lambda: report.tensor(1), report.tensor_ids, lambda: report.tensor_info(1), report.summary):
            with pytest.raises(reportdb.errors.ReportClosedError, match="the report is closed") as caught:
                call()
            assert "damaged" not in str(caught.value)
    with pytest.raises(reportdb.errors.ReportClosedError):
        with reportdb.open(path, "a") as report:
            report.close()
            report.put_tensor(2, np.zeros(4, np.float32))


def test_a_full_disk_is_a_disk_error_and_nothing_is_kept(tmp_path: Path) -> None:
    """SQLite's SQLITE_FULL (here from ``max_page_count``, as a full disk gives it) became SchemaError ("changed by
    another tool?"), or a raw "cannot rollback" from the writer's own rollback."""
    path = _report(tmp_path / "db.sqlite")
    with reportdb.open(path, "a") as report:
        with report.connection() as conn:
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            conn.execute(f"PRAGMA max_page_count={pages + 2}")
        with pytest.raises(reportdb.errors.DiskError, match="disk is full") as caught:
            report.put_tensor(2, np.random.default_rng(0).random(1 << 18).astype(np.float32))
        assert "changed by another tool" not in str(caught.value) and "damaged" not in str(caught.value)
        assert report.tensor_ids() == [1]


def _caught(conn: sqlite3.Connection, sql: str) -> sqlite3.Error:
    try:
        conn.execute(sql)
    except sqlite3.Error as exc:
        return exc
    raise AssertionError(f"{sql} did not fail")


def test_sqlite_errors_map_by_their_code(tmp_path: Path) -> None:
    """Real SQLite errors, each of one kind, through ``engine.translate``: a constraint is a ConstraintError (it was a
    CorruptionError), a lock is ReportLockedError, a file that is not a database a NotAReportError, a closed
    connection a ReportClosedError; only errors that mean the same whoever ran the statement map with ``only_own``."""
    path = tmp_path / "x.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE t(a INTEGER PRIMARY KEY)")
    conn.execute("INSERT INTO t VALUES (1)")
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    conn.execute("BEGIN IMMEDIATE")
    locked = _caught(other, "BEGIN IMMEDIATE")
    conn.execute("ROLLBACK")
    constraint = _caught(conn, "INSERT INTO t VALUES (1)")
    missing = _caught(conn, "SELECT * FROM nowhere")
    other.close()
    conn.close()
    closed = _caught(conn, "SELECT 1")
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"not a database at all" * 300)
    notadb = _caught(sqlite3.connect(garbage), "SELECT * FROM sqlite_master")
    cases = [(constraint, reportdb.errors.ConstraintError, False), (locked, reportdb.errors.ReportLockedError, False),
             (missing, reportdb.errors.SchemaError, False), (closed, reportdb.errors.ReportClosedError, True),
             (notadb, reportdb.errors.NotAReportError, False)]
    for exc, expected, own in cases:
        mapped = engine.translate(exc, path)
        assert type(mapped) is expected, (exc, mapped)
        assert (engine.translate(exc, path, only_own=True) is not None) == own, exc
