"""Report: the public API of one report database, its report tables (through the ORM) and its stored tensors.

``reportdb.open(path, mode)`` is the entry point. Mode ``"r"`` never writes the file; mode ``"a"``
creates it, or upgrades an older schema in place, in one transaction. The work is done in ``reportdb.store``:
opening (``schema.open_database``), the tensor write path (``tensors``), reading and checking the tensor
tables (``rows``), blobs (``blobs``); a Report holds the connection, its lock and its transactions.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from concurrent.futures import Executor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Iterator, Literal, Mapping, Sequence

import numpy as np

from . import recognize
from .dtypes import numpy_dtype
from .numeric.stats import ShardStats, TensorStats
from .reading import Reaper, snapshot as _snapshot
from .results import MAX_HTML_ROWS, ReportSummary, html_table
from .errors import CorruptionError, InvalidArgumentError, QueryTimeoutError, ReadOnlyError, ReportDBError, ReportNotFoundError, SchemaError, TensorNotFoundError
from .errors import ResourceLimitError
from .spec import Shards, assemble
from .store import blobs, codec as codec_mod, engine as engine_mod, rows as rows_mod, schema, tensors as tensors_mod
from .store import windows
from .store.codec import Compression
from .store.prepared import PreparedShard
from .store.rows import ShardInfo, TensorInfo

if TYPE_CHECKING:  # pragma: no cover
    from sqlalchemy import Engine
    from sqlalchemy.orm import Session, sessionmaker

Mode = Literal["r", "a"]
DB_NAME = "db.sqlite"


def resolve_path(path: str | os.PathLike[str]) -> Path:
    """A report folder means its ``db.sqlite``; anything else is the database file itself."""
    p = Path(path)
    return p / DB_NAME if p.is_dir() else p


def open(  # noqa: A001 - the public name is fixed
    path: str | os.PathLike[str], mode: Mode = "r", *, chunk_size: int = blobs.DEFAULT_CHUNK_SIZE,
    compression: Compression = "none",
) -> "Report":
    """Open a report folder or database file. ``"r"``: read only, as it is; ``"a"``: create or upgrade.

    ``chunk_size`` and ``compression`` apply to the tensors this Report writes (see :class:`Report`). The public
    ``reportdb.open`` (``reportdb.opening``) also opens a report in a team store by its URL.
    """
    return Report(path, mode, chunk_size=chunk_size, compression=compression)


#: Seconds a read-only Report keeps one read transaction open across its reads (``Report._renew``). Each read
#: transaction costs SQLite several system calls of file locking and a ``PRAGMA data_version``, a large part of a small
#: tensor's read; held for a few milliseconds, that is paid once per many reads (benchmarks/NOTES.md). Short, because in a rollback-journal file a reader's shared lock holds back every
#: commit: the reaper thread (:class:`~reportdb.reading.Reaper`) ends a snapshot this old even when its Report reads no more, so a
#: writer waits at most this long plus a read in progress (SQLite's busy handler then retries within milliseconds),
#: well inside any busy timeout (reportdb's is 60 s, Python sqlite3's default 5 s).
SNAPSHOT_SECONDS = 0.002


_REAPER = Reaper(lambda: SNAPSHOT_SECONDS)  # read at each look, so a change to SNAPSHOT_SECONDS applies
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_REAPER.reset)


class _Reading:
    """``Report._reading``: a class rather than a generator, as every read enters one (a generator-based context
    manager costs measurably more per read, benchmarks/NOTES.md). Entering renews the Report's snapshot
    where it keeps one (``Report._renew``)."""

    __slots__ = ("report", "what")

    def __init__(self, report: Report, what: str) -> None:
        self.report, self.what = report, what

    def __enter__(self) -> sqlite3.Connection:
        report = self.report
        report._lock.acquire()
        if report._hold and report._held_until <= time.monotonic() and not report._raw:
            try:
                report._renew()
            except BaseException as exc:
                self.__exit__(type(exc), exc, None)  # releases the lock; raises a SQLite error as what it stands for
                raise
        return report._conn

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        self.report._lock.release()
        what = self.what
        if isinstance(exc, sqlite3.Error):
            mapped = engine_mod.translate(exc, self.report.path, what=what)
            assert mapped is not None
            raise mapped from exc
        if isinstance(exc, (CorruptionError, QueryTimeoutError)) and what not in str(exc):
            raise type(exc)(f"{what}: {exc}") from exc
        if isinstance(exc, MemoryError):
            raise ResourceLimitError(
                f"{self.report.path}: {what}: reading it needs more memory than this process can have; read a window "
                "of it instead (report.tensor(tensor_id, window=np.s_[:64]), which costs memory in proportion to the "
                "window)"
            ) from exc


def copy_tensor(
    source: "Report", dest: "Report", tensor_id: int, rank: int = 0, *, to_rank: int | None = None
) -> TensorInfo:
    """Store a tensor of ``source`` into ``dest`` (under ``to_rank``, by default its own rank) with its values, spec
    and source, through ``put_tensor`` (chunks ``dest`` holds already are not stored again); return its info."""
    info = source.tensor_info(tensor_id, rank)
    dest.put_tensor(tensor_id, rank=rank if to_rank is None else to_rank, shards=source.shards(tensor_id, rank),
                    source=info.source, **info.spec.to_json())
    return info

def upgrade(path: str | os.PathLike[str]) -> str:
    """Bring an existing report database to the current schema in place; return the schema revision. A file that is
    no report (:mod:`reportdb.recognize`) is refused untouched with :class:`NotAReportError`."""
    db = resolve_path(path)
    if not db.is_file():
        raise ReportNotFoundError(f"{db}: no such report database")
    recognize.check_file(db, empty_ok=False)  # an empty file or someone else's database is no report to upgrade
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

    A Report opened read-only keeps one read transaction (a snapshot of the file) open across its reads for at most
    :data:`SNAPSHOT_SECONDS`, see :meth:`_renew`.
    """

    #: Whether a read-only Report of this class keeps snapshots (:meth:`_renew`). A subclass keeps them only if it says
    #: so itself (:meth:`__init_subclass__`): one that writes its file through another connection while it holds
    #: ``_lock`` (``team.RemoteReport`` fills chunks in) would wait on its own snapshot's lock.
    keeps_snapshots: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.keeps_snapshots = bool(cls.__dict__.get("keeps_snapshots", False))

    def __init__(
        self,
        path: str | os.PathLike[str],
        mode: Mode = "r",
        *,
        chunk_size: int = blobs.DEFAULT_CHUNK_SIZE,
        compression: Compression = "none",
    ) -> None:
        if mode not in ("r", "a"):
            raise InvalidArgumentError(f"mode must be 'r' or 'a', not {mode!r}")
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or not 0 < chunk_size <= blobs.MAX_CHUNK_SIZE:
            raise InvalidArgumentError(f"chunk_size must be a number of bytes from 1 to {blobs.MAX_CHUNK_SIZE}, not {chunk_size!r}")
        self._codec = codec_mod.codec_for(compression)
        self.path = resolve_path(path)
        self.mode = mode
        self.chunk_size = chunk_size
        self.compression = compression
        self._lock = threading.RLock()
        self._depth = 0
        self._hold = False  # whether reads keep a snapshot (set once the file is open: mode "r", not WAL)
        self._held = False  # this Report's own snapshot is open now (:meth:`_renew`)
        self._held_until = 0.0  # monotonic time it ends (0: none held)
        self._raw = 0  # depth of connection() blocks: reads inside one begin no snapshot (the caller's SQL runs as is)
        self._closed = False
        existed = self.path.exists()
        if not existed and (mode == "r" or not self.path.parent.is_dir()):
            raise ReportNotFoundError(
                f"{self.path}: no such report database"
                + ("" if mode == "r" else f" (folder {self.path.parent} does not exist)")
            )
        if existed and self.path.is_dir():
            raise ReportNotFoundError(f"{self.path}: is a folder without {DB_NAME}")
        if existed and mode == "a" and self.path.stat().st_size > 0:
            recognize.check_file(self.path)  # someone else's database gets no reportdb tables
        opened = schema.open_database(self.path, writing=mode == "a", existed=existed)
        try:
            self._open(opened, mode)
        except BaseException:  # a file that fails to open is not held open until the error is collected
            opened.conn.close()
            raise

    def _open(self, opened: schema.Opened, mode: Mode) -> None:
        """The rest of opening, on the connection :func:`schema.open_database` made: what the file holds."""
        if mode == "r":
            recognize.check(opened.conn, self.path, empty_ok=False)
        self._conn, self.schema_revision = opened.conn, opened.revision
        self._wal = opened.new_file  # this connection has put the file in WAL mode (else at its first write)
        self._engine: Engine | None = None  # made by session(), on first use: SQLAlchemy's ORM is slow to import
        self._sessions: sessionmaker[Session] | None = None
        self._tables = {schema.folded(name) for name in self._table_names()}  # as SQLite compares names
        self._has_codec = "rdb_chunk" in self._tables and any(
            r[1] == "codec" for r in self._conn.execute("PRAGMA table_info(rdb_chunk)")
        )  # False for an older schema read as it is
        self._has_block_crc = "rdb_chunk_crc" in self._tables  # schema 0005 on: windows check only the blocks they read
        self._address: str | None = None  # the file's content address kind, asked when first written or verified
        self._verified = windows.VerifiedBlocks()  # blocks this Report has checked: read again without a crc
        self._memo = rows_mod.ReadMemo(self._verified)  # rows read and checked, while the file is unchanged
        self._parsed = rows_mod.ParsedCache()  # specs and shapes decoded, by their stored text: each parsed once
        self._hold = mode == "r" and self.keeps_snapshots
        if opened.upgraded_older:
            self.fill_missing_stats()  # tensors stored before the statistics table existed

    # --- opening ----------------------------------------------------------------------------

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
            if self._closed:  # closing twice is harmless; any other use of a closed Report raises ReportClosedError
                return
            self._closed = True
            self._hold = False
            try:
                self._end_snapshot()
                if self.mode == "a" and not self._conn.in_transaction:
                    engine_mod.finish_writing(self._conn)
            except sqlite3.Error as exc:
                mapped = engine_mod.translate(exc, self.path, what="closing")
                assert mapped is not None
                raise mapped from exc
            finally:
                if self._engine is not None:
                    self._engine.dispose()  # StaticPool: closes the connection too
                self._conn.close()

    def __enter__(self) -> "Report":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def session(self) -> Session:
        """An ORM session on this report (models in ``reportdb.models``); commit it yourself.

        The SQLAlchemy engine, on this report's own connection, is made at the first call: a Report used only for
        tensors and counts (``reportdb info``, ``ls``) never imports the ORM."""
        with self._lock:
            if self._sessions is None:
                from sqlalchemy.orm import sessionmaker

                self._engine = engine_mod.engine_for(  # read only: the session's transaction is its own, not a snapshot
                    self._conn, readonly=self.mode == "r", before_write=self._start_writing if self.mode == "a" else self._release
                )
                self._sessions = sessionmaker(bind=self._engine)
                # SQLAlchemy's first connect ends with a ROLLBACK on this shared connection: run it here, under the
                # lock and with no snapshot open, so it cannot race the reaper ending one (nor end one a read holds)
                self._end_snapshot()
                self._engine.connect().close()
            return self._sessions()

    @contextlib.contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """The report's raw ``sqlite3`` connection (autocommit mode), held exclusively for the block, for SQL the
        API does not cover: bulk rows into report tables, PRAGMAs, ad-hoc queries. Inside ``batch()`` the
        statements join its transaction; outside, each commits on its own (a snapshot this Report keeps is ended first).
        Tensor tables are the API's to write."""
        with self._lock:
            self._release()
            self._raw += 1
            try:
                yield self._conn
            finally:
                self._raw -= 1

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
            except BaseException as exc:
                self._depth -= 1
                if outer and self._conn.in_transaction:  # SQLite rolled back itself on a full disk or an I/O error
                    self._conn.execute("ROLLBACK")
                self._raise_mapped(exc)
                raise
            self._depth -= 1
            if outer:
                try:
                    self._conn.execute("COMMIT")
                except BaseException as exc:
                    if self._conn.in_transaction:  # a failed COMMIT leaves the transaction open: all or nothing
                        self._conn.execute("ROLLBACK")
                    self._raise_mapped(exc)
                    raise

    def _raise_mapped(self, exc: BaseException) -> None:
        """Raise the ReportDBError a write's SQLite error means whoever wrote (a full disk, an I/O error, damage, a
        closed report: ``engine.translate(only_own=True)``); return for any other exception, to be raised as it is."""
        if isinstance(exc, sqlite3.Error):
            mapped = engine_mod.translate(exc, self.path, what="writing", only_own=True)
            if mapped is not None:
                raise mapped from exc

    def _reading(self, what: str) -> _Reading:
        """The connection, held for the block, with every SQLite error in it raised as the ReportDBError it stands
        for (damage, a timeout, a schema not laid out as expected), naming ``what`` (a table or a tensor)."""
        return _Reading(self, what)

    def _renew(self) -> None:
        """Begin this Report's snapshot, ending an expired one first (under ``_lock``, from ``_reading``).

        The snapshot is a read transaction kept open across reads for :data:`SNAPSHOT_SECONDS`: SQLite then takes its
        file locks once for many reads instead of at every statement, and the rows and blocks this Report remembers
        (``rows.ReadMemo``) are checked against ``PRAGMA data_version`` once per snapshot instead of once per read. It
        can never serve stale data: while it holds its shared lock on a rollback-journal file, no other connection can
        commit (a writer waits for it to end; SQLite's pending lock then keeps new snapshots back, so a writer is not
        starved). In WAL mode a snapshot would go on seeing the file as it was while a writer commits, so a WAL file
        read by this Report keeps none: each read is its own transaction, as in mode "a" (whose writes a snapshot
        would collide with). Within a transaction of the caller's (``session()``, a ``BEGIN`` in ``connection()``)
        reads join it and none is begun."""
        conn = self._conn
        self._end_snapshot()
        if conn.in_transaction:
            return
        conn.execute("BEGIN")
        try:
            self._memo.sync(conn)  # its first read takes the shared lock: the file as of now, for the whole snapshot
            wal = engine_mod.journal_mode(conn) == "wal"
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        if wal:
            self._hold = False
            conn.execute("ROLLBACK")
            return
        self._held = True
        self._held_until = time.monotonic() + SNAPSHOT_SECONDS
        self._verified.handles.keep(conn)  # chunks read in this snapshot keep their blob handles until it ends
        _REAPER.schedule(self, self._held_until)

    def _end_snapshot(self) -> None:
        """End this Report's snapshot if one is open (under ``_lock``): a read transaction, so a rollback, which cannot
        fail for want of a lock, releases it."""
        if self._held:
            self._held, self._held_until = False, 0.0
            self._verified.handles.close()  # open blob statements would keep the read transaction open
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")

    def _release(self) -> None:
        """End this Report's snapshot, taking ``_lock`` (before the caller's own SQL: ``connection()``, a session)."""
        with self._lock:
            self._end_snapshot()

    def _expire(self) -> bool:
        """The reaper's call: end the snapshot if its time is up. False when a read holds the Report right now (the
        reaper looks again later; never waits here, so one busy Report does not hold back the others')."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._held and self._held_until <= time.monotonic():
                self._end_snapshot()
        except sqlite3.Error:  # a read transaction's rollback fails only on a closed connection, which holds no lock
            self._held, self._held_until = False, 0.0  # (and the reaper thread, every Report's, must live on)
        finally:
            self._lock.release()
        return True

    def _sync(self, conn: sqlite3.Connection) -> None:
        """Make the rows and blocks this Report remembers current for the read about to run: once per snapshot where
        one is held (done by :meth:`_renew`), else in each read transaction."""
        if not self._held:
            self._memo.sync(conn)

    def _check_writable(self) -> None:
        if self.mode != "a":
            raise ReadOnlyError(f"{self.path} is open read-only; open it with mode='a' to write")

    def _require_store(self) -> None:
        if "rdb_tensor" not in self._tables:
            raise SchemaError(
                f"{self.path} predates reportdb's tensor tables; run `reportdb upgrade {self.path}` or open it with mode='a'"
            )

    def _address_kind(self) -> str:
        """The file's content address kind (``blobs.address_kind``): fixed when its schema reached 0006, so asked once."""
        if self._address is None:
            self._address = blobs.address_kind(self._conn)
        return self._address

    def _write_options(self, stats: bool) -> tensors_mod.WriteOptions:
        return tensors_mod.WriteOptions(self.chunk_size, self._codec, stats and "rdb_stats" in self._tables,
                                        self._address_kind())

    # --- writing ------------------------------------------------------------------------------

    def put_tensor(
        self,
        tensor_id: int,
        array: np.ndarray | None = None,
        *,
        rank: int = 0,
        shards: Sequence[tuple[Sequence[int], np.ndarray]] | None = None,
        if_exists: tensors_mod.IfExists = "error",
        stats: bool = True,
        _prepared: Sequence[PreparedShard] | None = None,
        **metadata: Any,
    ) -> bool:
        """Store a tensor: one ``array``, or ``shards=[(mesh_coordinate, array), ...]`` with a ``distribution``.

        ``metadata`` takes the TensorSpec fields (``ttnn_dtype``, ``layout``, ``tile_shape``,
        ``padded_shape``, ``storage_type``, ``memory_config``, ``distribution``...) and ``source``.
        Returns False when ``if_exists="skip"`` found the tensor already stored (``"error"`` raises
        ``TensorExistsError``, ``"replace"`` replaces it).
        ``_prepared`` (private, one per shard, ``reportdb.store.prepared.prepare_shard`` of the canonical shard) carries
        digests and statistics computed elsewhere, such as in the worker process that decoded the tensor.
        """
        self._check_writable()
        tensor = tensors_mod.new_tensor(tensor_id, array, rank=rank, shards=shards, _prepared=_prepared, **metadata)
        with self._lock, self.batch():
            return tensors_mod.put_one(self._conn, tensor, if_exists, self._write_options(stats))

    def put_tensors(
        self,
        tensors: Iterable[Mapping[str, Any]],
        *,
        if_exists: tensors_mod.IfExists = "error",
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
        new = [tensors_mod.new_tensor(**t) for t in tensors]
        with self._lock, self.batch():
            return tensors_mod.put_many(self._conn, new, if_exists, self._write_options(stats))

    def fill_missing_stats(self) -> int:
        """Compute the statistics of every stored shard that has none (older schema, or ``stats=False``)."""
        self._check_writable()
        with self._reading("table rdb_shard") as conn:
            missing = rows_mod.shards_without_stats(conn, self.path)
            for blob_id, shard in missing:
                array = self._read(blob_id, shard, f"blob {blob_id}")
                with self.batch():
                    tensors_mod.put_stats(conn, blob_id, shard.dtype, array)
        return len(missing)

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
        """Whether a tensor is stored under ``tensor_id`` and ``rank``."""
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
        chunks, and every chunk re-read (decompressed) matches its content address (BLAKE3 or sha256, the file's
        kind: a deeper check than the crc32 every read makes). ``pool`` hashes in its threads; blob ids in ``skip`` are not checked again, and the ones
        checked here are added to it."""
        info, blob_ids = self._info(tensor_id, rank)
        what = f"tensor {tensor_id} (rank {rank})"
        checked = 0
        address = self._address_kind()
        with self._reading(what) as conn:
            for shard, blob_id in zip(info.shards, blob_ids):
                if skip is None or blob_id not in skip:
                    checked += blobs.verify_blob(conn, blob_id, shard.nbytes, what=what, pool=pool, has_codec=self._has_codec,
                                                 has_block_crc=self._has_block_crc, address=address)
                    if skip is not None:
                        skip.add(blob_id)
        return checked

    def check_store(self) -> list[str]:
        """Find dangling references in the tensor tables without reading any tensor bytes (a few aggregate queries):
        tensors missing shard rows, shards whose blob is missing, blobs whose chunk list is incomplete or points at
        missing chunks, chunk sizes that do not add up. Returns one sentence per problem found (empty: none).

        Unreferenced blobs and chunks are not problems: a replaced tensor leaves its blob behind by design."""
        with self._reading("the tensor tables") as conn:
            return rows_mod.store_problems(conn, self.path, self._tables, has_codec=self._has_codec)

    def tensor_info(self, tensor_id: int, rank: int = 0) -> TensorInfo:
        """The stored metadata of a tensor; reads no tensor bytes."""
        return self._info(tensor_id, rank)[0]

    def _info(self, tensor_id: int, rank: int) -> tuple[TensorInfo, list[int]]:
        """A tensor's metadata and its shards' blob ids, every stored value checked (a malformed one is a
        CorruptionError naming the tensor, the table and the column)."""
        self._require_store()
        with self._reading(f"tensor {tensor_id} (rank {rank})") as conn:
            return rows_mod.read_info(conn, self.path, tensor_id, rank, self._parsed)

    def shards(self, tensor_id: int, rank: int = 0) -> Shards:
        """Every device shard of a tensor as ``[(mesh_coordinate, array), ...]``."""
        return self._shards(*self._info(tensor_id, rank))

    def _shards(self, info: TensorInfo, blob_ids: list[int]) -> Shards:
        """The shards of a tensor whose rows ``_info`` has read and checked."""
        what = f"tensor {info.tensor_id} (rank {info.rank})"
        return [(s.mesh_coordinate, self._read(blob_id, s, what)) for s, blob_id in zip(info.shards, blob_ids)]

    def tensor(
        self, tensor_id: int, rank: int = 0, *, window: windows.Window | None = None, rows: slice | None = None,
        device: Sequence[int] | None = None,
    ) -> np.ndarray:
        """The logical array (multi-device tensors assembled as their distribution says), or only ``window`` of it,
        or with ``device=(row, col)`` the one shard at that mesh coordinate (a window of it if given).

        ``window`` is numpy basic indexing (``(0, 0, slice(0, 32), slice(0, 64))``, ``np.s_[..., :64]``): only the
        chunks that hold it are read, and in chunks with block crcs only the 4 KiB blocks it touches, each checked;
        a window of a multi-device tensor reads only the shards it overlaps. ``rows=s`` is ``window=(s,)``. A whole
        tensor of one shard in one chunk (most small tensors) is read with one query. An unknown ``device`` is a
        TensorNotFoundError naming the coordinates the tensor has.

        Other reads run in one read transaction (a read-only Report keeps one open across reads for a few ms, see
        :meth:`_renew`). This Report remembers, while no connection changes the file, the
        rows it has read and checked and the blocks whose crcs matched (``rows.ReadMemo``, ``windows.VerifiedBlocks``):
        a repeated read runs no statement for its metadata and computes no crc for bytes already checked. A byte
        flipped on disk behind SQLite's back after this Report checked it is found by a new Report (its reads, or
        ``verify_tensor``), not by a repeated read.
        """
        if rows is not None:
            if window is not None:
                raise InvalidArgumentError("give window= or rows=, not both")
            window = (rows,)
        what = f"tensor {tensor_id} (rank {rank})"
        if window is None and device is None:
            self._require_store()
            with self._reading(what) as conn:  # the memo only in a snapshot, which has synced it already
                small = rows_mod.read_small(conn, self.path, tensor_id, rank, self._parsed, has_codec=self._has_codec,
                                            memo=self._memo if self._held else None)
            if small is not None:
                distribution = small[0].spec.distribution
                if distribution is None:  # the shard is the tensor (what assemble returns, without its calls)
                    return small[1]
                return assemble([(small[0].shards[0].mesh_coordinate, small[1])], distribution)
        self._require_store()
        with self._reading(what) as conn:
            # Inside a transaction of the caller's (batch(): rows read may yet be rolled back) none is remembered.
            memo: rows_mod.ReadMemo | None = self._memo if self._held or not conn.in_transaction else None
            with _snapshot(conn):
                array, whole = self._read_tensor(conn, what, tensor_id, rank, window, device, memo)
        return np.ascontiguousarray(array[window]) if whole and window is not None else array

    def _read_tensor(
        self, conn: sqlite3.Connection, what: str, tensor_id: int, rank: int, window: windows.Window | None,
        device: Sequence[int] | None, memo: rows_mod.ReadMemo | None,
    ) -> tuple[np.ndarray, bool]:
        """``tensor()`` past the one-query path, in its read transaction: ``(the window, False)`` where it could be read
        alone, else ``(the assembled tensor, True)``, which the caller cuts the window from."""
        self._sync(conn)
        key = ("info", tensor_id, rank)
        found = None if memo is None else memo.get(key)
        if found is None:
            found = rows_mod.read_info_blobs(conn, self.path, tensor_id, rank, self._parsed)
            if memo is not None:
                memo.put(key, found)
        info, blob_ids, blob_rows = found

        def read(index: int, part: windows.Window | None) -> np.ndarray:
            return rows_mod.read_shard(conn, blob_ids[index], info.shards[index], what, window=part,
                                       verified=self._verified, has_codec=self._has_codec,
                                       has_block_crc=self._has_block_crc, blob_row=blob_rows[index], memo=memo)

        if device is not None:
            return read(self._device_shard(info, device), window), False
        if len(info.shards) == 1 and (window is not None or info.spec.distribution is None):
            return read(0, window), False
        if window is not None and info.shape is not None and all(s.dtype == info.shards[0].dtype for s in info.shards):
            boxes = rows_mod.shard_boxes(info)  # where each shard lies: read only those the window overlaps
            if boxes is not None:
                out_shape, pieces = windows.split_window(info.shape, window, boxes)
                out = np.empty(out_shape, dtype=numpy_dtype(info.shards[0].dtype))
                for index, part, target in pieces if out.size else ():
                    out[target] = read(index, part)
                return out, False
        if window is not None and info.shape is not None:  # a bad window is refused before any shard is read
            windows.plan_window(info.shape, numpy_dtype(info.dtype).itemsize, window)
        return assemble(self._shards(info, blob_ids), info.spec.distribution), True

    def _device_shard(self, info: TensorInfo, device: Sequence[int]) -> int:
        """The index of the shard of ``info`` at mesh coordinate ``device``; TensorNotFoundError naming the ones there
        are otherwise."""
        try:
            coord = tuple(int(c) for c in device)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"device must be a mesh coordinate such as (0, 1), not {device!r}") from None
        for index, shard in enumerate(info.shards):
            if shard.mesh_coordinate == coord:
                return index
        have = [list(s.mesh_coordinate) for s in info.shards[:16]]
        raise TensorNotFoundError(
            f"{self.path}: tensor {info.tensor_id} (rank {info.rank}) has no shard at mesh coordinate {list(coord)}; its "
            f"{len(info.shards)} shard(s) are at {have}{' ...' if len(info.shards) > 16 else ''}"
        )

    def _read(self, blob_id: int, shard: ShardInfo, what: str) -> np.ndarray:
        """A shard's values, checked before allocation."""
        with self._reading(what) as conn, _snapshot(conn):
            self._sync(conn)
            return rows_mod.read_shard(conn, blob_id, shard, what, has_codec=self._has_codec, verified=self._verified)

    def tensor_stats(self, tensor_id: int, rank: int = 0) -> TensorStats:
        """Statistics stored when the tensor was written, one set per shard beside its mesh coordinate (a tensor of
        one shard reads them directly: ``tensor_stats(7).mean``); reads no tensor bytes."""
        info, blob_ids = self._info(tensor_id, rank)
        if "rdb_stats" not in self._tables:
            raise SchemaError(f"{self.path} has no statistics table; run `reportdb upgrade {self.path}`")
        what = f"tensor {tensor_id} (rank {rank})"
        stored = rows_mod.Stored(self.path, what)
        per_shard = []
        with self._reading(what) as conn:
            for shard, blob_id in zip(info.shards, blob_ids):
                found = rows_mod.read_stats(conn, stored, blob_id, shard.dtype)
                if found is None:
                    raise TensorNotFoundError(f"tensor {tensor_id} (rank {rank}) was stored without statistics")
                per_shard.append(ShardStats.from_dict(found))
        return TensorStats(tensor_id, rank, tuple(per_shard), tuple(tuple(s.mesh_coordinate) for s in info.shards))

    def summary(self) -> ReportSummary:
        """Schema version, row counts of the report tables, tensors and bytes stored (compressed chunks at their
        stored size; SQLite's ``length()`` of a blob reads no overflow page) against logical bytes."""
        with self._reading("summary") as conn:
            tables = sorted(self._table_names())
            counts = {t: conn.execute(f"SELECT COUNT(*) FROM {engine_mod.quoted(t)}").fetchone()[0] for t in tables}
            result = ReportSummary(
                path=str(self.path), schema_revision=self.schema_revision, schema_head=schema.head_revision(),
                report_schema_version=None, tables=counts, tensors=0, shards=0, logical_bytes=0, stored_bytes=0,
            )  # fmt: skip
            if "report_metadata" in tables:
                found = conn.execute("SELECT value FROM report_metadata WHERE key='schema_version'").fetchone()
                result = replace(result, report_schema_version=found[0] if found else None)
            if "rdb_tensor" in tables:
                logical = conn.execute("SELECT COALESCE(SUM(nbytes), 0) FROM rdb_tensor").fetchone()[0]
                stored = 0
                if "rdb_chunk" in tables:
                    stored = conn.execute("SELECT COALESCE(SUM(length(data)), 0) FROM rdb_chunk").fetchone()[0]
                try:
                    kind = blobs.address_kind(conn)
                except CorruptionError:  # a kind reportdb does not know: named as such, never as stored
                    kind = "unknown"
                result = replace(
                    result, tensors=counts["rdb_tensor"], shards=counts.get("rdb_shard", 0), logical_bytes=logical,
                    stored_bytes=stored, content_address=kind,
                )  # fmt: skip
        return result

    def _repr_html_(self) -> str:
        """The summary and the first tensors as small HTML tables for Jupyter, every cell escaped (a report's table
        names and metadata are someone else's); a tensor whose rows are damaged shows its error in its row."""
        summary = self.summary()
        rows: list[tuple[Any, ...]] = []
        keys = self.tensor_keys()
        for tensor_id, rank in keys[:MAX_HTML_ROWS]:
            try:
                i = self.tensor_info(tensor_id, rank)
                rows.append((tensor_id, rank, i.shape, i.dtype, i.spec.ttnn_dtype, i.spec.layout, len(i.shards), i.nbytes))
            except ReportDBError as exc:
                rows.append((tensor_id, rank, str(exc), None, None, None, None, None))
        header = ("id", "rank", "shape", "dtype", "ttnn dtype", "layout", "shards", "bytes")
        more = len(keys) - len(rows)
        caption = f"{len(keys)} tensors" + (f" (the first {len(rows)} shown)" if more else "")
        return summary._repr_html_() + html_table(header, rows, caption=caption)
