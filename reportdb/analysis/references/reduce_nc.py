"""fast_reduce_nc: the sum over the batch and channel axes (0, 1 or both) that models use to finish an all-reduce
after an all-gather, computed in float64 and rounded once to float32."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import Param, UnsupportedArguments, float64s, reference


@reference("ttnn.experimental.fast_reduce_nc", params=(
    Param("input", "tensor", 0, required=True), Param("dims", "ints", required=True), Param("output", "output"),
))
def fast_reduce_nc(input: Any, dims: tuple[int, ...], **_: Any) -> np.ndarray:
    """ttnn.experimental.fast_reduce_nc as tt-metal's unit test (``test_fast_reduce_nc.py``: ``torch.sum(input,
    dims, True)``) and documentation (reduction "on dim 0, 1, or [0, 1]") define it: the sum over ``dims``, kept as
    axes of length 1."""
    x = float64s("input", input)
    axes = tuple(sorted({d % x.ndim for d in dims if -x.ndim <= d < x.ndim})) if x.ndim else ()
    if not dims or len(axes) != len(set(dims)) or any(a > 1 for a in axes):
        raise UnsupportedArguments(["dims"], f"dims {dims} of a tensor of rank {x.ndim} (0, 1 or both expected)")
    return x.sum(axis=axes, keepdims=True).astype(np.float32)
