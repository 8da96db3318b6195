"""compute_stats(): equal to numpy's whole-array float64 answers, NaN/Inf counted apart, bounded blocks."""

from __future__ import annotations

import json
import warnings

import ml_dtypes
import numpy as np
import pytest

import reportdb.numeric.stats as stats_mod
from reportdb.errors import ReportDBError, UnsupportedDTypeError
from reportdb.numeric.stats import StatsError, compute_stats


def assert_stats_match(result: dict, array: np.ndarray, bins: int = 64) -> None:
    """Every key against numpy on the finite float64 values."""
    x = np.asarray(array).astype(np.float64).ravel()
    finite = x[np.isfinite(x)]
    assert result["count"] == x.size
    assert result["nan_count"] == int(np.isnan(x).sum())
    assert result["inf_count"] == int(np.isinf(x).sum())
    assert result["zero_count"] == int((x == 0).sum())
    assert result["min"] == float(np.nanmin(finite))
    assert result["max"] == float(np.nanmax(finite))
    assert result["absmax"] == float(np.abs(finite).max())
    assert result["mean"] == pytest.approx(float(finite.mean()), rel=1e-12, abs=1e-12)
    assert result["std"] == pytest.approx(float(finite.std()), rel=1e-9, abs=1e-12)
    counts, edges = np.histogram(finite, bins=bins, range=(finite.min(), finite.max()))
    assert result["hist_counts"] == counts.tolist()
    assert result["hist_edges"] == edges.tolist()
    json.dumps(result, allow_nan=False)


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> int:
    """Shrink the block so modest arrays exercise the streaming combine and the second histogram pass."""
    monkeypatch.setattr(stats_mod, "BLOCK_ELEMENTS", 1000)
    monkeypatch.setattr(stats_mod, "PATTERN_MIN_ELEMENTS", 1000)
    return 1000


def with_specials(x: np.ndarray) -> np.ndarray:
    """A copy with NaN, ±Inf and zeros sprinkled in."""
    x = x.copy()
    x[::97] = np.nan
    x[5::131] = np.inf
    x[7::173] = -np.inf
    x[11::53] = 0
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16])
def test_random_floats_with_specials(dtype: type) -> None:
    x = with_specials(np.random.default_rng(0).standard_normal(20000) * 10).astype(dtype)
    assert_stats_match(compute_stats(x), x)


def test_block_boundaries(small_blocks: int) -> None:
    rng = np.random.default_rng(1)
    x = with_specials(rng.standard_normal(7 * small_blocks + 13) * 5 + 1000)
    x[2000:3000] = np.nan  # one block with no finite value at all
    assert_stats_match(compute_stats(x.astype(np.float32)), x.astype(np.float32))
    assert_stats_match(compute_stats(x, bins=10), x, bins=10)


def test_histogram_edges_are_numpys_exactly() -> None:
    x = np.linspace(-3, 3, 6401)  # many values sit exactly on bin edges
    assert_stats_match(compute_stats(x), x)
    assert_stats_match(compute_stats(x, bins=7), x, bins=7)


def test_integers_and_bool() -> None:
    rng = np.random.default_rng(2)
    for x in (rng.integers(-50, 50, size=(30, 40), dtype=np.int16), rng.integers(0, 2**32 - 1, 5000, dtype=np.uint32),
              rng.random(999) > 0.3):
        assert_stats_match(compute_stats(x), x)


def test_constant_and_single_value() -> None:
    r = compute_stats(np.full(3000, 0.1))
    assert r["std"] == 0.0 and r["mean"] == 0.1 and r["hist_counts"][32] == 3000
    assert_stats_match(r, np.full(3000, 0.1))
    s = compute_stats(np.float32(-2.0))
    assert s["count"] == 1 and s["min"] == s["max"] == -2.0 and s["absmax"] == 2.0 and s["std"] == 0.0


def test_empty_and_all_nonfinite() -> None:
    e = compute_stats(np.zeros((0, 4), np.float32))
    assert e["count"] == 0 and e["nan_count"] == 0 and e["min"] is None and e["hist_counts"] is None
    json.dumps(e, allow_nan=False)
    n = compute_stats(np.array([np.nan, np.inf, -np.inf]))
    assert n["count"] == 3 and n["nan_count"] == 1 and n["inf_count"] == 2
    assert n["mean"] is None and n["hist_edges"] is None
    json.dumps(n, allow_nan=False)


def test_non_contiguous(small_blocks: int) -> None:
    x = np.random.default_rng(3).standard_normal((80, 90)).T
    assert compute_stats(x) == compute_stats(np.ascontiguousarray(x))


def test_bad_input() -> None:
    with pytest.raises(UnsupportedDTypeError):
        compute_stats(np.zeros(3, np.complex128))
    for bins in (0, -1, 2.5, True):
        with pytest.raises(StatsError):
            compute_stats(np.zeros(3), bins=bins)
    assert issubclass(StatsError, ReportDBError)


def test_spans_merge_like_one_pass(small_blocks: int, monkeypatch: pytest.MonkeyPatch) -> None:
    x = with_specials(np.random.default_rng(4).standard_normal(9 * small_blocks + 1))
    monkeypatch.setattr(stats_mod, "split_range", lambda size, block: [(0, 3000), (3000, 7000), (7000, size)])
    threaded = compute_stats(x)
    monkeypatch.setattr(stats_mod, "split_range", lambda size, block: [(0, size)])
    single = compute_stats(x)
    assert threaded["hist_counts"] == single["hist_counts"] and threaded["min"] == single["min"]
    assert threaded["std"] == pytest.approx(single["std"], rel=1e-12)
    small = compute_stats(np.arange(3.0))  # the per-thread scratch buffers carry nothing over
    assert small["hist_counts"] == np.histogram(np.arange(3.0), bins=64)[0].tolist()


@pytest.mark.parametrize("size", [0, 1, 999, 8000, 123_457])
def test_split_range_covers_every_position_once(size: int) -> None:
    spans = stats_mod.split_range(size, 1000)
    assert spans[0][0] == 0 and spans[-1][1] == size
    assert all(stop == nxt for (_, stop), (nxt, _) in zip(spans, spans[1:]))
    assert all(start % 1000 == 0 for start, _ in spans)


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2])
def test_narrow_floats_counted_by_bit_pattern(small_blocks: int, dtype: type) -> None:
    """Arrays of 1- and 2-byte dtypes longer than a block are summarized from the count of each bit pattern."""
    x = with_specials(np.random.default_rng(5).standard_normal(9 * small_blocks + 9) * 3 + 0.5)
    if dtype == ml_dtypes.float8_e4m3fn:  # no infinities in this format: they would become NaN
        x[np.isinf(x)] = 0
    assert_stats_match(compute_stats(x.astype(dtype)), x.astype(dtype))
    assert_stats_match(compute_stats(x.astype(dtype), bins=7), x.astype(dtype), bins=7)
    strided = x.astype(dtype).reshape(-1, 7)[:, ::2]
    assert compute_stats(strided) == compute_stats(np.ascontiguousarray(strided))


def test_narrow_integers_bool_and_constants_by_bit_pattern(small_blocks: int) -> None:
    rng = np.random.default_rng(6)
    for x in (rng.integers(-30000, 30000, 5000, dtype=np.int16), rng.integers(0, 255, 5000, dtype=np.uint8),
              rng.integers(-128, 127, 5000, dtype=np.int8), rng.random(5000) > 0.3):
        assert_stats_match(compute_stats(x), x)
    const = np.full(5000, 0.25, ml_dtypes.bfloat16)
    r = compute_stats(const)
    assert r["std"] == 0.0 and r["mean"] == 0.25 and r["hist_counts"][32] == 5000
    nonfinite = np.full(3000, np.nan, np.float16)
    nonfinite[::2] = np.inf
    n = compute_stats(nonfinite)
    assert n["nan_count"] == 1500 and n["inf_count"] == 1500 and n["min"] is None and n["hist_counts"] is None


def test_big_endian_narrow_dtype(small_blocks: int) -> None:
    x = np.random.default_rng(8).standard_normal(4000).astype(">f2")
    assert_stats_match(compute_stats(x), x)


def test_edges_equal_linspace_over_many_ranges() -> None:
    rng = np.random.default_rng(9)
    for lo, width, bins in zip(rng.standard_normal(300) * 10.0 ** rng.integers(-30, 30, 300),
                               rng.random(300) * 10.0 ** rng.integers(-300, 300, 300), rng.integers(1, 300, 300)):
        hi = lo + width
        edges = stats_mod._hist_edges(float(lo), float(hi), int(bins))
        first, last = (lo - 0.5, hi + 0.5) if lo == hi else (lo, hi)
        if lo == hi and first == lo:  # ±0.5 lost in rounding: widened by 2**-20 of the value (np.histogram refuses it)
            first, last = lo - abs(lo) * 2.0**-20, hi + abs(lo) * 2.0**-20
        assert edges.tolist() == np.linspace(first, last, bins + 1).tolist()
    assert stats_mod._hist_edges(0.0, 5e-324, 64).tolist() == np.linspace(0.0, 5e-324, 65).tolist()


@pytest.mark.parametrize("values", [[0.0, 5e-324], [0.0, 1e-310], [0.0, 1e-310, 3e-311], [1e-320, 1e-320 + 5e-324, 0.0]])
@pytest.mark.parametrize("repeat", [1, 30000])  # the few-calls path, compute_stats_many's segments, the streaming path
def test_ranges_a_few_subnormals_wide(values: list[float], repeat: int) -> None:
    """A range so narrow that the bin guess's scale overflows (zeros beside a denormal, as underflow or uninitialized
    memory leaves them) is binned by the edges themselves, with np.histogram's rule, on every path: it used to crash."""
    x = np.array(values * repeat)
    result = compute_stats(x)
    assert stats_mod.compute_stats_many([x])[0] == result
    edges = np.array(result["hist_edges"])
    expected = np.bincount(np.minimum(np.searchsorted(edges, x, side="right") - 1, 63), minlength=64)
    assert result["hist_counts"] == expected.tolist() and sum(result["hist_counts"]) == x.size
    assert result["min"] == x.min() and result["max"] == x.max()


def _varied_arrays() -> list[np.ndarray]:
    """Small arrays of every kind the segmented path meets or hands back to compute_stats."""
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal(int(n)).astype(np.float32) for n in rng.integers(1, 3000, 40)]
    arrays += [rng.uniform(-2, 2, int(n)).round(1) for n in rng.integers(1, 500, 20)]  # many ties on edges
    arrays += [
        np.zeros(7, np.int8), np.array([], np.float32), np.array(2.5), np.array([3.0]),
        np.array([np.nan, 1.0]), np.array([np.inf, -np.inf]), with_specials(rng.standard_normal(400)),
        np.arange(100, dtype=np.int64), np.arange(-50, 50, dtype=np.int16).reshape(10, 10), np.ones(10, ml_dtypes.bfloat16),
        rng.integers(0, 2, 50).astype(bool), rng.standard_normal(64).astype(ml_dtypes.float8_e4m3fn),
        np.maximum(rng.standard_normal(2000), 0), rng.standard_normal(999) * 1e-300, np.linspace(0, 1, 65),
        np.array([1.0, 1.0 + 2**-52, 1.0 + 2**-51]), rng.standard_normal(300_000).astype(np.float32),
        rng.standard_normal((30, 40)).astype(np.float32)[:, ::3],  # not contiguous
    ]
    return arrays


def test_many_equals_one_at_a_time() -> None:
    arrays = _varied_arrays()
    for array, many in zip(arrays, stats_mod.compute_stats_many(arrays), strict=True):
        one = compute_stats(array)
        assert many.keys() == one.keys()
        for key in one:
            if key in ("mean", "std") and one[key] is not None:
                assert many[key] == pytest.approx(one[key], rel=1e-12, abs=1e-300), key
            else:
                assert many[key] == one[key], (key, array.dtype, array.size)
        if np.isfinite(array.astype(np.float64)).any():
            try:
                assert_stats_match(many, array)
            except ValueError as exc:  # np.histogram refuses ranges narrower than 64 distinct edges
                assert "Too many bins" in str(exc)


def test_many_without_edges_and_bad_bins() -> None:
    arrays = _varied_arrays()[:30]
    without = stats_mod.compute_stats_many(arrays, edges=False)
    for array, result in zip(arrays, without):
        assert result["hist_edges"] is None
        assert result["hist_counts"] == compute_stats(array)["hist_counts"]
    with pytest.raises(StatsError):
        stats_mod.compute_stats_many(arrays, bins=0)
    with pytest.raises(UnsupportedDTypeError):
        stats_mod.compute_stats_many([np.zeros(3, np.complex64)])


def test_range_wider_than_the_largest_float() -> None:
    """np.histogram refuses such a range; the statistics still bin every value, from half steps, and the mean
    and std (whose float64 sums overflow) come out finite from scaled values: uninitialized memory looks so."""
    x = np.array([-1.7e308, 1.7e308, 0.0, 5e307, -1e308, 1.69e308])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning escapes either
        result = compute_stats(x)
        many = stats_mod.compute_stats_many([x])[0]
    assert sum(result["hist_counts"]) == x.size
    edges = np.array(result["hist_edges"])
    assert edges[0] == x.min() and edges[-1] == x.max() and np.all(np.diff(edges) > 0)
    assert result["hist_counts"][0] == 1 and result["hist_counts"][-1] == 2
    idx = np.searchsorted(edges, x, side="right") - 1
    assert np.bincount(np.minimum(idx, 63), minlength=64).tolist() == result["hist_counts"]
    scaled = x / 1.7e308
    assert result["mean"] == pytest.approx(scaled.mean() * 1.7e308, rel=1e-12)
    assert result["std"] == pytest.approx(scaled.std() * 1.7e308, rel=1e-12)
    assert many == result
    json.dumps(result, allow_nan=False)


@pytest.mark.parametrize("size", [10, 5000, 700_000])  # segmented, few-calls and streaming paths
@pytest.mark.parametrize("nan", [False, True])
def test_moments_near_the_float64_limit_stay_finite(size: int, nan: bool) -> None:
    rng = np.random.default_rng(size)
    x = rng.uniform(0.1, 1, size) * 1.5e308  # one sign: the range fits a float, the squares do not
    if nan:
        x[::7] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for result in (compute_stats(x), stats_mod.compute_stats_many([x])[0]):
            finite = x[np.isfinite(x)] / 1.5e308
            assert result["mean"] == pytest.approx(finite.mean() * 1.5e308, rel=1e-9, abs=1e296)
            assert result["std"] == pytest.approx(finite.std() * 1.5e308, rel=1e-9)
            assert result["nan_count"] == int(np.isnan(x).sum())
            json.dumps(result, allow_nan=False)


@pytest.mark.parametrize("value", [3e38, -3e38, float(np.finfo(np.float32).max), 2.0**60])
@pytest.mark.parametrize("size", [2, 70_000])  # the small path and the blocked one
def test_constant_too_large_for_half_a_unit(value: float, size: int) -> None:
    # ±0.5 around such a constant rounds back to it (np.histogram refuses it: "Too many bins"); it raised
    # ZeroDivisionError, so `reportdb show` of such a file was an internal error.
    stats = compute_stats(np.full(size, value, np.float32))
    assert stats["min"] == stats["max"] == float(np.float32(value))
    assert stats["hist_counts"][32] == size and sum(stats["hist_counts"]) == size
    edges = stats["hist_edges"]
    assert all(np.isfinite(edges)) and edges[32] <= stats["min"] <= edges[33]
    assert stats_mod.compute_stats_many([np.full(size, value, np.float32)])[0]["hist_counts"] == stats["hist_counts"]


@pytest.mark.parametrize("offset", [0.0, 1000.0, -3.0e7])
def test_finite_float32_blocks_keep_float64_arithmetic(small_blocks: int, offset: float) -> None:
    """Streamed all-finite float32 blocks: sums, centring and binning are float64 whatever the storage dtype (a float32
    sum or centring misses numpy's mean and std; values sit on and beside every edge)."""
    rng = np.random.default_rng(5)
    x = (offset + rng.standard_normal(20 * small_blocks) * (1 + abs(offset) * 1e-5)).astype(np.float32)
    edges = np.linspace(float(x.min()), float(x.max()), 65)
    x[:64] = edges[1:].astype(np.float32)  # on (or one float32 step beside) every edge
    x[64:128] = np.nextafter(edges[1:].astype(np.float32), np.float32(np.inf))
    assert_stats_match(compute_stats(x), x)
    assert_stats_match(compute_stats(x.astype(np.float64)), x.astype(np.float64))
    assert compute_stats(x[::2]) == compute_stats(np.ascontiguousarray(x[::2]))  # strided blocks: the same figures
