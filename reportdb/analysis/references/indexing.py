"""Operations that read or write elements at the positions an index tensor names along one axis: gather and scatter,
as torch defines them and ttnn 0.81.1's golden functions call them (tt-metal ``ttnn/ttnn/operations/
data_movement.py``: ``torch.gather``, ``torch.scatter``). Values keep their stored dtype."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import Param, UnsupportedArguments, reference
from .data_movement import rank_check


def _indices(name: str, value: Any, length: int) -> np.ndarray:
    """An index tensor as int64: integer values, or float values that are whole numbers; every one in
    [0, ``length``)."""
    index = np.asarray(value)
    if index.dtype.kind not in "iu":
        whole = index.astype(np.float64)
        if not np.all(np.mod(whole, 1) == 0):
            raise UnsupportedArguments([name], f"indices of dtype {index.dtype.name} that are not whole numbers")
        index = whole
    index = index.astype(np.int64)
    if index.size and (index.min() < 0 or index.max() >= length):
        raise UnsupportedArguments([name], f"an index outside an axis of {length}")
    return index


def _positions(index: np.ndarray, axis: int) -> tuple[np.ndarray, ...]:
    """The coordinates ``index`` names: its own position on every axis but ``axis``, its value on ``axis``."""
    grid: list[np.ndarray] = list(np.indices(index.shape, sparse=True))
    grid[axis] = index
    return tuple(grid)


def _check_shapes(index: np.ndarray, dims: tuple[int, ...], axis: int, name: str) -> None:
    """torch's rule: the index has the tensor's rank and is no larger on every axis but ``axis``."""
    if index.ndim != len(dims) or any(i > d for n, (i, d) in enumerate(zip(index.shape, dims)) if n != axis):
        raise UnsupportedArguments([name], f"an index of shape {index.shape} for a tensor of shape {dims}")


@reference("ttnn.gather", params=(
    Param("input_tensor", "tensor", 0, required=True), Param("dim", "int", 1, required=True),
    Param("index", "tensor", 2, required=True), Param("sparse_grad", "bool", default=False), Param("out", "output"),
), keeps_values=True)
def gather(input_tensor: Any, dim: int, index: Any, **_: Any) -> np.ndarray:
    """ttnn.gather as torch.gather: ``out[i][j][k] = input[index[i][j][k]][j][k]`` for ``dim`` 0, and so on; the
    output has the index's shape."""
    x = np.asarray(input_tensor)
    (axis,) = rank_check("dim", (dim,), x.ndim)
    idx = _indices("index", index, x.shape[axis])
    _check_shapes(idx, x.shape, axis, "index")
    return x[_positions(idx, axis)]


@reference("ttnn.scatter", params=(
    Param("input_tensor", "tensor", 0, required=True), Param("dim", "int", 1, required=True),
    Param("index", "tensor", 2, required=True), Param("src", "tensor", 3, required=True),
), keeps_values=True)
def scatter(input_tensor: Any, dim: int, index: Any, src: Any, **_: Any) -> np.ndarray:
    """ttnn.scatter as torch.scatter: the input with ``out[index[i][j][k]][j][k] = src[i][j][k]`` for ``dim`` 0, and
    so on. Two source elements aimed at one position are refused: which one lands is unspecified in torch and on
    the device."""
    x, values = np.asarray(input_tensor), np.asarray(src)
    (axis,) = rank_check("dim", (dim,), x.ndim)
    idx = _indices("index", index, x.shape[axis])
    _check_shapes(idx, x.shape, axis, "index")
    if values.ndim != idx.ndim or any(i > s for i, s in zip(idx.shape, values.shape)):
        raise UnsupportedArguments(["src"], f"a source of shape {values.shape} for an index of shape {idx.shape}")
    positions = _positions(idx, axis)
    targets = np.ravel_multi_index(np.broadcast_arrays(*positions), x.shape).ravel()
    if np.unique(targets).size != targets.size:
        raise UnsupportedArguments(["index"], "two source elements scattered to one position")
    out = x.copy()
    out[positions] = values[tuple(slice(0, n) for n in idx.shape)].astype(x.dtype)
    return out
