"""Distances in units in the last place (ULPs) between two arrays, streamed block by block for the metric vector.

Both sides are rounded to one float dtype (:func:`ulp_dtype`, the coarser of the two) and their bit patterns mapped to
integers in the same order as the floats, +0 and -0 both to 0, so the distance of two values is the count of
representable values between them. All the work is integer arithmetic on the patterns in per-thread scratch buffers
(2-byte dtypes in 32-bit distances, 4-byte ones in 64-bit); rounding into a narrower dtype happens into a scratch buffer
too, and only a block whose rounded values leave the finite range (an overflow to Inf, or NaN in e4m3fn) builds a mask.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np

from ..dtypes import DTYPES, dtype_name
from .blocks import scratch


def _float_rank(dtype: np.dtype) -> tuple[int, int] | None:
    """(mantissa bits, exponent bits) of a float dtype, None for integers and bool."""
    if dtype.kind in "biu":
        return None
    info = ml_dtypes.finfo(dtype)
    return int(info.nmant), int(info.nexp)


@functools.lru_cache(maxsize=None)
def ulp_dtype(da: np.dtype, db: np.dtype) -> np.dtype | None:
    """The coarser float dtype of the two (fewer mantissa bits, then fewer exponent bits), in which ULPs are
    counted; None if neither is a float (a ULP is then 1)."""
    ranked = [(rank, DTYPES[dtype_name(d)]) for d in (da, db) if (rank := _float_rank(d)) is not None]
    return min(ranked, key=lambda item: item[0])[1] if ranked else None


class UlpCounter:
    """Streaming max and sum of the ordered-integer distance between two arrays rounded to one float dtype.

    Works in this thread's scratch buffers, taken once: on this class of VM first-touching fresh memory costs more than
    the arithmetic itself, and a block's calls are many.
    """

    def __init__(self, dtype: np.dtype, block: int) -> None:
        self.dtype = dtype
        bits = dtype.itemsize * 8
        self.int_dtype = int_dtype = np.dtype(f"<i{dtype.itemsize}")
        self.shift = bits - 1
        self.int_max = int_dtype.type((1 << (bits - 1)) - 1)
        info = ml_dtypes.finfo(dtype)
        largest = np.array(info.max, dtype=dtype)
        self.ord_max = int(largest.view(int_dtype))  # finite values map into [-ord_max, ord_max]
        self.largest = float(info.max)
        self.block = block
        # Distances of 2-byte patterns fit 32 bits (at most 2^16); wider ones need 64.
        self.dist_dtype = np.dtype(np.int32) if dtype.itemsize <= 2 else np.dtype(np.int64)
        self.rounded = (scratch("ulp_round_a", block, dtype), scratch("ulp_round_b", block, dtype))
        self.ordered = (scratch("ulp_a", block, int_dtype), scratch("ulp_b", block, int_dtype))
        self.sign = scratch("ulp_sign", block, int_dtype)
        self.same = scratch("ulp_same", block, int_dtype)
        self.flipped = scratch("ulp_flipped", block, np.bool_)
        self.dist = scratch("ulp_dist", block, self.dist_dtype)
        self.count = 0
        self.max = 0
        self.total: float = 0  # an exact int while the patterns are narrower than 8 bytes

    def _bits(self, x: np.ndarray, side: int) -> np.ndarray:
        """The bit patterns (signed integers) of ``x`` rounded to the ULP dtype: a view when it already is one, else
        rounded into a scratch buffer (not a fresh array per block)."""
        if x.dtype != self.dtype:
            rounded = self.rounded[side][: x.size]
            np.copyto(rounded, x, casting="unsafe")
            x = rounded
        return x.view(self.int_dtype)

    def _ordered(self, bits: np.ndarray, side: int) -> np.ndarray:
        """Map patterns to integers in the same order as the floats, with -0 and +0 both mapped to 0: negative
        patterns become ``INT_MIN - bits``, computed branch-free as ``(bits ^ (sign & INT_MAX)) - sign``."""
        m = bits.size
        out = self.ordered[side][:m]
        sign = np.right_shift(bits, self.shift, out=self.sign[:m])
        np.bitwise_and(sign, self.int_max, out=out)  # sign is 0, or -1 for negative patterns
        np.bitwise_xor(out, bits, out=out)
        np.subtract(out, sign, out=out)
        return out

    def _may_overflow(self, x: np.ndarray) -> bool:
        """Whether rounding the finite values ``x`` of another dtype to the ULP dtype may leave its finite range: not
        when its smallest and largest values lie within that range (two reductions)."""
        if x.dtype == self.dtype or x.size == 0:
            return False
        return not -self.largest <= float(np.minimum.reduce(x)) <= float(np.maximum.reduce(x)) <= self.largest

    def add(self, a: np.ndarray, b: np.ndarray, keep: np.ndarray | None) -> None:
        """Fold in one block of the original arrays; ``keep`` marks the jointly finite positions (None: all)."""
        bits_a, bits_b = self._bits(a, 0), self._bits(b, 1)
        if keep is None and self.dtype.itemsize < 8 and not (self._may_overflow(a) or self._may_overflow(b)):
            self._add_patterns(bits_a, bits_b)
            return
        oa, ob = self._ordered(bits_a, 0), self._ordered(bits_b, 1)
        if a.dtype != self.dtype or b.dtype != self.dtype:  # rounding can overflow to Inf (NaN in e4m3fn): left out
            wide_a, wide_b = oa.astype(np.int64), ob.astype(np.int64)
            fits = (np.abs(wide_a) <= self.ord_max) & (np.abs(wide_b) <= self.ord_max)
            keep = fits if keep is None else keep & fits
        if keep is not None:
            oa, ob = oa[keep], ob[keep]
        if oa.size == 0:
            return
        if self.dtype.itemsize < 8:
            dist = np.subtract(oa, ob, out=self.dist[: oa.size], dtype=self.dist_dtype)
            np.abs(dist, out=dist)
            self._fold(oa.size, int(dist.sum(dtype=np.int64)), int(dist.max()))
        else:  # 64-bit patterns: the distance can exceed int64, so take it in wrapping uint64 arithmetic
            ua, ub = oa.view(np.uint64), ob.view(np.uint64)
            dist = np.where(oa >= ob, ua - ub, ub - ua)
            self._fold(oa.size, float(dist.sum(dtype=np.float64)), int(dist.max()))

    def _add_patterns(self, bits_a: np.ndarray, bits_b: np.ndarray) -> None:
        """Distances of finite patterns (narrower than 8 bytes) the cheap way: where both signs agree the distance is
        ``|bits_a - bits_b|`` (below ``2^(bits-1)``, no overflow); the positions of differing signs (a sign flip, or
        +0 against -0) hold ``|a| + |b|`` in patterns, taken apart, or by the ordered mapping when they are many."""
        m = bits_a.size
        signs = np.bitwise_xor(bits_a, bits_b, out=self.sign[:m])
        flipped = np.less(signs, 0, out=self.flipped[:m])
        flips = int(np.count_nonzero(flipped))
        if flips * 8 > m:
            oa, ob = self._ordered(bits_a, 0), self._ordered(bits_b, 1)
            dist = np.subtract(oa, ob, out=self.dist[:m], dtype=self.dist_dtype)
            np.abs(dist, out=dist)
            self._fold(m, int(dist.sum(dtype=np.int64)), int(dist.max()))
            return
        dist = np.subtract(bits_a, bits_b, out=self.same[:m])
        np.abs(dist, out=dist)
        total, top = 0, 0
        if flips:
            where = np.flatnonzero(flipped)
            mask = int(self.int_max)
            apart = (bits_a[where].astype(np.int64) & mask) + (bits_b[where].astype(np.int64) & mask)
            total, top = int(apart.sum()), int(apart.max())
            dist[where] = 0
        self._fold(m, total + int(dist.sum(dtype=np.int64)), max(top, int(dist.max())))

    def add_equal(self, count: int) -> None:
        """Count ``count`` positions of equal values (each a value both dtypes hold, so zero ULPs apart)."""
        self.count += count

    def _fold(self, count: int, total: float, top: int) -> None:
        """Add the distances of ``count`` positions, their sum ``total`` and maximum ``top``."""
        self.count += count
        self.total += total
        self.max = max(self.max, top)

    def merge(self, other: UlpCounter) -> None:
        """Combine with the counts of other positions."""
        self.count += other.count
        self.max = max(self.max, other.max)
        self.total += other.total
