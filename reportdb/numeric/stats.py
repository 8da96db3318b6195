"""Per-tensor summary statistics (range, moments, special-value counts, histogram), stored with every tensor.

Everything is computed in float64 over fixed-size blocks, so memory stays bounded whatever the tensor size,
and the figures do not depend on the storage dtype's precision (a bfloat16 sum of 10,000 values stalls at 256); the
histogram of a streamed float32 array is binned in float32 with exact float32 thresholds (:class:`_Float32Bins`), the
same counts at a third of the cost.
Three paths give the same figures: an array of one block in a handful of numpy calls (per-call overhead
dominates a 4 KiB tensor); a longer 1-byte dtype (float8, int8, bool), or a 2-byte one (bfloat16, float16,
int16) of 64K elements or more, from the count of each bit pattern; anything else streamed block by block, in
threads for long arrays.
``min``, ``max``, ``mean``, ``std`` (population, ddof=0), ``absmax`` and the histogram cover the finite values
only; NaN and ±Inf are counted separately, so the result always survives ``json.dumps(allow_nan=False)``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from .._lazy import lazy_module

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
else:  # numpy is imported on first use: opening a report and reading its metadata need none
    np = lazy_module("numpy", globals(), "np")

from ..dtypes import dtype_name
from ..errors import InvalidArgumentError, StatsError
from ..results import Result, html_table
from .blocks import BLOCK_ELEMENTS, Moments, dot, flat_blocks, parallel_map, scratch, split_range, to_float64

V = TypeVar("V")

#: Arrays up to this many elements take the few-calls path, whose float64 temporaries (128 KiB at most) stay
#: under glibc's mmap threshold; longer ones stream through reused scratch blocks, since memory mapped afresh
#: for each temporary costs more in page faults than the arithmetic (a 1 MiB float32 tensor: 2x).
SMALL_ELEMENTS = 1 << 14
#: 2-byte dtypes are summarized from the count of each of their 65,536 bit patterns from this length on; below it,
#: work on the 65,536 counts costs more than the elements (numpy 1.26's nonzero alone: 0.4 ms).
PATTERN_MIN_ELEMENTS = 1 << 16


class _StatsAccumulator:
    """Running counts, range and (count, mean, M2) of one span of blocks; spans merge in order."""

    def __init__(self, block: int) -> None:
        self.moments = Moments()
        self.lo = math.inf
        self.hi = -math.inf
        self.nan_count = self.inf_count = self.zero_count = 0
        self.all_finite: list[bool] = []  # per block, so the histogram pass skips the isfinite filter
        self.last_values: np.ndarray | None = None  # a one-block array keeps its values for the histogram
        self.buf = scratch("stats_values", block, np.float64)
        self.centred = scratch("stats_centred", block, np.float64)
        self.flags = scratch("stats_flags", block, np.bool_)

    def add(self, block: np.ndarray) -> None:
        """Fold in one block of the original array."""
        x = to_float64(block, self.buf)
        total = x.sum()
        finite = bool(np.isfinite(total))  # a finite sum proves every element finite
        self.all_finite.append(finite)
        if not finite:
            nans = int(np.count_nonzero(np.isnan(x)))
            size = x.size
            x = x[np.isfinite(x)]
            self.nan_count += nans
            self.inf_count += size - x.size - nans
            total = x.sum()
        self.last_values = x
        m = x.size
        if m == 0:
            return
        # Zeros counted as a mask: count_nonzero of float64 values costs twice a comparison and a mask count.
        self.zero_count += int(np.count_nonzero(np.equal(x, 0, out=self.flags[:m])))
        bmin = float(x.min())
        bmax = float(x.max())
        if bmin == bmax:  # exactly constant: an exact mean and zero spread, not summation noise
            bmean, bm2 = bmin, 0.0
        else:
            bmean = float(total) / m
            centred = np.subtract(x, bmean, out=self.centred[:m])
            bm2 = dot(centred, centred)
        self.lo = min(self.lo, bmin)
        self.hi = max(self.hi, bmax)
        self.moments.merge(Moments(m, bmean, bm2))

    def merge(self, other: _StatsAccumulator) -> None:
        """Fold in the accumulator of the span that follows this one."""
        self.moments.merge(other.moments)
        self.lo = min(self.lo, other.lo)
        self.hi = max(self.hi, other.hi)
        self.nan_count += other.nan_count
        self.inf_count += other.inf_count
        self.zero_count += other.zero_count


def _empty_result(count: int, nan_count: int, inf_count: int, zero_count: int) -> dict[str, Any]:
    """The result dict with its counts set and every finite-value figure None (filled in when there are any)."""
    return {
        "count": count,
        "nan_count": nan_count,
        "inf_count": inf_count,
        "zero_count": zero_count,
        "min": None,
        "max": None,
        "mean": None,
        "std": None,
        "absmax": None,
        "hist_counts": None,
        "hist_edges": None,
    }


#: ``np.arange(bins + 1)`` as float64 per bin count, the ramp histogram edges are built from.
_RAMPS: dict[int, np.ndarray] = {}


def _hist_edges(lo: float, hi: float, bins: int) -> np.ndarray:
    """``np.histogram``'s edges for finite values spanning ``lo..hi`` (a constant gets ±0.5)."""
    first, last = lo, hi
    if lo == hi:
        # A constant so large that ±0.5 is lost in rounding (np.histogram refuses it) is widened by a part of its own
        # magnitude instead, so its bins stay finite and distinct and it still lands in the middle one.
        pad = 0.5 if lo - 0.5 != lo else abs(lo) * 2.0**-20
        first, last = max(lo - pad, -sys.float_info.max), min(hi + pad, sys.float_info.max)
    step = (last - first) / bins
    if math.isinf(step) and math.isfinite(first) and math.isfinite(last):
        # Wider than the largest float (np.histogram refuses it): the same edges, built from half steps.
        half = (last * 0.5 - first * 0.5) / bins
        half_steps = np.arange(bins + 1, dtype=np.float64) * half
        edges = (half_steps + first) + half_steps
        edges[-1] = last
        return edges
    if step == 0 or not math.isfinite(step):  # the cases np.linspace computes another way
        return np.linspace(first, last, bins + 1, endpoint=True, dtype=np.float64)
    # np.linspace's own arithmetic (arange * step + start, the stop exact), without its per-call overhead.
    ramp = _RAMPS.get(bins)
    if ramp is None:
        ramp = _RAMPS[bins] = np.arange(bins + 1, dtype=np.float64)
    edges = ramp * step
    edges += first
    edges[-1] = last
    return edges


def histogram_edges(lo: float, hi: float, bins: int) -> list[float]:
    """The histogram edges ``compute_stats`` reports for finite values spanning ``lo..hi``: a function of the
    range alone, so stored statistics keep only the counts (writing 65 floats as text cost more than the stats)."""
    return _hist_edges(lo, hi, bins).tolist()


class _Bins:
    """``np.histogram``'s bin rule over fixed edges: bin i holds edges[i] <= v < edges[i+1], the last bin also its
    right edge. The one binning of every statistics path but the segmented one (which recomputes the same edges per
    element): a scaled guess, at most one bin off, fixed by comparison with the edges themselves, branch-free unlike a
    binary search, whose mispredictions cost more on random values. A range so narrow that the scale overflows (a
    few subnormals apart) takes the binary search."""

    def __init__(self, edges: np.ndarray) -> None:
        self.edges = edges
        self.bins = bins = edges.size - 1
        self.first = first = float(edges[0])
        last = float(edges[-1])
        # The guess is (v - first) * scale, or taken on halved values when last - first overflows.
        self.halve = math.isinf(last - first)
        self.scale = bins / ((last * 0.5 - first * 0.5) if self.halve else (last - first))
        # Lower and upper edge of each guessed index 0..bins, with +Inf sentinels: index ``bins`` (a value on the right
        # edge) always moves down one, and nothing moves up out of the last bin, which holds its right edge.
        self.lower = edges.copy()
        self.lower[-1] = np.inf
        self.upper = np.empty_like(edges)
        self.upper[:-2] = edges[1:-1]
        self.upper[-2:] = np.inf

    def index(self, values: np.ndarray) -> np.ndarray:
        """Bin index of each value (finite, within the edges), in a per-thread scratch buffer: use it before the
        next call."""
        m = values.size
        idx = scratch("bins_idx", m, np.intp)
        if not math.isfinite(self.scale):
            np.subtract(np.searchsorted(self.edges, values, side="right"), 1, out=idx)
            return np.minimum(idx, self.bins - 1, out=idx)
        guess = scratch("bins_guess", m, np.float64)
        if self.halve:
            np.multiply(values, 0.5, out=guess)
            guess -= self.first * 0.5
        else:
            np.subtract(values, self.first, out=guess)
        guess *= self.scale
        np.copyto(idx, guess, casting="unsafe")  # truncation toward zero, as astype(intp)
        edge = guess  # the guess is spent: its buffer holds each value's edge from here on
        flags = scratch("bins_flags", m, np.bool_)
        idx -= np.less(values, self.lower.take(idx, out=edge, mode="clip"), out=flags)
        idx += np.greater_equal(values, self.upper.take(idx, out=edge, mode="clip"), out=flags)
        return idx

    def counts(self, values: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """The histogram of ``values`` (each counted ``weights`` times when given)."""
        return np.bincount(self.index(values), weights=weights, minlength=self.bins)


_FLOAT32_MAX = 3.4028234663852886e38  # float(np.finfo(np.float32).max)
#: The most bins :class:`_Float32Bins` takes: its guess stays 8x closer than ``SLACK`` and its pair table small.
_FLOAT32_BINS_MAX = 256


class _Float32Bins:
    """:class:`_Bins`'s exact counts for float32 values, without a float64 value, a gather or a float64 guess per
    element: about a third of the histogram's CPU on a large float32 tensor (64 MiB: ~75 -> ~25 ms).

    Every float32 ``v`` satisfies ``v >= edge`` exactly when ``v >= t``, ``t`` the smallest float32 not below ``edge``
    (``thresholds``), so np.histogram's bin of ``v`` is the last threshold at or below it. The guess
    ``(v - min) * scale`` in float32 is within 3e-5 of a bin of the exact real quotient (three roundings of 2^-24 on
    at most ``bins``); every value whose guess lies within :data:`SLACK` of a whole number is binned again exactly
    (``searchsorted`` on the thresholds), and a guess farther from one truncates to the exact bin, since the float64
    edges are within 1e-13 of a bin of the exact ones."""

    #: Guesses this close to a whole number are re-binned exactly (2^-12: ~5e-4 of the values, each a few ns).
    SLACK = 2.0**-12  # exact in float32: numpy keeps the float32 arrays it meets float32

    def __init__(self, edges: np.ndarray, scale: np.float32) -> None:
        self.bins = bins = edges.size - 1
        self.first = np.float32(edges[0])
        self.scale = scale
        with np.errstate(over="ignore"):
            thresholds = edges[:bins].astype(np.float32)
        below = thresholds < edges[:bins]  # rounded down: the next float32 up is the smallest one not below
        thresholds[below] = np.nextafter(thresholds[below], np.float32(np.inf))
        self.thresholds = thresholds

    @classmethod
    def make(cls, edges: np.ndarray, lo: float, hi: float) -> _Float32Bins | None:
        """The float32 binning of finite float32 values spanning ``lo < hi`` (their float64 min and max) and edges
        ``edges``; None where the guess's bound does not hold: a constant (its edges are not float32 values), a span
        that overflows float32, one so narrow (under 2^-100) that subnormal differences lose their precision, or more
        than :data:`_FLOAT32_BINS_MAX` bins (the guess's error grows with them)."""
        if not 2.0**-100 <= hi - lo <= _FLOAT32_MAX or edges.size > _FLOAT32_BINS_MAX + 1:
            return None
        return cls(edges, np.float32((edges.size - 1) / (hi - lo)))  # at least 64 / 3.4e38: a normal float32

    def counts(self, values: np.ndarray) -> np.ndarray:
        """The int64 histogram of finite float32 ``values`` within the edges."""
        m = values.size
        bins = self.bins
        guess = scratch("f32bins_guess", m, np.float32)
        np.subtract(values, self.first, out=guess)
        np.multiply(guess, self.scale, out=guess)
        np.add(guess, self.SLACK, out=guess)  # a guess within SLACK of a whole number n lands in [n, n + 2 SLACK)
        idx = scratch("f32bins_idx", m, np.int32)
        np.copyto(idx, guess, casting="unsafe")  # truncation: non-negative, at most bins
        whole = scratch("f32bins_whole", m, np.float32)
        np.copyto(whole, idx, casting="unsafe")
        np.subtract(guess, whole, out=guess)
        near = scratch("f32bins_near", m, np.bool_)
        suspects = np.flatnonzero(np.less(guess, 2 * self.SLACK, out=near))
        # Two indices per count: bincount over half as many elements, of (bins + 1)^2 pairs summed both ways after.
        half = m // 2
        width = bins + 1
        pair = scratch("f32bins_pair", half, np.int32)
        np.multiply(idx[:half], width, out=pair)
        pair += idx[half : 2 * half]
        table = np.bincount(pair, minlength=width * width).reshape(width, width)
        counts = table.sum(axis=0) + table.sum(axis=1)
        if m % 2:
            counts[idx[m - 1]] += 1
        if suspects.size:
            exact = np.searchsorted(self.thresholds, values[suspects], side="right") - 1
            counts -= np.bincount(idx[suspects], minlength=width)
            counts += np.bincount(exact, minlength=width)
        return counts[:bins].astype(np.int64, copy=False)


def _finish(result: dict[str, Any], lo: float, hi: float, mean: float, m2: float, n: int,
            edges: np.ndarray, hist: np.ndarray) -> dict[str, Any]:
    """Fill in ``result``'s finite-value figures from the range, the moments (n, mean, M2) and the histogram."""
    result.update(
        min=lo,
        max=hi,
        mean=mean,
        std=math.sqrt(max(m2, 0.0) / n),
        absmax=max(abs(lo), abs(hi)),
        hist_counts=hist.tolist(),
        hist_edges=edges.tolist(),
    )
    return result


def _small_stats(arr: np.ndarray, bins: int) -> dict[str, Any]:
    """One-block arrays in as few numpy calls as possible: for a 4 KiB tensor the per-call overhead of the
    streaming path (threads, spans, a second pass for the histogram) costs more than the arithmetic."""
    x = np.asarray(arr.reshape(-1), dtype=np.float64)
    size = int(x.size)
    if size == 0:
        return _empty_result(0, 0, 0, 0)
    nan_count = inf_count = 0
    with np.errstate(invalid="ignore"):
        lo, hi = float(x.min()), float(x.max())
    if not (math.isfinite(lo) and math.isfinite(hi)):  # a NaN or an infinity is present: filter them out
        finite = np.isfinite(x)
        nan_count = int(np.count_nonzero(np.isnan(x)))
        x = x[finite]
        inf_count = size - nan_count - int(x.size)
        if x.size == 0:
            return _empty_result(size, nan_count, inf_count, 0)
        lo, hi = float(x.min()), float(x.max())
    n = int(x.size)
    result = _empty_result(size, nan_count, inf_count, n - int(np.count_nonzero(x)))
    if lo == hi:  # exactly constant: an exact mean and zero spread, not summation noise
        mean, m2 = lo, 0.0
    else:
        with np.errstate(over="ignore", invalid="ignore"):  # near the float64 limit: compute_stats rescales
            mean = float(x.sum()) / n
            centred = x - mean
            m2 = dot(centred, centred)
    edges = _hist_edges(lo, hi, bins)
    return _finish(result, lo, hi, mean, m2, n, edges, _Bins(edges).counts(x))


#: Per storage dtype, the float64 value of every bit pattern of a 1- or 2-byte dtype (built on first use).
_PATTERN_VALUES: dict[np.dtype, np.ndarray] = {}


def _pattern_values(dtype: np.dtype) -> np.ndarray:
    """The float64 value of each bit pattern of a 1- or 2-byte ``dtype``, indexed by the pattern."""
    table = _PATTERN_VALUES.get(dtype)
    if table is None:
        patterns = np.arange(1 << (8 * dtype.itemsize), dtype=np.uint8 if dtype.itemsize == 1 else np.uint16)
        as_dtype = patterns.view(dtype)
        with np.errstate(invalid="ignore"):  # NaN patterns convert to NaN, as they should
            table = (as_dtype != 0).astype(np.float64) if dtype.kind == "b" else as_dtype.astype(np.float64)
        _PATTERN_VALUES[dtype] = table
    return table


def _pattern_stats(arr: np.ndarray, bins: int, block: int) -> dict[str, Any]:
    """Statistics of a 1- or 2-byte dtype (bfloat16, float16, float8, int8/16, bool) from the count of each bit
    pattern: one counting pass over the array, then every figure from at most 65,536 distinct values with
    their multiplicities. Several times faster than converting every element to float64, and exact the same
    way (the histogram puts each distinct value in its bin by comparison with the edges)."""
    dtype = arr.dtype
    width = np.uint8 if dtype.itemsize == 1 else np.uint16
    patterns = 1 << (8 * dtype.itemsize)

    def bincount(blk: np.ndarray) -> np.ndarray:
        return np.bincount(np.ascontiguousarray(blk).view(width), minlength=patterns)

    def count(span: tuple[int, int]) -> np.ndarray:
        # Added into the first block's counts: every fresh 512 KiB array costs page faults (a 32K-element
        # bfloat16 tensor spent 1 ms in three of them, against 0.06 ms counting). Spans are never empty.
        blocks = flat_blocks(arr, block, *span)
        counts = bincount(next(blocks))
        for blk in blocks:
            counts += bincount(blk)
        return counts

    spans = parallel_map(count, split_range(arr.size, block))
    counts = spans[0]
    for more in spans[1:]:
        counts += more
    present = np.flatnonzero(counts != 0)  # on a bool mask: numpy 1.26 takes 0.19 ms here, 0.39 on the int64 counts
    values = _pattern_values(dtype)[present]
    weights = counts[present]
    finite = np.isfinite(values)
    nan_count = int(weights[np.isnan(values)].sum())
    finite_n = int(weights[finite].sum())
    inf_count = int(arr.size) - nan_count - finite_n
    values, weights = values[finite], weights[finite]
    result = _empty_result(int(arr.size), nan_count, inf_count, int(weights[values == 0].sum()))
    if finite_n == 0:
        return result
    lo, hi = float(values.min()), float(values.max())
    if lo == hi:
        mean, m2 = lo, 0.0
    else:
        # Pairwise sums of exact products (a value of at most 16 bits times a count), as accurate as numpy's.
        mean = float((values * weights).sum()) / finite_n
        centred = values - mean
        m2 = float((centred * centred * weights).sum())
    edges = _hist_edges(lo, hi, bins)
    hist = _Bins(edges).counts(values, weights).astype(np.int64)
    return _finish(result, lo, hi, mean, m2, finite_n, edges, hist)


def compute_stats(array: np.ndarray, bins: int = 64) -> dict[str, Any]:
    """Return JSON-serializable statistics of ``array`` (any storage dtype, any shape, bool and integers too).

    Keys: ``count``, ``nan_count``, ``inf_count``, ``zero_count`` (ints); ``min``, ``max``, ``mean``, ``std``,
    ``absmax`` (floats over the finite values, None when there are none); ``hist_counts`` (``bins`` ints) and
    ``hist_edges`` (``bins + 1`` floats) equal to ``np.histogram(finite_values_as_float64, bins,
    range=(min, max))`` (None when there are no finite values; for a range wider than the largest float, which
    np.histogram refuses, the same rule on edges built from half steps).
    """
    result = _compute_stats(array, bins)
    return _with_finite_moments(result, array)


def _with_finite_moments(result: dict[str, Any], array: np.ndarray) -> dict[str, Any]:
    """``result`` with its mean and std recomputed on scaled values where float64 overflowed (finite values near
    the float64 limit, such as uninitialized memory: their squares or their sum exceed it)."""
    mean, std = result["mean"], result["std"]
    if mean is not None and not (math.isfinite(mean) and math.isfinite(std)):
        result["mean"], result["std"] = _scaled_moments(np.asarray(array), result["absmax"])
    return result


def _scaled_moments(arr: np.ndarray, scale: float) -> tuple[float, float]:
    """Mean and std (ddof=0) of the finite values of ``arr``, computed on the values divided by ``scale`` (their
    largest magnitude), so nothing overflows; both results are at most ``scale`` in magnitude. Two block passes."""
    def finite_scaled(block: np.ndarray) -> np.ndarray:
        x = block.astype(np.float64)
        return x[np.isfinite(x)] / scale

    n, total = 0, 0.0
    for block in flat_blocks(arr, BLOCK_ELEMENTS):
        x = finite_scaled(block)
        n += x.size
        total += float(x.sum())
    mean = total / n
    m2 = 0.0
    for block in flat_blocks(arr, BLOCK_ELEMENTS):
        centred = finite_scaled(block) - mean
        m2 += dot(centred, centred)
    return mean * scale, math.sqrt(m2 / n) * scale


def _compute_stats(array: np.ndarray, bins: int) -> dict[str, Any]:
    """``compute_stats`` as the float64 arithmetic gives it (mean and std may overflow)."""
    bins = _checked_bins(bins)
    arr = np.asarray(array)
    dtype_name(arr.dtype)  # rejects complex, object, strings... with UnsupportedDTypeError
    if arr.size <= min(BLOCK_ELEMENTS, SMALL_ELEMENTS):
        return _small_stats(arr, bins)
    block = BLOCK_ELEMENTS
    if arr.dtype.isnative and (arr.dtype.itemsize == 1 or (arr.dtype.itemsize == 2 and arr.size >= PATTERN_MIN_ELEMENTS)):
        return _pattern_stats(arr, bins, block)
    spans = split_range(arr.size, block)

    def first_pass(span: tuple[int, int]) -> _StatsAccumulator:
        acc = _StatsAccumulator(block)
        with np.errstate(invalid="ignore", over="ignore"):  # per thread: inf - inf in a sum is expected
            for blk in flat_blocks(arr, block, *span):
                acc.add(blk)
        return acc

    accumulators = parallel_map(first_pass, spans)
    stats = accumulators[0]
    for acc in accumulators[1:]:
        stats.merge(acc)

    result = _empty_result(int(arr.size), stats.nan_count, stats.inf_count, stats.zero_count)
    if stats.moments.n == 0:
        return result

    edges = _hist_edges(stats.lo, stats.hi, bins)
    binning = _Bins(edges)
    float32 = _Float32Bins.make(edges, stats.lo, stats.hi) if arr.dtype == np.float32 else None

    def histogram(job: tuple[tuple[int, int], _StatsAccumulator]) -> np.ndarray:
        span, acc = job
        if float32 is not None:  # binned in float32 from the array itself, no float64 copy
            counts = np.zeros(bins, dtype=np.int64)
            for blk, finite in zip(flat_blocks(arr, block, *span), acc.all_finite):
                counts += float32.counts(blk if finite else blk[np.isfinite(blk)])
            return counts
        if len(acc.all_finite) == 1 and acc.last_values is not None:
            return binning.counts(acc.last_values)
        counts = np.zeros(bins, dtype=np.int64)
        values = scratch("hist_values", block, np.float64)  # this thread's: spans may change threads
        for blk, finite in zip(flat_blocks(arr, block, *span), acc.all_finite):
            x = to_float64(blk, values)
            counts += binning.counts(x if finite else x[np.isfinite(x)])
        return counts

    hist = sum(parallel_map(histogram, list(zip(spans, accumulators))), np.zeros(bins, dtype=np.int64))
    moments = stats.moments
    return _finish(result, stats.lo, stats.hi, moments.mean, moments.m2, moments.n, edges, hist)


def compute_stats_many(arrays: Sequence[np.ndarray], bins: int = 64, *, edges: bool = True) -> list[dict[str, Any]]:
    """``[compute_stats(a, bins) for a in arrays]``, with the small all-finite arrays done together;
    ``edges=False`` sets every ``hist_edges`` to None (they follow from min and max: ``histogram_edges``).

    A writer stores hundreds of 4 KiB tensors per batch; one at a time, numpy's per-call overhead (about 60 µs
    a tensor) costs more than the arithmetic. Here those arrays are concatenated and every figure comes from a
    fixed number of segmented numpy passes (``reduceat``, one ``bincount`` over tensor-and-bin indices), with
    the same float64 arithmetic and the same histogram edge rule as ``compute_stats``. Large arrays, arrays
    holding NaN or ±Inf, and ranges ``np.linspace`` would handle specially go through ``compute_stats``.
    """
    bins = _checked_bins(bins)

    def one(array: np.ndarray) -> dict[str, Any]:
        result = compute_stats(array, bins)
        if not edges:
            result["hist_edges"] = None
        return result

    results: list[dict[str, Any] | None] = [None] * len(arrays)
    batch: list[int] = []
    for i, array in enumerate(arrays):
        arr = np.asarray(array)
        dtype_name(arr.dtype)
        if 0 < arr.size <= _SEGMENTED_MAX:
            batch.append(i)
        else:
            results[i] = one(arr)
    group: list[int] = []
    elements = 0
    for position, i in enumerate(batch):
        group.append(i)
        elements += np.asarray(arrays[i]).size
        if elements >= _SEGMENTED_ELEMENTS or position == len(batch) - 1:
            done = _segmented_stats([np.asarray(arrays[j]).reshape(-1) for j in group], bins, edges)
            for j, result in zip(group, done):
                results[j] = one(arrays[j]) if result is None else _with_finite_moments(result, arrays[j])
            group, elements = [], 0
    return results  # type: ignore[return-value]


def _checked_bins(bins: int) -> int:
    """``bins`` as an int, or StatsError when it is not a positive integer."""
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 1:
        raise StatsError(f"bins must be a positive integer, got {bins!r}")
    return int(bins)


#: Arrays up to this many elements are done segmented; beyond it, per-element work outweighs per-call overhead.
_SEGMENTED_MAX = 2048
#: Elements per segmented pass: each float64 temporary stays under glibc's mmap threshold (128 KiB), since
#: memory mapped afresh for every temporary costs more in page faults than the arithmetic.
_SEGMENTED_ELEMENTS = 1 << 13


def _segmented_stats(flats: list[np.ndarray], bins: int, with_edges: bool = True) -> list[dict[str, Any] | None]:
    """Statistics of non-empty 1-D arrays as segments of one float64 vector; None where the array needs
    ``compute_stats`` (a NaN or an infinity, a range whose edges ``np.linspace`` computes another way, or one so
    narrow that the bin guess's scale overflows)."""
    sizes = np.fromiter((f.size for f in flats), dtype=np.intp, count=len(flats))
    starts = np.zeros(len(flats), dtype=np.intp)
    np.cumsum(sizes[:-1], out=starts[1:])
    x = np.concatenate(flats, dtype=np.float64, casting="unsafe") if len(flats) > 1 else flats[0].astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):  # unusable ranges go to compute_stats
        totals = np.add.reduceat(x, starts)
        lo = np.minimum.reduceat(x, starts)
        hi = np.maximum.reduceat(x, starts)
        constant = lo == hi
        first = np.where(constant, lo - 0.5, lo)
        last = np.where(constant, hi + 0.5, hi)
        step = (last - first) / bins
        scale = bins / (last - first)
        usable = np.isfinite(totals) & np.isfinite(step) & (step != 0) & np.isfinite(scale)
    if not usable.all():  # rare: give those arrays to compute_stats, and keep the rest segmented
        keep = np.flatnonzero(usable)
        partial = _segmented_stats([flats[i] for i in keep], bins, with_edges) if keep.size else []
        out: list[dict[str, Any] | None] = [None] * len(flats)
        for i, result in zip(keep, partial):
            out[i] = result
        return out
    counts = sizes.astype(np.float64)
    mean = np.where(constant, lo, totals / counts)
    with np.errstate(over="ignore", invalid="ignore"):  # near the float64 limit: compute_stats_many rescales
        centred = x - np.repeat(mean, sizes)  # per-segment values spread by np.repeat: cheaper than a gather
        centred *= centred
        m2 = np.where(constant, 0.0, np.add.reduceat(centred, starts))
        std = np.sqrt(np.maximum(m2, 0.0) / counts)
    zero_at = np.flatnonzero(x == 0)
    zeros = np.diff(np.searchsorted(zero_at, np.append(starts, x.size)))
    # The bins of _Bins, with each edge recomputed as _hist_edges makes it (i * step + first: the same float64
    # operations, so the same values) instead of gathered from a table; bin ``bins - 1`` takes its right edge.
    first_r = np.repeat(first, sizes)
    step_r = np.repeat(step, sizes)
    idx = ((x - first_r) * np.repeat(scale, sizes)).astype(np.intp)
    np.minimum(idx, bins - 1, out=idx)
    edge = idx * step_r
    edge += first_r
    idx -= x < edge
    np.multiply(idx + 1, step_r, out=edge)
    edge += first_r
    idx += (x >= edge) & (idx < bins - 1)
    idx += np.repeat(np.arange(0, len(flats) * bins, bins, dtype=np.intp), sizes)
    hist = np.bincount(idx, minlength=len(flats) * bins).reshape(len(flats), bins)
    edge_rows: list[Any] = [None] * len(flats)
    if with_edges:
        edges = np.arange(bins + 1, dtype=np.float64) * step[:, None]
        edges += first[:, None]
        edges[:, -1] = last
        edge_rows = edges.tolist()
    absmax = np.maximum(np.abs(lo), np.abs(hi))
    rows = zip(sizes.tolist(), zeros.tolist(), lo.tolist(), hi.tolist(), mean.tolist(), std.tolist(), absmax.tolist(),
               hist.tolist(), edge_rows)
    return [
        {"count": n, "nan_count": 0, "inf_count": 0, "zero_count": zero, "min": low, "max": high, "mean": mu,
         "std": sd, "absmax": amax, "hist_counts": counts_i, "hist_edges": edges_i}
        for n, zero, low, high, mu, sd, amax, counts_i, edges_i in rows
    ]


@dataclass(frozen=True)
class ShardStats(Result):
    """The statistics of one device shard, as :func:`compute_stats` defines them (stored when it was written):
    counts of all, NaN, ±Inf and zero values; range, moments and absmax of the finite values and their histogram
    (None when there are none)."""

    count: int
    min: float | None
    max: float | None
    mean: float | None
    std: float | None
    absmax: float | None
    nan_count: int
    inf_count: int
    zero_count: int
    hist_counts: tuple[int, ...] | None
    hist_edges: tuple[float, ...] | None

    @classmethod
    def from_dict(cls, stats: dict[str, Any]) -> ShardStats:
        """The statistics from :func:`compute_stats`'s dict (or a stored row read as one)."""
        counts, edges = stats["hist_counts"], stats["hist_edges"]
        return cls(
            count=stats["count"], min=stats["min"], max=stats["max"], mean=stats["mean"], std=stats["std"],
            absmax=stats["absmax"], nan_count=stats["nan_count"], inf_count=stats["inf_count"],
            zero_count=stats["zero_count"], hist_counts=None if counts is None else tuple(counts),
            hist_edges=None if edges is None else tuple(edges),
        )

    def _html_fields(self) -> list[tuple[str, Any]]:
        """Every figure but the histogram, which is 64 bins long."""
        return [(k, v) for k, v in super()._html_fields() if not k.startswith("hist_")]


class _OneShard(Generic[V]):
    """A :class:`TensorStats` attribute read from the tensor's only shard (an error for a multi-device tensor)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, stats: TensorStats, owner: type | None = None) -> V:
        return cast(V, getattr(stats.shard, self.name))


@dataclass(frozen=True)
class TensorStats(Result):
    """The stored statistics of a tensor: one :class:`ShardStats` per device shard, beside its mesh coordinate, in
    the tensor's shard order. A tensor of one shard (most of them) reads them directly: ``stats.mean``; a
    multi-device one through ``stats.shards``."""

    tensor_id: int
    rank: int
    shards: tuple[ShardStats, ...]
    mesh_coordinates: tuple[tuple[int, ...], ...]

    @property
    def shard(self) -> ShardStats:
        """The statistics of the tensor's only shard; a multi-device tensor has one set per shard (``shards``)."""
        if len(self.shards) != 1:
            raise InvalidArgumentError(
                f"tensor {self.tensor_id} (rank {self.rank}) has {len(self.shards)} shards, each with its own "
                "statistics: read them from .shards (beside .mesh_coordinates)"
            )
        return self.shards[0]

    # The figures of the only shard (see ``shard``), for the common one-device case.
    count = _OneShard[int]()
    min = _OneShard[float | None]()
    max = _OneShard[float | None]()
    mean = _OneShard[float | None]()
    std = _OneShard[float | None]()
    absmax = _OneShard[float | None]()
    nan_count = _OneShard[int]()
    inf_count = _OneShard[int]()
    zero_count = _OneShard[int]()
    hist_counts = _OneShard[tuple[int, ...] | None]()
    hist_edges = _OneShard[tuple[float, ...] | None]()

    def _repr_html_(self) -> str:
        """One row per shard: its mesh coordinate and figures (no histogram)."""
        names = [k for k, _ in self.shards[0]._html_fields()] if self.shards else []
        rows = [
            (coord, *(v for _, v in stats._html_fields())) for coord, stats in zip(self.mesh_coordinates, self.shards)
        ]
        caption = f"TensorStats of tensor {self.tensor_id} (rank {self.rank})"
        return html_table(("mesh coordinate", *names), rows, caption=caption)
