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
from .errors import (
    CorruptionError, NotAReportError, QueryTimeoutError, ReportDBError, ReportNotFoundError, SchemaError,
    TensorNotFoundError,
)
from .prepare import PreparedShard
from .spec import MAX_SHARDS, Distribution, MeshCoordinate, Shards, TensorSpec, assemble, assembled_shape, shape_from_json
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
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or not 0 < chunk_size <= blobs.MAX_CHUNK_SIZE:
            raise ReportDBError(f"chunk_size must be a number of bytes from 1 to {blobs.MAX_CHUNK_SIZE}, not {chunk_size!r}")
        self._codec = codec_mod.codec_for(compression)
        self.path = resolve_path(path)
        self.mode = mode
        self.chunk_size = chunk_size
        self.compression = compression
        self._lock = threading.RLock()
        self._depth = 0
        self._upgraded_tensors = False
        self._wal = False  # this connection has put the file in WAL mode (at its first write)
        self._conn, self.schema_revision = self._connect()
        self._engine = engine_mod.engine_for(
            self._conn, readonly=mode == "r", before_write=self._start_writing if mode == "a" else None
        )
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
            schema.check_safety(conn, self.path, writing=self.mode == "a")
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
            if isinstance(exc, sqlite3.OperationalError) and "readonly" in str(exc):
                raise ReportDBError(
                    f"{self.path}: cannot be read without write access ({exc}): a hot journal beside it needs rolling "
                    "back. Open it once where it is writable (reportdb.open(path, 'a')), then read it"
                ) from exc
            if isinstance(exc, sqlite3.DatabaseError):
                raise NotAReportError(f"{self.path}: not a SQLite report database ({exc})") from exc
            raise

    def _prepare_for_writing(self, conn: sqlite3.Connection, state: schema.SchemaState) -> None:
        new_file = state.kind is schema.SchemaKind.EMPTY
        engine_mod.set_write_mode(conn, new_file=new_file)
        self._wal = new_file
        if state.kind is not schema.SchemaKind.CURRENT:
            # Upgrade in the file's own journal mode first, so a failure leaves it byte-for-byte as it was.
            schema.upgrade(engine_mod.engine_for(conn, readonly=False))
        self._upgraded_tensors = state.kind is schema.SchemaKind.OLDER

    def _start_writing(self) -> None:
        """Put the file in WAL mode before this connection's first write transaction (an open that writes nothing
        leaves the file as it was; ``close`` puts it back in rollback-journal mode)."""
        if not self._wal:
            engine_mod.start_wal(self._conn)
            self._wal = True

    def _table_names(self) -> set[str]:
        return {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}

    def close(self) -> None:
        """Close the connection. In mode "a", the last connection to the file puts it back into rollback-journal
        mode first, so a finished report is one self-contained file (copyable alone, readable from read-only media);
        while other connections are open (writer processes) this is left, silently, to the last of them."""
        with self._lock:
            try:
                if self.mode == "a" and not self._conn.in_transaction:
                    engine_mod.finish_writing(self._conn)
            except sqlite3.Error as exc:
                mapped = engine_mod.translate(exc, self.path, what="closing")
                assert mapped is not None
                raise mapped from exc
            finally:
                self._engine.dispose()  # StaticPool: closes the connection too
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
                self._start_writing()
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

    @contextlib.contextmanager
    def _reading(self, what: str) -> Iterator[sqlite3.Connection]:
        """The connection, held for the block, with every SQLite error in it raised as the ReportDBError it stands
        for (damage, a timeout, a schema not laid out as expected), naming ``what`` (a table or a tensor)."""
        with self._lock:
            try:
                yield self._conn
            except sqlite3.Error as exc:
                mapped = engine_mod.translate(exc, self.path, what=what)
                assert mapped is not None
                raise mapped from exc
            except (CorruptionError, QueryTimeoutError) as exc:
                if what in str(exc):
                    raise
                raise type(exc)(f"{what}: {exc}") from exc

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
        with self._reading("table rdb_shard") as conn:
            missing = conn.execute(
                "SELECT DISTINCT s.blob_id, s.dtype, s.shape FROM rdb_shard s LEFT JOIN rdb_stats st"
                " ON st.blob_id = s.blob_id AND st.dtype = s.dtype WHERE st.blob_id IS NULL"
            ).fetchall()
            for blob_id, dtype, shape_text in missing:
                what = f"blob {blob_id}"
                shape = _Stored(self.path, what).shape("rdb_shard", "shape", shape_text)
                assert shape is not None
                shard = ShardInfo((), dtype, shape, math.prod(shape) * numpy_dtype(dtype).itemsize)
                array = self._read(blob_id, shard, what)
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
        with self._reading("table rdb_tensor") as conn:
            return [r[0] for r in conn.execute("SELECT tensor_id FROM rdb_tensor WHERE rank=? ORDER BY tensor_id", (rank,))]

    def tensor_keys(self) -> list[tuple[int, int]]:
        """Every stored ``(tensor_id, rank)``."""
        if "rdb_tensor" not in self._tables:
            return []
        with self._reading("table rdb_tensor") as conn:
            return [(r[0], r[1]) for r in conn.execute("SELECT tensor_id, rank FROM rdb_tensor ORDER BY rank, tensor_id")]

    def has_tensor(self, tensor_id: int, rank: int = 0) -> bool:
        if "rdb_tensor" not in self._tables:
            return False
        with self._reading("table rdb_tensor") as conn:
            return conn.execute("SELECT 1 FROM rdb_tensor WHERE tensor_id=? AND rank=?", (tensor_id, rank)).fetchone() is not None

    def verify_tensor(
        self, tensor_id: int, rank: int = 0, *, pool: Executor | None = None, skip: set[int] | None = None
    ) -> int:
        """Prove a tensor complete and intact; raise CorruptionError (naming the tensor and the table) otherwise,
        return the bytes checked.

        Checks that all its ``n_shards`` shard rows are there, each shard's blob is, with its chunks all present and of
        consistent sizes (shape x itemsize = blob nbytes = the chunks' sizes), the blob's address is that of its
        chunks, and every chunk re-read (decompressed) matches its sha256 address (a deeper check than the crc32
        every read makes). ``pool`` hashes in its threads; blob ids in ``skip`` are not checked again, and the ones
        checked here are added to it."""
        info, blob_ids = self._info(tensor_id, rank)
        what = f"tensor {tensor_id} (rank {rank})"
        checked = 0
        with self._reading(what) as conn:
            for shard, blob_id in zip(info.shards, blob_ids):
                if skip is None or blob_id not in skip:
                    checked += blobs.verify_blob(conn, blob_id, shard.nbytes, what=what, pool=pool, has_codec=self._has_codec)
                    if skip is not None:
                        skip.add(blob_id)
        return checked

    def check_store(self) -> list[str]:
        """Find dangling references in the tensor tables without reading any tensor bytes (a few aggregate queries):
        tensors missing shard rows, shards whose blob is missing, blobs whose chunk list is incomplete or points at
        missing chunks, chunk sizes that do not add up. Returns one sentence per problem found (empty: none).

        Unreferenced blobs and chunks are not problems: a replaced tensor leaves its blob behind by design."""
        if "rdb_tensor" not in self._tables:
            return []
        missing = [t for t in ("rdb_shard", "rdb_blob", "rdb_blob_chunk", "rdb_chunk") if t not in self._tables]
        if missing:
            return [f"{self.path}: table {', '.join(missing)} is missing; the database file is damaged"]
        checks = (
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
            ("rdb_chunk rows whose stored bytes do not fit their size",
             "SELECT id, nbytes, length(data) FROM rdb_chunk WHERE typeof(data) != 'blob' OR typeof(nbytes) != 'integer'"
             " OR nbytes <= 0 OR " + ("CASE WHEN codec IS NULL THEN length(data) != nbytes ELSE length(data) > nbytes END"
                                      if self._has_codec else "length(data) != nbytes")),
        )
        problems = []
        with self._reading("the tensor tables") as conn:
            for description, sql in checks:
                rows = conn.execute(sql + " LIMIT 11", (blobs.MAX_CHUNK_SIZE,) if "?" in sql else ()).fetchall()
                if rows:
                    listed = "; ".join(", ".join(map(str, r)) for r in rows[:10]) + ("; ..." if len(rows) > 10 else "")
                    problems.append(f"{self.path}: {description}: {listed}; the database file is damaged")
        return problems

    def tensor_info(self, tensor_id: int, rank: int = 0) -> TensorInfo:
        """The stored metadata of a tensor; reads no tensor bytes."""
        return self._info(tensor_id, rank)[0]

    def _info(self, tensor_id: int, rank: int) -> tuple[TensorInfo, list[int]]:
        """A tensor's metadata and its shards' blob ids, every stored value checked (a malformed one is a
        CorruptionError naming the tensor, the table and the column)."""
        self._require_store()
        what = f"tensor {tensor_id} (rank {rank})"
        with self._reading(what) as conn:
            row = conn.execute(
                "SELECT id, dtype, shape, nbytes, ttnn_dtype, layout, tile_shape, transpose_tile, padded_shape,"
                " storage_type, memory_config, distribution, source, n_shards FROM rdb_tensor WHERE tensor_id=? AND rank=?",
                (tensor_id, rank),
            ).fetchone()
            if row is None:
                raise TensorNotFoundError(f"{self.path}: no tensor {tensor_id} (rank {rank}) is stored")
            stored = _Stored(self.path, what)
            n_shards = row[13]
            if type(n_shards) is not int or not 1 <= n_shards <= MAX_SHARDS:
                raise stored.damaged("rdb_tensor", f"n_shards is {n_shards!r}, not a count from 1 to {MAX_SHARDS}")
            shard_rows = conn.execute(
                "SELECT s.shard_index, s.mesh_coordinate, s.dtype, s.shape, s.blob_id, b.id FROM rdb_shard s"
                " LEFT JOIN rdb_blob b ON b.id = s.blob_id WHERE s.tensor_pk=? ORDER BY s.shard_index LIMIT ?",
                (row[0], n_shards + 1),
            ).fetchall()
        if [r[0] for r in shard_rows] != list(range(n_shards)):
            raise stored.damaged("rdb_shard", f"has shards {[r[0] for r in shard_rows][:8]} of the {row[13]!r} "
                                              "rdb_tensor.n_shards says")
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
        shards = []
        for index, coord, dtype, shape_text, blob_id, found in shard_rows:
            if found is None:
                raise stored.damaged("rdb_shard", f"shard {index} points at blob {blob_id!r}, which is missing from rdb_blob")
            shape = stored.shape("rdb_shard", "shape", shape_text)
            assert shape is not None
            try:
                itemsize = numpy_dtype(dtype).itemsize
            except ReportDBError as exc:
                raise stored.damaged("rdb_shard", f"shard {index}: {exc}") from None
            shards.append(ShardInfo(stored.shape("rdb_shard", "mesh_coordinate", coord) or (), dtype, shape,
                                    math.prod(shape) * itemsize))
        shape = stored.shape("rdb_tensor", "shape", row[2], optional=True)
        info = TensorInfo(
            tensor_id, rank, row[1], shape, row[3], spec, stored.json("rdb_tensor", "source", row[12]), tuple(shards)
        )
        return info, [r[4] for r in shard_rows]

    def shards(self, tensor_id: int, rank: int = 0) -> Shards:
        """Every device shard of a tensor as ``[(mesh_coordinate, array), ...]``."""
        info, blob_ids = self._info(tensor_id, rank)
        return [
            (s.mesh_coordinate, self._read(blob_id, s, f"tensor {tensor_id} (rank {rank})"))
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
            return self._read(blob_ids[0], shard, f"tensor {tensor_id} (rank {rank})", rows=(start, max(start, stop)))
        array = assemble(self.shards(tensor_id, rank), info.spec.distribution)
        return array if rows is None else array[rows]

    def _read(self, blob_id: int, shard: ShardInfo, what: str, rows: tuple[int, int] | None = None) -> np.ndarray:
        """A shard's values (``rows``: only rows ``start..stop`` of its first axis). The blob's rows are checked to
        describe the shard's shape and dtype, complete, before anything is allocated."""
        dtype = numpy_dtype(shard.dtype)
        shape, offset = shard.shape, 0
        if rows is not None:
            row_bytes = math.prod(shape[1:]) * dtype.itemsize
            shape, offset = (rows[1] - rows[0],) + shape[1:], rows[0] * row_bytes
        with self._reading(what) as conn:
            layout = blobs.blob_layout(conn, blob_id, shard.nbytes, what=what, has_codec=self._has_codec)
            out = np.empty(shape, dtype=dtype)
            blobs.read_blob_into(conn, layout, out.reshape(-1).view(np.uint8), offset=offset, what=what)
        return out

    def tensor_stats(self, tensor_id: int, rank: int = 0) -> dict[str, Any]:
        """Statistics stored when the tensor was written (per shard for multi-device); reads no tensor bytes."""
        info, blob_ids = self._info(tensor_id, rank)
        if "rdb_stats" not in self._tables:
            raise SchemaError(f"{self.path} has no statistics table; run `reportdb upgrade {self.path}`")
        what = f"tensor {tensor_id} (rank {rank})"
        stored = _Stored(self.path, what)
        per_shard = []
        with self._reading(what) as conn:
            for shard, blob_id in zip(info.shards, blob_ids):
                row = conn.execute(
                    "SELECT count, min, max, mean, std, absmax, nan_count, inf_count, zero_count, histogram"
                    " FROM rdb_stats WHERE blob_id=? AND dtype=?",
                    (blob_id, shard.dtype),
                ).fetchone()
                if row is None:
                    raise TensorNotFoundError(f"tensor {tensor_id} (rank {rank}) was stored without statistics")
                histogram = stored.json("rdb_stats", "histogram", row[9])
                counts = histogram.get("counts") if isinstance(histogram, dict) else None
                if (histogram is not None and not isinstance(counts, list)) or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in (*(counts or ()), *(x for x in row[1:3] if x is not None))
                ):
                    raise stored.damaged("rdb_stats", f"its histogram or range is malformed ({str(row[9])[:60]!r})")
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
        with self._reading("summary") as conn:
            tables = sorted(self._table_names())
            counts = {t: conn.execute(f"SELECT COUNT(*) FROM {_quoted(t)}").fetchone()[0] for t in tables}
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
                found = conn.execute("SELECT value FROM report_metadata WHERE key='schema_version'").fetchone()
                result["report_schema_version"] = found[0] if found else None
            if "rdb_tensor" in tables:
                result["tensors"] = counts["rdb_tensor"]
                result["shards"] = counts.get("rdb_shard", 0)
                result["logical_bytes"] = conn.execute("SELECT COALESCE(SUM(nbytes), 0) FROM rdb_tensor").fetchone()[0]
                if "rdb_chunk" in tables:
                    result["stored_bytes"] = conn.execute("SELECT COALESCE(SUM(length(data)), 0) FROM rdb_chunk").fetchone()[0]
        return result


class _Stored:
    """Decodes the stored values of one tensor: JSON columns and shapes, each malformed one a CorruptionError that
    names the tensor, the table and the column, and says what to do."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self.what = what

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
        if not isinstance(text, str) or len(text) > _MAX_JSON:
            raise self.damaged(table, f"column {column} holds {type(text).__name__} {str(text)[:40]!r}, not JSON text")
        try:
            return json.loads(text)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError; deep nesting recurses
            raise self.damaged(table, f"column {column} is not valid JSON ({type(exc).__name__}: {str(exc)[:80]})") from None

    def shape(self, table: str, column: str, text: Any, *, optional: bool = False) -> tuple[int, ...] | None:
        """A JSON shape or mesh coordinate: a list of non-negative ints of sane rank (NULL only if ``optional``)."""
        value = self.json(table, column, text)
        if value is None and optional:
            return None
        try:
            return shape_from_json(value, f"column {column}")
        except ReportDBError as exc:
            raise self.damaged(table, str(exc)) from None


#: The longest JSON text a metadata column may hold (a memory config is a few KiB).
_MAX_JSON = 16 << 20


def _quoted(name: str) -> str:
    """``name`` as an SQL identifier: in double quotes, each double quote doubled."""
    return '"' + name.replace('"', '""') + '"'


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

