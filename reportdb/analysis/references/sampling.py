"""Sampling operations: top-k and sort (values and indices, two outputs) and plus_one (the token counter), as ttnn
0.81.1's golden functions define them (tt-metal ``ttnn/ttnn/operations/reduction.py`` for topk,
``data_movement.py`` for sort and plus_one). Among equal values the lower index comes first (a stable sort); the device's
unstable network may pick another of the tied indices (the goldens then mask those positions), so an index mismatch
at a tie is no fault. NaN sorts as the largest value, as in torch."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import Param, UnsupportedArguments, reference
from .data_movement import rank_check


def _order(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """The indices that sort ``x`` along ``axis``, stably, NaN above +inf."""
    keys = x.astype(np.float64)
    nan = np.isnan(keys)
    order = np.argsort(-np.where(nan, np.inf, keys) if descending else np.where(nan, np.inf, keys), axis=axis,
                       kind="stable")
    ordered_nan = np.take_along_axis(nan, order, axis)
    if ordered_nan.any():  # NaN and +inf share a key: NaN goes above, in index order within each
        order = np.take_along_axis(order, np.argsort(~ordered_nan if descending else ordered_nan, axis=axis,
                                                     kind="stable"), axis)
    return order


@reference("ttnn.topk", params=(
    Param("input_tensor", "tensor", 0, required=True), Param("k", "int", 1, default=32), Param("dim", "int", 2, default=-1),
    Param("largest", "bool", 3, default=True), Param("sorted", "bool", 4, default=True), Param("stable", "bool"),
    Param("indices_tensor", "tensor"), Param("output_tensor", "output"),
))
def topk(input_tensor: Any, k: int, dim: int, largest: bool, sorted: bool, indices_tensor: Any,
         **_: Any) -> tuple[np.ndarray, np.ndarray]:
    """ttnn.topk: the ``k`` largest (or smallest) values along ``dim``, in order, and their indices (or the labels
    ``indices_tensor`` holds at them); ties as the module says."""
    x = np.asarray(input_tensor)
    (axis,) = rank_check("dim", (dim,), x.ndim)
    if not sorted:
        raise UnsupportedArguments(["sorted"], "an unsorted top-k, whose order is the device's own")
    if not 0 <= k <= x.shape[axis]:
        raise UnsupportedArguments(["k"], f"k={k} on an axis of {x.shape[axis]}")
    indices = np.take(_order(x, axis, largest), np.arange(k), axis=axis)
    values = np.take_along_axis(x, indices, axis)
    if indices_tensor is not None:
        labels = np.asarray(indices_tensor)
        if labels.shape != x.shape:
            raise UnsupportedArguments(["indices_tensor"], f"labels of shape {labels.shape} for {x.shape}")
        indices = np.take_along_axis(labels, indices, axis)
    return values, indices.astype(np.int64)


@reference("ttnn.sort", params=(
    Param("input_tensor", "tensor", 0, required=True), Param("dim", "int", 1, default=-1),
    Param("descending", "bool", 2, default=False), Param("stable", "bool", 3, default=False), Param("out", "output"),
))
def sort(input_tensor: Any, dim: int, descending: bool, **_: Any) -> tuple[np.ndarray, np.ndarray]:
    """ttnn.sort as torch.sort: the values along ``dim`` in ascending (or descending) order and their indices
    (golden ``_golden_function_sort``); ties as the module says."""
    x = np.asarray(input_tensor)
    (axis,) = rank_check("dim", (dim,), x.ndim)
    order = _order(x, axis, descending)
    return np.take_along_axis(x, order, axis), order.astype(np.int64)


@reference("ttnn.plus_one", params=(
    Param("input_tensor", "tensor", 0, required=True), Param("skip_negative_entries", "bool", default=False),
))
def plus_one(input_tensor: Any, skip_negative_entries: bool, **_: Any) -> np.ndarray:
    """ttnn.plus_one on an INT32 or UINT32 tensor: every element plus 1, wrapping at the dtype's end; with
    ``skip_negative_entries`` only elements in [0, INT32_MAX) of a signed tensor (golden in data_movement.py)."""
    x = np.asarray(input_tensor)
    if x.dtype.kind not in "iu":
        raise UnsupportedArguments(["input_tensor"], f"an input of dtype {x.dtype.name} (plus_one takes INT32 or UINT32)")
    bumped = (x.astype(np.int64) + 1).astype(x.dtype)  # wraps as the device's 32-bit addition does
    if skip_negative_entries and x.dtype.kind == "i":
        return np.where((x >= 0) & (x < 2**31 - 1), bumped, x)
    return bumped
