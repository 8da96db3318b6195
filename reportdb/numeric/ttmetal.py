"""tt-metal's ``comp_pcc`` number from a comparison's streamed moments: its special cases' running state, the minimum
of ``np.ma.corrcoef``'s matrix from the moments, and whether its cast of the actual side to the golden's dtype is
exact (then the joint moments serve it, with no pass of its own). Kept apart from :mod:`.metrics`, which streams the
blocks."""

from __future__ import annotations

import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np

_TINY = float(np.finfo(np.float64).tiny)


def casts_exactly(src: np.dtype, dst: np.dtype) -> bool:
    """Whether every value of dtype ``src`` keeps its value cast to ``dst`` (±Inf and NaN included): then tt-metal's
    cast of the actual side to the golden's dtype changes nothing (bfloat16 or float16 into float32, float32 into
    float64, small integers into a float)."""
    if src == dst:
        return True
    if dst.kind in "biu":
        return False
    to = ml_dtypes.finfo(dst)
    if src.kind == "b":
        return True
    if src.kind in "iu":
        info = np.iinfo(src)
        return max(-int(info.min), int(info.max)) <= 2 ** (int(to.nmant) + 1)
    frm = ml_dtypes.finfo(src)
    keeps_inf = bool(np.isinf(np.array(np.inf, dtype=src).astype(dst))) or not np.isinf(np.array(np.inf, dtype=src))
    return (int(frm.nmant) <= int(to.nmant) and float(frm.max) <= float(to.max) and keeps_inf
            and float(frm.smallest_subnormal) >= float(to.smallest_subnormal))


@dataclass
class TtMetalState:
    """Running state of tt-metal's ``comp_pcc`` special cases (its masked values' moments are kept apart)."""

    golden_has_non_nan: bool = False
    calc_has_non_nan: bool = False
    golden_has_nonzero: bool = False
    calc_has_nonzero: bool = False
    equal: bool = True

    def merge(self, other: TtMetalState) -> None:
        """Combine with the state of other positions."""
        self.golden_has_non_nan |= other.golden_has_non_nan
        self.calc_has_non_nan |= other.calc_has_non_nan
        self.golden_has_nonzero |= other.golden_has_nonzero
        self.calc_has_nonzero |= other.calc_has_nonzero
        self.equal &= other.equal

    def result(self, size: int, n: int, m2_a: float, m2_b: float, cab: float) -> float:
        """The PCC comp_pcc would return, given the moments of its (cast, zeroed) values: their count, each side's M2
        and their co-moment."""
        if size == 0 or not (self.golden_has_non_nan or self.calc_has_non_nan):
            return 1.0
        if not (self.golden_has_non_nan and self.calc_has_non_nan):
            return 0.0
        if self.golden_has_nonzero != self.calc_has_nonzero:
            return 0.0
        if self.equal:
            return 1.0
        return masked_corrcoef_min(n, m2_a, m2_b, cab)


def masked_corrcoef_min(n: int, m2_a: float, m2_b: float, cab: float) -> float:
    """``np.min(np.ma.corrcoef(g, c))`` from the moments (count, M2 of each side, co-moment): cov / outer(std, std),
    where numpy.ma masks the entries whose divisor is zero (or whose value is not finite); all masked gives tt-metal's
    1.0."""
    if n < 2:
        return 1.0
    ddof = n - 1
    var = (m2_a / ddof, m2_b / ddof)
    std = (math.sqrt(var[0]), math.sqrt(var[1]))
    entries = ((var[0], std[0] * std[0]), (cab / ddof, std[0] * std[1]), (var[1], std[1] * std[1]))
    valid = [
        num / den
        for num, den in entries
        if abs(num) * _TINY < abs(den) and math.isfinite(num / den)  # numpy.ma's division domain
    ]
    return min(valid) if valid else 1.0
