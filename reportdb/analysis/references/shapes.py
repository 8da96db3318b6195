"""Operations that rearrange values into a new shape without arithmetic, as ttnn 0.81.1's golden functions define them
(tt-metal ``ttnn/ttnn/operations/data_movement.py`` unless named): pad and unpad, squeeze, unsqueeze, expand, repeat,
repeat_interleave, stack, narrow, reshape_on_device, tril and experimental.slice_write. Values keep their stored dtype
(a pad value is written in it), so integer tensors are covered too."""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from . import Param, UnsupportedArguments, elements, reference, shape
from .data_movement import rank_check

_IN = Param("input_tensor", "tensor", 0, required=True)


def _pad_pairs(dims: tuple[int, ...], padding: tuple[Any, ...], start: Any) -> list[tuple[int, int]]:
    """ttnn.pad's (before, after) per axis from either overload: a list of pairs (the leading axes unpadded when it is
    shorter than the rank; ttnn 0.6x's texts flatten it to ``0, 0, 0, 2`` when no start follows), or an output shape
    with the input's start in it."""
    if padding and isinstance(padding[0], tuple):
        pairs = list(padding)
    elif start is None and len(padding) % 2 == 0:
        pairs = list(zip(padding[::2], padding[1::2]))
    else:
        if not isinstance(start, tuple) or len(start) != len(dims) or len(padding) != len(dims):
            raise UnsupportedArguments(["padding"], f"an output shape {padding} and start {start} for rank {len(dims)}")
        pairs = [(s, p - d - s) for p, d, s in zip(padding, dims, start)]
    if len(pairs) > len(dims) or any(a < 0 or b < 0 for a, b in pairs):
        raise UnsupportedArguments(["padding"], f"padding {pairs} for a tensor of rank {len(dims)}")
    return [(0, 0)] * (len(dims) - len(pairs)) + pairs


def _pad_size(values: Mapping[str, Any]) -> int:
    """The padded output's elements (a hostile padding is refused before it sizes anything)."""
    dims = shape(values["input_tensor"])
    padding = values["padding"] if values["padding"] is not None else values.get("output_padded_shape")
    try:
        start = values.get("arg2")
        pairs = _pad_pairs(dims, padding or (), start if isinstance(start, tuple) else values.get("input_tensor_start"))
    except UnsupportedArguments:
        return elements(dims)
    return elements([d + a + b for d, (a, b) in zip(dims, pairs)])


@reference("ttnn.pad", params=(
    _IN, Param("padding", "pairs_or_ints", 1), Param("arg2", "float_or_ints", 2), Param("arg3", "float", 3),
    Param("value", "float"), Param("output_padded_shape", "ints"), Param("input_tensor_start", "ints"),
    Param("use_multicore", "ignored"),
), size=_pad_size, keeps_values=True)
def pad(input_tensor: Any, padding: tuple[Any, ...] | None, arg2: Any, arg3: float | None, value: float | None,
        output_padded_shape: tuple[int, ...] | None, input_tensor_start: tuple[int, ...] | None,
        **_: Any) -> np.ndarray:
    """ttnn.pad(input, padding_pairs, value) or ttnn.pad(input, output_padded_shape, input_tensor_start, value): the
    input with ``value`` before and after it on each axis (golden: torch.nn.functional.pad, mode constant)."""
    x = np.asarray(input_tensor)
    padding = padding if padding is not None else output_padded_shape
    if padding is None:
        raise UnsupportedArguments(["padding"], "required but not recorded")
    start = arg2 if isinstance(arg2, tuple) else input_tensor_start
    fill = value if value is not None else arg3 if isinstance(arg2, tuple) else arg2
    if fill is None:
        raise UnsupportedArguments(["value"], "required but not recorded")
    pairs = _pad_pairs(x.shape, padding, start)
    out = np.full(tuple(d + a + b for d, (a, b) in zip(x.shape, pairs)), np.asarray(fill).astype(x.dtype))
    out[tuple(slice(a, a + d) for d, (a, _) in zip(x.shape, pairs))] = x
    return out


@reference("ttnn.untilize_with_unpadding", params=(
    _IN, Param("output_tensor_end", "ints", 1, required=True), Param("use_multicore", "ignored"),
    Param("use_pack_untilize", "ignored"),
), keeps_values=True)
def untilize_with_unpadding(input_tensor: Any, output_tensor_end: tuple[int, ...], **_: Any) -> np.ndarray:
    """ttnn.untilize_with_unpadding: ``input[0:end + 1]`` on each axis, ``output_tensor_end`` the last index kept
    (golden ``slice(0, end + 1)`` per axis)."""
    x = np.asarray(input_tensor)
    if len(output_tensor_end) != x.ndim or any(not 0 <= e < d for e, d in zip(output_tensor_end, x.shape)):
        raise UnsupportedArguments(["output_tensor_end"], f"end {output_tensor_end} for a tensor of shape {x.shape}")
    return x[tuple(slice(0, e + 1) for e in output_tensor_end)]


@reference("ttnn.squeeze", params=(_IN, Param("dim", "ints", 1)), keeps_values=True)
def squeeze(input_tensor: Any, dim: tuple[int, ...] | None, **_: Any) -> np.ndarray:
    """ttnn.squeeze as torch.squeeze: every axis of size 1 removed, or those of ``dim`` that have size 1 (an axis
    of another size is kept)."""
    x = np.asarray(input_tensor)
    axes = range(x.ndim) if dim is None else rank_check("dim", dim, max(x.ndim, 1)) if x.ndim else ()
    return x.reshape(tuple(d for i, d in enumerate(x.shape) if not (i in axes and d == 1)))


@reference("ttnn.unsqueeze", params=(_IN, Param("dim", "int", 1, required=True)), keeps_values=True)
def unsqueeze(input_tensor: Any, dim: int, **_: Any) -> np.ndarray:
    """ttnn.unsqueeze as torch.unsqueeze: an axis of size 1 inserted at ``dim`` (-1 is after the last axis)."""
    x = np.asarray(input_tensor)
    (axis,) = rank_check("dim", (dim,), x.ndim + 1)
    return np.expand_dims(x, axis)


@reference("ttnn.unsqueeze_to_4D", params=(_IN,), keeps_values=True)
def unsqueeze_to_4d(input_tensor: Any, **_: Any) -> np.ndarray:
    """ttnn.unsqueeze_to_4D: leading axes of size 1 up to rank 4, a higher rank unchanged (golden
    ``_golden_function_unsqueeze_to_4d``, core.py)."""
    x = np.asarray(input_tensor)
    return x.reshape((1,) * (4 - x.ndim) + x.shape) if x.ndim < 4 else x


def _expand_shape(dims: tuple[int, ...], output_shape: tuple[int, ...]) -> tuple[int, ...]:
    """torch.expand's result shape: -1 keeps the input's size, new axes go in front; other sizes must broadcast."""
    lead = len(output_shape) - len(dims)
    if lead < 0:
        raise UnsupportedArguments(["output_shape"], f"{output_shape} has fewer axes than the input's {dims}")
    out = tuple(d if s == -1 and i >= lead else s for i, (s, d) in enumerate(zip(output_shape, (0,) * lead + dims)))
    if any(s < 0 for s in out) or any(d not in (1, s) for d, s in zip(dims, out[lead:])):
        raise UnsupportedArguments(["output_shape"], f"an input of shape {dims} does not expand to {output_shape}")
    return out


def _expand_size(values: Mapping[str, Any]) -> int:
    """The expanded output's elements."""
    try:
        return elements(_expand_shape(shape(values["input_tensor"]), values["output_shape"]))
    except UnsupportedArguments:
        return elements(shape(values["input_tensor"]))


@reference("ttnn.expand", "ttnn.experimental.broadcast_to", params=(
    _IN, Param("output_shape", "ints", 1, required=True), Param("output", "output"),
), size=_expand_size, keeps_values=True)
def expand(input_tensor: Any, output_shape: tuple[int, ...], **_: Any) -> np.ndarray:
    """ttnn.expand as torch.expand (golden ``input_tensor.expand(output_shape)``) and ttnn.experimental.broadcast_to as
    torch.broadcast_to (golden ``_broadcast_to_golden_function``), copied as ttnn copies them."""
    x = np.asarray(input_tensor)
    return np.ascontiguousarray(np.broadcast_to(x, _expand_shape(x.shape, output_shape)))


def _repeats(values: Mapping[str, Any]) -> tuple[int, ...]:
    """The repetition vector, under its 0.81 name or its older one (``shape``)."""
    reps = values.get("repetition_vector") or values.get("shape")
    if reps is None:
        raise UnsupportedArguments(["repetition_vector"], "required but not recorded")
    if any(r < 0 for r in reps):
        raise UnsupportedArguments(["repetition_vector"], f"a negative repetition in {reps}")
    return tuple(reps)


def _repeat_size(values: Mapping[str, Any]) -> int:
    """The input's elements times every repetition."""
    try:
        return elements(shape(values["input_tensor"])) * math.prod(_repeats(values))
    except UnsupportedArguments:
        return elements(shape(values["input_tensor"]))


@reference("ttnn.repeat", params=(_IN, Param("repetition_vector", "ints", 1), Param("shape", "ints")), size=_repeat_size,
           keeps_values=True)
def repeat(input_tensor: Any, **values: Any) -> np.ndarray:
    """ttnn.repeat as torch.Tensor.repeat, a shorter repetition vector padded with leading 1s (golden in
    data_movement.py)."""
    return np.tile(np.asarray(input_tensor), _repeats(values))


def _repeat_interleave_size(values: Mapping[str, Any]) -> int:
    """The input's elements times the repeats."""
    return elements(shape(values["input_tensor"])) * max(1, values["repeats"])


@reference("ttnn.repeat_interleave", params=(
    _IN, Param("repeats", "int", 1, required=True), Param("dim", "int", 2, default=0),
), size=_repeat_interleave_size, keeps_values=True)
def repeat_interleave(input_tensor: Any, repeats: int, dim: int, **_: Any) -> np.ndarray:
    """ttnn.repeat_interleave as torch.repeat_interleave: each element ``repeats`` times in a row along ``dim``."""
    x = np.asarray(input_tensor)
    (axis,) = rank_check("dim", (dim,), x.ndim)
    if repeats < 0:
        raise UnsupportedArguments(["repeats"], f"{repeats} repeats")
    return np.repeat(x, repeats, axis=axis)


@reference("ttnn.stack", params=(Param("tensors", "tensors", 0, required=True), Param("dim", "int", 1, required=True)),
           size=lambda values: sum(elements(shape(t)) for t in values["tensors"]), keeps_values=True)
def stack(tensors: list[np.ndarray], dim: int, **_: Any) -> np.ndarray:
    """ttnn.stack as torch.stack: the tensors (of one shape) along a new axis ``dim``."""
    arrays = [np.asarray(t) for t in tensors]
    if len({a.shape for a in arrays}) != 1:
        raise UnsupportedArguments(["tensors"], f"tensors of shapes {[a.shape for a in arrays]}")
    (axis,) = rank_check("dim", (dim,), arrays[0].ndim + 1)
    if len({a.dtype for a in arrays}) > 1:
        arrays = [a.astype(np.float32) for a in arrays]
    return np.stack(arrays, axis=axis)


@reference("ttnn.narrow", params=(
    _IN, Param("dim", "int", 1, required=True), Param("start", "int", 2, required=True),
    Param("length", "int", 3, required=True),
), keeps_values=True)
def narrow(input_tensor: Any, dim: int, start: int, length: int, **_: Any) -> np.ndarray:
    """ttnn.narrow as torch.narrow: ``length`` elements from ``start`` along ``dim`` (a negative start counts from the
    end)."""
    x = np.asarray(input_tensor)
    (axis,) = rank_check("dim", (dim,), x.ndim)
    first = start + x.shape[axis] if start < 0 else start
    if length < 0 or not 0 <= first <= first + length <= x.shape[axis]:
        raise UnsupportedArguments(["start"], f"{length} elements from {start} on an axis of {x.shape[axis]}")
    return x[(slice(None),) * axis + (slice(first, first + length),)]


@reference("ttnn.reshape_on_device", params=(
    _IN, Param("W", "ints", 1, required=True), Param("Z", "int", 2), Param("Y", "int", 3), Param("X", "int", 4),
), keeps_values=True)
def reshape_on_device(input_tensor: Any, W: tuple[int, ...], Z: int | None, Y: int | None, X: int | None,
                      **_: Any) -> np.ndarray:
    """ttnn.reshape_on_device(input, W, Z, Y, X) or (input, shape): the values in C order under [W, Z, Y, X]
    (golden ``input_tensor.reshape(W, Z, Y, X)``)."""
    dims = W if len(W) > 1 else W + tuple(d for d in (Z, Y, X) if d is not None)
    if len(W) == 1 and None in (Z, Y, X):
        raise UnsupportedArguments(["W"], "an output shape of W alone")
    try:
        return np.asarray(input_tensor).reshape(dims)
    except ValueError as exc:
        raise UnsupportedArguments(["W"], str(exc)) from None


@reference("ttnn.tril", params=(_IN, Param("diagonal", "int", 1, default=0)))
def tril(input_tensor: Any, diagonal: int, **_: Any) -> np.ndarray:
    """ttnn.tril as torch.tril over the last two axes: elements above the ``diagonal``-th diagonal zeroed (golden
    ``_golden_function_tril``, unary.py)."""
    x = np.asarray(input_tensor)
    if x.ndim < 2:
        raise UnsupportedArguments(["input_tensor"], f"a tensor of rank {x.ndim}")
    keep = np.tri(x.shape[-2], x.shape[-1], k=diagonal, dtype=bool)
    return np.where(keep, x, np.zeros((), dtype=x.dtype))


@reference("ttnn.experimental.slice_write", params=(
    _IN, Param("output_tensor", "tensor", 1, required=True), Param("slice_start", "ints", 2, required=True),
    Param("slice_end", "ints", 3, required=True), Param("slice_step", "ints", 4),
), keeps_values=True)
def slice_write(input_tensor: Any, output_tensor: Any, slice_start: tuple[int, ...], slice_end: tuple[int, ...],
                slice_step: tuple[int, ...] | None, **_: Any) -> np.ndarray:
    """ttnn.experimental.slice_write: the output tensor (as it was before the call) with ``output[start:end:step]``
    replaced by the input (golden ``_slice_write_golden_function``, tt-metal
    ``ttnn/ttnn/experimental_loader/golden_functions.py``)."""
    x, out = np.asarray(input_tensor), np.array(output_tensor)
    step = slice_step or (1,) * len(slice_start)
    if not len(slice_start) == len(slice_end) == len(step) == out.ndim or any(s <= 0 for s in step):
        raise UnsupportedArguments(["slice_start"], f"bounds {slice_start}, {slice_end}, {step} for rank {out.ndim}")
    window = tuple(slice(b, e, s) for b, e, s in zip(slice_start, slice_end, step))
    if out[window].shape != x.shape:
        raise UnsupportedArguments(["input_tensor"], f"a slice of shape {out[window].shape} for an input of {x.shape}")
    out[window] = x.astype(out.dtype)
    return out
