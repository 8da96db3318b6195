"""The linear-fit check of a comparison: whether the actual tensor is the golden one up to a scale or an offset, told
apart from the systematic shrink a low math fidelity causes.

Math fidelity truncates the operands' mantissas before the multiply (Tenstorrent's low-level-kernel tests model it by
masking operand mantissa bits per phase, tt-llk ``tests/python_tests/helpers`` ``apply_fidelity``; tt-buda's "Data
Formats and Math Fidelity" describes the phases): LoFi, the coarsest, keeps the leading 4 of srcA's and 6 of srcB's
7 explicit bfloat16 mantissa bits. Truncation only ever moves a value towards zero. With the dropped bits uniformly
random (they are, in real tensors) it drops on average half their span, ``(2^-4 - 2^-7) / 2`` of srcA's leading one
and ``(2^-6 - 2^-7) / 2`` of srcB's, which over mantissas spread log-uniformly in [1, 2) (``E[1/m] = 1 / (2 ln 2)``)
is 2.25% of a product's magnitude: :data:`LOFI_MEAN_LOSS`, the 0.978 actual/golden ratio measured on LoFi bfloat16
matmuls (``numeric/fidelity.py``, benchmarks/NOTES.md). A shrink down to twice that loss, :data:`LOFI_SHRINK`
(0.955), is passed with a note saying so; a wrong constant is far outside (x0.5, 1/sqrt(2) for a 1/sqrt(64) in place
of 1/sqrt(128), x2, any growth) and so is a x0.95 one. Only data whose dropped bits were all ones could shrink
further (to 0.923 at most), which real tensors are not; a scale bug smaller than the allowance (1/sqrt(1000) for
1/sqrt(1024)) passes. Every other scale or offset beyond the tolerance fails.
"""

from __future__ import annotations

import math
from typing import Sequence

#: How every note of :func:`fit_check` writes the fitted line, so :func:`fit_note` finds it among a comparison's.
_LINE = "b ~ "

#: The mean fraction of a product's magnitude LoFi's operand truncation drops (module docstring): 0.0225.
LOFI_MEAN_LOSS = ((2.0**-4 - 2.0**-7) / 2 + (2.0**-6 - 2.0**-7) / 2) / (2 * math.log(2))
#: The smallest actual/golden magnitude ratio passed as a fidelity shrink: twice LoFi's mean loss (0.955).
LOFI_SHRINK = 1.0 - 2 * LOFI_MEAN_LOSS


def fit_check(
    fit_scale: float, fit_offset: float, pcc: float, fit_tol: float, spread: float, atol: float
) -> tuple[bool, str | None]:
    """Whether ``b ~ fit_scale * a + fit_offset`` (``pcc`` passing, ``spread`` the larger rms of the two sides) is a
    scale or offset error, and the note that says what was seen (None when the fit is the identity within tolerance).

    The tolerance is ``t = fit_tol + (1/pcc - 1)`` (noise at correlation r moves the ratio of spreads by up to 1/r);
    an actual side shrunk to no less than :data:`LOFI_SHRINK` (less what noise moves, not ``fit_tol`` too: the
    allowance is fidelity's own) is a fidelity effect, not an error."""
    allowed = fit_tol + (1.0 / pcc - 1.0)
    offset_error = abs(fit_offset) > allowed * spread + atol
    ratio = 1.0 / fit_scale if fit_scale else math.inf  # actual/golden: below 1 the actual side is shrunk
    fit = f"{_LINE}{fit_scale:.6g}*a + {fit_offset:.6g}, actual/golden scale {ratio:.4g}"
    if abs(fit_scale - 1.0) <= allowed and not offset_error:
        return False, None
    shrink = fit_scale > 1.0 and ratio >= LOFI_SHRINK * (2.0 - 1.0 / pcc)  # the allowance, less what noise moves
    if shrink and not offset_error:
        return False, f"{fit}: a shrink within LoFi truncation (>= {LOFI_SHRINK:.3f}), not a scale error"
    why = "an offset" if abs(fit_scale - 1.0) <= allowed or shrink else "a scale"
    where = f" beyond LoFi truncation (>= {LOFI_SHRINK:.3f})" if 0 < ratio < 1.0 and not shrink else ""
    return True, f"pcc {pcc:.6g} passes but {fit}{where}: {why} error"


def fit_note(notes: Sequence[str]) -> str | None:
    """The note :func:`fit_check` left among a comparison's ``notes`` (the fitted line, scale error or fidelity
    shrink), None when it left none."""
    return next((n for n in notes if _LINE in n), None)
