"""Local verdicts: one wrong tile of a large tensor fails the default policy on ``tile_sqnr_db`` and is named, while
device-like results (bfloat16 rounding, LoFi operand truncation, bfloat16 accumulation, near-zero relu/softmax tiles)
pass; a scale bug fails ``scale_or_offset`` while LoFi's shrink passes with a note. Through ``compare``,
``compare_stored`` on a report written with ``reportdb.Writer``, ``judge_stored`` and run against run."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Callable

import ml_dtypes
import numpy as np
import pytest

import reportdb
from reportdb.analysis.policy import Criteria, Policy, PolicyError, Verdict, judge_stored
from reportdb.errors import ComparisonError
from reportdb.numeric import metrics, streamed
from reportdb.numeric.fit import LOFI_MEAN_LOSS, LOFI_SHRINK
from reportdb.numeric.metrics import compare
from reportdb.numeric.streamed import compare_stored, compare_streamed
from reportdb.numeric.tiles import FLOOR

BF16 = ml_dtypes.bfloat16
SHAPE = (1, 256, 2816)  # the silu output
TILE = (0, 3, 17)  # the planted tile: rows 96:128, columns 544:576


def _golden(shape: tuple[int, ...] = SHAPE, seed: int = 0) -> np.ndarray:
    """A float32 golden of standard normal values (every tile of about the mean energy)."""
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _tile(x: np.ndarray, where: tuple[int, int, int] = TILE) -> np.ndarray:
    """The view of one 32x32 tile of a 3-D array."""
    lead, r, c = where
    return x[lead, 32 * r : 32 * r + 32, 32 * c : 32 * c + 32]


def _swap_faces(t: np.ndarray) -> None:
    """Swap a tile's first 16x16 face with its right-hand neighbour, in place."""
    t[:16, :16], t[:16, 16:] = t[:16, 16:].copy(), t[:16, :16].copy()


FAULTS: dict[str, Callable[[np.ndarray, np.ndarray], None]] = {
    "sign flipped": lambda t, x: t.__imul__(-1),
    "x1.5": lambda t, x: t.__imul__(1.5),
    "x1.1": lambda t, x: t.__imul__(1.1),
    "rows reversed": lambda t, x: t.__setitem__(slice(None), t[::-1].copy()),
    "columns reversed": lambda t, x: t.__setitem__(slice(None), t[:, ::-1].copy()),
    "face swapped": lambda t, x: _swap_faces(t),
    "zeroed": lambda t, x: t.__setitem__(slice(None), 0),
    "another tile's values": lambda t, x: t.__setitem__(slice(None), _tile(x, (0, 1, 4))),
}


def _judge(
    actual: np.ndarray, golden: np.ndarray, dtype: str, policy: Policy | None = None
) -> tuple[metrics.Comparison, Verdict]:
    """The comparison at the policy's tolerances and its verdict, as an output of ``ttnn.silu`` of ``dtype``."""
    policy = policy or Policy.default()
    rtol, atol = policy.tolerances("ttnn.silu", dtype)
    comparison = compare(actual, golden, rtol=rtol, atol=atol)
    return comparison, policy.judge(comparison, op="ttnn.silu", dtype=dtype)


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("dtype", ["BFLOAT16", "FLOAT32"])
def test_one_wrong_tile_fails_and_is_named(fault: str, dtype: str) -> None:
    golden = _golden()
    actual = golden.astype(BF16).astype(np.float32) if dtype == "BFLOAT16" else golden.copy()
    FAULTS[fault](_tile(actual), golden)
    side = actual.astype(BF16) if dtype == "BFLOAT16" else actual
    _, clean_verdict = _judge(golden.astype(BF16) if dtype == "BFLOAT16" else golden, golden, dtype)
    comparison, verdict = _judge(side, golden, dtype)
    assert clean_verdict.passed and clean_verdict.notes == ()
    assert not verdict.passed and "tile_sqnr_db" in verdict.failed
    assert verdict.worst_tile == comparison.worst_tile == TILE and comparison.tile_shape == (32, 32)
    assert comparison.tile_sqnr_db is not None and comparison.tile_sqnr_db < 21  # x1.1: 20 dB, the rest <= 6
    assert any(n.startswith("tile_sqnr_db: 32x32 tile (0, 3, 17): ") for n in verdict.notes)
    if fault in ("x1.1", "x1.5") or (fault, dtype) == ("face swapped", "BFLOAT16"):  # passed the whole-tensor ones
        assert comparison.pcc is not None and comparison.pcc > 0.99 and comparison.sqnr_db is not None
        assert verdict.failed == ("tile_sqnr_db",)


def test_a_tile_at_an_edge_that_is_not_a_multiple_of_32() -> None:
    golden = _golden((4, 100, 70), seed=3)
    actual = golden.astype(BF16).astype(np.float32)
    actual[3, 96:100, 64:70] *= -1  # the last tile: 4 rows by 6 columns
    comparison, verdict = _judge(actual.astype(BF16), golden, "BFLOAT16")
    assert comparison.worst_tile == (3, 3, 2) and verdict.failed == ("tile_sqnr_db",)  # 24 of 28,000 values


def _brute(actual: np.ndarray, golden: np.ndarray, tile: tuple[int, int]) -> tuple[float, tuple[int, int, int]]:
    """The worst tile SQNR by padding and reshaping the whole arrays (the definition, not the streamed pass)."""
    a3 = actual.astype(np.float64).reshape(-1, *actual.shape[-2:])
    b3 = golden.astype(np.float64).reshape(-1, *golden.shape[-2:])
    keep = np.isfinite(a3) & np.isfinite(b3)
    th, tw = tile
    lead, h, w = b3.shape
    rows, cols = -(-h // th), -(-w // tw)

    def tiles(x: np.ndarray) -> np.ndarray:
        padded = np.zeros((lead, rows * th, cols * tw))
        padded[:, :h, :w] = x
        return padded.reshape(lead, rows, th, cols, tw).sum(axis=(2, 4))

    err = tiles(np.where(keep, a3 - b3, 0) ** 2)
    gold = tiles(np.where(keep, b3, 0) ** 2)
    n = tiles(keep.astype(np.float64))
    mean = gold.sum() / keep.sum()
    with np.errstate(divide="ignore"):
        sqnr = np.where(err > 0, 10 * np.log10(np.maximum(gold, FLOOR * n * mean) / np.where(err > 0, err, 1)), np.inf)
    worst = np.unravel_index(int(np.argmin(sqnr)), sqnr.shape)
    return float(sqnr[worst]), tuple(int(i) for i in worst)  # type: ignore[return-value]


@pytest.mark.parametrize("shape,tile", [((3, 45, 70), (32, 32)), ((2, 64, 256), (32, 32)), ((1, 100, 33), (32, 32)),
                                        ((4, 40, 96), (16, 32)), ((2, 3, 96, 64), (32, 16))])
def test_the_streamed_tile_sums_match_the_definition(shape: tuple[int, ...], tile: tuple[int, int],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks that start mid-row (a block size not a multiple of 32), windows of any size, NaN positions left out."""
    rng = np.random.default_rng(sum(shape))
    golden = rng.standard_normal(shape)
    actual = golden + 1e-3 * rng.standard_normal(shape)
    actual.reshape(-1)[rng.integers(0, golden.size, 3)] *= 1.7
    actual.reshape(-1)[rng.integers(0, golden.size, 2)] = np.nan
    expected, where = _brute(actual, golden, tile)
    monkeypatch.setattr(metrics, "BLOCK_ELEMENTS", 1000)
    monkeypatch.setattr(streamed, "BLOCK_ELEMENTS", 999)
    monkeypatch.setattr(streamed, "WINDOW_ELEMENTS", 777)
    whole = compare(actual, golden, tile=tile)
    windowed = compare_streamed(lambda w: actual[w], lambda w: golden[w], shape, shape, actual.dtype, golden.dtype,
                                rtol=1e-5, atol=1e-5, pcc=0.99, tile=tile)
    for c in (whole, windowed):
        assert c.tile_shape == tile and c.tile_sqnr_db == pytest.approx(expected, abs=1e-9)
        assert c.worst_tile == (int(np.ravel_multi_index(where[:1], (math.prod(shape[:-2]),))), *where[1:])


def test_vectors_and_thin_matrices_are_judged_by_runs() -> None:
    """A 1-D tensor, a single row, thin or tiny matrices: runs of 1024 consecutive values, a tile's worth."""
    for shape in ((5000,), (1, 5000), (5000, 1, 1), (625, 8, 1)):
        golden = _golden(shape, seed=4)
        actual = golden.copy()
        actual.reshape(-1)[4000:4032] *= -1  # 32 values in run 3 (values 3072-4095)
        c = compare(actual, golden)
        assert (c.tile_shape, c.worst_tile) == ((1, 1024), (0, 0, 3)) and c.tile_sqnr_db is not None
        assert c.tile_sqnr_db < 11 and c.sqnr_db is not None and c.sqnr_db > 15
    assert compare(_golden((8, 4096)), _golden((8, 4096))).tile_shape == (32, 32)  # 8 rows: 256 values a tile


def test_the_tile_shape_is_a_parameter_and_checked() -> None:
    golden = _golden((1, 64, 64), seed=5)
    actual = golden.copy()
    actual[0, 16:32, 32:64] *= 1.5
    c = compare(actual, golden, tile=(16, 32))
    assert (c.tile_shape, c.worst_tile) == ((16, 32), (0, 1, 1))
    for bad in ((0, 32), (32,), (32.0, 32), "32x32"):
        with pytest.raises(ComparisonError, match="tile must be"):
            compare(actual, golden, tile=bad)  # type: ignore[arg-type]


def _mask(x: np.ndarray, keep: int) -> np.ndarray:
    """bfloat16 values with only the leading ``keep`` of their 7 explicit mantissa bits (truncation, as LoFi)."""
    bits = x.astype(BF16).view(np.uint16)
    return (bits & np.uint16(0xFFFF ^ ((1 << (7 - keep)) - 1))).view(BF16).astype(np.float64)


def _operands(m: int, k: int, n: int, seed: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """bfloat16 matmul operands (as float64): A of N(0, 1) of shape (1, m, k), B of N(0, 1/k) of shape (k, n)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((1, m, k)).astype(BF16).astype(np.float64),
            (rng.standard_normal((k, n)) / math.sqrt(k)).astype(BF16).astype(np.float64))


def test_a_lofi_matmul_passes_with_the_shrink_noted() -> None:
    """Operands truncated as LoFi truncates them (srcA 4, srcB 6 mantissa bits), float32 accumulation, bfloat16 out."""
    a, b = _operands(256, 1024, 1024)
    golden = (a @ b).astype(np.float32)
    device = (_mask(a, 4) @ _mask(b, 6)).astype(np.float32).astype(BF16)
    comparison, verdict = _judge(device, golden, "BFLOAT16")
    assert verdict.passed and verdict.failed == ()
    assert comparison.fit_scale is not None and LOFI_SHRINK < 1 / comparison.fit_scale < 0.99  # shrunk ~2.2%
    assert comparison.tile_sqnr_db is not None and comparison.tile_sqnr_db > 28  # its worst tile, about 31 dB
    assert [n for n in verdict.notes if n.startswith("scale_or_offset:")] and "LoFi truncation" in verdict.notes[0]
    relu = _judge(np.maximum(device.astype(np.float32), 0).astype(BF16), np.maximum(golden, 0), "BFLOAT16")[1]
    assert relu.passed  # its zero tiles' errors are judged against a tenth of the tensor's mean energy


def test_bfloat16_accumulation_and_rounding_pass() -> None:
    """A K=2048 sum accumulated in bfloat16 across 32-wide K tiles (each tile's products summed in float32) against
    the float32-accumulated one; a softmax of bfloat16 logits with its near-zero tails."""
    a, b = _operands(128, 2048, 256, seed=7)
    products = a[0][:, :, None] * b[None, :, :]  # (m, k, n)
    partial = products.reshape(128, 64, 32, 256).sum(axis=2).astype(np.float32)
    total = np.zeros((128, 256), dtype=BF16)
    for kt in range(64):
        total = (total.astype(np.float32) + partial[:, kt]).astype(BF16)
    golden = products.sum(axis=1).astype(np.float32)
    assert _judge(total, golden, "BFLOAT16")[1].passed
    logits = np.random.default_rng(8).standard_normal((4, 128, 512)) * 4
    soft = np.exp(logits - logits.max(axis=-1, keepdims=True))
    soft /= soft.sum(axis=-1, keepdims=True)
    comparison, verdict = _judge(soft.astype(BF16), soft.astype(np.float32), "BFLOAT16")
    assert verdict.passed and comparison.tile_sqnr_db is not None


@pytest.mark.parametrize("bug,expect", [(0.5, "0.5"), (1 / math.sqrt(2), "0.7071"), (2.0, "2"), (1.1, "1.1")])
def test_scale_bugs_fail_on_scale_or_offset(bug: float, expect: str) -> None:
    golden = _golden((1, 128, 512), seed=9)
    comparison, verdict = _judge((golden * bug).astype(BF16), golden, "BFLOAT16")
    assert "scale_or_offset" in verdict.failed and comparison.scale_or_offset_error
    (note,) = [n for n in verdict.notes if n.startswith("scale_or_offset:")]
    assert f"actual/golden scale {expect}" in note and "scale error" in note


def test_an_offset_fails_on_scale_or_offset() -> None:
    golden = _golden((1, 128, 512), seed=10)
    comparison, verdict = _judge((golden + 0.2).astype(BF16), golden, "BFLOAT16")
    assert "scale_or_offset" in verdict.failed and comparison.scale_or_offset_error
    assert any("an offset error" in n for n in verdict.notes)


@pytest.mark.parametrize("shrink", [0.9, 0.95])
def test_a_shrink_beyond_lofi_truncation_fails(shrink: float) -> None:
    """x0.95 is more than twice LoFi's mean loss (2.25%): a wrong constant, not fidelity, though a tile-by-tile look
    sees it only at the tile bound (26 dB); the fit says so."""
    golden = _golden((1, 128, 512), seed=11)
    comparison, verdict = _judge((golden * shrink).astype(BF16), golden, "BFLOAT16")
    assert verdict.failed[:1] == ("scale_or_offset",) and "beyond LoFi truncation" in verdict.notes[0]


def test_the_lofi_allowance_is_twice_its_mean_loss_as_measured() -> None:
    """The derived mean loss matches a LoFi matmul computed bit-exactly (numeric/fidelity.py): 0.978 measured."""
    from reportdb.numeric import fidelity

    rng = np.random.default_rng(12)
    a, b = rng.standard_normal((64, 1024)).astype(np.float32), rng.standard_normal((1024, 256)).astype(np.float32)
    a, b = a.astype(BF16).astype(np.float32), b.astype(BF16).astype(np.float32)
    lofi = fidelity.matmul(a, b, "LoFi").astype(np.float64)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    ratio = float(np.sum(np.abs(lofi)) / np.sum(np.abs(exact)))
    assert abs((1 - ratio) - LOFI_MEAN_LOSS) < 0.003 and LOFI_SHRINK == pytest.approx(1 - 2 * LOFI_MEAN_LOSS)


def test_old_stored_vectors_without_tile_fields_are_still_judged() -> None:
    golden = _golden(seed=12)
    actual = golden.astype(BF16).astype(np.float32)
    _tile(actual)[...] *= 1.5
    new = compare(actual.astype(BF16), golden, rtol=2**-6, atol=2**-7).to_dict()
    old = {k: v for k, v in new.items() if k not in ("tile_shape", "tile_sqnr_db", "worst_tile", "tile_sqnr_p50")}
    judged_new, judged_old = judge_stored(None, new, "ttnn.silu"), judge_stored(None, old, "ttnn.silu")
    assert judged_new is not None and judged_new.failed == ("tile_sqnr_db",) and judged_new.worst_tile == TILE
    assert judged_old is not None and judged_old.passed and judged_old.worst_tile is None  # not measured: not judged
    data = json.loads(json.dumps(judged_new.to_dict(), allow_nan=False))
    assert data["worst_tile"] == list(TILE) and data["notes"][0].startswith("tile_sqnr_db: 32x32 tile (0, 3, 17)")
    assert data["criteria"]["tile_sqnr_db"] == 26.0
    assert Verdict(True, (), Criteria()).to_dict()["notes"] == []  # the three-field construction still works


def test_a_policy_file_with_tile_sqnr_db(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('[[rules]]\nop = "ttnn.silu"\npcc = 0.99\ntile_sqnr_db = 5\n')
    policy = Policy.load(path)
    golden = _golden(seed=13)
    actual = golden.astype(BF16).astype(np.float32)
    _tile(actual)[...] *= 1.5  # 6 dB: above this rule's 5, below the default's 26
    assert _judge(actual.astype(BF16), golden, "BFLOAT16", policy)[1].passed
    assert not _judge(actual.astype(BF16), golden, "BFLOAT16")[1].passed
    assert policy.to_dict()["rules"][0]["tile_sqnr_db"] == 5.0
    path.write_text('[[rules]]\nop = "*"\ntile_sqnr_db = "high"\n')
    with pytest.raises(PolicyError, match="tile_sqnr_db must be a finite number"):
        Policy.load(path)


def test_dtype_defaults_of_the_tile_criterion() -> None:
    from reportdb.analysis.policy import dtype_defaults

    bounds = {d: dtype_defaults(d)[0].tile_sqnr_db for d in ("FLOAT32", "BFLOAT16", "BFLOAT8_B", "BFLOAT4_B",
                                                             "FLOAT8_E4M3FN", "INT32")}
    assert bounds == {"FLOAT32": 26.0, "BFLOAT16": 26.0, "BFLOAT8_B": 26.0, "BFLOAT4_B": 11.83,
                      "FLOAT8_E4M3FN": 17.85, "INT32": None}


def _report(path: Path, tensors: dict[int, np.ndarray], **spec: object) -> Path:
    """A report written with ``reportdb.Writer``: each tensor an output, one ``ttnn.silu`` operation producing id 1."""
    with reportdb.Writer(path) as w:
        for tensor_id, value in tensors.items():
            w.put_tensor(tensor_id, value, role="output", **spec)
        w.add_operation(1, "ttnn.silu", outputs=[1])
    return path


def test_compare_stored_names_the_tile_in_its_stored_tile_shape(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    golden = _golden((1, 128, 512), seed=14).astype(BF16)
    actual = golden.copy()
    actual[0, 48:64, 96:128] *= np.asarray(1.1, BF16)
    monkeypatch.setattr(streamed, "WINDOW_ELEMENTS", 5000)  # several windows, two threads
    path = _report(tmp_path / "r", {1: actual, 2: golden}, layout="TILE", tile_shape=(16, 32))
    with reportdb.open(path) as report:
        c = compare_stored(report, 1, report, 2, 0, rtol=2**-6, atol=2**-7, pcc=0.99)
    assert (c.tile_shape, c.worst_tile) == ((16, 32), (0, 3, 3)) and c.tile_sqnr_db is not None
    verdict = Policy.default().judge(c, op="ttnn.silu", dtype="BFLOAT16")
    assert verdict.failed == ("tile_sqnr_db",) and verdict.worst_tile == (0, 3, 3)


def test_run_against_run_does_not_hide_a_wrong_tile(tmp_path: Path) -> None:
    golden = _golden((1, 256, 1024), seed=15).astype(BF16)
    other = golden.copy()
    _tile(other, (0, 2, 9))[...] *= np.asarray(1.1, BF16)
    result = reportdb.compare_runs(_report(tmp_path / "a", {1: golden}, ttnn_dtype="BFLOAT16"),
                                   _report(tmp_path / "b", {1: other}, ttnn_dtype="BFLOAT16"))
    (row,) = result.rows
    assert row.verdict == "diverges" and row.failed == ("tile_sqnr_db",) and row.metrics is not None
    assert row.metrics.worst_tile == (0, 2, 9) and row.metrics.pcc is not None and row.metrics.pcc > 0.9999
    assert re.fullmatch(r"tile_sqnr_db: 32x32 tile \(0, 2, 9\): (19|20)\.\d dB < 26 dB", row.notes[0])


def test_an_all_zero_golden_names_the_tile_with_the_error() -> None:
    golden = np.zeros((1, 64, 96), dtype=np.float32)
    actual = golden.copy()
    actual[0, 40, 70] = 0.5
    comparison, verdict = _judge(actual, golden, "FLOAT32")
    assert comparison.tile_sqnr_db is None and comparison.worst_tile == (0, 1, 2)
    assert "tile_sqnr_db" in verdict.failed and verdict.worst_tile == (0, 1, 2)
    assert "tile_sqnr_db: tile (0, 1, 2): errors where the golden is zero everywhere" in verdict.notes
    same, same_verdict = _judge(golden, golden, "FLOAT32")
    assert (same.tile_sqnr_db, same.worst_tile, same_verdict.passed) == (None, None, True)


def test_every_fault_through_compare_stored_on_a_written_report(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """One report (``reportdb.Writer``) holding a golden and each faulty output, read back window by window."""
    golden = _golden((1, 128, 1024), seed=16)
    outputs = {}
    for i, fault in enumerate(sorted(FAULTS), start=1):
        actual = golden.astype(BF16).astype(np.float32)
        FAULTS[fault](_tile(actual, (0, 2, 9)), golden)
        outputs[i] = actual.astype(BF16)
    monkeypatch.setattr(streamed, "WINDOW_ELEMENTS", 20000)  # windows that start mid-tile-row, two threads
    path = _report(tmp_path / "r", {100: golden, **outputs})
    policy = Policy.default()
    with reportdb.open(path) as report:
        for i, fault in enumerate(sorted(FAULTS), start=1):
            c = compare_stored(report, i, report, 100, 0, rtol=2**-6, atol=2**-7, pcc=0.99)
            verdict = policy.judge(c, op="ttnn.silu", dtype="BFLOAT16")
            assert (fault, c.worst_tile, "tile_sqnr_db" in verdict.failed) == (fault, (0, 2, 9), True)
