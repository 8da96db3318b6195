"""The default policy's verdicts, calibrated (issue #31): every device-like result of every op family passes and
every planted fault fails, each with room to spare (``benchmarks/bench_calibration.py`` prints the full table).

A device-like result is what a correct device gives (``reportdb.numeric.fidelity``: LoFi..HiFi4, float32 or bfloat16
dest, bfloat16 / BFLOAT8_B / BFLOAT4_B packing); the faults (``tests/faults.py``) hit one tile, one face, one core's
shard of rows or one device's shard. Margins are in dB between the worst tile's SQNR and the dtype's ``tile_sqnr_db``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import faults
from reportdb.analysis.policy import Policy, Verdict
from reportdb.numeric.metrics import Comparison, compare

POLICY = Policy.default()
CASES = faults.families()
IDS = [f"{family}-{label}" for family, label, *_ in CASES]
#: 2 x 8 tiles: room for a middle tile, a neighbour, 8 cores of 8 rows and 8 devices of 32 columns.
SMALL = (64, 256)
#: The issue's silu output.
MEDIUM = (1, 256, 2816)
LARGE = (1024, 1024)
def seed(label: str) -> int:
    """The seed the benchmark builds a case with (twice its index), so the tests and the table see the same data."""
    return 2 * next(i for i, c in enumerate(CASES) if c[1] == label)


def judge(case: faults.Case, actual: np.ndarray) -> tuple[Verdict, Comparison]:
    """The default policy's verdict on ``actual`` against the case's golden, compared at the policy's tolerances."""
    rtol, atol = POLICY.tolerances(case.op, case.dtype)
    m = compare(actual, case.golden, rtol=rtol, atol=atol, pcc=POLICY.pcc_threshold(case.op, case.dtype))
    return POLICY.judge(m, op=case.op, dtype=case.dtype), m


def check(case: faults.Case) -> None:
    """The device-like result passes above the threshold and every fault that must show fails below it, the verdict
    naming a tile the fault hit as the worst; a data movement case, held bit-exact by the built-in rule (a correct
    one is the golden's values moved, bit for bit), has no threshold: every fault fails its ``bitwise`` criterion."""
    verdict, m = judge(case, case.device)
    threshold = verdict.criteria.tile_sqnr_db
    assert verdict.passed, (case.label, verdict.failed, verdict.notes)
    if threshold is not None:
        tile = math.inf if m.tile_sqnr_db is None else m.tile_sqnr_db
        assert tile - threshold > 0, (case.label, tile, threshold)
    missed = {}
    for name, plant in faults.FAULTS.items():
        wrong = plant(case.device, case.stale)
        if wrong is None or not faults.expected_to_show(name, case.dtype):
            continue
        verdict, m = judge(case, wrong)
        assert verdict.worst_tile in faults.tiles_hit(name, wrong.shape), (case.label, name, verdict.worst_tile)
        if verdict.criteria.bitwise:
            if verdict.failed != ("bitwise",):
                missed[name] = (m.tile_sqnr_db, threshold, verdict.failed)
        elif verdict.passed or threshold is None or m.tile_sqnr_db is None or m.tile_sqnr_db >= threshold:
            missed[name] = (m.tile_sqnr_db, threshold, verdict.failed)
    assert missed == {}, (case.label, missed)


@pytest.mark.parametrize(("family", "label", "op", "dtype", "build"), CASES, ids=IDS)
def test_small(family: str, label: str, op: str, dtype: str, build: faults.Builder) -> None:
    check(faults.make_case(family, label, op, dtype, build, SMALL, seed(label)))


#: At the medium size, the fast tier runs the issue's own ops (a LoFi linear, silu, softmax); the slow tier the rest.
MEDIUM_LABELS = [
    *("BFLOAT16 in, LoFi, FLOAT32 dest", "silu", "softmax"),
    *(pytest.param(label, marks=pytest.mark.slow) for label in (
        "BFLOAT8_B in/out, LoFi", "multiply LoFi", "sum, BFLOAT16 dest", "transpose", "FLOAT32 -> BFLOAT4_B")),
]


@pytest.mark.parametrize("label", MEDIUM_LABELS)
def test_medium(label: str) -> None:
    """The issue's [1, 256, 2816] output: one wrong tile among 704."""
    family, _, op, dtype, build = next(c for c in CASES if c[1] == label)
    check(faults.make_case(family, label, op, dtype, build, MEDIUM, seed(label)))


@pytest.mark.slow
@pytest.mark.parametrize(("family", "label", "op", "dtype", "build"), CASES, ids=IDS)
def test_large(family: str, label: str, op: str, dtype: str, build: faults.Builder) -> None:
    """1M elements (one wrong tile among 1024) for every family."""
    check(faults.make_case(family, label, op, dtype, build, LARGE, seed(label)))


def test_a_fault_is_planted_where_it_says() -> None:
    """The injectors change what they name and nothing else (a fault that changed nothing could never be caught)."""
    x = np.arange(64 * 256, dtype=np.float32).reshape(64, 256) + 1
    stale = -x
    changed = {name: np.argwhere(plant(x, stale) != x) for name, plant in faults.FAULTS.items()}
    assert np.array_equal(np.unique(changed["tile sign flipped"][:, 0]), np.arange(32, 64))
    assert np.array_equal(np.unique(changed["tile sign flipped"][:, 1]), np.arange(128, 160))
    assert len(changed["face swapped"]) == 512 and changed["face swapped"][:, 0].max() == 47
    assert np.array_equal(np.unique(changed["core 3 x1.5"][:, 0]), np.arange(24, 32))
    assert np.array_equal(np.unique(changed["device 5 stale"][:, 1]), np.arange(160, 192))
    assert all(len(found) for found in changed.values())
    assert faults.fill_from_neighbour(x[:32, :32], stale[:32, :32]) is None
    assert faults.tiles_hit("core 3 x1.5", x.shape) == {(0, 0, c) for c in range(8)}  # rows 24-31: tile row 0
    assert faults.tiles_hit("device 5 stale", x.shape) == {(0, 0, 5), (0, 1, 5)}  # columns 160-191
    assert faults.tiles_hit("face swapped", (3, 64, 256)) == {(1, 1, 4)}
