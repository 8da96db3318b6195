"""N-d windows of a stored shard, read from only the chunks (and, in a chunk already checked, only the bytes) they need.

A window is numpy basic indexing: one int or slice (positive step) per axis, at most one Ellipsis, trailing axes
omitted meaning whole. Its bytes in the shard's C-contiguous blob form a box: a few levels of ``count`` x byte
``step``, the last a contiguous run (the trailing axes it covers whole merged into it). Offsets grow with the position
in the C-ordered result, so the bytes one chunk holds fill one contiguous range of the result, cut into at most two
boxes per level (:meth:`WindowPlan.blocks`), each copied by one strided numpy copy: no per-element index arrays.

Integrity. A chunk's crc32 covers the whole chunk, so checking it means reading all of it (a 4 MiB chunk: ~0.2-1 ms
to read, ~1 ms of crc32). The first time a window touches a raw chunk, the whole chunk is read and checked, and the
caller's :class:`VerifiedChunks` (one per connection) remembers it; later windows into that chunk read only the byte
ranges they need through ``blobopen`` (a 4 KiB row: ~10 us). The memory is dropped whenever another connection
commits to the file (``PRAGMA data_version``), so a chunk changed through SQLite is checked again; what it cannot see
is a byte changed on disk behind SQLite's back after this connection checked the chunk. A crc per 64 KiB block kept
with each chunk (a schema change) would check every read at that grain instead. Compressed chunks are always read,
checked and decompressed whole; without ``blobopen`` (Python 3.10) every chunk touched is read and checked whole.
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass
from types import EllipsisType
from typing import Callable, Union

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..errors import InvalidArgumentError
from . import blobs, pools

#: A window: one index, or a tuple of them (numpy basic indexing with ints, slices of positive step, one Ellipsis).
Window = Union[int, slice, EllipsisType, tuple[Union[int, slice, EllipsisType], ...]]

#: A read through ``blobopen`` costs about as much as copying 8 KiB more (measured: ~0.4 us a call, ~10-20 GB/s from
#: SQLite's page cache), so a box whose gaps are smaller than this per split is read in one piece.
_GAP = 8 << 10


@dataclass(frozen=True)
class WindowPlan:
    """Where a window's bytes lie in its shard's blob: ``counts[i]`` times ``steps[i]`` bytes apart per level, the last
    level the run of ``counts[-1]`` contiguous bytes (``steps[-1] == 1``), from byte ``base``; ``shape`` is the
    result's. ``extents[i]``: bytes from the first to past the last byte of the box of levels ``i..`` (``extents[-1]``
    is 1: a byte); ``sizes[i]``: result bytes per index of level ``i``. No levels: an empty window."""

    shape: tuple[int, ...]
    base: int
    counts: tuple[int, ...]
    steps: tuple[int, ...]
    extents: tuple[int, ...]
    sizes: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        """The size of the result in bytes."""
        return math.prod(self.counts) if self.counts else 0

    @property
    def span(self) -> tuple[int, int]:
        """The byte range of the blob from the window's first byte to past its last (empty for an empty window)."""
        return (self.base, self.base + self.extents[0]) if self.counts else (self.base, self.base)

    def blocks(self, lo: int, hi: int) -> list[tuple[int, int, int, int]]:
        """The window's bytes within blob bytes ``lo..hi`` as boxes ``(level, count, src, pos)``: indices ``0..count``
        of level ``level`` (all of the levels below) from blob byte ``src``, landing at result byte ``pos`` onwards;
        at most two per level."""
        found: list[tuple[int, int, int, int]] = []
        if self.counts:
            self._walk(0, self.base, 0, lo, hi, found)
        return found

    def _walk(self, level: int, base: int, pos: int, lo: int, hi: int, found: list[tuple[int, int, int, int]]) -> None:
        n, step, inner, size = self.counts[level], self.steps[level], self.extents[level + 1], self.sizes[level]
        # Index j's bytes are base + j*step .. + inner; step >= inner, so they are disjoint and in order.
        first = max(0, (lo - inner - base) // step + 1)  # the first j ending after lo
        last = min(n - 1, (hi - 1 - base) // step)  # the last j starting before hi
        if first > last:
            return
        whole_first = max(first, -((base - lo) // step))  # the first j starting at or after lo
        whole_last = min(last, (hi - inner - base) // step)  # the last j ending at or before hi
        if whole_first > whole_last:  # at most two indices, each cut by lo or hi
            for j in range(first, last + 1):
                self._walk(level + 1, base + j * step, pos + j * size, lo, hi, found)
            return
        if first < whole_first:
            self._walk(level + 1, base + first * step, pos + first * size, lo, hi, found)
        found.append((level, whole_last - whole_first + 1, base + whole_first * step, pos + whole_first * size))
        if last > whole_last:
            self._walk(level + 1, base + last * step, pos + last * size, lo, hi, found)

    def extent(self, level: int, count: int) -> int:
        """Bytes from the first to past the last byte of indices ``0..count`` of ``level``."""
        return (count - 1) * self.steps[level] + self.extents[level + 1]

    def copy(self, flat: np.ndarray, block: tuple[int, int, int, int], data: np.ndarray, offset: int) -> None:
        """Copy ``block`` into the result ``flat`` from ``data``, which holds blob bytes from ``offset`` on."""
        level, count, src, pos = block
        start, stop = src - offset, src - offset + self.extent(level, count)
        if start < 0 or stop > data.nbytes:  # as_strided reads whatever memory it is pointed at
            raise AssertionError(f"window box at bytes {src}..{src + stop - start} is outside the bytes read")
        shape = (count,) + self.counts[level + 1 :]
        target = flat[pos : pos + count * self.sizes[level]]
        if stop - start == target.nbytes:  # contiguous
            target[:] = data[start:stop]
        else:
            np.copyto(target.reshape(shape), as_strided(data[start:], shape, (self.steps[level],) + self.steps[level + 1 :],
                                                       writeable=False))


def plan_window(shape: tuple[int, ...], itemsize: int, window: Window) -> WindowPlan:
    """Where ``window`` of a C-contiguous array of ``shape`` and ``itemsize`` lies in its bytes (numpy basic indexing:
    negative indices count from the end, slices are clipped); InvalidArgumentError for a window numpy would refuse
    or that is not basic indexing with positive steps."""
    items = window if isinstance(window, tuple) else (window,)
    ellipses = [i for i, item in enumerate(items) if item is Ellipsis]
    if len(ellipses) > 1:
        raise InvalidArgumentError(f"a window may hold one Ellipsis (...), not {len(ellipses)}")
    if ellipses:
        i = ellipses[0]
        items = items[:i] + (slice(None),) * (len(shape) - len(items) + 1) + items[i + 1 :]
    if len(items) > len(shape):
        raise InvalidArgumentError(f"a window of {len(items)} indices was given for a {len(shape)}-d tensor of shape "
                                   f"{list(shape)}")
    items = items + (slice(None),) * (len(shape) - len(items))
    strides = [itemsize * math.prod(shape[i + 1 :]) for i in range(len(shape))]
    base, out_shape, levels = 0, [], []
    for axis, (item, n, stride) in enumerate(zip(items, shape, strides)):
        if isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)):
            i = int(item)
            if not -n <= i < n:
                raise InvalidArgumentError(f"index {i} is out of range for axis {axis} of size {n} (shape {list(shape)})")
            base += (i % n) * stride
        elif isinstance(item, slice):
            start, stop, step = _slice_indices(item, n, axis)
            count = len(range(start, stop, step))
            out_shape.append(count)
            base += start * stride if count else 0
            if count != 1:
                levels.append((count, step * stride))
        else:
            raise InvalidArgumentError(f"a window takes ints, slices and one Ellipsis per axis; axis {axis} got "
                                       f"{type(item).__name__} {item!r}")
    if 0 in out_shape:
        return WindowPlan(tuple(out_shape), base, (), (), (), ())
    run = itemsize
    while levels and levels[-1][1] == run:  # an axis whose step is the run so far continues it
        run *= levels.pop()[0]
    counts = tuple(c for c, _ in levels) + (run,)
    steps = tuple(s for _, s in levels) + (1,)
    extents = [1]
    for count, step in zip(reversed(counts), reversed(steps)):
        extents.append((count - 1) * step + extents[-1])
    sizes = tuple(math.prod(counts[i + 1 :]) for i in range(len(counts)))
    return WindowPlan(tuple(out_shape), base, counts, steps, tuple(reversed(extents)), sizes)


def _slice_indices(item: slice, n: int, axis: int) -> tuple[int, int, int]:
    """``slice.indices`` for a slice of ints (or None) with a positive step."""
    for value in (item.start, item.stop, item.step):
        if value is not None and (not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_))):
            raise InvalidArgumentError(f"slice {item} of axis {axis} must hold ints or None, not {type(value).__name__}")
    if item.step is not None and item.step <= 0:
        raise InvalidArgumentError(f"slice {item} of axis {axis}: a window's steps must be positive")
    return item.indices(n)


class VerifiedChunks:
    """The raw chunks whose crc32 one connection has checked since another connection last committed to the file, so
    that later windows into them may read only the bytes they need (see the module's docstring). Keep one per
    connection; a chunk is known by its row id, crc32 and sha256, so a row that now holds other bytes is not."""

    #: Forget everything past this many chunks (64 Ki entries: a few MiB), a bound on memory whatever is read.
    LIMIT = 1 << 16

    def __init__(self) -> None:
        self._chunks: set[tuple[int, int, bytes]] = set()
        self._version: object = None

    def sync(self, conn: sqlite3.Connection) -> None:
        """Forget every chunk if another connection has committed to the file since the last call."""
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        if version != self._version:
            self._chunks.clear()
            self._version = version

    def __contains__(self, chunk: blobs.ChunkRow) -> bool:
        return (chunk.id, chunk.crc32, chunk.digest) in self._chunks

    def add(self, chunk: blobs.ChunkRow) -> None:
        """Remember that ``chunk``'s stored bytes matched its crc32."""
        if len(self._chunks) >= self.LIMIT:
            self._chunks.clear()
        self._chunks.add((chunk.id, chunk.crc32, chunk.digest))


def read_window(
    conn: sqlite3.Connection, layout: blobs.BlobLayout, plan: WindowPlan, dtype: np.dtype, *, what: str = "blob",
    verified: VerifiedChunks | None = None,
) -> np.ndarray:
    """The window ``plan`` of a blob whose ``layout`` was checked (holding at least the chunks of ``plan.span``), as a
    new C-contiguous array of ``dtype``, reading only the chunks that hold its bytes.

    Every chunk touched is checked against its crc32 (a mismatch raises CorruptionError naming ``what``), read whole
    for that; with ``verified``, a raw chunk it already holds is read only where the window needs it (see the module's
    docstring), and the chunks checked here are added to it.
    """
    out = np.empty(plan.shape, dtype=dtype)
    if out.nbytes != plan.nbytes:
        raise InvalidArgumentError(f"{what}: a window plan of {plan.nbytes} bytes was given for {out.nbytes} bytes of "
                                   f"{dtype} in shape {list(plan.shape)}")
    if plan.nbytes == 0:
        return out
    lo, hi = plan.span
    if hi > layout.nbytes:
        raise InvalidArgumentError(f"{what}: the window's bytes {lo}..{hi} are outside the {layout.nbytes}-byte blob")
    flat = out.reshape(-1).view(np.uint8)
    if not hasattr(conn, "blobopen"):  # Python 3.10: no partial reads, so nothing to remember
        verified = None
    if verified is not None:
        verified.sync(conn)
    chunk_size = layout.chunk_size
    with blobs.ChecksBehind(pools.pool("check", 2)) as checks:
        for idx in range(lo // chunk_size, (hi - 1) // chunk_size + 1):
            start = idx * chunk_size
            found = plan.blocks(start, start + layout.expected(idx))
            if not found:  # a chunk between the window's rows
                continue
            chunk = layout.chunk(idx)
            if verified is not None and chunk.codec is None and chunk in verified:
                _read_parts(conn, plan, flat, chunk, start, found, what)
                continue
            data = blobs.chunk_bytes(conn, chunk.id)
            inline = chunk.nbytes < blobs.THREADED_CRC_MIN
            if chunk.codec is not None:
                checks.run(_decode_copy, layout, plan, flat, chunk, start, found, data, what, inline=inline)
                continue
            if len(data) != chunk.nbytes:
                raise blobs.corrupt(what, f"chunk {idx} holds {len(data)} bytes, not {chunk.nbytes}")
            checks.run(_check, chunk, data, what, verified, inline=inline)
            buffer = np.frombuffer(data, dtype=np.uint8)
            for block in found:
                plan.copy(flat, block, buffer, start)
    return out


def _check(chunk: blobs.ChunkRow, data: bytes, what: str, verified: VerifiedChunks | None) -> None:
    """Check a raw chunk's crc32 and remember it in ``verified``."""
    blobs.check_crc(chunk.idx, chunk.crc32, data, what)
    if verified is not None:
        verified.add(chunk)


def _decode_copy(
    layout: blobs.BlobLayout, plan: WindowPlan, flat: np.ndarray, chunk: blobs.ChunkRow, start: int,
    found: list[tuple[int, int, int, int]], data: bytes, what: str,
) -> None:
    """Check a compressed chunk's crc32, decompress it and copy the window's boxes out of it."""
    buffer = np.frombuffer(blobs.decoded(layout, chunk, data, what, crc=True), dtype=np.uint8)
    for block in found:
        plan.copy(flat, block, buffer, start)


def _read_parts(
    conn: sqlite3.Connection, plan: WindowPlan, flat: np.ndarray, chunk: blobs.ChunkRow, start: int,
    found: list[tuple[int, int, int, int]], what: str,
) -> None:
    """Copy the boxes ``found`` of a checked raw chunk stored from blob byte ``start``, reading only their bytes."""
    with conn.blobopen("rdb_chunk", "data", chunk.id, readonly=True) as blob:
        if len(blob) != chunk.nbytes:
            raise blobs.corrupt(what, f"chunk {chunk.idx} holds {len(blob)} bytes, not {chunk.nbytes}")

        def read(src: int, nbytes: int) -> bytes:
            # A slice of a Blob is its bytes (one call, faster than seek + read); typeshed types every subscript int.
            return blob[src - start : src - start + nbytes]  # type: ignore[return-value]

        for block in found:
            _fetch(plan, flat, block, read)


def _fetch(plan: WindowPlan, flat: np.ndarray, block: tuple[int, int, int, int], read: Callable[[int, int], bytes]) -> None:
    """Copy one box into ``flat`` with as few reads as pay: its whole extent at once when the gaps it skips are small,
    else one read per index of its first level (joined into one copy when each of those is contiguous)."""
    level, count, src, pos = block
    extent, size = plan.extent(level, count), plan.sizes[level]
    if extent - count * size <= (count - 1) * _GAP:
        plan.copy(flat, block, np.frombuffer(read(src, extent), dtype=np.uint8), src)
    elif count == 1:
        _fetch(plan, flat, (level + 1, plan.counts[level + 1], src, pos), read)
    elif plan.extent(level, 1) == size:
        step = plan.steps[level]
        flat[pos : pos + count * size] = np.frombuffer(
            b"".join([read(s, size) for s in range(src, src + count * step, step)]), dtype=np.uint8
        )
    else:
        for j in range(count):
            _fetch(plan, flat, (level, 1, src + j * plan.steps[level], pos + j * size), read)
