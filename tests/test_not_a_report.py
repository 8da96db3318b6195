"""A SQLite file that is not a report (someone's database with a ``users`` table, an empty ``db.sqlite``) is refused
untouched: ``upgrade`` and ``open(.., "a")`` add no table to it, ``info`` does not call it a legacy report nor suggest
a ``migrate``; a real TTNN report and a new empty file are still reports to read and to write."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import reportdb
from reportdb import recognize

from conftest import FIXTURES, ROOT


def _users_db(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users(name) VALUES ('ada')")
    conn.commit()
    conn.close()
    return path


def _state(path: Path) -> tuple[str, int, list[str]]:
    """The file's digest, mtime and directory listing: what must not change."""
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns, sorted(p.name for p in path.parent.iterdir())


def _tables(path: Path) -> list[str]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'"))
    finally:
        conn.close()


@pytest.mark.parametrize("mode", ["r", "a"])
def test_someone_elses_database_is_refused_untouched(tmp_path: Path, mode: str) -> None:
    db = _users_db(tmp_path / "app.sqlite")
    before = _state(db)
    with pytest.raises(reportdb.errors.NotAReportError, match=r"not a TTNN report.*operations.*tensors.*its tables: users"):
        reportdb.open(db, mode)  # type: ignore[arg-type]
    with pytest.raises(reportdb.errors.NotAReportError, match="not a TTNN report"):
        reportdb.upgrade(db)
    with pytest.raises(reportdb.errors.NotAReportError, match="not a TTNN report"):
        with reportdb.Writer(db) as w:
            w.add_operation(1, "ttnn.add")
    assert _state(db) == before and _tables(db) == ["users"]


def test_a_table_named_like_a_reports_is_not_enough(tmp_path: Path) -> None:
    """``operations`` and ``tensors`` without the columns every report has are not a report either."""
    db = tmp_path / "look-alike.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE operations(id INTEGER, label TEXT)")
    conn.execute("CREATE TABLE tensors(tensor_id INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(reportdb.errors.NotAReportError, match=r"lacks operations\(name, operation_id\)"):
        reportdb.upgrade(db)
    assert _tables(db) == ["operations", "tensors"]


def test_an_empty_database_is_nothing_to_read_or_upgrade_but_a_place_to_write(tmp_path: Path) -> None:
    folder = tmp_path / "killed-run"
    folder.mkdir()
    (folder / "db.sqlite").touch()
    with pytest.raises(reportdb.errors.NotAReportError, match="empty database"):
        reportdb.open(folder)
    with pytest.raises(reportdb.errors.NotAReportError, match="empty database"):
        reportdb.upgrade(folder)
    assert (folder / "db.sqlite").stat().st_size == 0 and sorted(p.name for p in folder.iterdir()) == ["db.sqlite"]
    with reportdb.open(folder, "a") as report:
        report.put_tensor(1, np.ones(3, np.float32))
    with reportdb.open(folder) as report:
        assert report.tensor_ids() == [1]


def test_reports_of_every_kind_are_recognized(tmp_path: Path) -> None:
    """ttnn's own databases (0.62, 0.64, 0.81's schema 3.5, the visualizer's empty 2024 one) and a reportdb report pass
    the check, which changes nothing."""
    ours = tmp_path / "ours.sqlite"
    with reportdb.open(ours, "a") as report:
        report.put_tensor(1, np.ones(2, np.float32))
    schemas = sorted((FIXTURES / "report-schemas").glob("*.sqlite"))
    assert len(schemas) >= 2
    for db in (
        FIXTURES / "ttnn-0.62.2-bin" / "report" / "db.sqlite",
        FIXTURES / "ttnn-0.64.5-report-tensorbin" / "report" / "db.sqlite",
        *schemas,
        ours,
    ):
        before = _state(db)
        recognize.check_file(db, empty_ok=False)
        assert _state(db) == before, db


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reportdb", *args], capture_output=True, text=True, timeout=120, cwd=ROOT,
    )


@pytest.mark.process
def test_cli_upgrade_and_info_refuse_what_is_not_a_report(tmp_path: Path) -> None:
    """The new user's case: ``upgrade`` on an unrelated database exits 1 with one line and adds nothing; ``info`` on it
    or on a folder with a 0-byte db.sqlite neither calls it a legacy TTNN report nor offers a migrate."""
    db = _users_db(tmp_path / "app.sqlite")
    empty = tmp_path / "empty-folder"
    empty.mkdir()
    (empty / "db.sqlite").touch()
    before = _state(db)
    for args in (("upgrade", str(db)), ("info", str(db)), ("ls", str(db)), ("info", str(empty)), ("upgrade", str(empty))):
        out = run_cli(*args)
        assert out.returncode == 1, (args, out.stdout, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1 and "not a" in out.stderr, (args, out.stderr)
        assert "legacy TTNN report" not in out.stdout + out.stderr and "migrate" not in out.stdout + out.stderr, args
        assert "schema" not in out.stdout, args
    assert _state(db) == before and _tables(db) == ["users"]
    assert (empty / "db.sqlite").stat().st_size == 0


@pytest.mark.process
def test_cli_info_still_names_a_real_legacy_report(tmp_path: Path) -> None:
    rep = tmp_path / "rep"
    shutil.copytree(FIXTURES / "ttnn-0.62.2-bin" / "report", rep, ignore=shutil.ignore_patterns("tensors"))
    out = run_cli("info", str(rep))
    assert out.returncode == 0, out.stderr
    assert "a legacy TTNN report database" in out.stdout and "reportdb migrate" in out.stdout
