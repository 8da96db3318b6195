"""Block streaming shared by statistics and metrics: fixed-size 1-D blocks of any array, per-thread scratch buffers,
spans of blocks run in threads, and the pairwise merge of partial moments.

Statistics and metrics are computed in float64 over blocks of :data:`BLOCK_ELEMENTS` elements, so memory stays
bounded whatever the tensor size; partial results of disjoint blocks (and of spans of blocks streamed on separate
cores) merge into the whole array's figures.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

from .._lazy import lazy_module

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
else:  # numpy is imported on first use: opening a report and reading its metadata need none
    np = lazy_module("numpy", globals(), "np")

from .. import pools

#: Elements per block: 2 MiB of float64, small enough for a few scratch arrays to stay in cache between passes.
BLOCK_ELEMENTS = 1 << 18

_T = TypeVar("_T")
_J = TypeVar("_J")

_local = threading.local()


def scratch(name: str, size: int, dtype: np.dtype | type) -> np.ndarray:
    """A per-thread reusable 1-D buffer of ``size`` elements: first-touching freshly allocated memory costs
    more than the arithmetic on this class of VM, and statistics run on every stored tensor. Buffers only
    grow to the largest block seen (a few MiB per thread); callers must not hold them across calls."""
    cache: dict[tuple[str, np.dtype], np.ndarray] = _local.__dict__.setdefault("buffers", {})
    key = (name, np.dtype(dtype))
    buf = cache.get(key)
    if buf is None or buf.size < size:
        buf = cache[key] = np.empty(size, dtype=key[1])
    return buf[:size]


def flat_blocks(array: np.ndarray, block: int, start: int = 0, stop: int | None = None) -> Iterator[np.ndarray]:
    """Yield consecutive 1-D C-order slices of ``array[start:stop]`` (flat positions) of at most ``block``
    elements, copying only non-contiguous input (one block at a time, from sub-arrays of at most ``block`` elements:
    :func:`_flat_pieces`)."""
    stop = array.size if stop is None else stop
    if array.flags.c_contiguous:
        flat = array.reshape(-1)
        for first in range(start, stop, block):
            yield flat[first : min(first + block, stop)]
        return
    for first in range(start, stop, block):
        pieces = list(_flat_pieces(array, first, min(first + block, stop), block))
        yield pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


def _flat_pieces(array: np.ndarray, first: int, last: int, block: int) -> Iterator[np.ndarray]:
    """Contiguous 1-D copies of flat C-order positions ``first..last`` of a non-contiguous array (a permute's or a
    transpose's view, a broadcast): each from a sub-array along the leading axes of at most ``block`` elements, or from a
    strided 1-D slice. numpy copies those a strided run at a time, where ``array.flat``'s slices went element by
    element (a transposed [1, 16, 256, 64] reference: 22 ns an element compared, against 7.5 contiguous)."""
    if array.ndim <= 1:
        yield np.ascontiguousarray(array.reshape(-1)[first:last])
    elif array.size <= block:
        yield np.ascontiguousarray(array).reshape(-1)[first:last]
    else:
        per = array.size // array.shape[0]
        for i in range(first // per, -(-last // per)):
            lo = i * per
            yield from _flat_pieces(array[i], max(first - lo, 0), min(last - lo, per), block)


def split_range(size: int, block: int) -> list[tuple[int, int]]:
    """Split positions 0..size into one block-aligned span per worker thread; a single span unless the
    array is at least four blocks long per worker, where threading pays for itself."""
    blocks = -(-size // block)
    workers = max(1, min(_cpus(), 4, blocks // 4))
    if workers == 1:
        return [(0, size)]
    per_worker = -(-blocks // workers) * block
    return [(start, min(start + per_worker, size)) for start in range(0, size, per_worker)]


def parallel_map(fn: Callable[[_J], _T], jobs: list[_J]) -> list[_T]:
    """``[fn(job) for job in jobs]``, in threads when there are several jobs (numpy releases the GIL in
    its loops, so block-streaming spans of an array run on separate cores).

    The first job runs in the calling thread, the others in this process's ``blocks`` pool, whose threads (and so
    their :func:`scratch` buffers) last: a pool made per call started threads and faulted in fresh scratch memory for
    every tensor a writer stored (a large part of its statistics' CPU time, benchmarks/NOTES.md). A job already running in that pool runs
    its own jobs inline, so no pool thread waits on the pool. Returns once every job has ended, even on an error."""
    if len(jobs) == 1 or getattr(_local, "pool_worker", False):
        return [fn(job) for job in jobs]
    from concurrent.futures import wait  # loaded with the pool, not with the module

    pool = pools.pool("blocks", _cpus())
    futures = [pool.submit(_as_pool_worker, fn, job) for job in jobs[1:]]
    try:
        first = fn(jobs[0])
    finally:
        wait(futures)  # none outlives the call: the jobs read the caller's arrays
    return [first, *(future.result() for future in futures)]


def _as_pool_worker(fn: Callable[[_J], _T], job: _J) -> _T:
    """Run ``fn(job)`` in a ``blocks`` pool thread, marked as such for a nested :func:`parallel_map`."""
    _local.pool_worker = True
    return fn(job)


def _cpus() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def to_float64(block: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Convert the 1-D ``block`` into the front of the reusable float64 buffer ``out`` and return that view. bfloat16
    is widened by its bits (the top half of a float32's, exactly), about half the cost of ml_dtypes' own cast."""
    view = out[: block.size]
    if block.dtype.kind == "V" and block.dtype.name == "bfloat16":  # ml_dtypes' kind; its name is a slow property
        wide = scratch("bfloat16_bits", block.size, np.uint32)
        np.left_shift(block.view(np.uint16), 16, out=wide, dtype=np.uint32)
        np.copyto(view, wide.view(np.float32))
    else:
        np.copyto(view, block, casting="unsafe")
    return view


def dot(x: np.ndarray, y: np.ndarray) -> float:
    """Sum of products without BLAS: einsum's single-threaded SIMD loop does not stall when the other
    core is busy, as a threaded BLAS dot can on a loaded 2-core machine."""
    return float(np.einsum("i,i->", x, y))


class Moments:
    """Count, mean and M2 (sum of squared deviations from the mean) of a run of float64 values.

    Partial moments of disjoint runs merge with Chan, Golub & LeVeque's pairwise formula, which stays accurate
    where a running sum of squares would cancel, and lets blocks and spans streamed apart combine in order.
    """

    __slots__ = ("n", "mean", "m2")

    def __init__(self, n: int = 0, mean: float = 0.0, m2: float = 0.0) -> None:
        self.n = n
        self.mean = mean
        self.m2 = m2

    def merge(self, other: Moments) -> tuple[float, float]:
        """Fold in the moments of other positions. Returns the shift of the other run's mean from this one's and
        the pair weight ``n * other.n / (n + other.n)`` (both 0 when a side is empty), so a co-moment of two
        sequences merges alongside as ``c += other_c + delta_x * delta_y * weight``."""
        if other.n == 0:
            return 0.0, 0.0
        if self.n == 0:
            self.n, self.mean, self.m2 = other.n, other.mean, other.m2
            return 0.0, 0.0
        total = self.n + other.n
        delta = other.mean - self.mean
        weight = self.n * other.n / total
        self.mean += delta * other.n / total
        self.m2 += other.m2 + delta * delta * weight
        self.n = total
        return delta, weight
