"""The comparison metric vector of :func:`reportdb.compare` streamed through windows of two tensors, so comparing
large tensors (a run against a run, the web API) holds a few windows at a time instead of both whole arrays.

``compare`` takes two whole arrays; here the accumulator it streams its blocks through (``metrics.PairAccumulator``) is
fed the blocks of windows read one after the other (two halves of the tensor in two threads, merged in order as
``compare`` merges its spans) and summarised by the same code, so the metrics have the same definitions.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable

import numpy as np

from ..dtypes import dtype_name, numpy_dtype
from ..errors import AssemblyError
from .blocks import flat_blocks, parallel_map
from .metrics import BLOCK_ELEMENTS, Comparison, PairAccumulator, check_params, compare
from .tiles import DEFAULT_TILE, tile_geometry

if TYPE_CHECKING:
    from ..report import Report

Window = tuple["int | slice", ...]

#: Elements per window of a streamed comparison (two sides, two threads: ~16 MiB of float32 windows at a time).
WINDOW_ELEMENTS = 1 << 20


def flat_windows(shape: tuple[int, ...], elements: int) -> list[Window]:
    """Windows that cover a tensor of ``shape`` in C order, each of at most about ``elements`` elements (at least one
    row of the last axis) and each one contiguous run of the tensor's elements."""
    if not shape:
        return [()]
    k = 0
    while k < len(shape) - 1 and math.prod(shape[k + 1 :]) > elements:
        k += 1
    step = max(1, elements // max(1, math.prod(shape[k + 1 :])))
    return [
        (*map(int, lead), slice(start, min(shape[k], start + step)))
        for lead in np.ndindex(*shape[:k])
        for start in range(0, shape[k], step)
    ]


def window_start(window: Window, shape: tuple[int, ...]) -> int:
    """The flat (C-order) position of the first element of a window :func:`flat_windows` gave for ``shape``."""
    if not window:
        return 0
    first = tuple(int(w.start or 0) if isinstance(w, slice) else int(w) for w in window)
    return int(np.ravel_multi_index(first, shape[: len(first)])) * math.prod(shape[len(first) :])


def compare_streamed(
    read_a: Callable[[Window], np.ndarray], read_b: Callable[[Window], np.ndarray],
    shape_a: tuple[int, ...], shape_b: tuple[int, ...], dtype_a: np.dtype, dtype_b: np.dtype,
    *, rtol: float, atol: float, pcc: float, fit_tol: float = 0.02, tile: tuple[int, int] = DEFAULT_TILE,
) -> Comparison:
    """``reportdb.compare(a, b, ...)`` of the tensors ``read_a(window)`` and ``read_b(window)`` give window by window
    (the same windows on both sides), holding a few windows at a time instead of both whole arrays."""
    if shape_a != shape_b:  # compare() reads nothing then: zero-strided stand-ins of the right shapes and dtypes
        return compare(np.broadcast_to(np.zeros((), dtype_a), shape_a), np.broadcast_to(np.zeros((), dtype_b), shape_b),
                       rtol=rtol, atol=atol, pcc=pcc, fit_tol=fit_tol, tile=tile)
    check_params(rtol, atol, pcc, fit_tol)
    geometry = tile_geometry(shape_a, tile)
    size = math.prod(shape_a)
    block = max(1, min(size, BLOCK_ELEMENTS))
    windows = flat_windows(shape_a, WINDOW_ELEMENTS)

    def run(part: list[Window]) -> PairAccumulator:
        acc = PairAccumulator(dtype_a, dtype_b, rtol, atol, block, geometry)
        with np.errstate(over="ignore", invalid="ignore"):  # per thread: overflows surface as None in the summary
            for window in part:
                a, b = read_a(window).reshape(-1), read_b(window).reshape(-1)
                first = window_start(window, shape_a)
                for start, blk_a, blk_b in zip(range(first, first + a.size, block), flat_blocks(a, block),
                                               flat_blocks(b, block)):
                    acc.add(blk_a, blk_b, start)
        return acc

    halves = [windows[: len(windows) // 2], windows[len(windows) // 2 :]] if len(windows) >= 2 else [windows]
    total, *rest = parallel_map(run, halves)  # two halves at once: reads, checks and numpy loops release the GIL
    for acc in rest:
        total.merge(acc)
    with np.errstate(over="ignore", invalid="ignore"):
        metrics = total.summary(size, pcc, fit_tol)
    return Comparison(
        shape_a=shape_a, shape_b=shape_b, dtype_a=dtype_name(dtype_a), dtype_b=dtype_name(dtype_b), rtol=float(rtol),
        atol=float(atol), pcc_threshold=float(pcc), fit_tol=float(fit_tol), **metrics,
    )


def compare_stored(
    actual: "Report", actual_id: int, golden: "Report", golden_id: int, rank: int, *, rtol: float, atol: float, pcc: float
) -> Comparison:
    """``compare`` of two stored tensors (of one report or two), read window by window, judged tile by tile in the
    actual tensor's stored tile shape (else 32x32); AssemblyError when one's shards do not assemble into one array."""
    sides = []
    for report, tensor_id in ((actual, actual_id), (golden, golden_id)):
        info = report.tensor_info(tensor_id, rank)
        if info.shape is None:
            raise AssemblyError(f"tensor {tensor_id} (rank {rank}) has {len(info.shards)} shards that do not assemble "
                                "into one array")
        sides.append((info, lambda window, r=report, t=tensor_id: r.tensor(t, rank, window=window or None)))
    (info_a, read_a), (info_b, read_b) = sides
    tile = info_a.spec.tile_shape or DEFAULT_TILE
    return compare_streamed(read_a, read_b, tuple(info_a.shape or ()), tuple(info_b.shape or ()),
                            numpy_dtype(info_a.dtype), numpy_dtype(info_b.dtype), rtol=rtol, atol=atol, pcc=pcc,
                            tile=tile)
