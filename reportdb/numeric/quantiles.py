"""Quantiles of the absolute error, streamed in bounded memory: a histogram over float32 bit patterns.

Each ``|a - b|`` (float64) is rounded to float32 and binned by its top 16 bits, sign bit 0, 8 exponent bits and
the 7 leading mantissa bits, so a bin spans ``[lo, lo * (1 + 2**-7))`` and there are 65,536 of them (512 KiB of
counts, whatever the tensor's size). A quantile is read as numpy's default (``method="linear"``): the order
statistics at ranks ``floor(q (n-1))`` and the next, each taken as its bin's midpoint (relative error at most
2**-8 = 0.39%, plus float32's 6e-8) and clamped to the exact maximum, then interpolated; so every quantile is within
0.4% of numpy's (exact for zero errors, and for errors at the maximum). Errors below 9.2e-41 (float32 subnormals
of the first bin) read as zero; errors beyond float32's largest (3.4e38) read as the maximum.
"""

from __future__ import annotations

import numpy as np

from .blocks import scratch

#: Bins: the top 16 bits of a non-negative float32 (sign 0, 8 exponent bits, 7 mantissa bits).
BINS = 1 << 16
_SHIFT = 16


class AbsErrorHistogram:
    """Running counts of absolute errors by float32 bit-pattern bin; two histograms of disjoint positions merge."""

    __slots__ = ("counts", "_f32", "_index", "_used")

    def __init__(self, block: int = 0) -> None:
        self.counts = np.zeros(BINS, dtype=np.int64)
        # Bins from here on are all zero: quantiles and merges touch only the front (errors rarely reach the top
        # exponents), not all 512 KiB of counts, which a replay of many small outputs paid once per comparison.
        self._used = 0
        self._f32 = scratch("quantile_f32", block, np.float32)  # this thread's buffers for blocks up to ``block``
        self._index = scratch("quantile_bin", block, np.intp)  # intp: bincount takes it without a copy

    def add(self, abs_error: np.ndarray) -> None:
        """Count one block of non-negative, finite float64 errors; run under ``np.errstate(over="ignore")`` (errors
        beyond float32's range round to Inf, counted in the top bin)."""
        m = abs_error.size
        if m == 0:
            return
        if m > self._f32.size:
            self._f32 = scratch("quantile_f32", m, np.float32)
            self._index = scratch("quantile_bin", m, np.intp)
        f32, index = self._f32[:m], self._index[:m]
        np.copyto(f32, abs_error, casting="unsafe")
        np.right_shift(f32.view(np.uint32), _SHIFT, out=index, casting="unsafe")
        found = np.bincount(index)  # as long as the largest bin met: errors rarely reach the top exponents
        self.counts[: found.size] += found
        self._used = max(self._used, found.size)

    def add_zeros(self, count: int) -> None:
        """Count ``count`` errors that are exactly zero."""
        self.counts[0] += count
        self._used = max(self._used, 1)

    def merge(self, other: AbsErrorHistogram) -> None:
        """Fold in the counts of other positions."""
        used = max(self._used, other._used)
        self.counts[:used] += other.counts[:used]
        self._used = used

    def quantiles(self, qs: tuple[float, ...], maximum: float) -> list[float | None]:
        """The ``qs`` quantiles (numpy's linear method, within 0.4%), None each when nothing was counted."""
        if self._used == 0:
            return [None for _ in qs]
        cumulative = np.cumsum(self.counts[: self._used])  # past it every bin is empty: the same ranks fall inside
        n = int(cumulative[-1])
        if n == 0:
            return [None for _ in qs]
        out: list[float | None] = []
        for q in qs:
            position = q * (n - 1)
            k = int(position)
            low = self._order_statistic(cumulative, k, maximum)
            high = self._order_statistic(cumulative, min(k + 1, n - 1), maximum)
            out.append(low + (position - k) * (high - low))
        return out

    @staticmethod
    def _order_statistic(cumulative: np.ndarray, rank: int, maximum: float) -> float:
        """The value of the ``rank``-th smallest error (0-based): its bin's midpoint, clamped to the maximum."""
        b = int(np.searchsorted(cumulative, rank, side="right"))
        if b == 0:
            return 0.0
        edges = np.array([b << _SHIFT, (b + 1) << _SHIFT], dtype=np.uint32).view(np.float32).astype(np.float64)
        middle = float(edges[0] + edges[1]) / 2 if np.isfinite(edges[1]) else float(edges[0])
        return min(middle, maximum)
