"""Culprits and victims: on a report where one operation is wrong by itself and the ones after it inherit the error
(local and global records), on the same report with global records only, and on the real fixture reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import reportdb
from reportdb.analysis.culprits import Culprit, GoldenComparison

from conftest import FIXTURES

ROOT = Path(__file__).resolve().parents[1]


def _chain(path: Path, *, local: bool) -> Path:
    """Five float32 operations in a chain: 1 and 2 close to golden, 3 wrong by itself (a flipped quarter), 4 doubles
    its input and 5 adds one, exactly, so they inherit op 3's error. Device outputs are tensors 1-5, local goldens
    101-105 (the op applied to the device's input), global goldens 201-205 (the golden chain from the start)."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((64, 64)).astype(np.float32)
    noise = lambda: rng.standard_normal((64, 64)).astype(np.float32) * 1e-4
    steps = [np.tanh, np.sin, lambda v: v * 3, lambda v: v * 2, lambda v: v + 1]
    device, local_golden, global_golden = {}, {}, {}
    prev_device, prev_golden = x, x
    for k, step in enumerate(steps, 1):
        local_golden[k] = step(prev_device).astype(np.float32)
        global_golden[k] = step(prev_golden).astype(np.float32)
        out = local_golden[k] + (noise() if k <= 2 else 0)
        if k == 3:
            out = out.copy()
            out[:32, :32] *= -1
        device[k] = out.astype(np.float32)
        prev_device, prev_golden = device[k], global_golden[k]
    with reportdb.Writer(path) as w:
        w.put_tensor(0, x, ttnn_dtype="FLOAT32")
        for k in range(1, 6):
            w.put_tensor(k, device[k], ttnn_dtype="FLOAT32")
            w.put_tensor(100 + k, local_golden[k])
            w.put_tensor(200 + k, global_golden[k])
            w.add_operation(k, f"ttnn.step{k}", inputs=[k - 1], outputs=[k])
        record = lambda t, g: {"tensor_id": t, "golden_tensor_id": g, "desired_pcc": 0.99}
        if local:
            w.add_rows("local_tensor_comparison_records", [record(k, 100 + k) for k in range(1, 6)])
        w.add_rows("global_tensor_comparison_records", [record(k, 200 + k) for k in range(1, 6)])
    return path


def _roles(result: GoldenComparison, kind: str) -> dict[int, str | None]:
    return {r.tensor_id: r.role for r in result if r.kind == kind}


def test_the_op_wrong_by_itself_is_the_culprit_and_the_later_ones_victims(tmp_path: Path) -> None:
    result = reportdb.compare_golden(_chain(tmp_path / "r", local=True))  # a path
    assert not result.global_only
    expected = {1: "pass", 2: "pass", 3: "culprit", 4: "victim", 5: "victim"}
    assert _roles(result, "local") == _roles(result, "global") == expected
    local = {r.tensor_id: r for r in result if r.kind == "local"}
    assert [local[k].verdict for k in range(1, 6)] == ["pass", "pass", "fail", "pass", "pass"]
    glob = {r.tensor_id: r for r in result if r.kind == "global"}
    assert [glob[k].verdict for k in range(1, 6)] == ["pass", "pass", "fail", "fail", "fail"]
    assert result.first_culprit == Culprit(3, 3, "ttnn.step3", 0)
    assert result.counts()["culprits"] == 1 and result.counts()["victims"] == 2
    ranked = result.ranked()
    assert (ranked[0].tensor_id, ranked[0].kind) == (3, "local")  # worst-first by local error: the culprit leads
    assert all(r.tensor_id != 4 for r in ranked[:2])


def test_global_records_only_rank_by_where_the_error_grows(tmp_path: Path) -> None:
    result = reportdb.compare_golden(_chain(tmp_path / "r", local=False))
    assert result.global_only
    assert _roles(result, "global") == {1: "pass", 2: "pass", 3: "culprit", 4: "victim", 5: "victim"}
    growth = {r.tensor_id: r.error_growth_db for r in result}
    assert growth[3] is not None and growth[3] > 40  # error ~1e-8 of the energy before, ~0.25 after
    assert growth[4] == pytest.approx(0.0, abs=0.01)  # doubling keeps the error's share
    assert growth[5] is not None and growth[5] < 0  # adding one grows the golden's energy, not the error
    assert result.first_culprit is not None and result.first_culprit.operation_id == 3
    assert result.ranked()[0].tensor_id == 3


@pytest.mark.process
def test_cli_golden_json_object(tmp_path: Path) -> None:
    path = _chain(tmp_path / "r", local=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "reportdb", "compare", str(path), "--golden", "--json"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 1, out.stderr
    data = json.loads(out.stdout)
    assert data["first_culprit"] == {"operation_id": 3, "tensor_id": 3, "name": "ttnn.step3", "rank": 0}
    assert [r["role"] for r in data["records"] if r["kind"] == "global"] == ["pass", "pass", "culprit", "victim", "victim"]
    assert data["records"][2]["failed"] == ["pcc", "sqnr_db", "tile_sqnr_db"] and data["global_only"] is False
    text = subprocess.run([sys.executable, "-m", "reportdb", "compare", str(path), "--golden"],
                          capture_output=True, text=True, timeout=300, env=env).stdout
    assert "first culprit: operation 3 ttnn.step3 (tensor 3)" in text and "[victim]" in text


@pytest.mark.parametrize(
    ("name", "first"),
    [("ttnn-0.64.5-report-tensorbin", (3, 7, "ttnn.embedding")), ("ttnn-0.62.2-bin", (4, 10, "ttnn.linear"))],
)
def test_real_fixture_reports(tmp_path: Path, name: str, first: tuple[int, int, str]) -> None:
    migrated = tmp_path / "report"
    reportdb.migrate(FIXTURES / name / "report", migrated)
    result = reportdb.compare_golden(migrated, store=False)
    assert result.first_culprit is not None
    assert (result.first_culprit.operation_id, result.first_culprit.tensor_id, result.first_culprit.name) == first
    for r in result:
        if r.metrics is None:
            assert r.role is None and r.verdict is None
            continue
        assert r.role in ("culprit", "pass")  # these runs' local and global records are the same pairs
        assert (r.role == "culprit") == (r.verdict == "fail")
        if r.recorded_matches is not None:  # ttnn judged by PCC alone; so does the policy here, with SQNR besides
            assert r.recorded_matches == (r.verdict == "pass")


def _silu_layers(path: Path, *, faulty: bool) -> None:
    """Four layers' silu on the same [1, 64, 256] bfloat16 shape, each device output its float32 result rounded to
    bfloat16 (a correct device's error), local golden records for each; ``faulty`` plants x1.5 on one 32x32 tile of
    layer 3's output."""
    import ml_dtypes

    rng = np.random.default_rng(3)
    with reportdb.Writer(path) as w:
        for layer in range(4):
            x = rng.standard_normal((1, 64, 256)).astype(np.float32)
            golden = x / (1 + np.exp(-x))
            device = golden.astype(ml_dtypes.bfloat16).astype(np.float32)
            if layer == 2 and faulty:
                device[0, 32:64, 64:96] *= 1.5
            w.put_tensor(10 * layer, x.astype(ml_dtypes.bfloat16), ttnn_dtype="BFLOAT16")
            w.put_tensor(10 * layer + 1, device.astype(ml_dtypes.bfloat16), ttnn_dtype="BFLOAT16")
            w.put_tensor(10 * layer + 2, golden)
            w.add_operation(layer + 1, "ttnn.silu", inputs=[10 * layer], outputs=[10 * layer + 1])
        w.add_rows("local_tensor_comparison_records", [
            {"tensor_id": 10 * k + 1, "golden_tensor_id": 10 * k + 2, "desired_pcc": 0.99} for k in range(4)])


@pytest.mark.process
def test_an_output_far_out_of_line_with_its_peers_is_an_anomaly(tmp_path: Path) -> None:
    """One silu call of four on one shape with a wrong tile: flagged against its peers (named, with both SQNRs) by
    compare_golden and `compare --golden`, whatever its verdict; correct calls are not."""
    _silu_layers(tmp_path / "faulty.sqlite", faulty=True)
    result = reportdb.compare_golden(tmp_path / "faulty.sqlite", store=False)
    assert [(a.operation_id, a.tensor_id, a.peers) for a in result.anomalies] == [(3, 21, 3)]
    found = result.anomalies[0]
    assert found.gap_db is not None and found.gap_db > 20 and found.peer_sqnr_db is not None
    assert found.peer_sqnr_db - found.sqnr_db == pytest.approx(found.gap_db)
    assert json.loads(json.dumps(result.to_dict()))["anomalies"][0]["tensor_id"] == 21
    out = subprocess.run([sys.executable, "-m", "reportdb", "compare", str(tmp_path / "faulty.sqlite"), "--golden"],
                         capture_output=True, text=True, cwd=ROOT)
    assert "anomaly: operation 3 ttnn.silu (tensor 21, 1x64x256 bfloat16)" in out.stdout, out.stdout + out.stderr
    assert "local op 3 tensor 21: tile_sqnr_db: 32x32 tile (0, 1, 2):" in out.stdout  # where the verdict saw it
    _silu_layers(tmp_path / "clean.sqlite", faulty=False)
    assert reportdb.compare_golden(tmp_path / "clean.sqlite", store=False).anomalies == ()
