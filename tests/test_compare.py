"""compare(): every metric against a whole-array float64 numpy reference, on crafted and random cases."""

from __future__ import annotations

import json
import math

import ml_dtypes
import numpy as np
import pytest

import reportdb.numeric.metrics as cmp
from reportdb.numeric.metrics import ComparisonError, compare
from reportdb.errors import ReportDBError, UnsupportedDTypeError

BF16 = np.dtype(ml_dtypes.bfloat16)


def ttmetal_comp_pcc(golden: np.ndarray, calculated: np.ndarray) -> float:
    """tt-metal's comp_pcc algorithm, step by step, in numpy (no torch here)."""
    golden = np.asarray(golden)
    calculated = np.asarray(calculated)
    if golden.dtype != calculated.dtype:
        with np.errstate(over="ignore", invalid="ignore"):
            calculated = calculated.astype(golden.dtype)
    g_nan, c_nan = np.isnan(golden.astype(np.float64)), np.isnan(calculated.astype(np.float64))
    if g_nan.all() and c_nan.all():
        return 1.0
    if g_nan.all() or c_nan.all():
        return 0.0
    if bool(np.any(golden.astype(bool))) != bool(np.any(calculated.astype(bool))):
        return 0.0
    golden = golden.astype(np.float64) if golden.dtype.kind not in "biu" else golden
    calculated = calculated.astype(np.float64) if calculated.dtype.kind not in "biu" else calculated
    if golden.dtype.kind == "f":
        golden = np.where(np.isfinite(golden), golden, 0.0)
        calculated = np.where(np.isfinite(calculated), calculated, 0.0)
    if np.array_equal(golden, calculated):
        return 1.0
    pcc = np.min(np.ma.corrcoef(np.ma.masked_invalid(golden).ravel(), np.ma.masked_invalid(calculated).ravel()))
    if isinstance(pcc, np.ma.core.MaskedConstant):
        return 1.0
    return float(pcc)


def reference(a: np.ndarray, b: np.ndarray, rtol: float = 1e-5, atol: float = 1e-8) -> dict:
    """Whole-array float64 versions of the metrics over jointly finite positions."""
    xa = np.asarray(a).astype(np.float64).ravel()
    xb = np.asarray(b).astype(np.float64).ravel()
    keep = np.isfinite(xa) & np.isfinite(xb)
    fa, fb = xa[keep], xb[keep]
    diff = np.abs(fa - fb)
    rel = diff / np.maximum(np.abs(fb), np.finfo(np.float64).eps)
    out = {
        "finite_count": int(keep.sum()),
        "max_abs_error": float(diff.max()) if diff.size else None,
        "mean_abs_error": float(diff.mean()) if diff.size else None,
        "max_rel_error": float(rel.max()) if diff.size else None,
        "mean_rel_error": float(rel.mean()) if diff.size else None,
        "allclose_mismatches": int(np.count_nonzero(~np.isclose(xa, xb, rtol=rtol, atol=atol, equal_nan=True))),
        "nan_mismatches": int(np.count_nonzero(np.isnan(xa) != np.isnan(xb))),
        "inf_mismatches": int(np.count_nonzero((np.isinf(xa) | np.isinf(xb)) & (xa != xb))),
        "pcc": None,
        "cosine": None,
    }
    if fa.size >= 2 and fa.std() > 0 and fb.std() > 0:
        out["pcc"] = float(np.corrcoef(fa, fb)[0, 1])
    if fa.size and np.any(fa) and np.any(fb):
        out["cosine"] = float(np.dot(fa, fb) / (np.linalg.norm(fa) * np.linalg.norm(fb)))
    return out


def ordered(x: np.ndarray) -> np.ndarray:
    """Float bit patterns as order-preserving integers (Python ints, so no overflow), -0 == +0."""
    bits = x.view(f"<i{x.dtype.itemsize}").astype(object)
    top = 1 << (8 * x.dtype.itemsize - 1)
    return np.array([(-top - v) if v < 0 else v for v in bits.ravel()], dtype=object)


def assert_matches_reference(
    result: cmp.Comparison, a: np.ndarray, b: np.ndarray, rtol: float | None = None, atol: float | None = None
) -> None:
    """Every reference metric agrees (floats to 1e-9 relative, counts exactly); allclose at the result's own
    tolerances (the dtypes' defaults when compare() was given none) unless others are given."""
    ref = reference(a, b, result.rtol if rtol is None else rtol, result.atol if atol is None else atol)
    for key, want in ref.items():
        got = getattr(result, key)
        if want is None or isinstance(want, int):
            assert got == want, (key, got, want)
        else:
            assert got == pytest.approx(want, rel=1e-9, abs=1e-12), (key, got, want)
    assert result.pcc_ttmetal == pytest.approx(ttmetal_comp_pcc(b, a), abs=1e-9)
    json.dumps(result.to_dict(), allow_nan=False)


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> int:
    """Shrink the block so modest arrays exercise the streaming combine."""
    monkeypatch.setattr(cmp, "BLOCK_ELEMENTS", 1000)
    return 1000


def test_equal_tensors() -> None:
    x = np.random.default_rng(0).standard_normal((4, 33, 17)).astype(np.float32)
    r = compare(x, x.copy())
    assert_matches_reference(r, x, x)
    assert r.pcc == pytest.approx(1.0) and r.pcc_ttmetal == 1.0
    assert r.ulp_max == 0 and r.max_abs_error == 0 and r.allclose_mismatches == 0
    assert r.passed and not r.scale_or_offset_error and not r.constant_input
    assert r.shape_a == (4, 33, 17) and r.dtype_a == "float32" and r.count == x.size


def test_scale_and_offset_is_flagged() -> None:
    x = np.random.default_rng(1).standard_normal(5000)
    r = compare(x, 2 * x + 5)
    assert_matches_reference(r, x, 2 * x + 5)
    assert r.pcc == pytest.approx(1.0, abs=1e-12)
    assert r.fit_scale == pytest.approx(2.0) and r.fit_offset == pytest.approx(5.0)
    assert r.scale_or_offset_error and not r.passed
    offset_only = compare(x, x + 0.5)
    assert offset_only.scale_or_offset_error and offset_only.fit_scale == pytest.approx(1.0)


def test_noise_is_not_a_scale_error() -> None:
    rng = np.random.default_rng(2)
    b = rng.standard_normal(20000)
    a = b + 0.05 * rng.standard_normal(b.size)
    r = compare(a, b)
    assert_matches_reference(r, a, b)
    assert 0.99 < r.pcc < 1 and not r.scale_or_offset_error and r.passed
    assert compare(-b, b).pcc == pytest.approx(-1.0) and not compare(-b, b).passed


def test_constant_tensors() -> None:
    ones = np.ones(100, dtype=np.float32)
    r = compare(ones, 2 * ones)
    assert_matches_reference(r, ones, 2 * ones)
    assert r.constant_input and r.pcc is None and r.pcc_ttmetal == 1.0  # tt-metal's masked 1.0
    assert r.allclose_mismatches == 100 and not r.passed
    same = compare(np.full(7, 0.1), np.full(7, 0.1))
    assert same.constant_input and same.passed and same.pcc is None
    noise = np.random.default_rng(3).standard_normal(100)
    mixed = compare(noise, np.full(100, 0.1))  # 0.1 is not an exact sum: only exact constancy counts
    assert mixed.constant_input and mixed.pcc is None and not mixed.passed


def test_one_side_all_zero_gives_ttmetal_zero() -> None:
    x = np.random.default_rng(4).standard_normal(50)
    r = compare(np.zeros(50), x)
    assert r.pcc_ttmetal == 0.0 == ttmetal_comp_pcc(x, np.zeros(50))
    assert r.cosine is None and r.constant_input


def test_nan_and_inf_at_same_positions() -> None:
    x = np.random.default_rng(5).standard_normal(1000).astype(np.float32)
    x[[3, 50]] = np.nan
    x[7], x[8] = np.inf, -np.inf
    y = x + np.float32(1e-3)
    r = compare(y, x)
    assert_matches_reference(r, y, x)
    assert r.finite_count == 996 and r.nan_mismatches == 0 and r.inf_mismatches == 0
    assert not r.nonfinite_mismatch and r.passed
    assert any("NaN" in note for note in r.notes)


def test_nan_and_inf_at_different_positions() -> None:
    x = np.random.default_rng(6).standard_normal(1000).astype(np.float32)
    a, b = x.copy(), x.copy()
    a[3], b[4] = np.nan, np.nan
    a[10], b[11] = np.inf, -np.inf
    a[20], b[20] = np.inf, -np.inf
    a[30], b[30] = np.nan, np.inf
    r = compare(a, b)
    assert_matches_reference(r, a, b)
    assert r.nan_mismatches == 3 and r.inf_mismatches == 4
    assert r.nonfinite_mismatch and not r.passed
    assert r.allclose_mismatches == 6
    assert r.pcc == pytest.approx(1.0)  # finite positions agree; PCC alone would hide the damage


def test_all_nan_both_sides() -> None:
    nan = np.full(4, np.nan)
    r = compare(nan, nan)
    assert r.pcc_ttmetal == 1.0 and r.pcc is None and r.passed and r.finite_count == 0
    one = compare(nan, np.arange(4.0))
    assert one.pcc_ttmetal == 0.0 and not one.passed


def test_bfloat16_vs_float32_one_ulp_apart() -> None:
    rng = np.random.default_rng(7)
    a = rng.standard_normal(4096).astype(BF16)
    bits = a.view(np.uint16)
    up = bits + np.where(bits & 0x8000, np.uint16(0xFFFF), np.uint16(1))  # one step away from zero... or toward
    b = up.astype(np.uint16).view(BF16).astype(np.float32)
    r = compare(a, b)  # at bfloat16's default tolerances (the coarser dtype's), not float32's 1e-5 / 1e-8
    assert (r.rtol, r.atol) == (2.0**-6, 2.0**-7)
    assert_matches_reference(r, a, b, rtol=2.0**-6, atol=2.0**-7)
    assert r.allclose_mismatches == 0 and compare(a, b, rtol=1e-5, atol=1e-8).allclose_mismatches == 4096
    assert r.ulp_dtype == "bfloat16" and r.ulp_max == 1 and r.ulp_mean == 1.0
    assert r.dtype_a == "bfloat16" and r.dtype_b == "float32"


def test_ulp_across_zero_and_powers_of_two() -> None:
    a = np.array([0.0, -0.0, 1.0, np.nextafter(np.float32(1), np.float32(0)), -1e-45, 2.0], dtype=np.float32)
    b = np.array([-0.0, 1e-45, np.nextafter(np.float32(1), np.float32(2)), 1.0, 1e-45, 4.0], dtype=np.float32)
    r = compare(a, b)
    want = np.abs(ordered(a) - ordered(b)).astype(np.int64)
    assert want.tolist() == [0, 1, 1, 1, 2, 1 << 23]
    assert r.ulp_max == int(want.max()) and r.ulp_mean == pytest.approx(float(want.mean()))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_ulp_matches_bit_reference(dtype: str) -> None:
    dt = np.dtype(getattr(ml_dtypes, dtype, None) or dtype)
    rng = np.random.default_rng(8)
    a = (rng.standard_normal(3000) * 4).astype(dt)
    b = (a.astype(np.float64) * (1 + rng.standard_normal(3000) * 0.05)).astype(dt)
    r = compare(a, b)
    keep = np.isfinite(a.astype(np.float64)) & np.isfinite(b.astype(np.float64))
    dist = np.abs(ordered(a[keep]) - ordered(b[keep]))
    assert r.ulp_dtype == dtype and r.ulp_max == int(dist.max())
    assert r.ulp_mean == pytest.approx(float(np.mean(dist.astype(float))))
    assert_matches_reference(r, a, b)


def test_float64_ulp_distance_beyond_int64() -> None:
    r = compare(np.array([-1e300, 1.0]), np.array([1e300, 2.0]))
    assert r.ulp_max == int(abs(ordered(np.array([-1e300])) - ordered(np.array([1e300])))[0])
    assert r.ulp_max > 2**63


def test_integer_tensors() -> None:
    rng = np.random.default_rng(9)
    a = rng.integers(-1000, 1000, size=(10, 100), dtype=np.int32)
    b = a + rng.integers(-2, 3, size=a.shape).astype(np.int32)
    r = compare(a, b)
    assert_matches_reference(r, a, b)
    assert r.ulp_dtype == "integer" and r.ulp_max == int(np.abs(a - b).max())
    assert r.ulp_mean == pytest.approx(np.abs(a.astype(np.int64) - b).mean())
    flags = compare(np.array([True, False, True]), np.array([True, False, False]))
    assert flags.ulp_max == 1 and flags.allclose_mismatches == 1
    mixed = compare(np.arange(5, dtype=np.uint8), np.arange(5, dtype=np.float32))
    assert mixed.ulp_dtype == "float32" and mixed.ulp_max == 0


def test_empty_and_zero_dim() -> None:
    e = compare(np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32))
    assert e.count == 0 and e.pcc is None and e.max_abs_error is None and e.ulp_max is None
    assert e.pcc_ttmetal == 1.0 and e.passed  # torch.all(isnan(empty)) is True: tt-metal's "both NaN"
    json.dumps(e.to_dict(), allow_nan=False)
    s = compare(np.float32(2.5), np.array(2.5, dtype=np.float32))
    assert s.count == 1 and s.shape_a == () and s.passed and s.constant_input
    d = compare(np.array(2.5), np.array(3.0))
    assert not d.passed and d.max_abs_error == 0.5


def test_shape_mismatch() -> None:
    r = compare(np.zeros((2, 3)), np.zeros((3, 2)))
    assert r.shape_mismatch and not r.passed
    assert r.pcc is None and r.count is None and r.allclose_mismatches is None
    json.dumps(r.to_dict(), allow_nan=False)


def test_block_boundaries_match_whole_array(small_blocks: int) -> None:
    rng = np.random.default_rng(10)
    b = (rng.standard_normal(10 * small_blocks + 7) * 3 + 100).astype(np.float32)
    a = (b + rng.standard_normal(b.size).astype(np.float32) * 0.1).astype(np.float32)
    a[[5, 1500, 9999]] = np.nan
    b[[5, 2500]] = np.inf
    a[3000:3000 + small_blocks] = 7.0  # one whole constant block
    b[3000:3000 + small_blocks] = 7.0
    r = compare(a, b)
    assert_matches_reference(r, a, b)
    rb = compare(a.astype(BF16), b)
    assert_matches_reference(rb, a.astype(BF16), b)
    assert r.pcc == pytest.approx(reference(a, b)["pcc"], abs=1e-12)


def test_constant_over_many_blocks(small_blocks: int) -> None:
    r = compare(np.full(5 * small_blocks + 3, 0.1), np.full(5 * small_blocks + 3, 0.1))
    assert r.constant_input and r.pcc is None and r.passed


def test_dtype_mismatch_ttmetal_casts_calculated_to_golden() -> None:
    rng = np.random.default_rng(11)
    golden = rng.standard_normal(3000).astype(BF16)
    calc = golden.astype(np.float32) + rng.standard_normal(3000).astype(np.float32) * 0.02
    r = compare(calc, golden)
    assert r.pcc_ttmetal == pytest.approx(ttmetal_comp_pcc(golden, calc), abs=1e-12)
    assert r.pcc_ttmetal != pytest.approx(r.pcc, abs=1e-9)  # the rounding to bfloat16 shows
    ints = compare(np.arange(10) + 0.4, np.arange(10))  # calculated truncated to int: equal → 1.0
    assert ints.pcc_ttmetal == 1.0 == ttmetal_comp_pcc(np.arange(10), np.arange(10) + 0.4)


def test_non_contiguous_input(small_blocks: int) -> None:
    rng = np.random.default_rng(12)
    a = rng.standard_normal((60, 70)).T
    b = a + 0.01
    assert compare(a, b) == compare(np.ascontiguousarray(a), np.ascontiguousarray(b))


def test_tolerances_are_used() -> None:
    a = np.array([1.0, 2.0, 3.0])
    b = np.array([1.0, 2.1, 3.0])
    assert compare(a, b).allclose_mismatches == 1
    assert compare(a, b, atol=0.2).allclose_mismatches == 0
    assert compare(a, b, rtol=0.1).allclose_mismatches == 0


def test_bad_input() -> None:
    with pytest.raises(UnsupportedDTypeError):
        compare(np.zeros(3, np.complex64), np.zeros(3, np.complex64))
    for kwargs in ({"rtol": -1.0}, {"atol": math.nan}, {"pcc": 2.0}, {"fit_tol": -0.1}):
        with pytest.raises(ComparisonError):
            compare(np.zeros(3), np.zeros(3), **kwargs)
    assert issubclass(ComparisonError, ReportDBError)


def test_spans_merge_like_one_pass(small_blocks: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(13)
    b = rng.standard_normal(9 * small_blocks + 1).astype(np.float32)
    a = b * np.float32(1.01) + np.float32(0.001)
    a[4321] = np.nan
    monkeypatch.setattr(cmp, "split_range", lambda size, block: [(0, 3000), (3000, 7000), (7000, size)])
    threaded = compare(a, b).to_dict()
    monkeypatch.setattr(cmp, "split_range", lambda size, block: [(0, size)])
    single = compare(a, b).to_dict()
    assert threaded.keys() == single.keys()
    for key, value in single.items():
        if isinstance(value, float):
            assert threaded[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key
        else:
            assert threaded[key] == value, key
