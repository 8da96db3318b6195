"""The tolerances a comparison request uses when it names none: the defaults of the coarser dtype of the pair (as
``torch.testing`` and the page propose them), so a bfloat16 output is not failed for bfloat16 rounding."""

from __future__ import annotations

from typing import Mapping

from . import params

#: Used where neither dtype has a default of its own (integers, unknown names).
DEFAULT_RTOL, DEFAULT_ATOL, DEFAULT_PCC = 1e-5, 1e-8, 0.99

#: rtol and atol by numpy dtype name: the page's table (static/app.js DEFAULT_TOL) is the same.
BY_DTYPE: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-7), "float32": (1.3e-6, 1e-5), "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5),
    "float8_e4m3fn": (0.125, 1e-3), "float8_e5m2": (0.25, 1e-3),
}  # fmt: skip


def dtype_defaults(*dtypes: str | None) -> tuple[float, float, str]:
    """rtol and atol for a pair of these dtypes (the looser of the known ones) and what they are the default of."""
    known = [(BY_DTYPE[d], d) for d in dtypes if d in BY_DTYPE]
    if not known:
        return DEFAULT_RTOL, DEFAULT_ATOL, "default"
    (rtol, atol), dtype = max(known, key=lambda item: item[0][0])
    return rtol, atol, f"default for {dtype}"


def requested(args: Mapping[str, str], *dtypes: str | None) -> tuple[float, float, str]:
    """rtol and atol of a request: as given, else the dtype defaults of the pair; and where they came from."""
    rtol, atol, source = dtype_defaults(*dtypes)
    given_rtol = params.optional_number(args, "rtol", low=0.0, high=1e300)
    given_atol = params.optional_number(args, "atol", low=0.0, high=1e300)
    if given_rtol is not None or given_atol is not None:
        source = "request"
    return (rtol if given_rtol is None else given_rtol), (atol if given_atol is None else given_atol), source
