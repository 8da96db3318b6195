"""Report: one report database, its report tables (through the ORM) and its stored tensors.

``reportdb.open(path, mode)`` is the entry point. Mode ``"r"`` never writes the file; mode ``"a"``
creates it, or upgrades an older schema in place, in one transaction.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import sqlite3
import threading
import time
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal, Mapping, Sequence

import numpy as np
from sqlalchemy.orm import Session, sessionmaker

from .dtypes import canonical, dtype_name, numpy_dtype
from .errors import NotAReportError, ReportDBError, ReportNotFoundError, SchemaError, TensorNotFoundError
from .prepare import PreparedShard
from .spec import Distribution, MeshCoordinate, Shards, TensorSpec, assemble, assembled_shape
from .stats import compute_stats, compute_stats_many, histogram_edges
from .store import blobs, bulk, codec as codec_mod, engine as engine_mod, pools, schema
from .store.codec import Compression

Mode = Literal["r", "a"]
DB_NAME = "db.sqlite"
_SPEC_FIELDS = {f.name for f in dataclasses.fields(TensorSpec)}
_NO_SPEC = TensorSpec()  # the spec of a tensor stored without metadata (TensorSpec is frozen)


#: Shards this large get their statistics computed beside the write (hashing and SQLite release the GIL).
_STATS_BESIDE_MIN = 4 << 20
#: The same for arrays stored set-based (``put_tensors``), which are at most one chunk: from this size on, their numpy
#: loops run long enough between GIL hand-offs for a helper thread to pay (writer, 1 MiB float32: 7.2 -> 5.6 ms a
#: tensor; 256 KiB: 1.85 -> 1.63; 64 KiB: slower).
_STATS_BESIDE_SMALL_MIN = 256 << 10


class TensorExistsError(ReportDBError):
    """A tensor is already stored under this id and rank."""


@dataclass(frozen=True)
class ShardInfo:
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


def resolve_path(path: str | os.PathLike[str]) -> Path:
    """A report folder means its ``db.sqlite``; anything else is the database file itself."""
    p = Path(path)
    return p / DB_NAME if p.is_dir() else p


def open(  # noqa: A001 - the public name is fixed
    path: str | os.PathLike[str], mode: Mode = "r", *, chunk_size: int = blobs.DEFAULT_CHUNK_SIZE,
    compression: Compression = "none",
) -> "Report":
    """Open a report folder or database file. ``"r"``: read only, as it is; ``"a"``: create or upgrade.

    ``chunk_size`` and ``compression`` apply to the tensors this Report writes (see :class:`Report`).
    """
    return Report(path, mode, chunk_size=chunk_size, compression=compression)


def upgrade(path: str | os.PathLike[str]) -> str:
    """Bring an existing report database to the current schema in place; return the schema revision."""
    db = resolve_path(path)
    if not db.is_file():
        raise ReportNotFoundError(f"{db}: no such report database")
    with Report(db, "a") as report:
        report.fill_missing_stats()
        return str(report.schema_revision)


class Report:
    """A report database: report tables through ``session()``, tensors through ``put_tensor``/``tensor``.

    Example::

        with reportdb.open("generated/ttnn/reports/1234", "a") as report:
            report.put_tensor(7, np.ones((32, 32), np.float32), ttnn_dtype="FLOAT32", layout="TILE")
            array = report.tensor(7)

    ``compression="zstd"`` stores a tensor's chunks zstd-compressed where a sample of its bytes shrinks by at
    least 10% (``reportdb.store.codec``); reading needs zstd only for chunks stored that way.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        mode: Mode = "r",
        *,
        chunk_size: int = blobs.DEFAULT_CHUNK_SIZE,
        compression: Compression = "none",
    ) -> None:
        if mode not in ("r", "a"):
            raise ReportDBError(f"mode must be 'r' or 'a', not {mode!r}")
        self._codec = codec_mod.codec_for(compression)
        self.path = resolve_path(path)
        self.mode = mode
        self.chunk_size = chunk_size
        self.compression = compression
        self._lock = threading.RLock()
        self._depth = 0
        self._upgraded_tensors = False
        self._conn, self.schema_revision = self._connect()
        self._engine = engine_mod.engine_for(self._conn, readonly=mode == "r")
        self._sessions = sessionmaker(bind=self._engine)
        self._tables = self._table_names()
        self._has_codec = "rdb_chunk" in self._tables and any(
            r[1] == "codec" for r in self._conn.execute("PRAGMA table_info(rdb_chunk)")
        )  # False for an older schema read as it is
        if self._upgraded_tensors:
            self.fill_missing_stats()  # tensors stored before the statistics table existed

    # --- opening ----------------------------------------------------------------------------

    def _connect(self) -> tuple[sqlite3.Connection, str | None]:
        existed = self.path.exists()
        if not existed and (self.mode == "r" or not self.path.parent.is_dir()):
            raise ReportNotFoundError(
                f"{self.path}: no such report database"
                + ("" if self.mode == "r" else f" (folder {self.path.parent} does not exist)")
            )
        if existed and self.path.is_dir():
            raise ReportNotFoundError(f"{self.path}: is a folder without {DB_NAME}")
        try:
            conn = engine_mod.connect(self.path, readonly=self.mode == "r")
        except sqlite3.DatabaseError as exc:
            raise NotAReportError(f"{self.path}: not a SQLite report database ({exc})") from exc
        except sqlite3.Error as exc:
            raise ReportDBError(f"{self.path}: cannot open: {exc}") from exc
        try:
            state = schema.inspect(conn, self.path)
            if self.mode == "a":
                self._prepare_for_writing(conn, state)
                state = schema.inspect(conn, self.path)
            return conn, state.revision
        except BaseException as exc:
            conn.close()
            if not existed:
                for suffix in ("", "-wal", "-shm", "-journal"):
                    Path(f"{self.path}{suffix}").unlink(missing_ok=True)
            if isinstance(exc, sqlite3.DatabaseError):
                raise NotAReportError(f"{self.path}: not a SQLite report database ({exc})") from exc
            raise

    def _prepare_for_writing(self, conn: sqlite3.Connection, state: schema.SchemaState) -> None:
        if state.kind is schema.SchemaKind.EMPTY:
            engine_mod.set_write_mode(conn, new_file=True)
        if state.kind is not schema.SchemaKind.CURRENT:
            # Upgrade in the file's own journal mode first, so a failure leaves it byte-for-byte as it was.
            schema.upgrade(engine_mod.engine_for(conn, readonly=False))
        engine_mod.set_write_mode(conn, new_file=False)
        self._upgraded_tensors = state.kind is schema.SchemaKind.OLDER

    def _table_names(self) -> set[str]:
        return {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}

    def close(self) -> None:
        with self._lock:
            self._engine.dispose()
            self._conn.close()

    def __enter__(self) -> "Report":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def session(self) -> Session:
        """An ORM session on this report (models in ``reportdb.models``); commit it yourself."""
        return self._sessions()

    @contextlib.contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """The report's raw ``sqlite3`` connection (autocommit mode), held exclusively for the block, for SQL the
        API does not cover: bulk rows into report tables, PRAGMAs, ad-hoc queries. Inside ``batch()`` the
        statements join its transaction; outside, each commits on its own. Tensor tables are the API's to write."""
        with self._lock:
            yield self._conn

    # --- transactions -------------------------------------------------------------------------

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Group many writes into one transaction (much faster for small tensors); all or nothing."""
        self._check_writable()
        with self._lock:
            outer = self._depth == 0
            if outer:
                self._conn.execute("BEGIN IMMEDIATE")
            self._depth += 1
            try:
                yield
            except BaseException:
                self._depth -= 1
                if outer:
                    self._conn.execute("ROLLBACK")
                raise
            self._depth -= 1
            if outer:
                try:
                    self._conn.execute("COMMIT")
                except BaseException:
                    if self._conn.in_transaction:  # a failed COMMIT leaves the transaction open: all or nothing
                        self._conn.execute("ROLLBACK")
                    raise

    def _check_writable(self) -> None:
        if self.mode != "a":
            raise ReportDBError(f"{self.path} is open read-only; open it with mode='a' to write")

    def _require_store(self) -> None:
        if "rdb_tensor" not in self._tables:
            raise SchemaError(
                f"{self.path} predates reportdb's tensor tables; run `reportdb upgrade {self.path}` or open it with mode='a'"
            )

    # --- writing ------------------------------------------------------------------------------

    def put_tensor(
        self,
        tensor_id: int,
        array: np.ndarray | None = None,
        *,
        rank: int = 0,
        shards: Sequence[tuple[Sequence[int], np.ndarray]] | None = None,
        if_exists: Literal["error", "skip", "replace"] = "error",
        stats: bool = True,
        _prepared: Sequence[PreparedShard] | None = None,
        **metadata: Any,
    ) -> bool:
        """Store a tensor: one ``array``, or ``shards=[(mesh_coordinate, array), ...]`` with a ``distribution``.

        ``metadata`` takes the TensorSpec fields (``ttnn_dtype``, ``layout``, ``tile_shape``,
        ``padded_shape``, ``storage_type``, ``memory_config``, ``distribution``...) and ``source``.
        Returns False when ``if_exists="skip"`` found the tensor already stored.
        ``_prepared`` (private, one per shard, ``reportdb.prepare.prepare_shard`` of the canonical shard) carries
        digests and statistics computed elsewhere, such as in the worker process that decoded the tensor.
        """
        self._check_writable()
        if (array is None) == (shards is None):
            raise ReportDBError("put_tensor takes either an array or shards=[(mesh_coordinate, array), ...]")
        spec, source = _spec_and_source(metadata)
        items: Shards = (
            [((), canonical(array))]  # type: ignore[arg-type]
            if array is not None
            else [(tuple(int(c) for c in coord), canonical(a)) for coord, a in shards]  # type: ignore[union-attr]
        )
        if not items:
            raise ReportDBError(f"tensor {tensor_id}: shards is empty")
        first_dtype = items[0][1].dtype
        if any(a.dtype != first_dtype for _, a in items):
            raise ReportDBError(f"tensor {tensor_id}: shards have different dtypes {sorted({str(a.dtype) for _, a in items})}")
        if _prepared is not None and len(_prepared) != len(items):
            raise ReportDBError(f"tensor {tensor_id}: {len(_prepared)} prepared shards for {len(items)} shards")
        dtype = dtype_name(first_dtype)
        row = _tensor_row(tensor_id, rank, items, spec, source)
        with self._lock, self.batch():
            try:
                tensor_pk = self._insert_tensor_row(row)
            except sqlite3.IntegrityError:  # UNIQUE(tensor_id, rank): already stored
                if if_exists == "skip":
                    return False
                if if_exists == "error":
                    raise _exists(tensor_id, rank) from None
                self._conn.execute(
                    "DELETE FROM rdb_shard WHERE tensor_pk IN (SELECT id FROM rdb_tensor WHERE tensor_id=? AND rank=?)",
                    (tensor_id, rank),
                )
                self._conn.execute("DELETE FROM rdb_tensor WHERE tensor_id=? AND rank=?", (tensor_id, rank))
                tensor_pk = self._insert_tensor_row(row)
            with_stats = stats and "rdb_stats" in self._tables
            for index, (coord, arr) in enumerate(items):
                prepared = _prepared[index] if _prepared is not None else None
                beside = (  # a large shard's statistics run in a helper thread while its bytes are hashed and written
                    pools.pool("stats", 1).submit(compute_stats, arr)
                    if with_stats and prepared is None and arr.nbytes >= _STATS_BESIDE_MIN else None
                )
                ref = blobs.put_blob(self._conn, arr, self.chunk_size, prepared.digests if prepared else None, self._codec)
                self._conn.execute(
                    "INSERT INTO rdb_shard(tensor_pk, shard_index, mesh_coordinate, dtype, shape, blob_id)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (tensor_pk, index, _json_ints(coord), dtype, _json_ints(arr.shape), ref.id),
                )
                if with_stats:
                    self._put_stats(ref.id, dtype, arr, known_missing=ref.created,
                                    precomputed=beside.result() if beside else prepared.stats if prepared else None)
        return True

    def put_tensors(
        self,
        tensors: Iterable[Mapping[str, Any]],
        *,
        if_exists: Literal["error", "skip", "replace"] = "error",
        stats: bool = True,
    ) -> list[bool]:
        """Store many tensors in one transaction; each mapping holds ``put_tensor``'s arguments (``tensor_id``,
        ``array`` or ``shards``, ``rank``, metadata). Returns ``put_tensor``'s answer for each, in order.

        Tensors of one array or one shard (a single-device ttnn tensor) that fit in one chunk go in together: a few
        set-based statements for the whole call instead of seven per tensor, and their statistics in one vectorized
        pass; much faster for many small tensors.
        """
        self._check_writable()
        self._require_store()
        entries = [dict(t) for t in tensors]
        results = [False] * len(entries)
        small: list[tuple[int, tuple[int, int], MeshCoordinate, np.ndarray, dict[str, Any]]] = []
        with self._lock, self.batch():
            for i, kw in enumerate(entries):
                one = _single(kw) if if_exists != "replace" and "_prepared" not in kw else None
                if one is not None:
                    coord, arr = one
                    kw.pop("array", None)
                    if arr.nbytes <= self.chunk_size:
                        kw.pop("shards", None)
                        small.append((i, (int(kw.pop("tensor_id")), int(kw.pop("rank", 0))), coord, arr, kw))
                        continue
                    kw["shards"] = [(coord, arr)]  # canonical already: put_tensor keeps it as it is
                results[i] = self.put_tensor(if_exists=if_exists, stats=stats, **kw)
            if small:
                for i, stored in zip((s[0] for s in small), self._put_small(small, if_exists, stats)):
                    results[i] = stored
        return results

    def _put_small(
        self, small: list[tuple[int, tuple[int, int], MeshCoordinate, np.ndarray, dict[str, Any]]], if_exists: str,
        stats: bool,
    ) -> list[bool]:
        """``put_tensors`` for tensors of one array or shard of one chunk each; the caller holds the transaction."""
        conn = self._conn
        keys = [key for _, key, _, _, _ in small]
        taken: set[tuple[int, int]] = set()
        for marks, key_piece in bulk.in_lists(keys):
            taken.update(conn.execute(
                f"SELECT tensor_id, rank FROM rdb_tensor WHERE (tensor_id, rank) IN (VALUES {marks.replace('?', '(?, ?)')})",
                [v for key in key_piece for v in key],
            ).fetchall())
        fresh = []
        coords = []
        results = []
        for _, key, coord, arr, kw in small:
            if key in taken:
                if if_exists == "error":
                    raise _exists(*key)
                results.append(False)
                continue
            taken.add(key)
            spec, source = _spec_and_source(kw)
            fresh.append((_tensor_row(key[0], key[1], [(coord, arr)], spec, source), arr))
            coords.append(_json_ints(coord))
            results.append(True)
        if not fresh:
            return results
        with_stats = stats and "rdb_stats" in self._tables
        beside: dict[int, Future[dict[str, Any]]] = {}  # id(array) -> its statistics, computed while the bytes go in
        if with_stats:
            for _, arr in fresh:
                if arr.nbytes >= _STATS_BESIDE_SMALL_MIN and id(arr) not in beside:
                    beside[id(arr)] = pools.pool("stats", 1).submit(compute_stats, arr)
        refs = bulk.put_small_blobs(conn, [arr for _, arr in fresh], self.chunk_size, self._codec)
        pk = bulk.next_id(conn, "rdb_tensor")
        conn.executemany(
            "INSERT INTO rdb_tensor(id, tensor_id, rank, dtype, shape, nbytes, n_shards, ttnn_dtype, layout, tile_shape,"
            " transpose_tile, padded_shape, storage_type, memory_config, distribution, source, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(pk + n, *row) for n, (row, _) in enumerate(fresh)],
        )
        conn.executemany(
            "INSERT INTO rdb_shard(tensor_pk, shard_index, mesh_coordinate, dtype, shape, blob_id) VALUES (?, 0, ?, ?, ?, ?)",
            [(pk + n, coord, row[2], _json_ints(arr.shape), blob_id)
             for n, ((row, arr), coord, (blob_id, _)) in enumerate(zip(fresh, coords, refs))],
        )
        if with_stats:
            wanted: dict[tuple[int, str], np.ndarray] = {}  # (blob id, dtype) -> values; once per pair
            for (row, arr), (blob_id, _) in zip(fresh, refs):
                wanted.setdefault((blob_id, row[2]), arr)
            reused = [blob_id for blob_id, created in refs if not created]  # stored before: maybe has statistics
            for marks, blob_ids in bulk.in_lists(reused):
                for have in conn.execute(f"SELECT blob_id, dtype FROM rdb_stats WHERE blob_id IN ({marks})", blob_ids):
                    wanted.pop(tuple(have), None)
            # Small arrays inline, together: in a helper thread beside the inserts they measured slower (GIL hand-offs
            # between small numpy calls); large ones were computed beside, their numpy loops releasing the GIL.
            arrays = list(wanted.values())
            inline = iter(compute_stats_many([a for a in arrays if id(a) not in beside], edges=False))
            self._put_stats_rows(list(wanted), [beside[id(a)].result() if id(a) in beside else next(inline) for a in arrays])
        return results

    def fill_missing_stats(self) -> int:
        """Compute the statistics of every stored shard that has none (older schema, or ``stats=False``)."""
        self._check_writable()
        with self._lock:
            missing = self._conn.execute(
                "SELECT DISTINCT s.blob_id, s.dtype, s.shape FROM rdb_shard s LEFT JOIN rdb_stats st"
                " ON st.blob_id = s.blob_id AND st.dtype = s.dtype WHERE st.blob_id IS NULL"
            ).fetchall()
            for blob_id, dtype, shape in missing:
                array = self._read(blob_id, numpy_dtype(dtype), tuple(json.loads(shape)), f"blob {blob_id}")
                with self.batch():
                    self._put_stats(blob_id, dtype, array)
        return len(missing)

    def _insert_tensor_row(self, row: tuple[Any, ...]) -> int:
        pk = self._conn.execute(
            "INSERT INTO rdb_tensor(tensor_id, rank, dtype, shape, nbytes, n_shards, ttnn_dtype, layout, tile_shape,"
            " transpose_tile, padded_shape, storage_type, memory_config, distribution, source, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            row,
        ).lastrowid
        assert pk is not None
        return pk

    def _put_stats(self, blob_id: int, dtype: str, array: np.ndarray, *, known_missing: bool = False,
                   precomputed: dict[str, Any] | None = None) -> None:
        """Store the statistics of a blob read as ``dtype`` unless they are stored already.

        ``known_missing``: the blob was created in this transaction, so no statistics can exist for it (blobs are
        never deleted, so their ids are never reused) and the lookup is skipped. ``precomputed``:
        ``compute_stats(array)`` computed elsewhere.
        """
        if not known_missing and self._conn.execute(
            "SELECT 1 FROM rdb_stats WHERE blob_id=? AND dtype=?", (blob_id, dtype)
        ).fetchone():
            return
        self._put_stats_rows([(blob_id, dtype)], [precomputed if precomputed is not None else compute_stats(array)])

    def _put_stats_rows(self, keys: Sequence[tuple[int, str]], results: Sequence[dict[str, Any]]) -> None:
        """Insert ``compute_stats`` results for ``(blob id, dtype)`` pairs that have none yet."""
        self._conn.executemany(
            "INSERT INTO rdb_stats(blob_id, dtype, count, min, max, mean, std, absmax, nan_count, inf_count,"
            " zero_count, histogram) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    blob_id, dtype, s["count"], s["min"], s["max"], s["mean"], s["std"], s["absmax"], s["nan_count"],
                    s["inf_count"], s["zero_count"], histogram,
                )
                for (blob_id, dtype), s, histogram in zip(keys, results, _counts_jsons([s["hist_counts"] for s in results]))
            ],
        )

    # --- reading ------------------------------------------------------------------------------

    def tensor_ids(self, rank: int = 0) -> list[int]:
        """The ids of the tensors stored for ``rank``, ascending."""
        if "rdb_tensor" not in self._tables:
            return []
        with self._lock:
            return [r[0] for r in self._conn.execute("SELECT tensor_id FROM rdb_tensor WHERE rank=? ORDER BY tensor_id", (rank,))]

    def tensor_keys(self) -> list[tuple[int, int]]:
        """Every stored ``(tensor_id, rank)``."""
        if "rdb_tensor" not in self._tables:
            return []
        with self._lock:
            return [(r[0], r[1]) for r in self._conn.execute("SELECT tensor_id, rank FROM rdb_tensor ORDER BY rank, tensor_id")]

    def has_tensor(self, tensor_id: int, rank: int = 0) -> bool:
        if "rdb_tensor" not in self._tables:
            return False
        with self._lock:
            return self._conn.execute(
                "SELECT 1 FROM rdb_tensor WHERE tensor_id=? AND rank=?", (tensor_id, rank)
            ).fetchone() is not None

    def verify_tensor(
        self, tensor_id: int, rank: int = 0, *, pool: Executor | None = None, skip: set[int] | None = None
    ) -> int:
        """Re-read a tensor's chunks and re-hash them against their sha256 addresses (a deeper check than the crc32
        every read makes); raise CorruptionError on a mismatch, return the bytes checked. ``pool`` hashes in its
        threads; blob ids in ``skip`` are not checked again, and the ones checked here are added to it."""
        _, blob_ids = self._info(tensor_id, rank)
        checked = 0
        with self._lock:
            for blob_id in blob_ids:
                if skip is None or blob_id not in skip:
                    checked += blobs.verify_blob(self._conn, blob_id, what=f"tensor {tensor_id} (rank {rank})",
                                                 pool=pool, has_codec=self._has_codec)
                    if skip is not None:
                        skip.add(blob_id)
        return checked

    def tensor_info(self, tensor_id: int, rank: int = 0) -> TensorInfo:
        """The stored metadata of a tensor; reads no tensor bytes."""
        return self._info(tensor_id, rank)[0]

    def _info(self, tensor_id: int, rank: int) -> tuple[TensorInfo, list[int]]:
        self._require_store()
        with self._lock:
            row = self._conn.execute(
                "SELECT id, dtype, shape, nbytes, ttnn_dtype, layout, tile_shape, transpose_tile, padded_shape,"
                " storage_type, memory_config, distribution, source FROM rdb_tensor WHERE tensor_id=? AND rank=?",
                (tensor_id, rank),
            ).fetchone()
            if row is None:
                raise TensorNotFoundError(f"{self.path}: no tensor {tensor_id} (rank {rank}) is stored")
            shard_rows = self._conn.execute(
                "SELECT s.mesh_coordinate, s.dtype, s.shape, s.blob_id, b.nbytes FROM rdb_shard s"
                " JOIN rdb_blob b ON b.id = s.blob_id WHERE s.tensor_pk=? ORDER BY s.shard_index",
                (row[0],),
            ).fetchall()
        spec = TensorSpec.from_json(
            {
                "ttnn_dtype": row[4], "layout": row[5], "tile_shape": _unjson(row[6]), "transpose_tile": bool(row[7]),
                "padded_shape": _unjson(row[8]), "storage_type": row[9], "memory_config": _unjson(row[10]),
                "distribution": _unjson(row[11]), "logical_shape": _unjson(row[2]),
            }
        )
        shards = tuple(ShardInfo(tuple(json.loads(c)), d, tuple(json.loads(s)), n) for c, d, s, _, n in shard_rows)
        shape = _unjson(row[2])
        info = TensorInfo(
            tensor_id, rank, row[1], None if shape is None else tuple(shape), row[3], spec, _unjson(row[12]), shards
        )
        return info, [r[3] for r in shard_rows]

    def shards(self, tensor_id: int, rank: int = 0) -> Shards:
        """Every device shard of a tensor as ``[(mesh_coordinate, array), ...]``."""
        info, blob_ids = self._info(tensor_id, rank)
        return [
            (s.mesh_coordinate, self._read(blob_id, numpy_dtype(s.dtype), s.shape, f"tensor {tensor_id} (rank {rank})"))
            for s, blob_id in zip(info.shards, blob_ids)
        ]

    def tensor(self, tensor_id: int, rank: int = 0, *, rows: slice | None = None) -> np.ndarray:
        """The logical array (multi-device tensors assembled as their distribution says).

        ``rows`` reads a range along the first axis; for a single-device tensor only the chunks that
        hold it are read.
        """
        info, blob_ids = self._info(tensor_id, rank)
        if rows is not None and len(info.shards) == 1 and info.shards[0].shape:
            shard = info.shards[0]
            start, stop, step = rows.indices(shard.shape[0])
            if step != 1:
                raise ReportDBError("rows must be a contiguous slice (step 1)")
            dtype = numpy_dtype(shard.dtype)
            row_bytes = int(np.prod(shard.shape[1:], dtype=np.int64)) * dtype.itemsize
            return self._read(
                blob_ids[0], dtype, (max(0, stop - start),) + shard.shape[1:], f"tensor {tensor_id} (rank {rank})",
                offset=start * row_bytes,
            )
        array = assemble(self.shards(tensor_id, rank), info.spec.distribution)
        return array if rows is None else array[rows]

    def _read(self, blob_id: int, dtype: np.dtype, shape: tuple[int, ...], what: str, offset: int = 0) -> np.ndarray:
        out = np.empty(shape, dtype=dtype)
        with self._lock:
            blobs.read_blob_into(
                self._conn, blob_id, out.reshape(-1).view(np.uint8), offset=offset, what=what, has_codec=self._has_codec
            )
        return out

    def tensor_stats(self, tensor_id: int, rank: int = 0) -> dict[str, Any]:
        """Statistics stored when the tensor was written (per shard for multi-device); reads no tensor bytes."""
        info, blob_ids = self._info(tensor_id, rank)
        if "rdb_stats" not in self._tables:
            raise SchemaError(f"{self.path} has no statistics table; run `reportdb upgrade {self.path}`")
        per_shard = []
        with self._lock:
            for shard, blob_id in zip(info.shards, blob_ids):
                row = self._conn.execute(
                    "SELECT count, min, max, mean, std, absmax, nan_count, inf_count, zero_count, histogram"
                    " FROM rdb_stats WHERE blob_id=? AND dtype=?",
                    (blob_id, shard.dtype),
                ).fetchone()
                if row is None:
                    raise TensorNotFoundError(f"tensor {tensor_id} (rank {rank}) was stored without statistics")
                counts = json.loads(row[9])["counts"] if row[9] else None
                edges = None if counts is None or row[1] is None else histogram_edges(row[1], row[2], len(counts))
                per_shard.append(
                    dict(zip(("count", "min", "max", "mean", "std", "absmax", "nan_count", "inf_count", "zero_count"), row[:9]))
                    | {"hist_counts": counts, "hist_edges": edges}
                )
        if len(per_shard) == 1:
            return per_shard[0]
        return {"shards": per_shard, "mesh_coordinates": [list(s.mesh_coordinate) for s in info.shards]}

    def summary(self) -> dict[str, Any]:
        """Schema version, row counts of the report tables, tensors and bytes stored (compressed chunks at their
        stored size; SQLite's ``length()`` of a blob reads no overflow page) against logical bytes."""
        with self._lock:
            tables = sorted(self._table_names())
            counts = {t: self._conn.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in tables}
            result: dict[str, Any] = {
                "path": str(self.path),
                "schema_revision": self.schema_revision,
                "schema_head": schema.head_revision(),
                "report_schema_version": None,
                "tables": counts,
                "tensors": 0,
                "shards": 0,
                "logical_bytes": 0,
                "stored_bytes": 0,
            }
            if "report_metadata" in tables:
                found = self._conn.execute("SELECT value FROM report_metadata WHERE key='schema_version'").fetchone()
                result["report_schema_version"] = found[0] if found else None
            if "rdb_tensor" in tables:
                result["tensors"] = counts["rdb_tensor"]
                result["shards"] = counts["rdb_shard"]
                result["logical_bytes"] = self._conn.execute("SELECT COALESCE(SUM(nbytes), 0) FROM rdb_tensor").fetchone()[0]
                result["stored_bytes"] = self._conn.execute("SELECT COALESCE(SUM(length(data)), 0) FROM rdb_chunk").fetchone()[0]
        return result


def _tensor_row(tensor_id: int, rank: int, items: Shards, spec: TensorSpec, source: Any) -> tuple[Any, ...]:
    """The ``rdb_tensor`` row of canonical shards (without its id), as ``_insert_tensor_row`` takes it."""
    first_dtype = items[0][1].dtype
    shape = _global_shape(items, spec)
    nbytes = math.prod(shape) * first_dtype.itemsize if shape is not None else sum(int(a.nbytes) for _, a in items)
    return (
        tensor_id, rank, dtype_name(first_dtype), _json_ints(shape), nbytes, len(items), spec.ttnn_dtype, spec.layout,
        _json(spec.tile_shape), int(spec.transpose_tile), _json(spec.padded_shape), spec.storage_type,
        _json(spec.memory_config), _json(spec.distribution.to_json() if spec.distribution else None),
        _json(source), time.time(),
    )


def _single(kw: dict[str, Any]) -> tuple[MeshCoordinate, np.ndarray] | None:
    """The one canonical array of a put's arguments and its mesh coordinate: ``array=`` without a distribution,
    or ``shards=`` of length one; None for anything else (``put_tensor`` checks and stores those)."""
    if "array" in kw and "shards" not in kw and kw["array"] is not None and kw.get("distribution") is None:
        return (), canonical(kw["array"])
    shards = kw.get("shards")
    if "array" not in kw and shards is not None and len(shards) == 1:
        coord, array = shards[0]
        return tuple(int(c) for c in coord), canonical(array)
    return None


def _exists(tensor_id: int, rank: int) -> TensorExistsError:
    return TensorExistsError(f"tensor {tensor_id} (rank {rank}) is already stored; pass if_exists='replace' or 'skip'")


def _spec_and_source(metadata: dict[str, Any]) -> tuple[TensorSpec, Any]:
    """A put's metadata (TensorSpec fields and ``source``, which is popped) as its spec and source."""
    source = metadata.pop("source", None)
    unknown = metadata.keys() - _SPEC_FIELDS
    if unknown:
        raise ReportDBError(f"unknown tensor metadata {sorted(unknown)}; known: {sorted(_SPEC_FIELDS | {'source'})}")
    return (_spec_from_metadata(metadata) if metadata else _NO_SPEC), source


def _spec_from_metadata(metadata: dict[str, Any]) -> TensorSpec:
    values = dict(metadata)
    dist = values.get("distribution")
    if dist is not None and not isinstance(dist, Distribution):
        values["distribution"] = Distribution.from_json(dist)
    return TensorSpec.from_json(values) if values else TensorSpec()


def _global_shape(items: Shards, spec: TensorSpec) -> tuple[int, ...] | None:
    if len(items) == 1 and spec.distribution is None:
        return tuple(items[0][1].shape)
    try:
        return tuple(int(v) for v in assembled_shape([(c, tuple(a.shape)) for c, a in items], spec.distribution))
    except ReportDBError:
        return None


def _counts_jsons(histograms: Sequence[Sequence[int] | None]) -> list[str]:
    """``json.dumps({"counts": counts})`` of each histogram (the statistics row of every stored tensor): one
    ``json.dumps`` of them all, cut apart, costs a fraction of one call each."""
    text = json.dumps(histograms)  # "[[1, 2], [3, 4]]": histograms hold ints only, so "], [" cuts it
    if "null" in text:  # a histogram of no finite value: cut apart no more
        return [json.dumps({"counts": counts}) for counts in histograms]
    if not histograms:
        return []
    return ['{"counts": [' + part + "]}" for part in text[2:-2].split("], [")]


def _json_ints(values: Sequence[int] | None) -> str | None:
    """``json.dumps(list(values))`` of a shape or mesh coordinate (Python ints), several times faster."""
    if values is None:
        return None
    return "[" + ", ".join(map(str, values)) + "]"


def _json(value: Any) -> str | None:
    if value is None:
        return None
    return json.dumps(list(value) if isinstance(value, tuple) else value)


def _unjson(text: str | None) -> Any:
    return None if text is None else json.loads(text)
