"""Reading the tensor tables: a tensor's ``rdb_tensor`` and ``rdb_shard`` rows decoded into :class:`TensorInfo`, its
shards' values, its ``rdb_stats`` rows, and the completeness checks of the whole store.

A report is someone else's file: every stored value is checked before it is used or sizes an allocation, and a
malformed one is a CorruptionError naming the tensor, the table and the column, and saying what to do. The caller
holds the connection and maps SQLite's own errors (``Report`` does, naming the tensor too).
"""

from __future__ import annotations

import collections
import json
import math
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Hashable, Sequence

from .._lazy import lazy_module

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    import reportdb.numeric.stats as stats_mod
else:  # numpy and the statistics are imported on first use: opening a report and reading its metadata need neither
    np = lazy_module("numpy", globals(), "np")
    stats_mod = lazy_module("reportdb.numeric.stats", globals(), "stats_mod")

from ..dtypes import itemsize, numpy_dtype
from ..errors import CorruptionError, ReportDBError, TensorNotFoundError, excerpt
from ..spec import MAX_SHARDS, MeshCoordinate, TensorSpec, assemble_with, assembled_shape, shape_from_json
from . import blobs, engine, windows

#: The longest JSON text a metadata column may hold (a memory config is a few KiB).
MAX_JSON = 16 << 20
#: The longest dtype name a tensor's row may hold (the longest real one is a few dozen characters).
_MAX_NAME = 64

#: The statistics columns of ``rdb_stats`` that ``Report.tensor_stats`` returns as they are, in order.
STATS_COLUMNS = ("count", "min", "max", "mean", "std", "absmax", "nan_count", "inf_count", "zero_count")


@dataclass(frozen=True)
class ShardInfo:
    """One device shard of a stored tensor: its mesh coordinate, dtype name, shape and size in bytes."""

    mesh_coordinate: MeshCoordinate
    dtype: str
    shape: tuple[int, ...]
    nbytes: int


@dataclass(frozen=True)
class TensorInfo:
    """Everything stored about a tensor except its values."""

    tensor_id: int
    rank: int
    dtype: str
    shape: tuple[int, ...] | None  # None when the shards cannot be assembled
    nbytes: int
    spec: TensorSpec
    source: dict[str, Any] | None
    shards: tuple[ShardInfo, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "tensor_id": self.tensor_id,
            "rank": self.rank,
            "dtype": self.dtype,
            "shape": None if self.shape is None else list(self.shape),
            "nbytes": self.nbytes,
            "spec": self.spec.to_json(),
            "source": self.source,
            "shards": [
                {"mesh_coordinate": list(s.mesh_coordinate), "dtype": s.dtype, "shape": list(s.shape), "nbytes": s.nbytes}
                for s in self.shards
            ],
        }

    def _repr_html_(self) -> str:
        """The metadata and the shards as two small HTML tables for Jupyter, every cell escaped (stored metadata is
        someone else's text)."""
        from ..results import html_table  # the notebook view is all this module takes from it

        spec = self.spec.to_json()
        fields = [("tensor_id", self.tensor_id), ("rank", self.rank), ("dtype", self.dtype), ("shape", self.shape),
                  ("nbytes", self.nbytes), *((k, v) for k, v in spec.items() if v is not None), ("source", self.source)]
        shards = [(s.mesh_coordinate, s.dtype, s.shape, s.nbytes) for s in self.shards]
        return html_table(("field", "value"), fields, caption=f"TensorInfo of tensor {self.tensor_id}") + html_table(
            ("mesh coordinate", "dtype", "shape", "nbytes"), shards, caption=f"{len(self.shards)} shards"
        )


class Stored:
    """Decodes the stored values of one tensor (or blob, ``what``): JSON columns and shapes, each malformed one a
    CorruptionError that names it, the table and the column, and says what to do."""

    def __init__(self, path: Path, what: str, cache: ParsedCache | None = None) -> None:
        self.path = path
        self.what = what
        self.cache = cache  # decoded shapes by their text, shared by a Report's reads

    def damaged(self, table: str, problem: str) -> CorruptionError:
        return CorruptionError(
            f"{self.path}: {self.what}: table {table}: {problem}; the database file is damaged or was changed by "
            "another tool. `reportdb verify` lists every damaged tensor; restore the file from a copy or migrate the "
            "report again"
        )

    def json(self, table: str, column: str, text: Any) -> Any:
        """The decoded JSON of a column (None for NULL)."""
        if text is None:
            return None
        if not isinstance(text, str) or len(text) > MAX_JSON:
            raise self.damaged(table, f"column {column} holds {type(text).__name__} {str(text)[:40]!r}, not JSON text")
        try:
            return json.loads(text)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError; deep nesting recurses
            raise self.damaged(table, f"column {column} is not valid JSON ({type(exc).__name__}: {str(exc)[:80]})") from None

    def shape(self, table: str, column: str, text: Any, *, optional: bool = False) -> tuple[int, ...] | None:
        """A JSON shape or mesh coordinate: a list of non-negative ints of sane rank (NULL only if ``optional``)."""
        key = ("shape", text)
        if self.cache is not None and isinstance(text, str):
            found = self.cache.get(key)
            if found is not MISSING:
                return found  # type: ignore[no-any-return]
        value = self.json(table, column, text)
        if value is None and optional:
            return None
        try:
            shape = shape_from_json(value, f"column {column}")
        except ReportDBError as exc:
            raise self.damaged(table, str(exc)) from None
        if self.cache is not None and isinstance(text, str):
            self.cache.put(key, shape)
        return shape


class ParsedCache:
    """Decoded metadata of one Report, keyed by the stored text itself (a spec by its columns' text, a shape by its
    JSON): tensors that share a memory config share one parse, and a row changed by anyone is a different key, so it
    can never be served a stale value. Least recently used entries go first beyond ``size``. Only values that decoded
    without error are kept; a malformed one is decoded, and reported, again at every read. A cached TensorSpec is
    shared by every TensorInfo that uses it: treat it, its ``memory_config`` dict included, as read-only."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._items: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()

    def get(self, key: Hashable) -> Any:
        """The value kept under ``key``, or :data:`MISSING`."""
        value = self._items.get(key, MISSING)
        if value is not MISSING:
            self._items.move_to_end(key)
        return value

    def put(self, key: Hashable, value: Any) -> None:
        self._items[key] = value
        if len(self._items) > self.size:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


#: What :meth:`ParsedCache.get` returns for a key it does not hold (None is a value: a NULL column).
MISSING: Any = object()

_TENSOR_COLUMNS = (
    "id, dtype, shape, nbytes, ttnn_dtype, layout, tile_shape, transpose_tile, padded_shape, storage_type, memory_config,"
    " distribution, source, n_shards"
)


def read_info(
    conn: sqlite3.Connection, path: Path, tensor_id: int, rank: int, cache: ParsedCache | None = None
) -> tuple[TensorInfo, list[int]]:
    """A tensor's metadata and its shards' blob ids, every stored value checked: the shard rows all there (as many
    as ``n_shards``, itself bounded), each shard's blob present, every JSON column well-formed. ``cache`` keeps
    decoded specs and shapes across calls (see :class:`ParsedCache`)."""
    info, blob_ids, _ = read_info_blobs(conn, path, tensor_id, rank, cache)
    return info, blob_ids


_BLOB_COLUMNS = "b.nbytes, b.chunk_size, b.n_chunks, b.digest"
_SHARD_COLUMNS = "s.shard_index, s.mesh_coordinate, s.dtype, s.shape, s.blob_id, b.id, " + _BLOB_COLUMNS
#: A tensor of one shard (the common case) in one statement: its tensor, shard and blob rows joined.
_ONE_SHARD_SQL = (
    f"SELECT {', '.join('t.' + c.strip() for c in _TENSOR_COLUMNS.split(','))}, {_SHARD_COLUMNS} FROM rdb_tensor t"
    " LEFT JOIN rdb_shard s ON s.tensor_pk = t.id LEFT JOIN rdb_blob b ON b.id = s.blob_id"
    " WHERE t.tensor_id=? AND t.rank=? LIMIT 2"
)


def read_info_blobs(
    conn: sqlite3.Connection, path: Path, tensor_id: int, rank: int, cache: ParsedCache | None = None
) -> tuple[TensorInfo, list[int], list[tuple[Any, ...]]]:
    """:func:`read_info`, and each shard's ``rdb_blob`` row ``(nbytes, chunk_size, n_chunks, digest)`` (unchecked:
    ``blobs.blob_layout(found=...)`` checks it), read with the tensor's rows: one statement for a tensor of one
    shard, two for more."""
    rows = conn.execute(_ONE_SHARD_SQL, (tensor_id, rank)).fetchall()
    if not rows:
        raise TensorNotFoundError(f"{path}: no tensor {tensor_id} (rank {rank}) is stored")
    row = rows[0]
    stored = Stored(path, f"tensor {tensor_id} (rank {rank})", cache)
    n_shards = row[13]
    if type(n_shards) is not int or not 1 <= n_shards <= MAX_SHARDS:
        raise stored.damaged("rdb_tensor", f"n_shards is {n_shards!r}, not a count from 1 to {MAX_SHARDS}")
    if n_shards == 1 and len(rows) == 1 and row[14] is not None:
        shard_rows: Sequence[Sequence[Any]] = [row[14:]]
    else:
        shard_rows = conn.execute(
            f"SELECT {_SHARD_COLUMNS} FROM rdb_shard s LEFT JOIN rdb_blob b ON b.id = s.blob_id WHERE s.tensor_pk=?"
            " ORDER BY s.shard_index LIMIT ?",
            (row[0], n_shards + 1),
        ).fetchall()
    info, blob_ids = _decode_info(stored, tensor_id, rank, row[:14], [r[:6] for r in shard_rows])
    return info, blob_ids, [tuple(r[6:]) for r in shard_rows]


def _decode_info(
    stored: Stored, tensor_id: int, rank: int, row: Sequence[Any], shard_rows: Sequence[Sequence[Any]]
) -> tuple[TensorInfo, list[int]]:
    """:func:`read_info` of a tensor's ``rdb_tensor`` row (:data:`_TENSOR_COLUMNS`, ``n_shards`` checked) and its
    shard rows ``(shard_index, mesh_coordinate, dtype, shape, blob_id, rdb_blob.id)``, in shard order."""
    n_shards = row[13]
    if [r[0] for r in shard_rows] != list(range(n_shards)):
        raise stored.damaged("rdb_shard", f"has shards {[r[0] for r in shard_rows][:8]} of the {row[13]!r} "
                                          "rdb_tensor.n_shards says")
    key = ("spec", row[2], *row[4:12])
    spec = MISSING if stored.cache is None else stored.cache.get(key)
    if spec is MISSING:
        spec_fields = {
            "ttnn_dtype": row[4], "layout": row[5], "tile_shape": stored.json("rdb_tensor", "tile_shape", row[6]),
            "transpose_tile": bool(row[7]), "padded_shape": stored.json("rdb_tensor", "padded_shape", row[8]),
            "storage_type": row[9], "memory_config": stored.json("rdb_tensor", "memory_config", row[10]),
            "distribution": stored.json("rdb_tensor", "distribution", row[11]),
            "logical_shape": stored.json("rdb_tensor", "shape", row[2]),
        }
        try:
            spec = TensorSpec.from_json(spec_fields)
        except ReportDBError as exc:
            raise stored.damaged("rdb_tensor", f"its metadata is malformed ({exc})") from None
        if stored.cache is not None:
            stored.cache.put(key, spec)
    shards = []
    for index, coord, dtype, shape_text, blob_id, found in shard_rows:
        if found is None:
            raise stored.damaged("rdb_shard", f"shard {index} points at blob {blob_id!r}, which is missing from rdb_blob")
        # A ShardInfo is immutable and a function of these three columns: the tensors of a report share a handful.
        key = ("shard", coord, dtype, shape_text)
        shard = MISSING if stored.cache is None else stored.cache.get(key)
        if shard is MISSING:
            shard = _decode_shard(stored, index, coord, dtype, shape_text)
            if stored.cache is not None:
                stored.cache.put(key, shard)
        shards.append(shard)
    shape = stored.shape("rdb_tensor", "shape", row[2], optional=True)
    if type(row[3]) is not int or row[3] < 0:
        raise stored.damaged("rdb_tensor", f"column nbytes holds {type(row[3]).__name__} {excerpt(row[3], 40)}, not a "
                                           "byte count")
    if not isinstance(row[1], str) or len(row[1]) > _MAX_NAME:
        raise stored.damaged("rdb_tensor", f"column dtype holds {type(row[1]).__name__} {excerpt(row[1], 40)}, not a "
                                           "dtype name")
    info = TensorInfo(
        tensor_id, rank, row[1], shape, row[3], spec, stored.json("rdb_tensor", "source", row[12]), tuple(shards)
    )
    return info, [r[4] for r in shard_rows]


def _decode_shard(stored: Stored, index: int, coord: Any, dtype: Any, shape_text: Any) -> ShardInfo:
    """The ShardInfo of shard ``index`` from its ``rdb_shard`` columns, each checked."""
    shape = stored.shape("rdb_shard", "shape", shape_text)
    assert shape is not None
    try:
        width = itemsize(dtype)
    except ReportDBError as exc:
        raise stored.damaged("rdb_shard", f"shard {index}: {exc}") from None
    return ShardInfo(stored.shape("rdb_shard", "mesh_coordinate", coord) or (), dtype, shape, math.prod(shape) * width)


#: A box of an assembled tensor: ``(shard index, origin, shape)``.
Box = tuple[int, tuple[int, ...], tuple[int, ...]]


def shard_boxes(info: TensorInfo) -> list[Box] | None:
    """Where each shard the assembled tensor is made of lies in it (a replicated mesh axis uses its index 0, as
    ``spec.assemble`` does), so a window reads only the shards it overlaps; None when the shards do not assemble
    into the stored shape (then nothing can be said without reading them)."""
    if info.shape is None:
        return None
    shapes = [(s.mesh_coordinate, s.shape) for s in info.shards]
    try:
        if assembled_shape(shapes, info.spec.distribution) != info.shape:
            return None

        def concat(parts: list[list[Box]], dim: int) -> list[Box]:
            placed: list[Box] = []
            offset = 0
            for boxes in parts:
                extent = 0
                for index, origin, shape in boxes:
                    d = dim % len(shape)
                    placed.append((index, origin[:d] + (origin[d] + offset,) + origin[d + 1 :], shape))
                    extent = max(extent, origin[d] + shape[d])
                offset += extent
            return placed

        boxes: list[Box] = assemble_with(
            [(s.mesh_coordinate, [(i, (0,) * len(s.shape), s.shape)]) for i, s in enumerate(info.shards)],
            info.spec.distribution, concat,
        )
    except ReportDBError:
        return None
    return boxes


#: A chunk up to this size comes back inside the one query of :func:`read_small` (larger ones through ``blobopen``).
SMALL_CHUNK = 256 << 10


def _small_sql(codec: str) -> str:
    """The one query of :func:`read_small`; ``codec`` is the column, or NULL for a schema older than compression."""
    return (
        f"SELECT {', '.join('t.' + c.strip() for c in _TENSOR_COLUMNS.split(','))},"
        " s.shard_index, s.mesh_coordinate, s.dtype, s.shape, s.blob_id, b.id,"
        " b.nbytes, b.chunk_size, b.n_chunks, b.digest,"
        f" bc.idx, c.id, c.nbytes, c.crc32, {codec}, c.digest, length(c.data),"
        " typeof(c.data), CASE WHEN typeof(c.data) = 'blob' AND length(c.data) <= ? THEN c.data END"
        " FROM rdb_tensor t LEFT JOIN rdb_shard s ON s.tensor_pk = t.id LEFT JOIN rdb_blob b ON b.id = s.blob_id"
        " LEFT JOIN rdb_blob_chunk bc ON bc.blob_id = b.id LEFT JOIN rdb_chunk c ON c.id = bc.chunk_id"
        " WHERE t.tensor_id=? AND t.rank=? LIMIT 2"
    )


_SMALL_SQL = {True: _small_sql("c.codec"), False: _small_sql("NULL")}
#: A small tensor read again (:func:`read_small` with a memo): its one chunk's bytes, by row id.
_CHUNK_DATA_SQL = "SELECT data FROM rdb_chunk WHERE id=?"


def _fetch(conn: sqlite3.Connection, sql: str, args: tuple[Any, ...]) -> list[Any]:
    """Every row of one statement, through ``engine.Connection.fetch`` (the small reads' cheaper path) where it can."""
    return conn.fetch(sql, args) if isinstance(conn, engine.Connection) else conn.execute(sql, args).fetchall()


def read_small(
    conn: sqlite3.Connection, path: Path, tensor_id: int, rank: int, cache: ParsedCache | None = None, *,
    has_codec: bool = True, memo: ReadMemo | None = None,
) -> tuple[TensorInfo, np.ndarray] | None:
    """A tensor of one shard in at most one chunk (the common small tensor) read with one query: its tensor, shard,
    blob and chunk rows joined, and the chunk's bytes with them when they are at most :data:`SMALL_CHUNK`. Every value
    is checked as :func:`read_info` and :func:`read_shard` check it (the same functions do), the crc32 included.

    Returns None, having allocated nothing, for any other tensor: several shards or chunks, one chunk over
    :data:`SMALL_CHUNK`, a missing tensor or any row that does not join as it should; the caller then takes the general
    path, which reads and reports it.

    ``memo`` (a Report's, synced in this read transaction, see :class:`ReadMemo`) keeps the checked rows of a tensor of
    one raw chunk read here, so that reading it again looks up only its chunk, by row id, instead of joining five
    tables; the chunk's bytes are read and checked against its crc32 all the same."""
    found = None if memo is None else memo.get_small(tensor_id, rank)
    if found is not None:
        info, chunk = found
        again = _fetch(conn, _CHUNK_DATA_SQL, (chunk.id,))
        if again and isinstance(again[0][0], bytes):
            shard = info.shards[0]
            return info, blobs.raw_array(chunk, again[0][0], numpy_dtype(shard.dtype), shard.shape,
                                         f"tensor {tensor_id} (rank {rank})")
    sql, args = _SMALL_SQL[has_codec], (SMALL_CHUNK, tensor_id, rank)
    rows = _fetch(conn, sql, args)
    if len(rows) != 1:
        return None
    row = rows[0]
    n_chunks, idx = row[22], row[24]
    if row[13] != 1 or type(row[13]) is not int or row[14] != 0 or row[19] is None or not (
        (n_chunks == 1 and idx == 0) or (n_chunks == 0 and idx is None)
    ) or type(n_chunks) is not int:
        return None
    if row[32] is None and row[31] == "blob" and type(row[30]) is int and row[30] > SMALL_CHUNK:
        return None  # the general path reads a large chunk, skipping the crcs the Report has checked already
    what = f"tensor {tensor_id} (rank {rank})"
    info, blob_ids = _decode_info(Stored(path, what, cache), tensor_id, rank, row[:14], [row[14:20]])
    shard = info.shards[0]
    blob = row[20:24]
    blobs.check_blob_row(blob_ids[0], shard.nbytes, blob, what)
    layout = blobs.checked_layout(blob_ids[0], shard.nbytes, blob, [row[24:32]] if n_chunks else [], what)
    dtype = numpy_dtype(shard.dtype)
    if layout.chunks and layout.chunks[0].codec is None and row[32] is not None:
        array = blobs.raw_array(layout.chunks[0], row[32], dtype, shard.shape, what)
        if memo is not None:
            memo.put_small(tensor_id, rank, info, layout.chunks[0])
        return info, array
    out = np.empty(shard.shape, dtype=dtype)
    blobs.read_blob_into(conn, layout, out.reshape(-1).view(np.uint8), what=what, first_data=row[32])
    return info, out


def read_shard(
    conn: sqlite3.Connection, blob_id: int, shard: ShardInfo, what: str, *,
    window: windows.Window | None = None, verified: windows.VerifiedBlocks | None = None, has_codec: bool = True,
    has_block_crc: bool = True, blob_row: tuple[Any, ...] | None = None, memo: ReadMemo | None = None,
) -> np.ndarray:
    """A shard's values, or only ``window`` of them (numpy basic indexing, see ``windows.plan_window``), reading only
    the chunks that hold them. The blob's rows are checked to describe the shard's shape and dtype, complete (for a
    window: the chunks it spans), before anything is allocated. ``verified``, one per Report and synced in this read
    transaction, lets reads of bytes already checked skip their crcs (see ``windows.VerifiedBlocks``); ``memo`` keeps
    the checked chunk rows for the next read (see :class:`ReadMemo`)."""
    dtype = numpy_dtype(shard.dtype)
    if window is None:
        layout = _layout(conn, blob_id, shard.nbytes, what, has_codec, None, False, blob_row, memo)
        out = np.empty(shard.shape, dtype=dtype)
        blobs.read_blob_into(conn, layout, out.reshape(-1).view(np.uint8), what=what, verified=verified)
        return out
    plan = windows.plan_window(shard.shape, dtype.itemsize, window)
    layout = _layout(conn, blob_id, shard.nbytes, what, has_codec, plan.span if plan.nbytes else None, has_block_crc,
                     blob_row, memo)
    return windows.read_window(conn, layout, plan, dtype, what=what, verified=verified)


#: Chunks listed together when a read of a span lists its chunks for a Report's memo: a new place in a large tensor
#: then costs one statement per 8 chunks (measured: the rows of 1, 4 and 8 chunks with their block crcs in 30, 34 and
#: 44 us), and a window's first read at a new place about 12 us less on average (208 -> ~196 us).
LAYOUT_GROUP = 8


def _layout(
    conn: sqlite3.Connection, blob_id: int, nbytes: int, what: str, has_codec: bool, span: tuple[int, int] | None,
    block_crcs: bool, blob_row: tuple[Any, ...] | None, memo: ReadMemo | None,
) -> blobs.BlobLayout:
    """``blobs.blob_layout`` of the chunks that hold ``span`` (None: all of them), from ``memo`` when it holds them.
    With a memo, a span's chunks are listed by aligned groups of ``memo.group`` (:data:`LAYOUT_GROUP`), so a viewer
    panning across a large tensor runs one statement per group rather than one per chunk."""
    chunk_size = blob_row[1] if blob_row is not None else None
    if memo is None or type(chunk_size) is not int or chunk_size <= 0:
        return blobs.blob_layout(conn, blob_id, nbytes, what=what, has_codec=has_codec, span=span,
                                 block_crcs=block_crcs, found=blob_row)
    if span is not None:
        group = memo.group * chunk_size
        span = (span[0] // group * group, min(((span[1] - 1) // group + 1) * group, nbytes))
    key = ("layout", blob_id, nbytes, has_codec, block_crcs,
           None if span is None else (span[0] // chunk_size, (span[1] - 1) // chunk_size))
    layout = memo.get(key)
    if layout is None:
        layout = blobs.blob_layout(conn, blob_id, nbytes, what=what, has_codec=has_codec, span=span,
                                   block_crcs=block_crcs, found=blob_row)
        memo.put(key, layout)
    assert isinstance(layout, blobs.BlobLayout)
    return layout


class ReadMemo:
    """Rows one Report has read and checked (a tensor's decoded metadata, a blob's chunk rows and block crcs, a small
    tensor's rows, see :func:`read_small`), kept
    only while the file is as it was when they were read: the caller calls :meth:`sync` at the start of each read
    transaction, which forgets everything once another connection has committed to the file or this one has changed
    rows (``PRAGMA data_version`` and ``total_changes``, through ``verified``, whose checked blocks go with them). A
    repeated read of a tensor then runs no statement for its metadata or its chunk list; the bytes it reads are still
    checked against the block crcs stored with their chunk (or known checked, see ``windows.VerifiedBlocks``). Only
    what passed every check is kept, and nothing read inside a write transaction (it may be rolled back). Bounded: at
    most :data:`LIMIT` entries and about :data:`BYTES` bytes of them (a layout costs its block crcs, 4 KiB per 4 MiB
    chunk); past either everything is forgotten."""

    LIMIT = 4096
    BYTES = 32 << 20
    #: Small tensors (:meth:`put_small`) kept at a time, apart from the rest: a few, so that a walk over thousands of
    #: tensors, which reads none of them again before it would be forgotten, neither crowds out the rest nor keeps its
    #: rows alive long enough to cost the garbage collector (kept among the rest, they made such a walk 25% slower).
    SMALL = 64
    #: What an entry is counted as beside its block crcs: a tensor's metadata, or each chunk row of a layout.
    ENTRY = 1 << 10

    def __init__(self, verified: windows.VerifiedBlocks) -> None:
        self.verified = verified
        #: Chunks listed together for a span (see :func:`_layout`); 1 where listing a chunk not read is not free.
        self.group = LAYOUT_GROUP
        self._items: dict[Hashable, Any] = {}
        self._bytes = 0
        self._small: dict[tuple[int, int], tuple[TensorInfo, blobs.ChunkRow]] = {}

    def sync(self, conn: sqlite3.Connection) -> None:
        """Forget everything, checked blocks included, if the file may have changed since the last call."""
        if self.verified.sync(conn):
            self.clear()

    def clear(self) -> None:
        """Forget every entry (checked blocks are ``verified``'s)."""
        self._items.clear()
        self._small.clear()
        self._bytes = 0

    def get_small(self, tensor_id: int, rank: int) -> tuple[TensorInfo, blobs.ChunkRow] | None:
        """The checked rows of a small tensor (:func:`read_small`): its info and its one raw chunk's row, or None."""
        return self._small.get((tensor_id, rank))

    def put_small(self, tensor_id: int, rank: int, info: TensorInfo, chunk: blobs.ChunkRow) -> None:
        """Keep a small tensor's checked rows; past :data:`SMALL` of them, the others are forgotten."""
        if len(self._small) >= self.SMALL:
            self._small.clear()
        self._small[(tensor_id, rank)] = (info, chunk)

    def get(self, key: Hashable) -> Any:
        """The value kept under ``key``, or None."""
        return self._items.get(key)

    def put(self, key: Hashable, value: Any) -> None:
        """Keep ``value`` (a ``blobs.BlobLayout`` or a tensor's metadata) under ``key``."""
        cost = self.ENTRY
        if isinstance(value, blobs.BlobLayout):
            cost = self.ENTRY * len(value.chunks) + sum(len(c.crcs) for c in value.chunks if c.crcs is not None)
        if cost > self.BYTES:
            return
        if len(self._items) >= self.LIMIT or self._bytes + cost > self.BYTES:
            self.clear()
        self._items[key] = value
        self._bytes += cost


def read_stats(conn: sqlite3.Connection, stored: Stored, blob_id: int, dtype: str) -> dict[str, Any] | None:
    """The statistics row of a blob read as ``dtype`` (:data:`STATS_COLUMNS`, ``hist_counts`` and ``hist_edges``),
    its histogram and range checked; None when there is none."""
    row = conn.execute(
        f"SELECT {', '.join(STATS_COLUMNS)}, histogram FROM rdb_stats WHERE blob_id=? AND dtype=?", (blob_id, dtype)
    ).fetchone()
    if row is None:
        return None
    histogram = stored.json("rdb_stats", "histogram", row[9])
    counts = histogram.get("counts") if isinstance(histogram, dict) else None
    if (histogram is not None and not isinstance(counts, list)) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in (*(counts or ()), *(x for x in row[1:3] if x is not None))
    ):
        raise stored.damaged("rdb_stats", f"its histogram or range is malformed ({str(row[9])[:60]!r})")
    edges = None if counts is None or row[1] is None else stats_mod.histogram_edges(row[1], row[2], len(counts))
    return dict(zip(STATS_COLUMNS, row[:9])) | {"hist_counts": counts, "hist_edges": edges}


def shards_without_stats(conn: sqlite3.Connection, path: Path) -> list[tuple[int, ShardInfo]]:
    """Every ``(blob id, dtype)`` that shards are read as and that has no statistics row (an older schema, or
    ``stats=False``), as the blob id and a ShardInfo to read it with."""
    missing = conn.execute(
        "SELECT DISTINCT s.blob_id, s.dtype, s.shape FROM rdb_shard s LEFT JOIN rdb_stats st"
        " ON st.blob_id = s.blob_id AND st.dtype = s.dtype WHERE st.blob_id IS NULL"
    ).fetchall()
    found = []
    for blob_id, dtype, shape_text in missing:
        shape = Stored(path, f"blob {blob_id}").shape("rdb_shard", "shape", shape_text)
        assert shape is not None
        found.append((blob_id, ShardInfo((), dtype, shape, math.prod(shape) * itemsize(dtype))))
    return found


def store_problems(
    conn: sqlite3.Connection, path: Path, tables: set[str], *, has_codec: bool, chunk_sizes: bool = True
) -> list[str]:
    """Dangling references and sizes that do not add up across the tensor tables, found with a few aggregate
    queries and without reading any tensor bytes; one sentence per problem (empty: none). See ``Report.check_store``.

    ``chunk_sizes=False`` leaves out the one check of the chunks' stored bytes (their length against their row's size),
    for a copy of the rows whose chunk bytes are kept elsewhere (a team store's report, ``team.remote``, holds them
    empty until a read fetches them); every check of the rows themselves still runs."""
    if "rdb_tensor" not in tables:
        return []
    missing = [t for t in ("rdb_shard", "rdb_blob", "rdb_blob_chunk", "rdb_chunk") if t not in tables]
    if missing:
        return [f"{path}: table {', '.join(missing)} is missing; the database file is damaged"]
    checks: tuple[tuple[str, str], ...] = (
        ("rdb_tensor rows whose shard rows are not all there (n_shards)",
         "SELECT t.tensor_id, t.rank FROM rdb_tensor t LEFT JOIN rdb_shard s ON s.tensor_pk = t.id"
         " GROUP BY t.id HAVING COUNT(s.id) != t.n_shards OR COUNT(DISTINCT s.shard_index) != t.n_shards"
         " OR MIN(s.shard_index) != 0 OR MAX(s.shard_index) != t.n_shards - 1"),
        ("rdb_shard rows whose tensor is missing",
         "SELECT s.id, s.tensor_pk FROM rdb_shard s LEFT JOIN rdb_tensor t ON t.id = s.tensor_pk WHERE t.id IS NULL"),
        ("rdb_shard rows whose blob is missing from rdb_blob",
         "SELECT t.tensor_id, t.rank, s.blob_id FROM rdb_shard s JOIN rdb_tensor t ON t.id = s.tensor_pk"
         " LEFT JOIN rdb_blob b ON b.id = s.blob_id WHERE b.id IS NULL"),
        ("rdb_blob rows with impossible sizes",
         "SELECT id, nbytes, chunk_size, n_chunks FROM rdb_blob WHERE typeof(nbytes) != 'integer'"
         " OR typeof(chunk_size) != 'integer' OR chunk_size <= 0 OR chunk_size > ? OR nbytes < 0"
         " OR n_chunks != (nbytes + chunk_size - 1) / chunk_size"),
        ("rdb_blob rows whose chunk list (rdb_blob_chunk) is incomplete, points at missing chunks or does not add "
         "up to the blob's size",
         "SELECT b.id, b.n_chunks, COUNT(bc.idx), COALESCE(SUM(c.nbytes), 0), b.nbytes FROM rdb_blob b"
         " LEFT JOIN rdb_blob_chunk bc ON bc.blob_id = b.id LEFT JOIN rdb_chunk c ON c.id = bc.chunk_id GROUP BY b.id"
         " HAVING COUNT(bc.idx) != b.n_chunks OR COUNT(c.id) != COUNT(bc.idx) OR COALESCE(SUM(c.nbytes), 0) != b.nbytes"
         " OR COUNT(DISTINCT bc.idx) != COUNT(bc.idx) OR COALESCE(MIN(bc.idx), 0) != 0"
         " OR COALESCE(MAX(bc.idx), -1) != b.n_chunks - 1"),
        ("rdb_chunk rows whose stored bytes do not fit their size" if chunk_sizes else "rdb_chunk rows with impossible sizes",
         "SELECT id, nbytes, length(data) FROM rdb_chunk WHERE typeof(nbytes) != 'integer' OR nbytes <= 0" + (
             " OR typeof(data) != 'blob' OR " + ("CASE WHEN codec IS NULL THEN length(data) != nbytes ELSE length(data) > "
                                                 "nbytes END" if has_codec else "length(data) != nbytes")
         if chunk_sizes else "")),
    )
    if "rdb_chunk_crc" in tables:
        checks += (
            ("rdb_chunk_crc rows whose chunk is missing, or whose block crcs do not fit their chunk",
             "SELECT cc.chunk_id, cc.block_size, length(cc.crcs), c.nbytes FROM rdb_chunk_crc cc"
             " LEFT JOIN rdb_chunk c ON c.id = cc.chunk_id WHERE c.id IS NULL OR typeof(cc.block_size) != 'integer'"
             f" OR cc.block_size < {blobs.MIN_CRC_BLOCK} OR typeof(cc.crcs) != 'blob'"
             " OR length(cc.crcs) != 4 * ((c.nbytes + cc.block_size - 1) / cc.block_size)"),
        )
    problems = []
    for description, sql in checks:
        rows = conn.execute(sql + " LIMIT 11", (blobs.MAX_CHUNK_SIZE,) if "?" in sql else ()).fetchall()
        if rows:
            listed = "; ".join(", ".join(map(str, r)) for r in rows[:10]) + ("; ..." if len(rows) > 10 else "")
            problems.append(f"{path}: {description}: {listed}; the database file is damaged")
    return problems
