"""``replay --chain --substitute``: going on past the first culprit, so the one it hid shows up, and whether the model's
output recovers once the culprits are fixed; the counts a replay result carries."""

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
from reportdb.analysis.replay import ReplayResult

BF16 = ml_dtypes.bfloat16
ROOT = Path(__file__).resolve().parents[1]


def bf16(x: np.ndarray) -> np.ndarray:
    """A device result: the exact value rounded to bfloat16."""
    return np.asarray(x, dtype=np.float32).astype(BF16)


def f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def make_two_culprits(path: Path) -> None:
    """A small transformer-like block, each device output its reference of the device's inputs rounded to bfloat16,
    with two planted faults: op 1 (linear) negates its first 32 columns, op 3 (the second linear) adds 1 to one
    32x32 tile. Ops 4 (residual add), 5 (layer norm) and 6 (softmax) come after; op 6's output is the model's."""
    rng = np.random.default_rng(32)
    x, w1, w2 = bf16(rng.standard_normal((64, 64))), bf16(rng.standard_normal((64, 64)) / 8), \
        bf16(rng.standard_normal((64, 64)) / 8)
    h1 = f32(x) @ f32(w1)
    h1[:, :32] = -h1[:, :32]  # culprit A
    h1 = bf16(h1)
    h2 = bf16(np.maximum(f32(h1), 0))
    h3 = f32(h2) @ f32(w2)
    h3[:32, 32:] += 1.0  # culprit B
    h3 = bf16(h3)
    h4 = bf16(f32(h3) + f32(x))
    centred = f32(h4) - f32(h4).mean(axis=-1, keepdims=True)
    h5 = bf16(centred / np.sqrt((centred**2).mean(axis=-1, keepdims=True) + 1e-5))
    e = np.exp(f32(h5) - f32(h5).max(axis=-1, keepdims=True))
    h6 = bf16(e / e.sum(axis=-1, keepdims=True))
    with reportdb.Writer(path) as w:
        for tensor_id, array in ((1, x), (2, w1), (3, w2), (4, h1), (5, h2), (6, h3), (7, h4), (8, h5), (9, h6)):
            w.put_tensor(tensor_id, array, ttnn_dtype="BFLOAT16", layout="TILE")
        w.add_operation(1, "ttnn.linear", inputs=[1, 2], outputs=[4])
        w.add_operation(2, "ttnn.relu", inputs=[4], outputs=[5])
        w.add_operation(3, "ttnn.linear", inputs=[5, 3], outputs=[6])
        w.add_operation(4, "ttnn.add", inputs=[6, 1], outputs=[7])
        w.add_operation(5, "ttnn.layer_norm", inputs=[7], outputs=[8], arguments={"epsilon": "1e-05"})
        w.add_operation(6, "ttnn.softmax", inputs=[8], outputs=[9], arguments={"dim": "-1"})


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("substitute") / "two.sqlite"
    make_two_culprits(path)
    return path


def verdicts(result: ReplayResult) -> list[tuple[int, bool | None, bool | None, bool | None, bool]]:
    return [(r.operation_id, r.isolated, r.chained, r.substituted, r.substitute) for r in result.rows]


def test_plain_chain_hides_the_second_culprit_among_victims(report: Path) -> None:
    plain = reportdb.replay(report, chain=True)
    assert [r.passed for r in plain.rows] == [False] * 6  # every output after culprit A fails: B looks like a victim
    assert plain.first_failure is not None and plain.first_failure.operation_id == 1
    assert all(r.substituted is None for r in plain.rows)


def test_substituting_the_first_culprit_shows_the_second(report: Path) -> None:
    result = reportdb.replay(report, chain=True, substitute="1")
    assert verdicts(result) == [
        (1, False, False, False, True), (2, True, False, True, False), (3, False, False, False, False),
        (4, True, False, False, False), (5, True, False, False, False), (6, True, False, False, False),
    ]
    assert [r.operation_id for r in result.failed] == [1, 3, 4, 5, 6]
    by_name = reportdb.replay(report, chain=True, substitute=["ttnn.lin*"])  # a glob takes both linears
    assert [r.substitute for r in by_name.rows] == [True, False, True, False, False, False]
    assert [r.passed for r in by_name.rows] == [False, True, False, True, True, True]


def test_substituting_every_failing_operation_recovers_the_output(report: Path) -> None:
    result = reportdb.replay(report, substitute_failing=True)  # substitution runs a chain
    assert verdicts(result) == [
        (1, False, False, False, True), (2, True, False, True, False), (3, False, False, False, True),
        (4, True, False, True, False), (5, True, False, True, False), (6, True, False, True, False),
    ]
    final = result.rows[-1]
    assert final.metrics is not None and final.metrics.max_abs_error < 0.01
    assert (result.operations, result.compared, result.failed_outputs, result.not_compared) == (6, 6, 2, {})


def test_counts_on_the_result(report: Path, tmp_path: Path) -> None:
    result = reportdb.replay(report)
    assert (result.operations, result.compared, result.failed_outputs) == (6, 6, 2)
    data = result.to_dict()
    assert data["compared"] == 6 and data["not_compared"] == {} and data["rows"][0]["isolated"] is None


def test_a_bad_substitution_is_refused(report: Path) -> None:
    with pytest.raises(reportdb.ReportDBError, match="operation ids or names"):
        reportdb.replay(report, chain=True, substitute=[1.5])  # type: ignore[list-item]
    with pytest.raises(reportdb.ReportDBError, match="cannot store"):
        reportdb.replay(report, chain=True, substitute="1", store=True)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "reportdb", "replay", *args], capture_output=True, text=True, env=env,
                          timeout=300)


@pytest.mark.process
def test_cli_shows_the_verdicts_side_by_side(report: Path) -> None:
    table = _cli(str(report), "--chain", "--substitute-failing")
    assert table.returncode == 1, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[-4:] == ["alone", "chained", "substituted", "result"]
    assert lines[3].split()[6:10] == ["FAIL", "FAIL", "FAIL*", "FAIL"]  # op 3: substituted, fails on its own
    assert "last output (operation 6 ttnn.softmax): isolated pass, chained FAIL, substituted pass" in table.stdout
    data = json.loads(_cli(str(report), "--chain", "--substitute", "1", "--json").stdout)
    assert [(r["isolated"], r["chained"], r["substituted"], r["substitute"]) for r in data["rows"][:3]] == [
        (False, False, False, True), (True, False, True, False), (False, False, False, False)]
    assert (data["operations"], data["compared"], data["failed_outputs"]) == (6, 6, 5)
    usage = _cli(str(report), "--substitute", "1")
    assert usage.returncode == 2 and "--chain" in usage.stderr


def test_substituting_an_operation_without_a_reference_carries_the_chain_past_it(tmp_path: Path) -> None:
    """Plain --chain stops at an operation it has no reference for; substituting it carries its stored output on."""
    rng = np.random.default_rng(3)
    x = bf16(rng.standard_normal((32, 32)))
    with reportdb.Writer(tmp_path / "gap.sqlite") as w:
        for tensor_id, array in ((1, x), (2, x), (3, bf16(np.maximum(f32(x), 0)))):
            w.put_tensor(tensor_id, array)
        w.add_operation(1, "ttnn.frobnicate", inputs=[1], outputs=[2])
        w.add_operation(2, "ttnn.relu", inputs=[2], outputs=[3])
    plain = reportdb.replay(tmp_path / "gap.sqlite", chain=True)
    assert [(r.status, r.passed) for r in plain.rows] == [("no_reference", None), ("missing_inputs", None)]
    carried = reportdb.replay(tmp_path / "gap.sqlite", chain=True, substitute="ttnn.frob*")
    assert [(r.status, r.passed, r.substitute) for r in carried.rows] == [
        ("no_reference", None, True), ("compared", True, False)]
    assert carried.rows[1].chained is None and carried.rows[1].isolated is True


def test_before_the_first_substitution_the_substituted_chain_is_the_plain_one(report: Path) -> None:
    """Substituting only the second culprit: up to it the substituted verdicts are the chained ones; after it, the
    outputs are judged on what the device had there, and pass."""
    result = reportdb.replay(report, chain=True, substitute="3")
    assert verdicts(result) == [
        (1, False, False, False, False), (2, True, False, False, False), (3, False, False, False, True),
        (4, True, False, True, False), (5, True, False, True, False), (6, True, False, True, False),
    ]
    assert [r.metrics.to_dict() for r in result.rows[:3]] == [  # type: ignore[union-attr]
        r.metrics.to_dict() for r in reportdb.replay(report, chain=True).rows[:3]]  # type: ignore[union-attr]
