"""The linear-fit check of a comparison: whether the actual tensor is the golden one up to a scale or an offset, told
apart from the systematic shrink a low math fidelity causes.

Math fidelity truncates the operands' mantissas before the multiply (Tenstorrent's low-level-kernel tests model it by
masking operand mantissa bits per phase, tt-llk ``tests/python_tests/helpers`` ``apply_fidelity``; tt-buda's "Data
Formats and Math Fidelity" describes the phases): LoFi, the coarsest, keeps the leading 4 of srcA's and 6 of srcB's
7 explicit bfloat16 mantissa bits. Truncation only ever moves a value towards zero and by less than one unit of the
last kept bit, so a product loses less than ``1 - (1 - 2^-4)(1 - 2^-6)``, 7.7%, of its magnitude: :data:`LOFI_SHRINK`
(0.923) is the smallest actual/golden magnitude ratio LoFi can explain. On Gaussian data the fitted ratio of a LoFi
bfloat16 matmul is about 0.978 (benchmarks/NOTES.md), an average of the truncations, where a wrong constant is far
outside: x0.5, 1/sqrt(2) (a 1/sqrt(64) for a 1/sqrt(128)), x2, or any growth. A shrink between 0.923 and 1 is
therefore passed with a note saying so (a scale bug that small, such as 1/sqrt(1000) for 1/sqrt(1024), passes too);
every other scale or offset beyond the tolerance fails.
"""

from __future__ import annotations

import math

#: The smallest actual/golden magnitude ratio LoFi's operand truncation explains (module docstring).
LOFI_SHRINK = (1.0 - 2.0**-4) * (1.0 - 2.0**-6)


def fit_check(
    fit_scale: float, fit_offset: float, pcc: float, fit_tol: float, spread: float, atol: float
) -> tuple[bool, str | None]:
    """Whether ``b ~ fit_scale * a + fit_offset`` (``pcc`` passing, ``spread`` the larger rms of the two sides) is a
    scale or offset error, and the note that says what was seen (None when the fit is the identity within tolerance).

    The tolerance is ``t = fit_tol + (1/pcc - 1)`` (noise at correlation r moves the ratio of spreads by up to 1/r);
    an actual side shrunk by no more than :data:`LOFI_SHRINK` beyond it is a fidelity effect, not an error."""
    allowed = fit_tol + (1.0 / pcc - 1.0)
    offset_error = abs(fit_offset) > allowed * spread + atol
    ratio = 1.0 / fit_scale if fit_scale else math.inf  # actual/golden: below 1 the actual side is shrunk
    fit = f"b ~ {fit_scale:.6g}*a + {fit_offset:.6g}, actual/golden scale {ratio:.4g}"
    if abs(fit_scale - 1.0) <= allowed and not offset_error:
        return False, None
    shrink = fit_scale > 1.0 and ratio >= LOFI_SHRINK * (1.0 - allowed)
    if shrink and not offset_error:
        return False, f"{fit}: a shrink within LoFi truncation (>= {LOFI_SHRINK:.3f}), not a scale error"
    why = "an offset" if abs(fit_scale - 1.0) <= allowed or shrink else "a scale"
    where = f" beyond LoFi truncation (>= {LOFI_SHRINK:.3f})" if 0 < ratio < 1.0 and not shrink else ""
    return True, f"pcc {pcc:.6g} passes but {fit}{where}: {why} error"
