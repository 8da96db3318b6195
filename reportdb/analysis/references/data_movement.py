"""Operations that move values without arithmetic: transpose, permute, reshape, concat, slice, to_layout, tilize,
untilize, embedding, and split and chunk (several outputs) (typecast is in ``typecast``). Values keep their stored dtype (nothing to round), so
integer tensors are covered too. reportdb stores tensors in their logical shape, so a layout change is the identity."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from . import Param, UnsupportedArguments, elements, reference, shape

_IN = Param("input_tensor", "tensor", 0, required=True)
#: What one piece of a split costs, in elements: ~240 bytes measured (the view, its slot in the list of pieces, its
#: split point), as much as 128 of the two-byte elements stored tensors mostly hold. Splitting 2M elements into
#: pieces of one built 470 MB from a 4 MB input (issue 30).
PIECE_ELEMENTS = 128


def rank_check(name: str, axes: tuple[int, ...], ndim: int) -> tuple[int, ...]:
    """Axes counted from the end made non-negative; one outside the rank is refused."""
    if any(not -ndim <= a < ndim for a in axes):
        raise UnsupportedArguments([name], f"{axes} is outside a tensor of rank {ndim}")
    return tuple(a % ndim for a in axes)


@reference("ttnn.transpose", params=(_IN, Param("dim1", "int", 1, required=True), Param("dim2", "int", 2, required=True)),
           keeps_values=True)
def transpose(input_tensor: Any, dim1: int, dim2: int, **_: Any) -> np.ndarray:
    """ttnn.transpose: two axes swapped."""
    x = np.asarray(input_tensor)
    a, b = rank_check("dim1", (dim1, dim2), x.ndim)
    return np.swapaxes(x, a, b)


@reference("ttnn.permute", params=(_IN, Param("dims", "ints", 1, required=True), Param("pad_value", "ignored")),
           keeps_values=True)
def permute(input_tensor: Any, dims: tuple[int, ...], **_: Any) -> np.ndarray:
    """ttnn.permute: the axes in the order ``dims``."""
    x = np.asarray(input_tensor)
    if len(dims) != x.ndim:
        raise UnsupportedArguments(["dims"], f"{len(dims)} axes for a tensor of rank {x.ndim}")
    return np.transpose(x, rank_check("dims", dims, x.ndim))


@reference("ttnn.reshape", "ttnn.view", "ttnn.experimental.view", params=(_IN, Param("shape", "ints", 1, required=True),
                                                Param("padded_shape", "ignored", 2)), keeps_values=True)
def reshape(input_tensor: Any, shape: tuple[int, ...], **_: Any) -> np.ndarray:
    """ttnn.reshape: the same values in C order under ``shape`` (one -1 inferred); ttnn.view and
    ttnn.experimental.view are that reshape done without a copy where the layout allows it (the latter has no golden
    function: its docstring says ttnn.reshape calls it for this)."""
    x = np.asarray(input_tensor)
    try:
        return x.reshape(shape)
    except ValueError as exc:
        raise UnsupportedArguments(["shape"], str(exc)) from None


def _concat_size(values: Mapping[str, Any]) -> int:
    """Every input's elements: the result (and the float32 copies of mixed dtypes) holds them all, however many
    times one stored tensor is listed."""
    return sum(elements(shape(t)) for t in values["tensors"])


@reference("ttnn.concat", params=(Param("tensors", "tensors", 0, required=True), Param("dim", "int", 1, 0),
                                  Param("groups", "int", default=1), Param("output_tensor", "output")),
           size=_concat_size, keeps_values=True)
def concat(tensors: list[np.ndarray], dim: int, groups: int, **_: Any) -> np.ndarray:
    """ttnn.concat along ``dim`` (grouped concatenation is not modelled)."""
    if groups != 1:
        raise UnsupportedArguments(["groups"], "grouped concatenation")
    arrays = [np.asarray(t) for t in tensors]
    rank_check("dim", (dim,), arrays[0].ndim)  # checked here: numpy overflows on an axis beyond a C long
    if len({a.dtype for a in arrays}) > 1:
        arrays = [a.astype(np.float32) for a in arrays]
    try:
        return np.concatenate(arrays, axis=dim)
    except (ValueError, np.exceptions.AxisError if hasattr(np, "exceptions") else ValueError) as exc:
        raise UnsupportedArguments(["dim"], str(exc)) from None


@reference("ttnn.slice", params=(
    _IN, Param("slice_start", "ints", 1), Param("slice_end", "ints", 2), Param("slice_step", "ints", 3),
    Param("starts", "ints"), Param("ends", "ints"), Param("steps", "ints"), Param("pad_value", "ignored"),
), keeps_values=True)
def slice_(input_tensor: Any, slice_start: Any, slice_end: Any, slice_step: Any, starts: Any, ends: Any,
           steps: Any, **_: Any) -> np.ndarray:
    """ttnn.slice: ``input[start:end:step]`` per leading axis, bounds as positional or keyword arguments."""
    begin, end, step = slice_start or starts, slice_end or ends, slice_step or steps
    if begin is None or end is None:
        raise UnsupportedArguments(["slice_start" if begin is None else "slice_end"], "required but not recorded")
    step = step or (1,) * len(begin)
    if not len(begin) == len(end) == len(step) or any(s <= 0 for s in step):
        raise UnsupportedArguments(["slice_step"], "bounds of different lengths or a step that is not positive")
    return np.asarray(input_tensor)[tuple(slice(b, e, s) for b, e, s in zip(begin, end, step))]


_LAYOUT = (_IN, Param("layout", "ignored", 1), Param("dtype", "dtype"), Param("use_multicore", "ignored"),
           Param("device", "ignored"), Param("pad_value", "ignored"), Param("use_pack_untilize", "ignored"))


@reference("ttnn.to_layout", "ttnn.tilize", "ttnn.untilize", "ttnn.tilize_with_zero_padding", "ttnn.to_memory_config",
           params=_LAYOUT, keeps_values=True)
def to_layout(input_tensor: Any, dtype: str | None = None, **_: Any) -> np.ndarray:
    """A change of layout or memory: the logical values are unchanged (a ``dtype`` asked for as well is refused)."""
    if dtype is not None:
        raise UnsupportedArguments(["dtype"], "a layout change that also converts the dtype")
    return np.asarray(input_tensor)


def _embedding_size(values: Mapping[str, Any]) -> int:
    """A table row per index: 10^6 indices into a table 4096 wide build 4 * 10^9 elements."""
    indices, table = shape(values["input_tensor"]), shape(values["weight"])
    return elements(indices) * max(1, table[-1] if table else 1)


@reference("ttnn.embedding", params=(
    _IN, Param("weight", "tensor", 1, required=True), Param("padding_idx", "ignored"), Param("layout", "ignored"),
    Param("embeddings_type", "ignored"), Param("dtype", "dtype"), Param("output_tensor", "output"),
), size=_embedding_size, keeps_values=True)
def embedding(input_tensor: Any, weight: Any, **_: Any) -> np.ndarray:
    """ttnn.embedding: the rows of ``weight`` the indices name (an index outside the table is refused)."""
    indices = np.asarray(input_tensor)
    table = np.asarray(weight)
    if indices.dtype.kind not in "iu":
        if indices.dtype.kind == "f" and np.all(np.mod(indices, 1) == 0):
            indices = indices.astype(np.int64)
        else:
            raise UnsupportedArguments(["input_tensor"], f"indices of dtype {indices.dtype.name}")
    if table.ndim != 2 and not (table.ndim == 4 and table.shape[0] == table.shape[1] == 1):
        raise UnsupportedArguments(["weight"], f"an embedding table of shape {table.shape}")
    table = table.reshape(table.shape[-2], table.shape[-1])
    if indices.size and (indices.min() < 0 or indices.max() >= table.shape[0]):
        raise UnsupportedArguments(["input_tensor"], "an index outside the embedding table")
    return table[indices.astype(np.int64)]


def _axis_length(values: Mapping[str, Any], name: str) -> int | None:
    """The length of the axis ``values[name]`` names in the input, None when it names none (the reference refuses)."""
    dims = shape(values["input_tensor"])
    dim = values.get(name)
    return dims[dim] if isinstance(dim, int) and -len(dims) <= dim < len(dims) else None


def _pieces_size(pieces: int, values: Mapping[str, Any]) -> int:
    """The input's elements (the pieces are views of it) and what ``pieces`` pieces cost (:data:`PIECE_ELEMENTS`)."""
    return elements(shape(values["input_tensor"])) + pieces * PIECE_ELEMENTS


def _split_size(values: Mapping[str, Any]) -> int:
    """:func:`_pieces_size` of the pieces ``split_size`` cuts: one per ``split_size`` along the axis, or one per
    listed size."""
    n, sizes = _axis_length(values, "dim"), values["split_size"]
    one = len(sizes) == 1 and sizes[0] > 0
    return _pieces_size(-(-n // sizes[0]) if one and n is not None else len(sizes), values)


@reference("ttnn.split", params=(_IN, Param("split_size", "ints", 1, required=True), Param("dim", "int", 2, default=0)),
           size=_split_size, keeps_values=True)
def split(input_tensor: Any, split_size: tuple[int, ...], dim: int, **_: Any) -> tuple[np.ndarray, ...]:
    """ttnn.split as torch.split: pieces of ``split_size`` along ``dim`` (the last one shorter), or pieces of the
    listed sizes when they add up to the axis."""
    x = np.asarray(input_tensor)
    (axis,) = rank_check("dim", (dim,), x.ndim)
    n = x.shape[axis]
    if len(split_size) == 1 and split_size[0] > 0:  # one size (a one-element list of the whole axis is the same)
        sizes = [min(split_size[0], n - start) for start in range(0, n, split_size[0])] or [0]
    elif len(split_size) > 1 and sum(split_size) == n and all(s >= 0 for s in split_size):
        sizes = list(split_size)
    else:
        raise UnsupportedArguments(["split_size"], f"split sizes {split_size} for an axis of {n}")
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


def _chunk_size(values: Mapping[str, Any]) -> int:
    """:func:`_pieces_size` of the chunks: at most ``chunks``, at most one per element of the axis."""
    n = _axis_length(values, "dim")
    return _pieces_size(max(1, min(values["chunks"], n or 1)), values)


@reference("ttnn.chunk", params=(_IN, Param("chunks", "int", 1, required=True), Param("dim", "int", 2, required=True)),
           size=_chunk_size, keeps_values=True)
def chunk(input_tensor: Any, chunks: int, dim: int, **_: Any) -> tuple[np.ndarray, ...]:
    """ttnn.chunk as torch.chunk: pieces of ceil(n / chunks) along ``dim`` (so possibly fewer than ``chunks``)."""
    x = np.asarray(input_tensor)
    (axis,) = rank_check("dim", (dim,), x.ndim)
    if chunks < 1:
        raise UnsupportedArguments(["chunks"], f"{chunks} chunks")
    n = x.shape[axis]
    size = max(1, -(-n // chunks))
    return tuple(np.split(x, list(range(size, n, size)), axis=axis)) if n else (x,)
