"""Operations that place a tensor and keep its values: conversions between interleaved and sharded memory, reshards,
reallocation, moves, clones, copies, experimental.typecast, and tilizing with padding. reportdb stores every tensor in
its logical shape (tile padding removed, shards assembled), so each of them is the identity on the stored values,
written in the output dtype where one is asked for; ttnn 0.81.1's golden functions (tt-metal
``ttnn/ttnn/experimental_loader/golden_functions.py``, ``ttnn/ttnn/operations/core.py``,
``ttnn/ttnn/operations/data_movement.py``) say the same. The partial conversions move one slice of rows."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from . import Param, UnsupportedArguments, reference
from .typecast import stored_as

_IN = Param("input_tensor", "tensor", 0, required=True)
_OUTPUT_DTYPE = Param("output_dtype", "dtype")


def _dtype(values: Mapping[str, Any]) -> str | None:
    """The one output dtype the arguments ask for (keyword or positional), None for none; two different ones are
    refused."""
    asked = {v for k, v in values.items() if v is not None and (k in ("output_dtype", "dtype") or k.startswith("arg"))}
    if len(asked) > 1:
        raise UnsupportedArguments(["output_dtype"], f"two output dtypes {sorted(asked)}")
    return next(iter(asked), None)


def _positional_dtypes(first: int, last: int) -> tuple[Param, ...]:
    """Positional parameters ``first``..``last`` that are a placement setting in one overload and the output dtype
    in another (the dtype is read, the setting ignored)."""
    return tuple(Param(f"arg{i}", "dtype_or_placement", i) for i in range(first, last + 1))


_CONVERSION = (_IN, *_positional_dtypes(1, 5), _OUTPUT_DTYPE, Param("keep_l1_aligned", "ignored"),
               Param("is_l1_aligned", "ignored"), Param("output_tensor", "output"),
               *(Param(name, "ignored") for name in ("grid", "shard_shape", "shard_scheme", "shard_orientation",
                                                     "sharded_memory_config")))


@reference("ttnn.sharded_to_interleaved", "ttnn.interleaved_to_sharded", params=_CONVERSION, keeps_values=True)
def sharding_conversion(input_tensor: Any, **values: Any) -> np.ndarray:
    """ttnn.sharded_to_interleaved (``input, memory_config, output_dtype``) and ttnn.interleaved_to_sharded
    (``input, grid, shard_shape, scheme, orientation, output_dtype`` or ``input, memory_config, output_dtype``): the
    input's values, in ``output_dtype`` when given (golden ``_sharding_conversion_golden_function``,
    experimental_loader/golden_functions.py)."""
    return stored_as(input_tensor, _dtype(values), "output_dtype")


@reference("ttnn.reshard", "ttnn.reallocate", "ttnn.move", params=(
    _IN, Param("memory_config", "ignored", 1), Param("output_tensor", "output"),
), keeps_values=True)
def identity(input_tensor: Any, **_: Any) -> np.ndarray:
    """ttnn.reshard, ttnn.reallocate and ttnn.move: the same values elsewhere in memory (their goldens return the
    input: experimental_loader/golden_functions.py's ``_nop_golden_function``, core.py, data_movement.py)."""
    return np.asarray(input_tensor)


@reference("ttnn.clone", params=(_IN, *_positional_dtypes(1, 2), Param("dtype", "dtype")), keeps_values=True)
def clone(input_tensor: Any, **values: Any) -> np.ndarray:
    """ttnn.clone: the input's values, in ``dtype`` when given (golden in core.py:
    ``golden_to_output_dtype(tensor, dtype)``)."""
    return stored_as(input_tensor, _dtype(values))


@reference("ttnn.copy", params=(_IN, Param("output", "tensor", 1, required=True)), input_dtypes=True,
           keeps_values=True)
def copy(input_tensor: Any, output: Any, input_dtypes: Mapping[int, str | None] | None = None, **_: Any) -> np.ndarray:
    """ttnn.copy(a, b): a's values written into b, so in b's dtype (golden ``_golden_function_copy``,
    data_movement.py: ``input_a.to(input_b.dtype)``). b's ttnn dtype comes from the report; with none recorded a
    bfloat16 b (BFLOAT16 or a block float: they round differently) is refused unless a is bfloat16 too."""
    a, b = np.asarray(input_tensor), np.asarray(output)
    if a.shape != b.shape:
        raise UnsupportedArguments(["output"], f"a copy of shape {a.shape} into a tensor of shape {b.shape}")
    target = ((input_dtypes or {}).get(id(output)) or "").rsplit(".", 1)[-1].lower() or None
    if target is None:
        if b.dtype == a.dtype:
            return a
        if b.dtype.name == "bfloat16":
            raise UnsupportedArguments(["output"], "a bfloat16 destination whose ttnn dtype is not recorded")
        target = b.dtype.name
    return stored_as(a, target, "output")


@reference("ttnn.experimental.typecast", params=(
    _IN, Param("dtype", "dtype", 1, required=True), Param("output_mem_config", "ignored", 2),
    Param("output_tensor", "output"),
))
def experimental_typecast(input_tensor: Any, dtype: str, **_: Any) -> np.ndarray:
    """ttnn.experimental.typecast: the input written in ``dtype``. It has no golden function; its device operation is
    ttnn.copy's (tt-metal ``ttnn/cpp/ttnn/operations/experimental/copy/typecast/typecast.cpp`` calls
    ``ttnn::prim::copy`` with the dtype), whose golden writes the values in the destination's dtype
    (``input_a.to(input_b.dtype)``, data_movement.py)."""
    return stored_as(input_tensor, dtype)


@reference("ttnn.tilize_with_val_padding", params=(
    _IN, Param("output_tensor_shape", "ignored", 1), Param("pad_value", "ignored", 2), Param("memory_config", "ignored", 3),
    Param("output_dtype", "dtype", 4), Param("dtype", "dtype"), Param("use_multicore", "ignored"),
), keeps_values=True)
def tilize_with_val_padding(input_tensor: Any, **values: Any) -> np.ndarray:
    """ttnn.tilize_with_val_padding: the padding is the tile layout's physical padding, so the logical values are the
    input's (golden in data_movement.py: ``golden_to_output_dtype(input_tensor, dtype)``)."""
    return stored_as(input_tensor, _dtype(values))


def _slice_rows(rows: int, num_slices: int, slice_index: int) -> slice:
    """Rows ``slice_index`` of ``num_slices`` equal slices of ``rows`` (the partial conversions' slicing)."""
    if num_slices < 1 or not 0 <= slice_index < num_slices:
        raise UnsupportedArguments(["slice_index"], f"slice {slice_index} of {num_slices}")
    size = rows // num_slices
    return slice(slice_index * size, slice_index * size + size)


@reference("ttnn.interleaved_to_sharded_partial", params=(
    _IN, Param("grid", "ignored", 1), Param("shard_shape", "ignored", 2), Param("num_slices", "int", 3, required=True),
    Param("slice_index", "int", 4, required=True), Param("shard_scheme", "ignored", 5),
    Param("shard_orientation", "ignored", 6), _OUTPUT_DTYPE,
), keeps_values=True)
def interleaved_to_sharded_partial(input_tensor: Any, num_slices: int, slice_index: int, output_dtype: str | None,
                                   **_: Any) -> np.ndarray:
    """ttnn.interleaved_to_sharded_partial: the input flattened to [1, 1, rows, width] and slice ``slice_index`` of
    ``num_slices`` equal slices of its rows (golden in experimental_loader/golden_functions.py)."""
    x = np.asarray(input_tensor)
    if x.ndim < 2:
        raise UnsupportedArguments(["input_tensor"], f"a tensor of rank {x.ndim}")
    flat = x.reshape(1, 1, -1, x.shape[-1])
    return stored_as(flat[:, :, _slice_rows(flat.shape[2], num_slices, slice_index), :], output_dtype, "output_dtype")


@reference("ttnn.sharded_to_interleaved_partial", params=(
    _IN, Param("cache_tensor", "tensor", 1, required=True), Param("num_slices", "int", 2, required=True),
    Param("slice_index", "int", 3, required=True), Param("memory_config", "ignored", 4), _OUTPUT_DTYPE,
), keeps_values=True)
def sharded_to_interleaved_partial(input_tensor: Any, cache_tensor: Any, num_slices: int, slice_index: int,
                                   output_dtype: str | None, **_: Any) -> np.ndarray:
    """ttnn.sharded_to_interleaved_partial: the cache tensor (flattened to [1, 1, rows, width]) with slice
    ``slice_index`` of ``num_slices`` equal slices of its rows replaced by the input (golden in
    experimental_loader/golden_functions.py); the output is the updated cache, in its own shape."""
    cache = np.asarray(cache_tensor)
    if cache.ndim < 2:
        raise UnsupportedArguments(["cache_tensor"], f"a tensor of rank {cache.ndim}")
    flat = cache.reshape(1, 1, -1, cache.shape[-1]).copy()
    rows = _slice_rows(flat.shape[2], num_slices, slice_index)
    piece = stored_as(input_tensor, output_dtype, "output_dtype")
    if piece.size != flat[:, :, rows, :].size:
        raise UnsupportedArguments(["input_tensor"], f"a slice of shape {piece.shape} for {flat[:, :, rows, :].shape}")
    flat[:, :, rows, :] = piece.reshape(flat[:, :, rows, :].shape)
    return flat.reshape(cache.shape)
