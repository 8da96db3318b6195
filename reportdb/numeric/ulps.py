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

    Works in per-thread scratch buffers: on this class of VM first-touching fresh memory costs more than
    the arithmetic itself.
    """

    def __init__(self, dtype: np.dtype, block: int) -> None:
        self.dtype = dtype
        bits = dtype.itemsize * 8
        self.int_dtype = np.dtype(f"<i{dtype.itemsize}")
        self.shift = bits - 1
        self.int_max = self.int_dtype.type((1 << (bits - 1)) - 1)
        largest = np.array(ml_dtypes.finfo(dtype).max, dtype=dtype)
        self.ord_max = int(largest.view(self.int_dtype))  # finite values map into [-ord_max, ord_max]
        self.block = block
        # Distances of 2-byte patterns fit 32 bits (at most 2^16); wider ones need 64.
        self.dist_dtype = np.dtype(np.int32) if dtype.itemsize <= 2 else np.dtype(np.int64)
        self.count = 0
        self.max = 0
        self.total: float = 0  # an exact int while the patterns are narrower than 8 bytes

    def _bits(self, x: np.ndarray, name: str) -> np.ndarray:
        """The bit patterns (signed integers) of ``x`` rounded to the ULP dtype: a view when it already is one, else
        rounded into a scratch buffer (not a fresh array per block)."""
        if x.dtype != self.dtype:
            rounded = scratch(name, self.block, self.dtype)[: x.size]
            np.copyto(rounded, x, casting="unsafe")
            x = rounded
        return x.view(self.int_dtype)

    def _ordered(self, bits: np.ndarray, name: str) -> np.ndarray:
        """Map patterns to integers in the same order as the floats, with -0 and +0 both mapped to 0: negative
        patterns become ``INT_MIN - bits``, computed branch-free as ``(bits ^ (sign & INT_MAX)) - sign``."""
        m = bits.size
        out = scratch(name, self.block, self.int_dtype)[:m]
        sign = np.right_shift(bits, self.shift, out=scratch("ulp_sign", self.block, self.int_dtype)[:m])
        np.bitwise_and(sign, self.int_max, out=out)  # sign is 0, or -1 for negative patterns
        np.bitwise_xor(out, bits, out=out)
        np.subtract(out, sign, out=out)
        return out

    def _overflows(self, x: np.ndarray) -> bool:
        """Whether rounding ``x`` (finite values of another dtype) to the ULP dtype leaves its finite range somewhere:
        rounding is monotonic, so it does exactly when its largest or smallest value does."""
        if x.dtype == self.dtype or x.dtype.kind in "biu" and x.dtype.itemsize < self.dtype.itemsize:
            return False
        with np.errstate(over="ignore", invalid="ignore"):
            ends = np.array([x.min(), x.max()], dtype=x.dtype).astype(self.dtype)
        return not bool(np.isfinite(ends.astype(np.float64)).all())

    def add(self, a: np.ndarray, b: np.ndarray, keep: np.ndarray | None) -> None:
        """Fold in one block of the original arrays; ``keep`` marks the jointly finite positions (None: all)."""
        bits_a, bits_b = self._bits(a, "ulp_round_a"), self._bits(b, "ulp_round_b")
        if keep is None and self.dtype.itemsize < 8 and not (self._overflows(a) or self._overflows(b)):
            self._add_patterns(bits_a, bits_b)
            return
        oa, ob = self._ordered(bits_a, "ulp_a"), self._ordered(bits_b, "ulp_b")
        if a.dtype != self.dtype or b.dtype != self.dtype:  # rounding can overflow to Inf (NaN in e4m3fn): left out
            wide_a, wide_b = oa.astype(np.int64), ob.astype(np.int64)
            fits = (np.abs(wide_a) <= self.ord_max) & (np.abs(wide_b) <= self.ord_max)
            keep = fits if keep is None else keep & fits
        if keep is not None:
            oa, ob = oa[keep], ob[keep]
        if oa.size == 0:
            return
        if self.dtype.itemsize < 8:
            dist = np.subtract(oa, ob, out=scratch("ulp_dist", self.block, self.dist_dtype)[: oa.size],
                               dtype=self.dist_dtype)  # fmt: skip
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
        signs = np.bitwise_xor(bits_a, bits_b, out=scratch("ulp_sign", self.block, self.int_dtype)[:m])
        flipped = np.less(signs, 0, out=scratch("ulp_flipped", self.block, np.bool_)[:m])
        flips = int(np.count_nonzero(flipped))
        if flips * 8 > m:
            oa, ob = self._ordered(bits_a, "ulp_a"), self._ordered(bits_b, "ulp_b")
            dist = np.subtract(oa, ob, out=scratch("ulp_dist", self.block, self.dist_dtype)[:m], dtype=self.dist_dtype)
            np.abs(dist, out=dist)
            self._fold(m, int(dist.sum(dtype=np.int64)), int(dist.max()))
            return
        dist = np.subtract(bits_a, bits_b, out=scratch("ulp_same", self.block, self.int_dtype)[:m])
        np.abs(dist, out=dist)
        total, top = 0, 0
        if flips:
            where = np.flatnonzero(flipped)
            mask = int(self.int_max)
            apart = (bits_a[where].astype(np.int64) & mask) + (bits_b[where].astype(np.int64) & mask)
            total, top = int(apart.sum()), int(apart.max())
            dist[where] = 0
        self._fold(m, total + int(dist.sum(dtype=np.int64)), max(top, int(dist.max())))

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
