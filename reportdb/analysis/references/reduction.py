"""The reductions mean, sum, max, min, var, std (over one axis, several or all, keeping them or not, times ttnn's
``scalar``), prod, argmax and cumsum, as ttnn's golden functions (tt-metal ``ttnn/ttnn/operations/reduction.py``) map
them onto torch's."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from . import Param, UnsupportedArguments, floats, reference

_PARAMS = (
    Param("input_tensor", "tensor", 0, required=True), Param("dim", "ints", 1), Param("keepdim", "bool", 2, False),
    Param("scalar", "float", default=1.0), Param("output_tensor", "output"),
)


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


def _spread(x: np.ndarray, dim: tuple[int, ...] | None, keepdim: bool, correction: int | None) -> np.ndarray:
    """The variance in float64 with torch's ``correction`` (1, Bessel's, when none is given): NaN where no more
    elements than the correction are reduced, as torch gives."""
    axes = _axes(dim, x.ndim)
    n = x.size if axes is None else math.prod(x.shape[a] for a in axes)
    ddof = 1 if correction is None else correction
    biased = np.var(x.astype(np.float64), axis=axes, keepdims=keepdim) if n else np.full(
        np.sum(x, axis=axes, keepdims=keepdim).shape, np.nan)
    return biased * (n / (n - ddof) if n > ddof else np.nan)


_SPREAD = _PARAMS + (Param("correction", "bool_or_int"),)


@reference("ttnn.var", params=_SPREAD)
def var(input_tensor: Any, dim: tuple[int, ...] | None, keepdim: bool, scalar: float, correction: int | None,
        **_: Any) -> np.ndarray:
    """ttnn.var as torch.var (Bessel-corrected unless ``correction`` says otherwise), times ``scalar`` squared."""
    out = _spread(floats("input_tensor", input_tensor), dim, keepdim, correction) * scalar**2
    return np.asarray(out, dtype=np.float32)


@reference("ttnn.std", params=_SPREAD)
def std(input_tensor: Any, dim: tuple[int, ...] | None, keepdim: bool, scalar: float, correction: int | None,
        **_: Any) -> np.ndarray:
    """ttnn.std as torch.std (Bessel-corrected unless ``correction`` says otherwise), times ``|scalar|``."""
    out = np.sqrt(_spread(floats("input_tensor", input_tensor), dim, keepdim, correction)) * abs(scalar)
    return np.asarray(out, dtype=np.float32)


@reference("ttnn.prod", params=(
    Param("input_tensor", "tensor", 0, required=True), Param("dim", "int", 1), Param("keepdim", "bool", 2, False),
    Param("dims", "ints"), Param("output_tensor", "output"),
))
def prod(input_tensor: Any, dim: int | None, keepdim: bool, dims: tuple[int, ...] | None, **_: Any) -> np.ndarray:
    """ttnn.prod: the product over ``dim`` (every element for none), or over each of ``dims`` with the axes kept
    (golden ``_golden_function_prod``), accumulated in float64 and rounded once."""
    x = floats("input_tensor", input_tensor).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if dims is not None:
            out = np.prod(x, axis=_axes(dims, x.ndim), keepdims=True)
        elif dim is None:
            out = np.prod(x)
        else:
            out = np.prod(x, axis=_axes((dim,), x.ndim), keepdims=keepdim)
    return np.asarray(out, dtype=np.float32)


@reference("ttnn.cumsum", "ttnn.moreh_cumsum", params=(
    Param("input_tensor", "tensor", 0, required=True), Param("dim", "int", 1, required=True), Param("dtype", "dtype"),
    Param("reverse_order", "bool", default=False), Param("output_tensor", "output"), Param("out", "output"),
    Param("output", "output"),
))
def cumsum(input_tensor: Any, dim: int, dtype: str | None, reverse_order: bool, **_: Any) -> np.ndarray:
    """ttnn.cumsum and ttnn.moreh_cumsum (golden moreh.py's ``_golden_cumsum``) as torch.cumsum along ``dim`` (from
    the end with ``reverse_order``): float inputs accumulated in
    float64 and rounded once, integer ones in their own width (wrapping as the device's adder does)."""
    x = np.asarray(input_tensor)
    (axis,) = _axes((dim,), x.ndim) or (0,)
    if dtype is not None:
        raise UnsupportedArguments(["dtype"], "a cumulative sum that also converts the dtype")
    source = np.flip(x, axis) if reverse_order else x
    if x.dtype.kind in "iu":
        out = np.cumsum(source.astype(np.int64), axis=axis).astype(x.dtype)
    else:
        out = np.cumsum(floats("input_tensor", source).astype(np.float64), axis=axis).astype(np.float32)
    return np.flip(out, axis) if reverse_order else out
