"""The tensor write path: a tensor's ``rdb_tensor`` row, its ``rdb_shard`` rows and the ``rdb_stats`` row of each
blob, each INSERT written once.

``Report.put_tensor`` stores one tensor at a time (:func:`put_one`); ``Report.put_tensors`` (what the writer uses)
sends the tensors of one shard that fit in one chunk through :func:`put_small`: a few set-based statements for the
whole call instead of several per tensor, and their statistics in one vectorized pass. Both write the same rows.
The caller holds the write transaction (``BEGIN IMMEDIATE``), so new row ids are taken from each table's maximum.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Sequence

from .._lazy import lazy_module

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
else:  # numpy is imported on first use: opening a report and reading its metadata need none
    np = lazy_module("numpy", globals(), "np")

if TYPE_CHECKING:  # pragma: no cover
    from concurrent.futures import Future

from ..dtypes import canonical, dtype_name
from ..errors import InvalidArgumentError, ReportDBError, TensorExistsError
from ..numeric.stats import compute_stats, compute_stats_many
from ..spec import MeshCoordinate, Shards, TensorSpec, assembled_shape, check_metadata
from .. import pools
from . import blobs, bulk
from .prepared import PreparedShard

IfExists = Literal["error", "skip", "replace"]

#: Shards this large get their statistics computed beside the write (hashing and SQLite release the GIL).
_STATS_BESIDE_MIN = 4 << 20
#: The same for arrays stored set-based (``put_small``), which are at most one chunk: from this size on, their numpy
#: loops run long enough between GIL hand-offs for a helper thread to pay (writer, 1 MiB float32: 7.2 -> 5.6 ms a
#: tensor; 256 KiB: 1.85 -> 1.63; 64 KiB: slower).
_STATS_BESIDE_SMALL_MIN = 256 << 10

_NO_SPEC = TensorSpec()  # the spec of a tensor stored without metadata (TensorSpec is frozen)

_INSERT_TENSOR = (
    "INSERT INTO rdb_tensor(id, tensor_id, rank, dtype, shape, nbytes, n_shards, ttnn_dtype, layout, tile_shape,"
    " transpose_tile, padded_shape, storage_type, memory_config, distribution, source, created_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_SHARD = (
    "INSERT INTO rdb_shard(tensor_pk, shard_index, mesh_coordinate, dtype, shape, blob_id) VALUES (?, ?, ?, ?, ?, ?)"
)
_INSERT_STATS = (
    "INSERT INTO rdb_stats(blob_id, dtype, count, min, max, mean, std, absmax, nan_count, inf_count, zero_count,"
    " histogram) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


@dataclass(frozen=True)
class WriteOptions:
    """How a Report writes tensor values: chunk size, codec (None: raw), whether statistics rows are written
    (asked for, and the file has an ``rdb_stats`` table) and the file's content address kind (``blobs.address_kind``)."""

    chunk_size: int
    codec: str | None
    stats: bool
    address: str


@dataclass(frozen=True)
class NewTensor:
    """A tensor to store: its key, canonical shards (all of one dtype), spec and source, and optionally the digests
    and statistics of each shard computed elsewhere (``prepared``, one per shard)."""

    tensor_id: int
    rank: int
    shards: Shards
    spec: TensorSpec
    source: Any
    prepared: Sequence[PreparedShard] | None = None

    @property
    def dtype(self) -> str:
        return dtype_name(self.shards[0][1].dtype)

    def row(self) -> tuple[Any, ...]:
        """The tensor's ``rdb_tensor`` row, without its id."""
        spec = self.spec
        shape = self._global_shape()
        nbytes = (math.prod(shape) * self.shards[0][1].dtype.itemsize if shape is not None
                  else sum(int(a.nbytes) for _, a in self.shards))
        return (
            self.tensor_id, self.rank, self.dtype, _json_ints(shape), nbytes, len(self.shards), spec.ttnn_dtype,
            spec.layout, _json(spec.tile_shape), int(spec.transpose_tile), _json(spec.padded_shape), spec.storage_type,
            _json(spec.memory_config), _json(spec.distribution.to_json() if spec.distribution else None),
            _json(self.source), time.time(),
        )

    def _global_shape(self) -> tuple[int, ...] | None:
        """The shape of the assembled tensor; None when its shards cannot be assembled."""
        if len(self.shards) == 1 and self.spec.distribution is None:
            return tuple(self.shards[0][1].shape)
        try:
            return tuple(int(v) for v in assembled_shape([(c, tuple(a.shape)) for c, a in self.shards],
                                                         self.spec.distribution))
        except ReportDBError:
            return None


def new_tensor(
    tensor_id: int,
    array: np.ndarray | None = None,
    *,
    rank: int = 0,
    shards: Sequence[tuple[Sequence[int], np.ndarray]] | None = None,
    _prepared: Sequence[PreparedShard] | None = None,
    **metadata: Any,
) -> NewTensor:
    """``put_tensor``'s arguments checked and made canonical: one ``array`` or ``shards`` of one dtype, metadata
    the TensorSpec fields and ``source`` (see ``Report.put_tensor``)."""
    if (array is None) == (shards is None):
        raise InvalidArgumentError("put_tensor takes either an array or shards=[(mesh_coordinate, array), ...]")
    check_metadata(metadata)
    source = metadata.pop("source", None)
    spec = TensorSpec.from_json(metadata) if metadata else _NO_SPEC
    items: Shards = (
        [((), canonical(array))] if array is not None
        else [(tuple(int(c) for c in coord), canonical(a)) for coord, a in shards or ()]
    )
    if not items:
        raise InvalidArgumentError(f"tensor {tensor_id}: shards is empty")
    first_dtype = items[0][1].dtype
    if any(a.dtype != first_dtype for _, a in items):
        raise InvalidArgumentError(f"tensor {tensor_id}: shards have different dtypes {sorted({str(a.dtype) for _, a in items})}")
    if _prepared is not None and len(_prepared) != len(items):
        raise InvalidArgumentError(f"tensor {tensor_id}: {len(_prepared)} prepared shards for {len(items)} shards")
    return NewTensor(int(tensor_id), int(rank), items, spec, source, _prepared)


def put_many(conn: sqlite3.Connection, tensors: Sequence[NewTensor], if_exists: IfExists, options: WriteOptions) -> list[bool]:
    """Store tensors (``put_tensors``): those of one shard of at most one chunk, nothing prepared and not to be
    replaced, set-based after the others; return for each whether it was stored (False: skipped, already there)."""
    results = [False] * len(tensors)
    small: list[int] = []
    for i, tensor in enumerate(tensors):
        if (if_exists != "replace" and tensor.prepared is None and len(tensor.shards) == 1
                and tensor.shards[0][1].nbytes <= options.chunk_size):
            small.append(i)
        else:
            results[i] = put_one(conn, tensor, if_exists, options)
    for i, stored in zip(small, put_small(conn, [tensors[i] for i in small], if_exists, options)):
        results[i] = stored
    return results


def put_one(conn: sqlite3.Connection, tensor: NewTensor, if_exists: IfExists, options: WriteOptions) -> bool:
    """Store one tensor of any size, shard by shard; False when ``if_exists="skip"`` found it already stored."""
    key = (tensor.tensor_id, tensor.rank)
    row = tensor.row()
    try:
        pk = _insert_tensors(conn, [row])
    except sqlite3.IntegrityError:  # UNIQUE(tensor_id, rank): already stored
        if if_exists == "skip":
            return False
        if if_exists == "error":
            raise _exists(key) from None
        conn.execute(
            "DELETE FROM rdb_shard WHERE tensor_pk IN (SELECT id FROM rdb_tensor WHERE tensor_id=? AND rank=?)", key
        )
        conn.execute("DELETE FROM rdb_tensor WHERE tensor_id=? AND rank=?", key)
        pk = _insert_tensors(conn, [row])
    dtype = tensor.dtype
    shard_rows = []
    for index, (coord, arr) in enumerate(tensor.shards):
        prepared = tensor.prepared[index] if tensor.prepared is not None else None
        beside = (  # a large shard's statistics run in a helper thread while its bytes are hashed and written
            pools.pool("stats", 1).submit(compute_stats, arr)
            if options.stats and prepared is None and arr.nbytes >= _STATS_BESIDE_MIN else None
        )
        ref = blobs.put_blob(conn, arr, options.chunk_size, prepared.digests if prepared else None, options.codec,
                             address=options.address)
        shard_rows.append((pk, index, _json_ints(coord), dtype, _json_ints(arr.shape), ref.id))
        if options.stats:
            put_stats(conn, ref.id, dtype, arr, known_missing=ref.created,
                      precomputed=beside.result() if beside else prepared.stats if prepared else None)
    conn.executemany(_INSERT_SHARD, shard_rows)
    return True


def put_small(conn: sqlite3.Connection, tensors: Sequence[NewTensor], if_exists: IfExists, options: WriteOptions) -> list[bool]:
    """Store tensors of one shard of at most one chunk each with a few statements for them all (``if_exists`` is
    "error" or "skip"); return for each whether it was stored."""
    if not tensors:
        return []
    keys = [(t.tensor_id, t.rank) for t in tensors]
    taken: set[tuple[int, int]] = set()
    for marks, key_piece in bulk.in_lists(keys):
        taken.update(conn.execute(
            f"SELECT tensor_id, rank FROM rdb_tensor WHERE (tensor_id, rank) IN (VALUES {marks.replace('?', '(?, ?)')})",
            [v for key in key_piece for v in key],
        ).fetchall())
    fresh: list[tuple[tuple[Any, ...], MeshCoordinate, np.ndarray]] = []  # (rdb_tensor row, coordinate, values)
    results = []
    for tensor, key in zip(tensors, keys):
        if key in taken:
            if if_exists == "error":
                raise _exists(key)
            results.append(False)
            continue
        taken.add(key)
        coord, arr = tensor.shards[0]
        fresh.append((tensor.row(), coord, arr))
        results.append(True)
    if not fresh:
        return results
    beside: dict[int, Future[dict[str, Any]]] = {}  # id(array) -> its statistics, computed while the bytes go in
    if options.stats:
        for _, _, arr in fresh:
            if arr.nbytes >= _STATS_BESIDE_SMALL_MIN and id(arr) not in beside:
                beside[id(arr)] = pools.pool("stats", 1).submit(compute_stats, arr)
    refs = bulk.put_small_blobs(conn, [arr for _, _, arr in fresh], options.chunk_size, options.codec, options.address)
    pk = _insert_tensors(conn, [row for row, _, _ in fresh])
    conn.executemany(_INSERT_SHARD, [
        (pk + n, 0, _json_ints(coord), row[2], _json_ints(arr.shape), blob_id)
        for n, ((row, coord, arr), (blob_id, _)) in enumerate(zip(fresh, refs))
    ])
    if options.stats:
        wanted: dict[tuple[int, str], np.ndarray] = {}  # (blob id, dtype) -> values; once per pair
        for (row, _, arr), (blob_id, _) in zip(fresh, refs):
            wanted.setdefault((blob_id, row[2]), arr)
        reused = [blob_id for blob_id, created in refs if not created]  # stored before: maybe has statistics
        for marks, blob_ids in bulk.in_lists(reused):
            for have in conn.execute(f"SELECT blob_id, dtype FROM rdb_stats WHERE blob_id IN ({marks})", blob_ids):
                wanted.pop(tuple(have), None)
        # Small arrays inline, together: in a helper thread beside the inserts they measured slower (GIL hand-offs
        # between small numpy calls); large ones were computed beside, their numpy loops releasing the GIL.
        arrays = list(wanted.values())
        inline = iter(compute_stats_many([a for a in arrays if id(a) not in beside], edges=False))
        _insert_stats(conn, list(wanted), [beside[id(a)].result() if id(a) in beside else next(inline) for a in arrays])
    return results


def put_stats(conn: sqlite3.Connection, blob_id: int, dtype: str, array: np.ndarray, *, known_missing: bool = False,
              precomputed: dict[str, Any] | None = None) -> None:
    """Store the statistics of a blob read as ``dtype`` unless they are stored already.

    ``known_missing``: the blob was created in this transaction, so no statistics can exist for it (blobs are
    never deleted, so their ids are never reused) and the lookup is skipped. ``precomputed``:
    ``compute_stats(array)`` computed elsewhere.
    """
    if not known_missing and conn.execute(
        "SELECT 1 FROM rdb_stats WHERE blob_id=? AND dtype=?", (blob_id, dtype)
    ).fetchone():
        return
    _insert_stats(conn, [(blob_id, dtype)], [precomputed if precomputed is not None else compute_stats(array)])


def _insert_tensors(conn: sqlite3.Connection, rows: Sequence[tuple[Any, ...]]) -> int:
    """Insert ``rdb_tensor`` rows (as :meth:`NewTensor.row` makes them) under consecutive new ids; return the first."""
    pk = bulk.next_id(conn, "rdb_tensor")
    conn.executemany(_INSERT_TENSOR, [(pk + n, *row) for n, row in enumerate(rows)])
    return pk


def _insert_stats(conn: sqlite3.Connection, keys: Sequence[tuple[int, str]], results: Sequence[dict[str, Any]]) -> None:
    """Insert ``compute_stats`` results for ``(blob id, dtype)`` pairs that have none yet."""
    conn.executemany(_INSERT_STATS, [
        (
            blob_id, dtype, s["count"], s["min"], s["max"], s["mean"], s["std"], s["absmax"], s["nan_count"],
            s["inf_count"], s["zero_count"], json.dumps({"counts": s["hist_counts"]}),
        )
        for (blob_id, dtype), s in zip(keys, results)
    ])


def _exists(key: tuple[int, int]) -> TensorExistsError:
    return TensorExistsError(f"tensor {key[0]} (rank {key[1]}) is already stored; pass if_exists='replace' or 'skip'")


def _json_ints(values: Sequence[int] | None) -> str | None:
    """``json.dumps(list(values))`` of a shape or mesh coordinate (Python ints): 0.6 instead of 3 µs, three times per
    stored tensor, on the writer's path of many small tensors."""
    if values is None:
        return None
    return "[" + ", ".join(map(str, values)) + "]"


def _json(value: Any) -> str | None:
    if value is None:
        return None
    return json.dumps(list(value) if isinstance(value, tuple) else value)
