"""Golden records recomputed on the real reports, run against run, and pictures."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import reportdb
from reportdb.analysis.plot import PlotUnavailableError
from reportdb.analysis.runs import OperationRef

from conftest import FIXTURES

REPORTS = ["ttnn-0.62.2-bin", "ttnn-0.64.5-report-tensorbin"]


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for name in REPORTS:
        dst = tmp_path_factory.mktemp(name) / "report"
        reportdb.migrate(FIXTURES / name / "report", dst)
        out[name] = dst
    return out


@pytest.mark.parametrize("name", REPORTS)
def test_recomputed_pcc_equals_recorded_wherever_the_golden_exists(migrated: dict[str, Path], name: str, tmp_path: Path) -> None:
    work = tmp_path / "report"
    shutil.copytree(migrated[name], work)
    with reportdb.open(work, "a") as report:
        results = reportdb.compare_golden(report)
        stored = {(r.kind, r.tensor_id) for r in results if r.metrics is not None}
        golden_files = {int(p.stem) for p in (FIXTURES / name / "report" / "tensors").glob("*.pt")}
        compared = [r for r in results if r.status == "compared"]
        assert compared and {r.golden_tensor_id for r in compared} <= golden_files
        for r in results:
            if r.golden_tensor_id in golden_files and report.has_tensor(r.tensor_id):
                assert r.status == "compared"
        for r in compared:
            assert r.metrics.pcc == pytest.approx(r.recorded_pcc, abs=1e-6)
            assert r.metrics.pcc_ttmetal == pytest.approx(r.recorded_pcc, abs=1e-6)
            assert r.metrics.passed == (r.recorded_pcc >= r.desired_pcc)
        missing = [r for r in results if r.status != "compared"]
        assert all(r.metrics is None for r in missing)
        json.dumps([r.to_dict() for r in results], allow_nan=False)
    con = sqlite3.connect(work / "db.sqlite")
    rows = {(k, t): json.loads(m) for k, t, m in con.execute("SELECT kind, tensor_id, metrics FROM rdb_comparison")}
    assert set(rows) == stored


def _differ_in_one_output(src: Path, dst: Path, operation_id: int) -> int:
    shutil.copytree(src, dst)
    with reportdb.open(dst, "a") as report, report.session() as s:
        tensor_id = s.connection().exec_driver_sql(
            "SELECT tensor_id FROM output_tensors WHERE operation_id=? AND output_index=0", (operation_id,)
        ).scalar_one()
    with reportdb.open(dst, "a") as report:
        values = report.tensor(tensor_id).astype(np.float32)
        changed = values[::-1].copy() + 1.0  # same shape, clearly different values
        report.put_tensor(tensor_id, changed.astype(values.dtype), if_exists="replace")
    return tensor_id


def test_run_vs_run_marks_the_first_divergence(migrated: dict[str, Path], tmp_path: Path) -> None:
    a = migrated[REPORTS[0]]
    b = tmp_path / "b"
    _differ_in_one_output(a, b, operation_id=6)
    with reportdb.open(a) as ra, reportdb.open(b) as rb:
        result = reportdb.compare_runs(ra, rb)
    assert result.matched_by == "id" and not result.unmatched_a and not result.unmatched_b
    compared = [r for r in result.rows if r.status == "compared"]
    assert compared
    first = result.first_divergence
    assert first is not None and first.operation_id_a == 6 and first.passed is False
    assert [r.operation_id_a for r in result.rows if r.first_divergence] == [6]
    for r in compared:
        if r.operation_id_a != 6:
            assert r.passed and r.pcc == pytest.approx(1.0)


def test_run_vs_run_falls_back_to_name_order_when_ids_differ(migrated: dict[str, Path], tmp_path: Path) -> None:
    a = migrated[REPORTS[0]]
    b = tmp_path / "b"
    _differ_in_one_output(a, b, operation_id=9)
    con = sqlite3.connect(b / "db.sqlite")
    removed_name = con.execute("SELECT name FROM operations WHERE operation_id=2").fetchone()[0]
    con.execute("DELETE FROM operations WHERE operation_id=2")
    for table in ("operations", "output_tensors", "input_tensors"):
        con.execute(f"UPDATE {table} SET operation_id = operation_id + 100")
    con.commit()
    con.close()
    with reportdb.open(a) as ra, reportdb.open(b) as rb:
        result = reportdb.compare_runs(ra, rb)
    assert result.matched_by == "name order"
    assert result.unmatched_a == (OperationRef(2, removed_name),) and result.unmatched_b == ()
    first = result.first_divergence
    assert first is not None and (first.operation_id_a, first.operation_id_b) == (9, 109)


@pytest.mark.process
def test_cli_compare_golden_and_runs(migrated: dict[str, Path], tmp_path: Path) -> None:
    work = tmp_path / "a"
    shutil.copytree(migrated[REPORTS[0]], work)
    b = tmp_path / "b"
    _differ_in_one_output(work, b, operation_id=6)
    run = lambda *args: subprocess.run([sys.executable, "-m", "reportdb", *args], capture_output=True, text=True, timeout=300)
    golden = run("compare", str(work), "--golden")  # records below their desired PCC fail, as in a test runner
    assert golden.returncode == 1 and "FAIL pcc" in golden.stdout and "golden tensor not stored" in golden.stdout
    runs = run("compare", str(work), str(b), "--json")
    assert runs.returncode == 1, runs.stderr
    assert json.loads(runs.stdout)["first_divergence"]["operation_id_a"] == 6
    text = run("compare", str(work), str(b)).stdout
    assert ">>" in text and "first divergence: operation 6" in text
    bad = run("compare", str(work))
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.process
def test_plot_writes_pictures(migrated: dict[str, Path], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")  # a test extra; the missing-matplotlib path is tested below
    report_path = migrated[REPORTS[0]]
    with reportdb.open(report_path) as report:
        out = reportdb.plot_tensor(report, 2, tmp_path / "t.png")
        err = reportdb.plot_tensor(report, 2, tmp_path / "e.png", against=(report, 1000001))
    for path in (out, err):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    cli = subprocess.run(
        [sys.executable, "-m", "reportdb", "plot", str(report_path), "2", "--against", f"{report_path}:1000001", "-o", str(tmp_path / "c.png")],
        capture_output=True, text=True, timeout=300,
    )
    assert cli.returncode == 0 and (tmp_path / "c.png").stat().st_size > 0, cli.stderr


@pytest.mark.process
def test_plot_without_matplotlib_is_a_clear_error(migrated: dict[str, Path], tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "import reportdb\n"
        "from reportdb.analysis.plot import PlotUnavailableError\n"
        f"r = reportdb.open({str(migrated[REPORTS[0]])!r})\n"
        "try:\n"
        f"    reportdb.plot_tensor(r, 2, {str(tmp_path / 'x.png')!r})\n"
        "except PlotUnavailableError as e:\n"
        "    print('refused:', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "refused: plotting needs matplotlib" in out.stdout, out.stderr
    assert not (tmp_path / "x.png").exists()
    assert issubclass(PlotUnavailableError, reportdb.ReportDBError)


def test_stats_of_migrated_tensors_equal_numpy(migrated: dict[str, Path]) -> None:
    with reportdb.open(migrated[REPORTS[1]]) as report:
        for tensor_id in report.tensor_ids():
            if len(report.tensor_info(tensor_id).shards) != 1:
                continue
            values = report.tensor(tensor_id).astype(np.float64)
            s = report.tensor_stats(tensor_id)
            finite = values[np.isfinite(values)]
            assert s.count == values.size and s.nan_count == int(np.isnan(values).sum())
            if finite.size:
                assert (s.min, s.max) == (finite.min(), finite.max())
                assert s.mean == pytest.approx(finite.mean(), rel=1e-9, abs=1e-12)
                assert s.std == pytest.approx(finite.std(), rel=1e-9, abs=1e-12)
                counts, _ = np.histogram(finite, 64, range=(finite.min(), finite.max()) if finite.min() < finite.max() else (finite.min() - 0.5, finite.max() + 0.5))
                assert s.hist_counts == tuple(counts.tolist())


def _bare_report(path: Path, ddl: str | None) -> Path:
    """A new reportdb database with tensors 1 and 2, without the record tables but, if given, one hand-made."""
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, np.arange(8, dtype=np.float32))
        report.put_tensor(2, np.arange(8, dtype=np.float32))
        with report.connection() as conn:
            conn.execute("DROP TABLE local_tensor_comparison_records")
            conn.execute("DROP TABLE global_tensor_comparison_records")
            if ddl is not None:
                conn.execute(ddl)
    return path


def test_compare_golden_without_records_stores_nothing_and_raises_nothing(tmp_path: Path) -> None:
    no_tables = _bare_report(tmp_path / "none.sqlite", None)
    empty = _bare_report(tmp_path / "empty.sqlite", "CREATE TABLE local_tensor_comparison_records (tensor_id int, golden_tensor_id int)")
    for path in (no_tables, empty):
        with reportdb.open(path, "a") as report:
            assert list(reportdb.compare_golden(report)) == []  # with store=True: an empty insert used to raise ProgrammingError
            with report.connection() as conn:
                assert conn.execute("SELECT COUNT(*) FROM rdb_comparison").fetchone()[0] == 0


def test_compare_golden_reads_record_tables_missing_columns(tmp_path: Path) -> None:
    path = _bare_report(tmp_path / "old.sqlite", "CREATE TABLE global_tensor_comparison_records (tensor_id int, golden_tensor_id int)")
    with reportdb.open(path, "a") as report, report.connection() as conn:
        conn.execute("INSERT INTO global_tensor_comparison_records VALUES (1, 2)")
    with reportdb.open(path) as report:
        (row,) = reportdb.compare_golden(report)
    assert (row.kind, row.rank, row.desired_pcc, row.recorded_pcc, row.status) == ("global", 0, None, None, "compared")
    assert row.metrics.passed
    hostile = _bare_report(tmp_path / "hostile.sqlite", "CREATE TABLE local_tensor_comparison_records (x int)")
    with reportdb.open(hostile) as report, pytest.raises(reportdb.ReportDBError, match="no tensor_id column"):
        reportdb.compare_golden(report)
