"""Replay's two-pass comparison: a passing output gets only what its verdict reads (``compare(full=False)``), a
failing one (or every one with ``full_stats``) the full metric vector, and the verdicts are the same either way.

Checked on every calibration case (``tests/faults.py``: each op family's device-like result and every planted fault)
under the default policy and under one that sets every criterion, on hand-made special cases (NaN/Inf, constants,
integers, a shape change), and on the replay test report, through the API and the CLI.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from click.testing import CliRunner

import faults
import reportdb
from reportdb.analysis.policy import Policy
from reportdb.analysis.replay_rows import judged
from reportdb.cli import cli
from reportdb.numeric.metrics import DISTRIBUTION, Comparison, compare
from test_replay import make_chain

#: Every criterion set, so that every field a verdict may read is read: allclose with a mismatch fraction, the largest
#: absolute error and ULP distance besides the dtype's PCC, SQNR and tile SQNR.
STRICT = Policy.parse("""
[[rules]]
op = "*"
pcc = 0.99
rtol = 0.02
atol = 0.01
max_mismatch_fraction = 0.001
max_abs_error = 0.05
max_ulp = 4
sqnr_db = 20
tile_sqnr_db = 22
""")
POLICIES = {"default": Policy.default(), "strict": STRICT}
#: Fields the light pass leaves out besides DISTRIBUTION (the ULPs, unless a criterion bounds them), or that say
#: which pass made the comparison.
LEFT_OUT = {"ulp_max", "ulp_mean", "notes", "full_stats"}


def cases() -> list[tuple[str, str, str, np.ndarray, np.ndarray]]:
    """(label, op, dtype, actual, golden) of every calibration case's device result and of each fault planted in it."""
    out = []
    for index, (family, label, op, dtype, build) in enumerate(faults.families()):
        case = faults.make_case(family, label, op, dtype, build, (64, 256), 2 * index)
        out.append((label, op, dtype, case.device, case.golden))
        for name, plant in faults.FAULTS.items():
            wrong = plant(case.device, case.stale)
            if wrong is not None:
                out.append((f"{label}: {name}", op, dtype, wrong, case.golden))
    return out


def special_cases() -> list[tuple[str, str, str, np.ndarray, np.ndarray]]:
    """Outputs the moments or the specials' path judge: NaN and Inf on either side, a constant side, integers, equal
    values, a shape change."""
    rng = np.random.default_rng(3)
    golden = rng.standard_normal((64, 64)).astype(np.float32)
    device = golden.astype(ml_dtypes.bfloat16)
    nan = device.copy()
    nan[3, 5] = np.nan
    inf = golden.copy()
    inf[7, 9] = np.inf
    both = device.copy()
    both[7, 9] = np.inf
    ints = rng.integers(-50, 50, (32, 32)).astype(np.int32)
    off = ints.copy()
    off[1, 1] += 3
    return [
        ("nan on the device", "ttnn.add", "BFLOAT16", nan, golden),
        ("inf in the golden", "ttnn.add", "BFLOAT16", device, inf),
        ("the same inf", "ttnn.add", "BFLOAT16", both, inf),
        ("constant device", "ttnn.add", "BFLOAT16", np.ones_like(device), golden),
        ("constant both", "ttnn.add", "BFLOAT16", np.ones_like(device), np.ones_like(golden)),
        ("equal", "ttnn.add", "FLOAT32", golden.copy(), golden),
        ("integers equal", "ttnn.add", "INT32", ints.copy(), ints),
        ("integers off", "ttnn.add", "INT32", off, ints),
        ("shape", "ttnn.add", "BFLOAT16", device[:32], golden),
        ("scaled", "ttnn.multiply", "BFLOAT16", (golden * 1.2).astype(ml_dtypes.bfloat16), golden),
    ]


ALL = cases() + special_cases()


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_light_comparison_gives_the_same_verdicts(policy: str) -> None:
    """The light pass's verdict equals the full vector's on every case (passed, failed criteria, worst tile, notes),
    every field it keeps is the full vector's to the bit, and the ones it leaves out are None; judged() returns the
    full vector exactly where the output fails."""
    judge = POLICIES[policy]
    failing = 0
    for label, op, dtype, actual, golden in ALL:
        rtol, atol = judge.tolerances(op, dtype)
        pcc = judge.pcc_threshold(op, dtype)
        full = compare(actual, golden, rtol=rtol, atol=atol, pcc=pcc)
        ulps = any(judge.criteria_for(op, dtype, accumulated=a).reads_ulps for a in (False, True))  # as judged()
        light = compare(actual, golden, rtol=rtol, atol=atol, pcc=pcc, full=False, ulps=ulps)
        verdict = judge.judge(full, op=op, dtype=dtype)
        assert judge.judge(light, op=op, dtype=dtype) == verdict, label
        kept = {f.name for f in fields(Comparison)} - set(DISTRIBUTION) - LEFT_OUT
        assert {k: getattr(light, k) for k in kept} == {k: getattr(full, k) for k in kept}, label
        if not full.shape_mismatch:
            assert [getattr(light, k) for k in DISTRIBUTION] == [None] * len(DISTRIBUTION), label
            assert (light.ulp_max, light.full_stats) == (full.ulp_max if ulps else None, False), label
        assert set(light.notes) <= set(full.notes), label
        metrics, again = judged(judge, op, dtype, actual, golden, full=False)
        assert again == verdict and metrics.full_stats == (not verdict.passed), label
        failing += not verdict.passed
    assert 0 < failing < len(ALL)  # both kinds were judged


def test_replay_gives_full_vectors_to_failing_outputs_only(tmp_path: Path) -> None:
    """A replay judges as one with ``full_stats`` does; its passing rows leave the distribution figures out, its
    failing row (the wrong softmax) and every row of a full_stats replay hold them."""
    path = tmp_path / "chain.sqlite"
    make_chain(path)
    light = reportdb.replay(path, workers=1)
    full = reportdb.replay(path, workers=1, full_stats=True)
    assert [(r.operation_id, r.status, r.passed, r.failed) for r in light.rows] == \
        [(r.operation_id, r.status, r.passed, r.failed) for r in full.rows]
    compared = [r for r in light.rows if r.metrics is not None]
    assert {r.passed for r in compared} == {True, False}
    for row in compared:
        assert row.metrics is not None
        assert row.metrics.full_stats == (row.passed is False)
        assert (row.metrics.abs_error_p99 is None) == row.passed
    assert all(r.metrics.full_stats and r.metrics.abs_error_p50 is not None for r in full.rows if r.metrics)
    chained = reportdb.replay(path, chain=True)
    assert [r.passed for r in chained.rows] == [r.passed for r in reportdb.replay(path, chain=True, full_stats=True).rows]


def test_cli_full_stats(tmp_path: Path) -> None:
    """``replay --json`` leaves a passing output's quantiles out (null), ``--full-stats`` gives them; the table shows
    the ULPs of a passing output as "-" unless --full-stats."""
    path = tmp_path / "chain.sqlite"
    make_chain(path)
    runner = CliRunner()
    rows = {}
    for flag in ((), ("--full-stats",)):
        done = runner.invoke(cli, ["replay", str(path), "--json", "--ops", "ttnn.relu", *flag])
        assert done.exit_code == 0, done.output
        rows[flag] = json.loads(done.output)["rows"][0]["metrics"]
    assert rows[()]["abs_error_p50"] is None and rows[()]["full_stats"] is False
    assert rows[("--full-stats",)]["abs_error_p50"] is not None and rows[("--full-stats",)]["full_stats"] is True
    table = runner.invoke(cli, ["replay", str(path), "--ops", "ttnn.relu"]).output.splitlines()[1].split()
    full = runner.invoke(cli, ["replay", str(path), "--ops", "ttnn.relu", "--full-stats"]).output.splitlines()[1].split()
    assert table[-2] == "-" and full[-2] == "0", (table, full)
