"""Run against run by values: each output's verdict under the policy, the first divergence in execution order, the
JSON the CLI prints, and exit codes that never pass what was not compared (0 pass, 1 a failure, 3 not compared)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import reportdb

from conftest import FIXTURES

BF16 = ml_dtypes.bfloat16
ROOT = Path(__file__).resolve().parents[1]
N_OPS = 7


def _values(seed: int, shape: tuple[int, ...] = (64, 64)) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32).astype(BF16)


def _write_run(path: Path, outputs: dict[int, np.ndarray], ttnn_dtype: str = "BFLOAT16") -> Path:
    """A Writer report of a chain of operations (each consumes the previous output), written in reverse id order so
    rowid order is not execution order."""
    with reportdb.Writer(path) as w:
        for op_id in sorted(outputs, reverse=True):
            w.put_tensor(op_id, outputs[op_id], ttnn_dtype=ttnn_dtype, role="output")
            w.add_operation(op_id, f"ttnn.op{op_id}", inputs=[op_id - 1] if op_id > 1 else [], outputs=[op_id])
    return path


def _crafted_runs(tmp_path: Path) -> tuple[Path, Path]:
    """Run A, and run B whose outputs are: 1 the same bytes, 2 one ULP apart everywhere, 3 the same, 4 a flipped
    32x32 block (PCC ~0.5), 5 a NaN, 6 another shape, 7 the same."""
    a = {k: _values(k) for k in range(1, N_OPS + 1)}
    b = {k: v.copy() for k, v in a.items()}
    b[2] = np.nextafter(a[2], np.array(np.inf, BF16))
    b[4][:32, :32] *= -1
    b[5][7, 7] = np.nan
    b[6] = a[6][:, :32].copy()
    return _write_run(tmp_path / "a", a), _write_run(tmp_path / "b", b)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "reportdb", *args], capture_output=True, text=True, timeout=300, env=env)


def test_each_verdict_and_the_first_divergence_in_execution_order(tmp_path: Path) -> None:
    a, b = _crafted_runs(tmp_path)
    result = reportdb.compare_runs(a, b)  # paths, not open reports
    verdicts = {r.operation_id_a: (r.verdict, r.failed) for r in result.rows}
    assert verdicts == {
        1: ("identical", ()),
        2: ("within_tolerance", ()),
        3: ("identical", ()),
        4: ("diverges", ("pcc", "sqnr_db", "tile_sqnr_db")),
        5: ("diverges", ("nonfinite",)),
        6: ("diverges", ("shape",)),
        7: ("identical", ()),
    }
    assert [r.operation_id_a for r in result.rows] == list(range(1, N_OPS + 1))
    first = result.first_divergence
    assert first is not None and (first.operation_id_a, first.tensor_a, first.tensor_b) == (4, 4, 4)
    assert [r.operation_id_a for r in result.rows if r.first_divergence] == [4]
    assert result.counts() == {"identical": 3, "within_tolerance": 1, "diverges": 3, "not_compared": 0}
    ulp = result.rows[1].metrics
    assert ulp is not None and ulp.ulp_max == 1 and not ulp.bitwise_equal and ulp.pcc > 0.9999


def test_bfloat16_outputs_are_judged_by_bfloat16_defaults_not_float32(tmp_path: Path) -> None:
    a = {1: _values(1)}
    b = {1: (a[1].astype(np.float32) * np.float32(1.004)).astype(BF16)}  # 0.4% scale: ~1 bfloat16 ulp
    result = reportdb.compare_runs(_write_run(tmp_path / "a", a), _write_run(tmp_path / "b", b))
    (row,) = result.rows
    assert row.verdict == "within_tolerance" and row.metrics is not None
    assert row.metrics.rtol == 2 * 2.0**-7  # counted at bfloat16's tolerance: float32's 1e-5 failed nearly all
    assert row.metrics.allclose_mismatches == 0
    strict = reportdb.compare_runs(tmp_path / "a", tmp_path / "b", rtol=1e-5, atol=1e-8)
    assert strict.rows[0].verdict == "diverges" and strict.rows[0].failed == ("rtol/atol",)


@pytest.mark.process
def test_cli_json_first_divergence_and_exit_1(tmp_path: Path) -> None:
    a, b = _crafted_runs(tmp_path)
    out = _cli("compare", str(a), str(b), "--json")
    assert out.returncode == 1, out.stderr
    data = json.loads(out.stdout)
    assert list(data)[0] == "first_divergence"
    assert {k: data["first_divergence"][k] for k in ("operation_id_a", "operation_id_b", "tensor_a", "tensor_b")} == {
        "operation_id_a": 4, "operation_id_b": 4, "tensor_a": 4, "tensor_b": 4,
    }
    assert [row["verdict"] for row in data["rows"]] == [
        "identical", "within_tolerance", "identical", "diverges", "diverges", "diverges", "identical",
    ]
    assert data["rows"][3]["failed"] == ["pcc", "sqnr_db", "tile_sqnr_db"] and "max_abs_error" in data["rows"][3]
    text = _cli("compare", str(a), str(b))
    assert text.returncode == 1 and "first divergence: operation 4 ttnn.op4" in text.stdout


@pytest.mark.process
def test_cli_table_columns_do_not_run_together(tmp_path: Path) -> None:
    a = _write_run(tmp_path / "a", {1: np.array([[1.0, 2.0]], np.float32)}, "FLOAT32")
    b = _write_run(tmp_path / "b", {1: np.array([[-1.0, 2.0]], np.float32)}, "FLOAT32")
    out = _cli("compare", str(a), str(b))
    line = next(ln for ln in out.stdout.splitlines() if "ttnn.op1" in ln)
    fields = line.split()
    assert fields[fields.index("2130706432") - 1] == "2"  # max abs err, ulp max: printed as "22130706432" before


@pytest.mark.process
def test_identical_runs_exit_0(tmp_path: Path) -> None:
    values = {k: _values(k) for k in (1, 2)}
    a, b = _write_run(tmp_path / "a", values), _write_run(tmp_path / "b", values)
    out = _cli("compare", str(a), str(b))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 identical" in out.stdout


@pytest.fixture(scope="module")
def legacy_and_migrated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    legacy = FIXTURES / "ttnn-0.64.5-report-tensorbin" / "report"
    migrated = tmp_path_factory.mktemp("m") / "report"
    reportdb.migrate(legacy, migrated)
    return legacy, migrated


@pytest.mark.process
def test_nothing_compared_is_not_a_pass(legacy_and_migrated: tuple[Path, Path]) -> None:
    legacy, migrated = legacy_and_migrated
    before = {p: p.stat().st_mtime_ns for p in legacy.rglob("*")}
    runs = _cli("compare", str(legacy), str(migrated))
    assert runs.returncode == 3, runs.stdout + runs.stderr
    assert "tensor not stored in A" in runs.stdout and "not everything was compared" in runs.stderr
    data = json.loads(_cli("compare", str(legacy), str(migrated), "--json").stdout)
    assert data["counts"]["not_compared"] == len(data["rows"]) > 0 and data["first_divergence"] is None
    golden = _cli("compare", str(legacy), "--golden")
    assert golden.returncode == 3, golden.stdout + golden.stderr
    assert "0 compared" in golden.stdout and "20 not compared" in golden.stdout
    assert {p: p.stat().st_mtime_ns for p in legacy.rglob("*")} == before  # read only


@pytest.mark.process
def test_golden_exit_codes(legacy_and_migrated: tuple[Path, Path], tmp_path: Path) -> None:
    _, migrated = legacy_and_migrated
    failing = _cli("compare", str(migrated), "--golden")
    assert failing.returncode == 1 and "FAIL pcc,sqnr_db,tile_sqnr_db [culprit]" in failing.stdout
    passing = tmp_path / "pass"
    with reportdb.Writer(passing) as w:
        w.put_tensor(1, _values(1), ttnn_dtype="BFLOAT16")
        w.put_tensor(2, _values(1), ttnn_dtype="BFLOAT16")
        w.add_operation(1, "ttnn.add", outputs=[1])
        w.add_rows("local_tensor_comparison_records", [{"tensor_id": 1, "golden_tensor_id": 2, "desired_pcc": 0.99}])
    ok = _cli("compare", str(passing), "--golden")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    with reportdb.Writer(passing, append=True) as w:
        w.add_rows("global_tensor_comparison_records", [{"tensor_id": 1, "golden_tensor_id": 99, "desired_pcc": 0.99}])
    partial = _cli("compare", str(passing), "--golden")
    assert partial.returncode == 3 and "1 not compared" in partial.stdout


@pytest.mark.process
def test_policy_file_on_the_cli_both_forms(tmp_path: Path, legacy_and_migrated: tuple[Path, Path]) -> None:
    _, migrated = legacy_and_migrated
    lenient = tmp_path / "lenient.toml"
    lenient.write_text('[[rules]]\nop = "*"\npcc = 0.5\n')
    golden = _cli("compare", str(migrated), "--golden", "--policy", str(lenient), "--json")
    assert golden.returncode == 0, golden.stdout + golden.stderr
    assert json.loads(golden.stdout)["first_culprit"] is None
    a, b = _crafted_runs(tmp_path)
    strict = tmp_path / "strict.toml"
    strict.write_text('[[rules]]\nop = "ttnn.op2"\nmax_ulp = 0\n')
    runs = json.loads(_cli("compare", str(a), str(b), "--policy", str(strict), "--json").stdout)
    assert runs["rows"][1]["verdict"] == "diverges" and runs["rows"][1]["failed"] == ["max_ulp"]
    assert runs["first_divergence"]["operation_id_a"] == 2
    bad = tmp_path / "bad.toml"
    bad.write_text('[[rules]]\nop = "*"\npcc = 0.5\n\n[[rules]]\nop = "x"\nsnr = 3\n')
    out = _cli("compare", str(a), str(b), "--policy", str(bad))
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1
    assert f"{bad}, line 5" in out.stderr and "unknown key 'snr'" in out.stderr


def test_a_flipped_block_pcc_passes_still_diverges(tmp_path: Path) -> None:
    """The run pair that printed "first divergence: none": a sign-flipped 32x32 block of a 512x512 bfloat16 output
    keeps PCC at 0.9925, above 0.99; its SQNR (18 dB, bfloat16's default asks 22.9) names the divergence."""
    a = {k: _values(k, (512, 512)) for k in (1, 2)}
    b = {k: v.copy() for k, v in a.items()}
    b[2][:32, :32] *= -1
    result = reportdb.compare_runs(_write_run(tmp_path / "a", a), _write_run(tmp_path / "b", b))
    first = result.first_divergence
    assert first is not None and first.operation_id_a == 2 and first.failed == ("sqnr_db", "tile_sqnr_db")
    assert first.pcc is not None and 0.99 < first.pcc < 0.995 and first.metrics is not None
    assert first.metrics.sqnr_db is not None and first.metrics.sqnr_db < 22.9
