"""The reductions mean, sum, max, min (over one axis, several or all, keeping them or not, times ttnn's ``scalar``)
and argmax, as ttnn's golden functions map them onto torch's."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import Param, UnsupportedArguments, floats, reference

_PARAMS = (
    Param("input_tensor", "tensor", 0, required=True), Param("dim", "ints", 1), Param("keepdim", "bool", 2, False),
    Param("scalar", "float", default=1.0), Param("output_tensor", "output"),
)  # fmt: skip


def _axes(dim: tuple[int, ...] | None, ndim: int) -> tuple[int, ...] | None:
    """The axes reduced: all of them for no ``dim``, else ``dim`` (negative counted from the end), checked."""
    if dim is None:
        return None
    if any(not -ndim <= d < ndim for d in dim):
        raise UnsupportedArguments(["dim"], f"{dim} is outside a tensor of rank {ndim}")
    return tuple(d % ndim for d in dim)


def _reduction(function: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """A reference reducing the float32 input with ``function`` (numpy's signature: axis, keepdims)."""

    def run(input_tensor: Any, dim: tuple[int, ...] | None, keepdim: bool, scalar: float, **_: Any) -> np.ndarray:
        x = floats("input_tensor", input_tensor)
        out = function(x, axis=_axes(dim, x.ndim), keepdims=keepdim)
        return np.asarray(out * np.float32(scalar) if scalar != 1.0 else out, dtype=np.float32)

    return run


def _mean(x: np.ndarray, axis: tuple[int, ...] | None, keepdims: bool) -> np.ndarray:
    """The mean accumulated in float64 and rounded once (torch's float32 mean is that close)."""
    return np.asarray(np.mean(x, axis=axis, keepdims=keepdims, dtype=np.float64), dtype=np.float32)


def _sum(x: np.ndarray, axis: tuple[int, ...] | None, keepdims: bool) -> np.ndarray:
    """The sum accumulated in float64 and rounded once."""
    return np.asarray(np.sum(x, axis=axis, keepdims=keepdims, dtype=np.float64), dtype=np.float32)


reference("ttnn.mean", params=_PARAMS)(_reduction(_mean))
reference("ttnn.sum", params=_PARAMS)(_reduction(_sum))
reference("ttnn.max", params=_PARAMS)(_reduction(np.max))
reference("ttnn.min", params=_PARAMS)(_reduction(np.min))


@reference("ttnn.argmax", params=_PARAMS[:3] + (Param("output_tensor", "output"), Param("use_multicore", "ignored")))
def argmax(input_tensor: Any, dim: tuple[int, ...] | None, keepdim: bool, **_: Any) -> np.ndarray:
    """ttnn.argmax: the first index of the maximum along one axis, or in the flattened tensor for no ``dim``."""
    x = floats("input_tensor", input_tensor)
    if dim is not None and len(dim) != 1:
        raise UnsupportedArguments(["dim"], "argmax reduces one axis")
    if dim is None:
        index = np.argmax(x)
        return np.asarray(index, dtype=np.int64).reshape((1,) * x.ndim if keepdim else ())
    axis = _axes(dim, x.ndim)[0]  # type: ignore[index]
    return np.argmax(x, axis=axis, keepdims=keepdim).astype(np.int64)
