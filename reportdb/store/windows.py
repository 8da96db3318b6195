"""N-d windows of a stored shard, read from only the chunks, and within them only the blocks, they need.

A window is numpy basic indexing: one int or slice (positive step) per axis, at most one Ellipsis, trailing axes
omitted meaning whole. Its bytes in the shard's C-contiguous blob form a box: a few levels of ``count`` x byte
``step``, the last a contiguous run (the trailing axes it covers whole merged into it). Offsets grow with the position
in the C-ordered result, so the bytes one chunk holds fill one contiguous range of the result, cut into at most two
boxes per level (:meth:`WindowPlan.blocks`), each copied by one strided numpy copy: no per-element index arrays.

Integrity. A raw chunk with block crcs (``rdb_chunk_crc``, schema 0005 on; see ``blobs.py``) is read only in the
4 KiB blocks the window touches, each checked against its crc32: a 4 KiB row costs one block, a 64x64 window of an
8192-wide float32 matrix 64 blocks (256 KiB), never a whole 4 MiB chunk. Reads go through one ``blobopen`` handle per
chunk, kept open while the Report holds its read snapshot (:class:`BlobHandles`), or on Python 3.10 through
``substr()`` of the needed byte range (which saves the transfer and the crc of the rest, though SQLite still walks the
chunk's pages to the range). Chunks without block crcs (a file written before
0005, compressed chunks, chunks of one block) are checked whole against their crc32, read whole for that; compressed
chunks are always read, checked and decompressed whole. A Report remembers what it has checked
(:class:`VerifiedBlocks`), so a repeated window reads only its own bytes, with no crc: the 64x64 window again is 64
reads of 256 bytes. That memory is forgotten whenever the file changes through SQLite; see the class for the
trade-off.
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass
from types import EllipsisType
from typing import TYPE_CHECKING, Sequence, Union

from .._lazy import lazy_module

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
else:  # numpy is imported on first use: opening a report and reading its metadata need none
    np = lazy_module("numpy", globals(), "np")

from ..errors import CorruptionError, InvalidArgumentError
from .. import pools
from . import blobs

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
            np.copyto(target.reshape(shape), np.lib.stride_tricks.as_strided(data[start:], shape, (self.steps[level],) + self.steps[level + 1 :],
                                                       writeable=False))


#: One axis of a window, normalized: an index (the axis dropped), or ``(start, stop, step)`` of a slice.
Axis = Union[int, tuple[int, int, int]]


def window_axes(shape: tuple[int, ...], window: Window) -> list[Axis]:
    """``window`` of an array of ``shape`` as one normalized :data:`Axis` per axis (numpy basic indexing: negative
    indices count from the end, slices are clipped, trailing axes whole); InvalidArgumentError for a window numpy
    would refuse or that is not basic indexing with positive steps."""
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
    axes: list[Axis] = []
    for axis, (item, n) in enumerate(zip(items, shape)):
        # ``type(...) is int`` first: the common case, several times cheaper than the isinstance checks (bool excluded)
        if type(item) is int or isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)):
            i = int(item)
            if not -n <= i < n:
                raise InvalidArgumentError(f"index {i} is out of range for axis {axis} of size {n} (shape {list(shape)})")
            axes.append(i % n)
        elif isinstance(item, slice):
            axes.append(_slice_indices(item, n, axis))
        else:
            raise InvalidArgumentError(f"a window takes ints, slices and one Ellipsis per axis; axis {axis} got "
                                       f"{type(item).__name__} {item!r}")
    return axes


def plan_window(shape: tuple[int, ...], itemsize: int, window: Window) -> WindowPlan:
    """Where ``window`` of a C-contiguous array of ``shape`` and ``itemsize`` lies in its bytes (see
    :func:`window_axes` for what a window may be)."""
    axes = window_axes(shape, window)
    strides = [itemsize] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    base, out_shape, levels = 0, [], []
    for item, stride in zip(axes, strides):
        if isinstance(item, int):
            base += item * stride
        else:
            start, stop, step = item
            count = len(range(start, stop, step))
            out_shape.append(count)
            base += start * stride if count else 0
            if count != 1:
                levels.append((count, step * stride))
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
        if value is not None and type(value) is not int and (
            not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_))
        ):
            raise InvalidArgumentError(f"slice {item} of axis {axis} must hold ints or None, not {type(value).__name__}")
    if item.step is not None and item.step <= 0:
        raise InvalidArgumentError(f"slice {item} of axis {axis}: a window's steps must be positive")
    return item.indices(n)


def split_window(
    shape: tuple[int, ...], window: Window, boxes: list[tuple[int, tuple[int, ...], tuple[int, ...]]]
) -> tuple[tuple[int, ...], list[tuple[int, tuple[Union[int, slice], ...], tuple[slice, ...]]]]:
    """A window of an array of ``shape`` tiled by the boxes ``(index, origin, shape)`` of its parts (the shards of an
    assembled tensor): the result's shape and, for each part the window overlaps, ``(index, the part's own window,
    where its values land in the result)``; parts it misses are left out, so they are never read."""
    axes = window_axes(shape, window)
    out_shape = tuple(len(range(*a)) for a in axes if not isinstance(a, int))
    pieces = []
    for index, origin, part in boxes:
        local: list[Union[int, slice]] = []
        target: list[slice] = []
        for item, o, n in zip(axes, origin, part):
            if isinstance(item, int):
                if not o <= item < o + n:
                    break
                local.append(item - o)
                continue
            start, stop, step = item
            first = start if start >= o else start + -(-(o - start) // step) * step  # the first index at or after o
            end = min(stop, o + n)
            if first >= end:
                break
            count = len(range(first, end, step))
            local.append(slice(first - o, first - o + (count - 1) * step + 1, step))
            at = (first - start) // step
            target.append(slice(at, at + count))
        else:
            pieces.append((index, tuple(local), tuple(target)))
    return out_shape, pieces


#: Block numbers of a chunk: a slice (of a positive step), or a list or index array of them.
Blocks = Union[slice, list[int], "np.ndarray"]


class BlobHandles:
    """Read-only ``blobopen`` handles of raw chunks kept open for one read snapshot of a Report: between
    :meth:`keep` (``Report._renew``, once it holds its snapshot) and :meth:`close` (``Report._end_snapshot``, before
    the snapshot's rollback). A chunk read again in that snapshot (a window repeated, the next window in the same 4 MiB)
    skips SQLite's set-up of a blob statement and its walk along the chunk's overflow pages to the offset read
    (measured: a repeated 64x64 window 38 -> 33.5 us). Never outside a held snapshot: an open handle is a statement in
    progress, which would keep its read transaction (in WAL mode, a stale view of the file) open after the read ended.
    Within the snapshot no connection can change a chunk (a rollback-journal file's shared lock holds writers back,
    and the Report writes nothing while it holds one). At most :data:`LIMIT` open; past that the oldest is closed.
    Used under the Report's lock."""

    #: The most handles open at once (each a SQLite statement and its cursor: a few KiB).
    LIMIT = 16

    def __init__(self) -> None:
        self._conn: sqlite3.Connection | None = None  # the snapshot's connection while keeping, else None
        self._open: dict[tuple[int, int], sqlite3.Blob] = {}  # by (chunk row id, size), oldest first

    def keep(self, conn: sqlite3.Connection) -> None:
        """Keep the handles of chunks read through ``conn`` open until :meth:`close`."""
        self.close()
        self._conn = conn

    def close(self) -> None:
        """Close every kept handle and keep none from now on."""
        opened, self._open, self._conn = self._open, {}, None
        for blob in opened.values():
            blob.close()

    def blob(self, conn: sqlite3.Connection, chunk: blobs.ChunkRow, what: str) -> tuple[sqlite3.Blob, bool]:
        """A read-only handle of raw chunk ``chunk`` whose length is its ``nbytes`` (CorruptionError otherwise), and
        whether the caller closes it (False: it is kept here for the snapshot)."""
        key = (chunk.id, chunk.nbytes)
        keeping = conn is self._conn
        if keeping:
            found = self._open.get(key)
            if found is not None:
                return found, False
        blob = _open_chunk(conn, chunk, what)
        if not keeping:
            return blob, True
        if len(self._open) >= self.LIMIT:
            self._open.pop(next(iter(self._open))).close()
        self._open[key] = blob
        return blob, False


def _open_chunk(conn: sqlite3.Connection, chunk: blobs.ChunkRow, what: str) -> sqlite3.Blob:
    """A read-only ``blobopen`` handle of raw chunk ``chunk``, whose length is checked to be its ``nbytes``."""
    blob = conn.blobopen("rdb_chunk", "data", chunk.id, readonly=True)
    if len(blob) != chunk.nbytes:
        found = len(blob)
        blob.close()
        raise blobs.corrupt(what, f"chunk {chunk.idx} holds {found} bytes, not {chunk.nbytes}")
    return blob


class VerifiedBlocks:
    """What one Report has checked of raw chunks against their stored crcs since it opened: a chunk whole (its crc32),
    or some of its blocks (their ``rdb_chunk_crc`` crc32s). A later read of checked bytes reads only the bytes it needs
    and computes no crc again: a repeated 64x64 window of a wide matrix costs 64 small reads instead of 256 KiB of
    crc32, a repeated whole read one copy per chunk.

    Chunks are immutable and content-addressed: one is known here by its row id, crc32, sha256 and block size, so a
    row that now describes other content is checked afresh. Everything is forgotten when another connection has
    committed to the file or this one has changed rows (``PRAGMA data_version`` and ``total_changes``): the caller
    calls :meth:`sync` once per read transaction, before it asks anything, so changes made through SQLite are always
    checked. The trade-off: a byte flipped on disk behind SQLite's back after this Report checked its block is not seen
    by a repeated read through this Report; a new Report finds it (any read of the block, or ``verify_tensor``, which
    re-reads and hashes every chunk; the Report that checked it may be served the page from SQLite's own cache anyway).

    Bounded whatever is read: at most :data:`LIMIT` chunks and :data:`FLAGS` block flags in all (one byte per block:
    1 KiB per 4 MiB chunk); past either everything is forgotten. Used under the Report's lock, from one thread.
    """

    #: The most chunks remembered.
    LIMIT = 1 << 16
    #: The most block flags remembered, all chunks together (one byte each: 16 MiB, block flags of 64 GiB of chunks).
    FLAGS = 16 << 20

    def __init__(self) -> None:
        # Per chunk: True once it was checked whole, else its block size and a flag byte per block (1: checked).
        self._chunks: dict[tuple[int, int, bytes], tuple[int, bytearray] | bool] = {}
        self._flags = 0
        self._version: object = None
        #: Chunk handles kept open while the Report holds a read snapshot (see :class:`BlobHandles`).
        self.handles = BlobHandles()

    def sync(self, conn: sqlite3.Connection) -> bool:
        """Forget every chunk if another connection has committed to the file, or this one has changed rows, since
        the last call; return whether it did (rows read before may have changed too)."""
        version = (conn.execute("PRAGMA data_version").fetchone()[0], conn.total_changes)
        if version == self._version:
            return False
        self.clear()
        self._version = version
        return True

    def clear(self) -> None:
        """Forget every chunk."""
        self._chunks.clear()
        self._flags = 0

    @staticmethod
    def _key(chunk: blobs.ChunkRow) -> tuple[int, int, bytes]:
        return (chunk.id, chunk.crc32, chunk.digest)

    def whole(self, chunk: blobs.ChunkRow) -> bool:
        """Whether ``chunk`` was checked whole (or every block of it)."""
        return self._chunks.get(self._key(chunk)) is True

    def checked(self, chunk: blobs.ChunkRow, blocks: Blocks) -> bool:
        """Whether every block ``blocks`` (a slice of block numbers, or a list or index array of them) of ``chunk``, in
        blocks of ``chunk.block_size``, was checked."""
        found = self._chunks.get(self._key(chunk))
        if found is None or found is True or found is False:
            return bool(found)
        size, flags = found
        if size != chunk.block_size:
            return False
        if isinstance(blocks, slice):
            return flags.find(0, blocks.start, blocks.stop) < 0 if blocks.step in (None, 1) else 0 not in flags[blocks]
        return bool(np.frombuffer(flags, dtype=np.uint8)[blocks].all())

    def add(self, chunk: blobs.ChunkRow, blocks: Blocks | None = None) -> None:
        """Remember that ``blocks`` of ``chunk`` (None: all of it) matched their crcs."""
        key = self._key(chunk)
        found = self._chunks.get(key)
        if found is True:
            return
        if len(self._chunks) >= self.LIMIT:
            self.clear()
            found = None
        if isinstance(found, tuple) and (blocks is None or found[0] != chunk.block_size):
            self._flags -= len(found[1])
            found = None
        if blocks is None or chunk.block_size <= 0:
            self._chunks[key] = True
            return
        if found is None or found is False:
            n = -(-chunk.nbytes // chunk.block_size)
            if self._flags + n > self.FLAGS:
                self.clear()
            found = self._chunks[key] = (chunk.block_size, bytearray(n))
            self._flags += n
        flags = found[1]
        if isinstance(blocks, slice):
            flags[blocks] = b"\x01" * len(range(*blocks.indices(len(flags))))
        else:
            np.frombuffer(flags, dtype=np.uint8)[blocks] = 1
        if flags.find(0) < 0:  # every block checked: the chunk is, whole
            self._flags -= len(flags)
            self._chunks[key] = True


def read_window(
    conn: sqlite3.Connection, layout: blobs.BlobLayout, plan: WindowPlan, dtype: np.dtype, *, what: str = "blob",
    verified: VerifiedBlocks | None = None,
) -> np.ndarray:
    """The window ``plan`` of a blob whose ``layout`` was checked (holding at least the chunks of ``plan.span``), as a
    new C-contiguous array of ``dtype``, reading only the chunks that hold its bytes.

    Every byte read is checked (a mismatch raises CorruptionError naming ``what``): in the blocks it touches where the
    chunk has block crcs, else against the chunk's crc32, reading it whole for that. With ``verified`` (one per
    Report, see :class:`VerifiedBlocks`; the caller has synced it in this read transaction), bytes it holds as checked
    are read alone and not checked again, and what is checked here is added to it once every check has passed.
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
    streamed = hasattr(conn, "blobopen")
    checked: list[blobs.ChunkRow] = []  # chunks checked whole here, remembered once all checks have passed
    chunk_size = layout.chunk_size
    with blobs.ChecksBehind(pools.pool("check", 2)) as checks:
        for idx in range(lo // chunk_size, (hi - 1) // chunk_size + 1):
            start = idx * chunk_size
            found = plan.blocks(start, start + layout.expected(idx))
            if not found:  # a chunk between the window's rows
                continue
            chunk = layout.chunk(idx)
            if chunk.crcs is not None and chunk.codec is None:
                _read_blocks(conn, plan, flat, chunk, start, found, what, streamed, verified)
                continue
            if verified is not None and streamed and chunk.codec is None and verified.whole(chunk):
                _read_parts(conn, plan, flat, chunk, start, found, what, verified)
                continue
            data = blobs.chunk_bytes(conn, chunk.id)
            inline = chunk.nbytes < blobs.THREADED_CRC_MIN
            if chunk.codec is not None:
                checks.run(_decode_copy, layout, plan, flat, chunk, start, found, data, what, inline=inline)
                continue
            if len(data) != chunk.nbytes:
                raise blobs.corrupt(what, f"chunk {idx} holds {len(data)} bytes, not {chunk.nbytes}")
            checks.run(blobs.check_crc, chunk.idx, chunk.crc32, data, what, inline=inline)
            checked.append(chunk)
            buffer = np.frombuffer(data, dtype=np.uint8)
            for block in found:
                plan.copy(flat, block, buffer, start)
    if verified is not None:
        for chunk in checked:
            verified.add(chunk)
    return out


def _decode_copy(
    layout: blobs.BlobLayout, plan: WindowPlan, flat: np.ndarray, chunk: blobs.ChunkRow, start: int,
    found: list[tuple[int, int, int, int]], data: bytes, what: str,
) -> None:
    """Check a compressed chunk's crc32 and size, and copy the window's boxes out of it as it is decompressed, a piece
    at a time (``blobs.decoded_pieces``), up to the window's last byte in it: the memory a window costs is its own size and one
    piece, never the chunk's (a hostile frame may declare up to ``blobs.MAX_CHUNK_SIZE``)."""
    end = max(src + plan.extent(level, count) for level, count, src, _ in found)  # past the window's last byte here
    for offset, piece in blobs.decoded_pieces(layout, chunk, data, what):
        at = start + offset
        buffer = np.frombuffer(piece, dtype=np.uint8)
        for block in plan.blocks(at, at + len(piece)):
            plan.copy(flat, block, buffer, at)
        if at + len(piece) >= end:
            break


def _read_parts(
    conn: sqlite3.Connection, plan: WindowPlan, flat: np.ndarray, chunk: blobs.ChunkRow, start: int,
    found: list[tuple[int, int, int, int]], what: str, verified: VerifiedBlocks,
) -> None:
    """Copy the boxes ``found`` of a checked raw chunk stored from blob byte ``start``, reading only their bytes
    (through a handle ``verified`` keeps for the snapshot, where it keeps one)."""
    blob, owned = verified.handles.blob(conn, chunk, what)
    try:
        reader = _PartsReader(blob, start)
        for block in found:
            _fetch(plan, flat, block, reader)
    finally:
        if owned:
            blob.close()


class _PartsReader:
    """Byte ranges of a chunk already checked whole (see :class:`VerifiedBlocks`), by blob offset."""

    gap = _GAP  # a box whose gaps are at most this is read in one piece (see :func:`_fetch`)

    def __init__(self, blob: sqlite3.Blob, start: int) -> None:
        self.blob, self.start = blob, start

    def read(self, src: int, nbytes: int) -> bytes:
        # A slice of a Blob is its bytes (one call, faster than seek + read); typeshed types every subscript int.
        return self.blob[src - self.start : src - self.start + nbytes]  # type: ignore[return-value]

    def gather(self, src: int, step: int, count: int, size: int) -> bytes:
        """``count`` ranges of ``size`` bytes ``step`` apart from ``src``, joined."""
        return b"".join([self.read(s, size) for s in range(src, src + count * step, step)])


class BlockReader:
    """Byte ranges of one raw chunk with block crcs stored from blob byte ``start``, each read in whole blocks and
    every block checked against its crc32. ``streamed``: through ``blobopen`` slices, else (Python 3.10) through
    ``substr()`` in a SELECT. With ``verified`` (see :class:`VerifiedBlocks`), a range whose blocks it holds as
    checked is read alone, without its blocks' other bytes or a crc, and blocks checked here are added to it; the
    chunk's handle is then the one it keeps for the snapshot, where it keeps one (:class:`BlobHandles`)."""

    def __init__(
        self, conn: sqlite3.Connection, chunk: blobs.ChunkRow, start: int, what: str, streamed: bool,
        verified: VerifiedBlocks | None = None,
    ) -> None:
        assert chunk.crcs is not None
        self.conn, self.chunk, self.start, self.what, self.verified = conn, chunk, start, what, verified
        # A box is read in one piece when its gaps are shorter than a block: then every block of it holds some of the
        # window and is read and checked anyway; wider gaps are skipped, block by block (:meth:`gather`).
        self.gap = chunk.block_size - 1
        self.blob: sqlite3.Blob | None = None
        self._owned = False  # whether close() closes the handle (not when ``verified`` keeps it for the snapshot)
        if streamed and verified is not None:
            self.blob, self._owned = verified.handles.blob(conn, chunk, what)
        elif streamed:
            self.blob, self._owned = _open_chunk(conn, chunk, what), True
        self.expected = np.frombuffer(chunk.crcs, dtype="<u4")

    def close(self) -> None:
        """Close the chunk's handle unless it is kept for the snapshot."""
        if self.blob is not None and self._owned:
            self.blob.close()

    def _bytes(self, lo: int, hi: int) -> bytes:
        """Chunk bytes ``lo..hi``, of that length (CorruptionError otherwise), unchecked."""
        if self.blob is not None:
            data: bytes = self.blob[lo:hi]  # type: ignore[assignment]
        else:
            row = self.conn.execute("SELECT substr(data, ?, ?) FROM rdb_chunk WHERE id=?", (lo + 1, hi - lo, self.chunk.id)).fetchone()
            data = row[0] if row is not None and isinstance(row[0], bytes) else b""
        if len(data) != hi - lo:
            raise blobs.corrupt(self.what, f"chunk {self.chunk.idx} holds {len(data)} bytes from byte {lo}, not {hi - lo} "
                                           f"of its {self.chunk.nbytes}")
        return data

    def _check(self, blocks: Blocks, crcs: list[int]) -> None:
        """Compare the crc32s computed of ``blocks`` with the stored ones; CorruptionError naming the first that differs.
        One comparison of two lists of ints (a window's 64: ~1.7 us, half a numpy comparison's); numpy only to name
        the block that differs."""
        expected = self.expected[blocks]
        if expected.tolist() != crcs:
            bad = np.flatnonzero(np.array(crcs, dtype=np.uint32) != expected)
            block, size = int(np.arange(self.expected.size)[blocks][bad[0]]), self.chunk.block_size
            raise CorruptionError(
                f"{self.what}: chunk {self.chunk.idx} failed its integrity check in block {block} (bytes "
                f"{block * size}..{min((block + 1) * size, self.chunk.nbytes)} of the chunk; stored bytes were changed "
                "or lost); the database file is damaged"
            )
        if self.verified is not None:
            self.verified.add(self.chunk, blocks)

    def read(self, src: int, nbytes: int) -> bytes:
        """Blob bytes ``src .. src + nbytes`` (within this chunk), checked."""
        lo, size = src - self.start, self.chunk.block_size
        first, last = lo // size, (lo + nbytes - 1) // size
        if self.verified is not None and self.verified.checked(self.chunk, slice(first, last + 1)):
            return self._bytes(lo, lo + nbytes)
        start, stop = first * size, min((last + 1) * size, self.chunk.nbytes)
        data = self._bytes(start, stop)
        view = memoryview(data)
        self._check(slice(first, last + 1), [blobs.crc32(view[i : i + size]) for i in range(0, stop - start, size)])
        return data if (lo, nbytes) == (start, stop - start) else data[lo - start : lo - start + nbytes]

    def gather(self, src: int, step: int, count: int, size: int) -> bytes:
        """``count`` ranges of ``size`` bytes ``step`` apart from ``src``, joined: the blocks that hold them read as
        runs of consecutive blocks (a column of a wide matrix: one block per row, or two where a row's range crosses a
        block edge; ranges that share blocks share their run), each block checked once, in one vectorized comparison;
        or, when every one of those blocks is known checked, the ranges alone. Planned in plain Python: a window has a
        few dozen rows, where numpy's cost per call (~1 us an operation) would be most of the work."""
        lo, bsize = src - self.start, self.chunk.block_size
        if step % bsize == 0 and lo % bsize + size <= bsize:
            return self._gather_rows(lo, step, count, size)
        nbytes, blob = self.chunk.nbytes, self.blob
        starts = range(lo, lo + count * step, step)
        firsts = [s // bsize for s in starts]
        lasts = [(s + size - 1) // bsize for s in starts]
        where: Sequence[int] = range(count)  # the run of each range
        if all(f > last + 1 for f, last in zip(firsts[1:], lasts)):  # runs apart: one per range
            runs = list(zip(firsts, lasts))
        else:  # ranges in the same or adjacent blocks: their runs merged, in order
            merged: list[list[int]] = []
            place = []
            for f, last in zip(firsts, lasts):
                if merged and f <= merged[-1][1] + 1:
                    merged[-1][1] = max(merged[-1][1], last)
                else:
                    merged.append([f, last])
                place.append(len(merged) - 1)
            runs, where = [(f, last) for f, last in merged], place
        blocks = [b for f, last in runs for b in range(f, last + 1)]
        if self.verified is not None and self.verified.checked(self.chunk, blocks):
            return self._ranges(starts, size)
        bounds = [(f * bsize, min(last * bsize + bsize, nbytes)) for f, last in runs]
        if blob is not None:
            datas: list[bytes] = [blob[a:b] for a, b in bounds]  # type: ignore[misc]  # Blob slices are bytes
            if sum(map(len, datas)) != sum(b - a for a, b in bounds):
                raise blobs.corrupt(self.what, f"chunk {self.chunk.idx} holds fewer bytes than its {nbytes}")
        else:
            datas = [self._bytes(a, b) for a, b in bounds]
        self._check(blocks, [blobs.crc32(memoryview(data)[i : i + bsize]) for data in datas
                             for i in range(0, len(data), bsize)])
        return b"".join([datas[w][s - bounds[w][0] : s - bounds[w][0] + size] for w, s in zip(where, starts)])

    def _gather_rows(self, lo: int, step: int, count: int, size: int) -> bytes:
        """:meth:`gather` of ranges from chunk byte ``lo`` that each lie in one block, all at the same place in theirs,
        one block every ``step // block_size``: the rows of a window of a matrix, the common case. Its blocks are a
        slice, each read whole, checked, and cut at that place."""
        bsize, nbytes, blob = self.chunk.block_size, self.chunk.nbytes, self.blob
        at, first = lo % bsize, lo // bsize
        blocks = slice(first, first + (count - 1) * (step // bsize) + 1, step // bsize)
        if self.verified is not None and self.verified.checked(self.chunk, blocks):
            return self._ranges(range(lo, lo + count * step, step), size)
        lows = range(lo - at, lo - at + count * step, step)
        if blob is not None:
            datas: list[bytes] = [blob[x : x + bsize] for x in lows]  # type: ignore[misc]  # Blob slices are bytes
            if sum(map(len, datas)) != count * bsize - max(0, lows[-1] + bsize - nbytes):
                raise blobs.corrupt(self.what, f"chunk {self.chunk.idx} holds fewer bytes than its {nbytes}")
        else:
            datas = [self._bytes(x, min(x + bsize, nbytes)) for x in lows]
        self._check(blocks, list(map(blobs.crc32, datas)))
        return b"".join([data[at : at + size] for data in datas])

    def _ranges(self, starts: range, size: int) -> bytes:
        """The ranges of ``size`` bytes from chunk bytes ``starts`` whose blocks are known checked: their bytes alone,
        joined."""
        if self.blob is None:
            return b"".join([self._bytes(s, s + size) for s in starts])
        blob = self.blob
        joined = b"".join([blob[s : s + size] for s in starts])  # type: ignore[misc]  # Blob slices are bytes
        if len(joined) != len(starts) * size:
            raise blobs.corrupt(self.what, f"chunk {self.chunk.idx} holds fewer bytes than its {self.chunk.nbytes}")
        return joined


def _read_blocks(
    conn: sqlite3.Connection, plan: WindowPlan, flat: np.ndarray, chunk: blobs.ChunkRow, start: int,
    found: list[tuple[int, int, int, int]], what: str, streamed: bool, verified: VerifiedBlocks | None = None,
) -> None:
    """Copy the boxes ``found`` of a raw chunk with block crcs stored from blob byte ``start``, reading and checking
    only the blocks that hold them (or, those ``verified`` holds as checked, only their bytes)."""
    reader = BlockReader(conn, chunk, start, what, streamed, verified)
    try:
        for block in found:
            _fetch(plan, flat, block, reader)
    finally:
        reader.close()


def _fetch(plan: WindowPlan, flat: np.ndarray, block: tuple[int, int, int, int], reader: _PartsReader | BlockReader) -> None:
    """Copy one box into ``flat`` with as few reads as pay: its whole extent at once when the gaps it skips are small
    (``reader.gap``), else one read per index of its first level (joined into one copy when each of those is
    contiguous)."""
    level, count, src, pos = block
    extent, size = plan.extent(level, count), plan.sizes[level]
    if extent - count * size <= (count - 1) * reader.gap:
        plan.copy(flat, block, np.frombuffer(reader.read(src, extent), dtype=np.uint8), src)
    elif count == 1:
        _fetch(plan, flat, (level + 1, plan.counts[level + 1], src, pos), reader)
    elif plan.extent(level, 1) == size:
        flat[pos : pos + count * size] = np.frombuffer(reader.gather(src, plan.steps[level], count, size), dtype=np.uint8)
    else:
        for j in range(count):
            _fetch(plan, flat, (level, 1, src + j * plan.steps[level], pos + j * size), reader)
