"""Large float32 statistics: the float32 binning gives np.histogram's counts exactly, and the streamed path uses it."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import reportdb.numeric.stats as stats_mod
from reportdb.numeric import blocks
from reportdb.numeric.stats import _Float32Bins, _hist_edges, compute_stats


def on_and_beside_edges(x: np.ndarray, bins: int = 64) -> np.ndarray:
    """``x`` (float32) with values on, just above and just below every float32 rounding of its histogram edges."""
    lo, hi = float(x.min()), float(x.max())
    e32 = _hist_edges(lo, hi, bins).astype(np.float32)
    up = np.nextafter(e32, np.float32(np.inf))
    down = np.nextafter(e32, np.float32(-np.inf))
    out = np.concatenate([x, e32, up, down]).astype(np.float32)
    return np.clip(out, np.float32(lo), np.float32(hi))


CASES = {
    "normal": lambda rng, n: rng.standard_normal(n).astype(np.float32),
    "large offset, few ulps": lambda rng, n: (1e7 + rng.integers(0, 3, n)).astype(np.float32),
    "ulp steps": lambda rng, n: np.float32(1.5) + np.arange(n, dtype=np.float32) * np.float32(2**-22),
    "tiny": lambda rng, n: (rng.standard_normal(n) * 1e-25).astype(np.float32),
    "wide": lambda rng, n: rng.uniform(-1.6e38, 1.6e38, n).astype(np.float32),
    "huge": lambda rng, n: (rng.standard_normal(n) * 1e37).astype(np.float32),
    "negative": lambda rng, n: -rng.exponential(3.0, n).astype(np.float32),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("bins", [1, 7, 64, 256])
def test_float32_bins_equal_np_histogram(case: str, bins: int) -> None:
    rng = np.random.default_rng(len(case) * 31 + bins)
    for n in (3, 1000, 4097):
        x = on_and_beside_edges(CASES[case](rng, n), bins)
        lo, hi = float(x.min()), float(x.max())
        edges = _hist_edges(lo, hi, bins)
        binning = _Float32Bins.make(edges, lo, hi)
        assert binning is not None
        expected = np.histogram(x.astype(np.float64), bins, range=(lo, hi))[0]
        assert binning.counts(x).tolist() == expected.tolist()


def test_float32_bins_decline_ranges_their_bound_does_not_cover() -> None:
    edges = _hist_edges(-3e38, 3e38, 64)
    assert _Float32Bins.make(edges, -3e38, 3e38) is None  # the span overflows float32
    assert _Float32Bins.make(_hist_edges(1e-35, 1e-35 + 1e-40, 64), 1e-35, 1e-35 + 1e-40) is None  # under 2^-100
    assert _Float32Bins.make(_hist_edges(0.0, 1.0, 1000), 0.0, 1.0) is None  # more bins than its guess allows
    assert _Float32Bins.make(_hist_edges(2.0, 2.0, 64), 2.0, 2.0) is None  # a constant's edges are not float32


def test_streamed_float32_statistics_bin_in_float32(monkeypatch: pytest.MonkeyPatch) -> None:
    """A streamed float32 array never bins float64 values, and keeps np.histogram's counts (values on every edge,
    NaN and ±Inf in some blocks, -0.0 and 0.0 counted as zeros)."""
    monkeypatch.setattr(stats_mod, "BLOCK_ELEMENTS", 1000)

    def refused(self: object, values: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        raise AssertionError("float64 binning of a float32 array")

    monkeypatch.setattr(stats_mod._Bins, "counts", refused)
    x = on_and_beside_edges(np.random.default_rng(9).standard_normal(40_000).astype(np.float32) * 3)
    x[100:110] = -0.0
    x[200:205] = 0.0
    x[5000] = np.nan
    x[17_003] = np.inf
    x[30_001] = -np.inf
    result = compute_stats(x)
    finite = x[np.isfinite(x)].astype(np.float64)
    counts, edges = np.histogram(finite, 64, range=(finite.min(), finite.max()))
    assert result["hist_counts"] == counts.tolist() and result["hist_edges"] == edges.tolist()
    assert (result["nan_count"], result["inf_count"], result["zero_count"]) == (1, 2, int((finite == 0).sum()))
    assert result["min"] == finite.min() and result["max"] == finite.max()
    assert result["mean"] == pytest.approx(finite.mean(), rel=1e-12)
    assert result["std"] == pytest.approx(finite.std(), rel=1e-9)


def test_parallel_map_reuses_its_threads_and_runs_nested_calls_inline() -> None:
    """Spans run in one lasting pool (no thread started per call), a nested call from a pool thread does not wait on
    the pool, and an error reaches the caller once every job has ended."""
    names: set[str] = set()

    def job(i: int) -> int:
        if threading.current_thread() is not threading.main_thread():
            names.add(threading.current_thread().name)
        return blocks.parallel_map(lambda k: k * 10, [i, i + 1])[1] + i  # nested: inline in a pool thread

    for _ in range(3):
        assert blocks.parallel_map(job, [1, 2, 3]) == [21, 32, 43]
    assert names and all(name.startswith("reportdb-blocks") for name in names)
    assert len(names) <= blocks._cpus()

    ended: list[int] = []

    def failing(i: int) -> int:
        if i == 0:
            raise ValueError("job 0")
        ended.append(i)
        return i

    with pytest.raises(ValueError, match="job 0"):
        blocks.parallel_map(failing, [0, 1, 2])
    assert sorted(ended) == [1, 2]
