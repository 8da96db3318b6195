"""Operations that create a tensor from their arguments alone: zeros, ones, full, moreh_full and arange (a shape, a fill
value, a range, a dtype: BFLOAT16 when none is given), zeros_like, ones_like, full_like and fill (the template's shape
and, by default, its dtype), and fill_rm / fill_ones_rm (a corner of one value in another), as ttnn 0.81.1's golden
functions define them (tt-metal ``ttnn/ttnn/operations/creation.py``). The values are written in the output dtype as
ttnn stores them (a fill value of 0.1 is bfloat16's 0.10009765625)."""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from . import Param, UnsupportedArguments, elements, reference
from .typecast import stored_as

#: Arguments that only place the created tensor.
_PLACE = (Param("layout", "ignored"), Param("device", "ignored"), Param("memory_config", "ignored"))


def _positional_place(first: int) -> tuple[Param, ...]:
    """layout, device and memory_config at positions ``first``.. (the creation functions' order)."""
    return tuple(Param(p.name, "ignored", first + i) for i, p in enumerate(_PLACE))


def _shape_size(values: Mapping[str, Any]) -> int:
    """The created tensor's elements."""
    dims = values.get("shape") or ()
    return elements(dims) if all(d >= 0 for d in dims) else 0


def _filled(dims: tuple[int, ...], value: float, dtype: str | None) -> np.ndarray:
    """A tensor of shape ``dims`` holding ``value`` written in ``dtype`` (BFLOAT16 for None)."""
    if any(d < 0 for d in dims):
        raise UnsupportedArguments(["shape"], f"a negative size in {dims}")
    return stored_as(np.full(dims, value, dtype=np.float32), dtype or "bfloat16")


_CREATE = (Param("shape", "ints", 0, required=True), Param("dtype", "dtype", 1), *_positional_place(2))


@reference("ttnn.zeros", params=_CREATE, size=_shape_size)
def zeros(shape: tuple[int, ...], dtype: str | None, **_: Any) -> np.ndarray:
    """ttnn.zeros: 0 in every element (golden ``torch.zeros(shape, dtype)``)."""
    return _filled(shape, 0.0, dtype)


@reference("ttnn.ones", params=_CREATE, size=_shape_size)
def ones(shape: tuple[int, ...], dtype: str | None, **_: Any) -> np.ndarray:
    """ttnn.ones: 1 in every element (golden ``torch.ones(shape, dtype)``)."""
    return _filled(shape, 1.0, dtype)


@reference("ttnn.full", params=(Param("shape", "ints", 0, required=True), Param("fill_value", "float", 1, required=True),
                                Param("dtype", "dtype", 2), *_positional_place(3)), size=_shape_size)
def full(shape: tuple[int, ...], fill_value: float, dtype: str | None, **_: Any) -> np.ndarray:
    """ttnn.full: ``fill_value`` in every element, written in ``dtype`` (golden ``_golden_function_full``:
    ``torch.full`` in float32, then the dtype)."""
    return _filled(shape, fill_value, dtype)


@reference("ttnn.moreh_full", params=(
    Param("shape", "ints", 0, required=True), Param("fill_value", "float", 1, required=True),
    Param("device", "ignored", 2), Param("dtype", "dtype"), Param("layout", "ignored"), Param("memory_config", "ignored"),
), size=_shape_size)
def moreh_full(shape: tuple[int, ...], fill_value: float, dtype: str | None, **_: Any) -> np.ndarray:
    """ttnn.moreh_full(shape, fill_value, device): as ttnn.full (golden ``_golden_full``, tt-metal
    ``ttnn/ttnn/operations/moreh.py``: ``torch.full`` in the dtype, BFLOAT16 by default)."""
    return _filled(shape, fill_value, dtype)


_LIKE = (Param("tensor", "tensor", 0, required=True), Param("dtype", "dtype", 1), *_positional_place(2))


def _template_dtype(tensor: Any, input_dtypes: Mapping[int, str | None] | None) -> str:
    """A template tensor's ttnn dtype as the report recorded it, else its stored dtype."""
    recorded = ((input_dtypes or {}).get(id(tensor)) or "").rsplit(".", 1)[-1].lower()
    return recorded or np.asarray(tensor).dtype.name


def _like(tensor: Any, value: float, dtype: str | None, input_dtypes: Mapping[int, str | None] | None) -> np.ndarray:
    """``value`` in a tensor of ``tensor``'s shape, written in ``dtype``, by default the template's dtype."""
    return stored_as(np.full(np.shape(tensor), value, dtype=np.float32), dtype or _template_dtype(tensor, input_dtypes))


@reference("ttnn.zeros_like", params=_LIKE, input_dtypes=True)
def zeros_like(tensor: Any, dtype: str | None, input_dtypes: Mapping[int, str | None] | None = None,
               **_: Any) -> np.ndarray:
    """ttnn.zeros_like: 0 in the template's shape (golden ``torch.zeros_like``, then the dtype)."""
    return _like(tensor, 0.0, dtype, input_dtypes)


@reference("ttnn.ones_like", params=_LIKE, input_dtypes=True)
def ones_like(tensor: Any, dtype: str | None, input_dtypes: Mapping[int, str | None] | None = None,
              **_: Any) -> np.ndarray:
    """ttnn.ones_like: 1 in the template's shape (golden ``torch.ones_like``, then the dtype)."""
    return _like(tensor, 1.0, dtype, input_dtypes)


@reference("ttnn.full_like", "ttnn.fill", params=(Param("tensor", "tensor", 0, required=True),
                                     Param("fill_value", "float", 1, required=True), Param("dtype", "dtype", 2),
                                     *_positional_place(3)), input_dtypes=True)
def full_like(tensor: Any, fill_value: float, dtype: str | None, input_dtypes: Mapping[int, str | None] | None = None,
              **_: Any) -> np.ndarray:
    """ttnn.full_like and ttnn.fill: ``fill_value`` in the template's shape (goldens ``torch.full_like``, then the
    dtype; fill's is in ``ttnn/ttnn/operations/unary.py``)."""
    return _like(tensor, fill_value, dtype, input_dtypes)


def _range(values: Mapping[str, Any]) -> tuple[float, float, float]:
    """(start, end, step) from arange's overloads: ``arange(end)``, ``arange(start, end[, step])``, or keywords."""
    a: Any = values.get("arg0")
    b: Any = values.get("arg1")
    start: Any = values.get("start") if values.get("start") is not None else a if b is not None else 0.0
    end: Any = values.get("end") if values.get("end") is not None else b if b is not None else a
    step: Any = values.get("step") if values.get("step") is not None else 1.0
    if start is None or end is None:
        raise UnsupportedArguments(["end"], "required but not recorded")
    bounds = (float(start), float(end), float(step))
    if bounds[2] == 0 or not all(math.isfinite(v) for v in bounds):
        raise UnsupportedArguments(["step"], f"a range from {start} to {end} by {step}")
    return bounds


def _arange_size(values: Mapping[str, Any]) -> int:
    """How many values the range holds."""
    try:
        start, end, step = _range(values)
    except UnsupportedArguments:
        return 0
    return max(0, math.ceil((end - start) / step))


@reference("ttnn.arange", params=(
    Param("arg0", "float", 0), Param("arg1", "float", 1), Param("step", "float", 2), Param("start", "float"),
    Param("end", "float"), Param("dtype", "dtype"), *_PLACE,
), size=_arange_size)
def arange(dtype: str | None, **values: Any) -> np.ndarray:
    """ttnn.arange: ``start, start + step, ...`` below ``end``, written in ``dtype`` (BFLOAT16 by default: 257
    becomes 256), as the golden's ``torch.arange(...).to(dtype)``; whole-number bounds count in integers."""
    start, end, step = _range(values)
    if all(float(v).is_integer() for v in (start, end, step)):
        numbers = np.arange(int(start), int(end), int(step), dtype=np.int64)
    else:
        numbers = np.arange(start, end, step, dtype=np.float64).astype(np.float32)
    return stored_as(numbers.astype(np.float64) if dtype in (None, "bfloat16", "float32") else numbers,
                     dtype or "bfloat16")


def _corner_size(values: Mapping[str, Any]) -> int:
    """The created [N, C, H, W] tensor's elements."""
    dims = [values.get(name) for name in "NCHW"]
    return elements([d for d in dims if isinstance(d, int) and d >= 0]) if None not in dims else 0


def _corner(values: Mapping[str, Any], high: float, low: float,
            input_dtypes: Mapping[int, str | None] | None) -> np.ndarray:
    """An [N, C, H, W] tensor of ``low`` with ``high`` in rows < hOnes and columns < wOnes, in the dtype of the
    template ``any``."""
    dims = tuple(values[name] for name in "NCHW")
    if any(d < 0 for d in dims) or values["hOnes"] < 0 or values["wOnes"] < 0:
        raise UnsupportedArguments(["N"], f"a shape {dims} with a corner of {values['hOnes']} x {values['wOnes']}")
    out = np.full(dims, low, dtype=np.float32)
    out[:, :, : values["hOnes"], : values["wOnes"]] = high
    return stored_as(out, _template_dtype(values["any"], input_dtypes))


_CORNER = (*(Param(name, "int", i, required=True) for i, name in enumerate(("N", "C", "H", "W", "hOnes", "wOnes"))),
           Param("any", "tensor", 6, required=True))


@reference("ttnn.fill_rm", params=_CORNER + (Param("val_hi", "float", 7, required=True),
                                             Param("val_lo", "float", 8, required=True)),
           input_dtypes=True, size=_corner_size)
def fill_rm(val_hi: float, val_lo: float, input_dtypes: Mapping[int, str | None] | None = None,
            **values: Any) -> np.ndarray:
    """ttnn.fill_rm: ``val_lo`` everywhere but ``val_hi`` in the [hOnes, wOnes] corner of each [H, W] plane (golden
    in tt-metal ``ttnn/ttnn/operations/data_movement.py``; ``any`` gives only the dtype)."""
    return _corner(values, val_hi, val_lo, input_dtypes)


@reference("ttnn.fill_ones_rm", params=_CORNER, input_dtypes=True, size=_corner_size)
def fill_ones_rm(input_dtypes: Mapping[int, str | None] | None = None, **values: Any) -> np.ndarray:
    """ttnn.fill_ones_rm: fill_rm with 1 in the corner and 0 elsewhere (golden in data_movement.py)."""
    return _corner(values, 1.0, 0.0, input_dtypes)
