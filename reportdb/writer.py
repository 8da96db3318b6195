"""The writer for profiling runs: operations, their links and tensor values, written while a model runs.

A run calls ``put_tensor`` and ``add_operation`` from its hot path, so the writer keeps the cost there
small: tensors are copied into memory and written in batches (one ``BEGIN IMMEDIATE`` transaction per
batch) by a background thread, so statistics, hashing and SQLite writes run beside the model rather than in
its thread. The thread starts once an eighth of a batch (count or bytes) is queued and takes everything
queued by then, so batches grow when the model outpaces it; the caller writes itself only when two full
batches are waiting, which bounds the memory held. Tensors of ``sync_bytes`` or more are written at once by
the calling thread without a copy, and ids already stored are skipped before any conversion. Small tensors
go in set-based (``Report.put_tensors``). ``flush()`` returns only after COMMIT: that is the point from which
a crash (even SIGKILL) cannot lose the data, since SQLite's WAL is consistent across application crashes.

Several processes (ranks) may write one report at once: each opens its own connection (never one
carried across ``fork``), schema creation is serialized by an advisory lock on the report's folder,
and a "database is locked" from SQLite is retried with backoff instead of reaching the caller.

A report of any age can be appended to (a new one, one ``reportdb.migrate`` made of a 2024 report, ttnn 0.81's):
the writer reads the file's own report tables and columns once per open and checks every row against them when
it is added, so a row the file cannot take is refused then, with a ``ReportDBError``, and never costs a batch at
flush time. Columns the writer fills on its own (``tensors.storage_type`` and ``size``...) are left out where the
file lacks them. A file whose tables have no ``rank`` column (ttnn before multi-host runs) keeps its schema as
ttnn wrote it, since the visualizer reads a report by the columns it finds: rank 0 is written there without the
column, another rank is refused (its rows could not be told from rank 0's, and such files key ``tensors`` and
``operations`` on the id alone). A report table the file lacks is created, in the transaction of its first rows,
as its model in ``reportdb.models`` declares it. Rows that pass every check can still break a constraint of the
file (a duplicate key another process wrote first, a dangling ``source_file_id``): those rows alone are left out,
the rest of the batch is committed, and the next call raises :class:`RowsRefusedError` naming them.

Configuration comes from arguments, else from environment variables, else defaults:

=======================  ============================  =============================================
argument                 environment variable          meaning
=======================  ============================  =============================================
``store``                ``REPORTDB_STORE``            ``all`` | ``outputs`` | ``none``: which tensor
                                                       values to keep (metadata rows are always kept)
``chunk_size``           ``REPORTDB_CHUNK_SIZE``       bytes per stored chunk (``4M``, ``65536``...)
``compression``          ``REPORTDB_COMPRESSION``      ``none`` | ``zstd``: chunks compressed where a
                                                       sample shrinks by 10% (``reportdb[zstd]`` extra)
``stats``                ``REPORTDB_STATS``            compute statistics as tensors are stored (1/0)
``batch_items``          ``REPORTDB_BATCH_ITEMS``      commit after this many queued items
``batch_bytes``          ``REPORTDB_BATCH_BYTES``      commit after this many queued tensor bytes
``batch_seconds``        ``REPORTDB_BATCH_SECONDS``    commit queued items at least this often (a
                                                       background thread; 0: only by count, bytes, flush)
``sync_bytes``           ``REPORTDB_SYNC_BYTES``       tensors this large are written at once, uncopied,
                                                       by the calling thread (default 256 MiB; smaller
                                                       ones are copied and queued)
``lock_timeout``         ``REPORTDB_LOCK_TIMEOUT``     seconds to keep retrying a locked database
``durable``              ``REPORTDB_DURABLE``          1: ``synchronous=NORMAL`` (commits survive a
                                                       process crash; an OS crash may drop the last
                                                       ones); WAL checkpoints, which fsync, run in a
                                                       thread of their own. 0: ``synchronous=OFF`` on
                                                       this writer's connection: still safe against a
                                                       process crash or SIGKILL, not against power
                                                       loss; 10-25% faster (no fsync at checkpoints)
=======================  ============================  =============================================
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import os
import random
import sqlite3
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal, Mapping, Sequence, TypeVar

import numpy as np

from .dtypes import canonical, dtype_name
from .errors import ReportDBError
from .spec import TensorSpec
from .store import blobs
from .store.checkpoint import Checkpointer
from .store.codec import Compression, codec_for

StorePolicy = Literal["all", "outputs", "none"]
Role = Literal["input", "output"]
T = TypeVar("T")

_SPEC_FIELDS = frozenset(f.name for f in dataclasses.fields(TensorSpec))
#: Metadata that only goes into the legacy ``tensors`` row (the visualizer's columns), not the spec.
_ROW_FIELDS = frozenset({"device_id", "address", "buffer_type", "size"})
#: The ``tensors`` row columns the writer fills, those the file's table lacks left out.
_TENSOR_ROW = ("shape", "dtype", "layout", "memory_config", "device_id", "address", "buffer_type", "storage_type", "size")


# --- configuration --------------------------------------------------------------------------------


def _parse_size(text: str, name: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    raw = text.strip().lower().removesuffix("ib").removesuffix("b")
    try:
        if raw and raw[-1] in units:
            return int(float(raw[:-1]) * units[raw[-1]])
        return int(raw)
    except ValueError:
        raise ReportDBError(f"{name}={text!r} is not a size in bytes (examples: 65536, 4M, 64MiB)") from None


def _parse_bool(text: str, name: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ReportDBError(f"{name}={text!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def _parse_float(text: str, name: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ReportDBError(f"{name}={text!r} is not a number") from None


_ENV: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "store": ("REPORTDB_STORE", lambda v, n: v.strip().lower()),
    "chunk_size": ("REPORTDB_CHUNK_SIZE", _parse_size),
    "compression": ("REPORTDB_COMPRESSION", lambda v, n: v.strip().lower()),
    "stats": ("REPORTDB_STATS", _parse_bool),
    "batch_items": ("REPORTDB_BATCH_ITEMS", lambda v, n: _parse_size(v, n)),
    "batch_bytes": ("REPORTDB_BATCH_BYTES", _parse_size),
    "batch_seconds": ("REPORTDB_BATCH_SECONDS", _parse_float),
    "sync_bytes": ("REPORTDB_SYNC_BYTES", _parse_size),
    "lock_timeout": ("REPORTDB_LOCK_TIMEOUT", _parse_float),
    "durable": ("REPORTDB_DURABLE", _parse_bool),
}


@dataclass(frozen=True)
class WriterConfig:
    """What the writer stores and how it batches; see the module docstring for the environment variables."""

    store: StorePolicy = "all"
    chunk_size: int = blobs.DEFAULT_CHUNK_SIZE
    compression: Compression = "none"
    stats: bool = True
    batch_items: int = 512
    batch_bytes: int = 64 << 20
    batch_seconds: float = 2.0
    sync_bytes: int = 256 << 20
    lock_timeout: float = 600.0
    durable: bool = True

    def __post_init__(self) -> None:
        if self.store not in ("all", "outputs", "none"):
            raise ReportDBError(f"store must be 'all', 'outputs' or 'none', not {self.store!r}")
        codec_for(self.compression)  # an unknown name, or zstd without a zstd library: a clear error now
        for name in ("chunk_size", "batch_items", "batch_bytes"):
            if getattr(self, name) < 1:
                raise ReportDBError(f"{name} must be at least 1, not {getattr(self, name)}")
        for name in ("batch_seconds", "sync_bytes", "lock_timeout"):
            if getattr(self, name) < 0:
                raise ReportDBError(f"{name} must not be negative, not {getattr(self, name)}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> "WriterConfig":
        """Defaults, replaced by the ``REPORTDB_*`` environment variables, replaced by non-None ``overrides``."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name, (var, parse) in _ENV.items():
            if env.get(var, "").strip():
                values[name] = parse(env[var], var)
        unknown = set(overrides) - set(_ENV)
        if unknown:
            raise ReportDBError(f"unknown writer options {sorted(unknown)}; known: {sorted(_ENV)}")
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


# --- queued work ----------------------------------------------------------------------------------


@dataclass
class _TensorItem:
    tensor_id: int
    rank: int
    shards: list[tuple[tuple[int, ...], np.ndarray]] | None  # None: metadata row only
    metadata: dict[str, Any]
    row: dict[str, Any]
    nbytes: int
    owned: bool  # the shards are private copies (a caller cannot change them before they are written)


@dataclass
class _Pending:
    """Everything queued since the last commit, in the order it must be written."""

    operations: list[tuple[int, int, str | None, float | None]] = field(default_factory=list)
    rows: list[tuple[str, tuple[str, ...], tuple[Any, ...]]] = field(default_factory=list)
    tensors: list[_TensorItem] = field(default_factory=list)
    nbytes: int = 0
    since: float = 0.0

    def __len__(self) -> int:
        return len(self.operations) + len(self.rows) + len(self.tensors)


class RowsRefusedError(ReportDBError):
    """Rows the report's own constraints refused when their batch was written (a duplicate key, a dangling
    reference); every other row and tensor of the batch was committed."""


@functools.lru_cache(maxsize=None)
def _model_tables() -> dict[str, Any]:
    """The SQLAlchemy ``Table`` of every report table, from the ORM models (the newest schema, plus ``buffer_pages``)."""
    from .models import REPORT_MODELS

    return {m.__tablename__: m.__table__ for m in REPORT_MODELS}


@functools.lru_cache(maxsize=None)
def _model_columns(table: str) -> tuple[str, ...] | None:
    """The columns a report table the file lacks is created with, or None for a name that is no report table."""
    model = _model_tables().get(table)
    return None if model is None else tuple(c.name for c in model.columns if c.name != "rowid")


def _quote(name: str) -> str:
    """``name`` as an SQL identifier: in double quotes, with each ``"`` doubled, so any name a file holds is safe."""
    return '"' + name.replace('"', '""') + '"'


_I64 = 1 << 63
#: The rows ``add_operation`` writes, by table: their columns, ``rank`` added where the file's table has it.
_OPERATION_ROWS: dict[str, tuple[str, ...]] = {
    "operations": ("operation_id", "name", "duration"),
    "operation_arguments": ("operation_id", "name", "value"),
    "stack_traces": ("operation_id", "stack_trace"),
    "input_tensors": ("operation_id", "input_index", "tensor_id"),
    "output_tensors": ("operation_id", "output_index", "tensor_id"),
}


def _int64(value: Any, table: str, column: str) -> int:
    """``int(value)``, refused now if it does not fit the 64-bit integers SQLite stores."""
    number = int(value)
    if not -_I64 <= number < _I64:
        raise ReportDBError(f"table {table!r}, column {column!r}: {number} does not fit SQLite's 64-bit integers")
    return number


def _bindable(value: Any, table: str, column: str) -> Any:
    """``value`` as SQLite stores it (numpy scalars and int/str subclasses as plain Python values), or a ReportDBError
    now for a value the insert would fail on at flush time: an unsupported type, an integer beyond 64 bits, text that
    is not valid Unicode."""
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        value = value.item()
    if value is None or type(value) is float:
        return value
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ReportDBError(f"table {table!r}, column {column!r}: text that is not valid Unicode ({exc})") from None
        return value if type(value) is str else str.__str__(value)
    if isinstance(value, int):  # bool and IntEnum included
        return _int64(value, table, column)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return value
    raise ReportDBError(
        f"table {table!r}, column {column!r}: cannot store a {type(value).__name__} ({str(value)[:80]!r}); "
        "give an int, float, str, bytes or None"
    )


#: The background thread starts once 1/_EAGER of a batch (count or bytes) is queued.
_EAGER = 8

#: The checkpoint thread is poked after this many tensor bytes or commits (whichever comes first).
_CHECKPOINT_BYTES = 16 << 20
_CHECKPOINT_COMMITS = 64
#: SQLite's automatic checkpoint in the committing thread, kept as a backstop at 4x its default: 4000 pages of the
#: file's page size (250 MiB with the 64 KiB pages of a file reportdb created, 16 MiB in a 4 KiB-page legacy report).
_AUTOCHECKPOINT_PAGES = 4000

#: Objects a forked child inherited (connections it must neither use nor close).
_INHERITED: list[Any] = []

_LIVE: "weakref.WeakSet[Writer]" = weakref.WeakSet()


def _close_all_at_exit() -> None:
    for writer in list(_LIVE):
        with contextlib.suppress(Exception):
            writer.close()


def _reset_all_in_child() -> None:
    for writer in list(_LIVE):
        writer._forget_parent()


atexit.register(_close_all_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_all_in_child)


def _is_lock_error(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


# --- the writer -----------------------------------------------------------------------------------


class Writer:
    """Write a report while a model runs; safe across threads and processes, crash-safe after ``flush()``.

    Example::

        with reportdb.Writer("generated/ttnn/reports/run1", rank=0) as w:
            w.put_tensor(1, x)
            w.put_tensor(2, y, ttnn_dtype="BFLOAT16", layout="TILE")
            w.add_operation(1, "ttnn.add", duration=1.5e-5, arguments={"memory_config": "L1"},
                            stack_trace=trace, inputs=[1], outputs=[2])
            w.flush()  # everything above is committed when this returns

    ``path`` is a report folder (``db.sqlite`` inside; created if missing) or a database file.
    Options left as None come from the environment (``WriterConfig.from_env``); ``config`` replaces both.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        rank: int = 0,
        config: WriterConfig | None = None,
        store: StorePolicy | None = None,
        chunk_size: int | None = None,
        compression: str | None = None,
        stats: bool | None = None,
        batch_items: int | None = None,
        batch_bytes: int | None = None,
        batch_seconds: float | None = None,
        sync_bytes: int | None = None,
        lock_timeout: float | None = None,
        durable: bool | None = None,
    ) -> None:
        self.config = config or WriterConfig.from_env(
            store=store, chunk_size=chunk_size, compression=compression, stats=stats, batch_items=batch_items,
            batch_bytes=batch_bytes, batch_seconds=batch_seconds, sync_bytes=sync_bytes, lock_timeout=lock_timeout,
            durable=durable,
        )
        p = Path(path)
        if p.suffix not in (".sqlite", ".db", ".sqlite3") and not p.is_file():
            p.mkdir(parents=True, exist_ok=True)
        from .report import resolve_path

        self.path = resolve_path(p)
        self.rank = int(rank)
        self._closed = False
        self._init_process_state()
        self._open()  # fail early (bad path, newer schema...) rather than on the first background flush
        _LIVE.add(self)

    def _init_process_state(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()  # guards the queue and the bookkeeping sets
        self._io = threading.RLock()  # guards the connection; taken before _lock, never after
        self._pending = _Pending()
        self._report: Any = None
        self._unique_rows = False  # the report's tensors table is keyed on (tensor_id[, rank]); known once opened
        # The report tables the file holds and their columns, read once per open; tables this writer creates join
        # once their transaction commits.
        self._tables: dict[str, tuple[str, ...]] = {}
        self._op_shapes: dict[str, tuple[tuple[str, ...], bool]] | None = None  # see _operation_shapes
        self._tensors_ranked: bool | None = None  # see _tensor_rows_ranked
        self._checkpointer: Checkpointer | None = None  # this process's WAL checkpoints, off the committing thread
        self._unchecked_bytes = self._unchecked_commits = 0  # committed since the checkpointer was last poked
        self._known: dict[tuple[int, int], bool] = {}  # id -> whether its values are recorded
        self._loaded_ranks: set[int] = set()  # ranks whose stored ids are in _known
        self._outputs: set[tuple[int, int]] = set()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()  # set by close(): the background thread stops
        self._drain = threading.Event()  # set when a full batch is waiting for the background thread

    def _forget_parent(self) -> None:
        """In a forked child: drop the parent's connection (never use or close it), queue and thread."""
        if self._pid != os.getpid():
            # Never use or close a connection carried across fork (SQLite's rule): keep them from being collected.
            _INHERITED.append((self._report, self._checkpointer))
            self._init_process_state()

    # --- opening ------------------------------------------------------------------------------

    def _open(self) -> Any:
        """This process's Report (mode "a"); opened once, under a folder lock so creators do not race."""
        if self._pid != os.getpid():
            self._forget_parent()
        if self._report is not None:
            return self._report
        from .report import Report

        def attempt() -> Any:
            with _folder_lock(self.path.parent):
                report = Report(self.path, "a", chunk_size=self.config.chunk_size, compression=self.config.compression)
            if not self.config.durable:
                with report.connection() as conn:
                    conn.execute("PRAGMA synchronous=OFF")
            return report

        self._report = self._retry(attempt, "open the report")
        with self._report.connection() as conn:
            self._tables = _file_tables(conn)
            self._unique_rows = _unique_tensor_rows(conn, self._tables.get("tensors", ()))
            self._op_shapes = self._tensors_ranked = None
            if self.config.durable:
                # Checkpoints (a copy and two fsyncs) go to a thread of their own, so commits do not wait for the
                # disk; SQLite's own stays as a backstop at 4x its default size, for a WAL that grows faster than
                # that thread copies it back. Without fsyncs a checkpoint is only a copy, cheaper in the committing
                # thread than handed to another, so durable=False keeps SQLite's.
                conn.execute(f"PRAGMA wal_autocheckpoint={_AUTOCHECKPOINT_PAGES}")
                self._checkpointer = Checkpointer(self.path, synchronous="NORMAL")
        return self._report

    def _columns_of(self, table: str) -> tuple[str, ...]:
        """The columns rows of ``table`` may fill: the file's own, or, for a report table the file lacks, those its
        model creates it with. Any other name is refused."""
        if self._report is None:
            with self._io:
                self._open()
        columns = self._tables.get(table)
        if columns is None:
            columns = _model_columns(table)
            if columns is None:
                raise ReportDBError(
                    f"{self.path}: unknown report table {table!r}; this report has {sorted(self._tables)}, and reportdb "
                    f"can create {sorted(set(_model_tables()) - set(self._tables))}"
                )
        return columns

    def _no_columns(self, table: str, missing: Iterable[str]) -> ReportDBError:
        """The error for columns a row asks for that the file's ``table`` lacks, saying why where it is the age."""
        missing = sorted(missing)
        have = self._columns_of(table)
        newer = [c for c in missing if c in (_model_columns(table) or ())]
        why = f" (newer reports have {', '.join(newer)}; an older ttnn wrote this one)" if newer else ""
        return ReportDBError(f"{self.path}: table {table!r} of this report has no columns {missing}{why}; it has {list(have)}")

    def _rank_refused(self, table: str, rank: int) -> ReportDBError:
        return ReportDBError(
            f"{self.path}: table {table!r} of this report has no rank column (ttnn wrote it before multi-host runs), "
            f"so only rank 0 can be written to it, not rank {rank}; write other ranks to a new report"
        )

    def _tensor_rows_ranked(self) -> bool:
        """Whether the file's ``tensors`` rows carry a rank; checked once per open that they can carry a tensor id."""
        ranked = self._tensors_ranked
        if ranked is None:
            have = self._columns_of("tensors")
            if "tensor_id" not in have:
                raise self._no_columns("tensors", ["tensor_id"])
            ranked = self._tensors_ranked = "rank" in have
        return ranked

    def _operation_shapes(self, rank: int) -> dict[str, tuple[tuple[str, ...], bool]]:
        """For each table ``add_operation`` writes, the columns of its rows and whether ``rank`` is one of them (where
        the file's table has the column), checked against the file once per open; a rank other than 0 is refused
        where a table has no rank column."""
        shapes = self._op_shapes
        if shapes is None:
            shapes = {}
            for table, columns in _OPERATION_ROWS.items():
                have = self._columns_of(table)
                if any(c not in have for c in columns):
                    raise self._no_columns(table, (c for c in columns if c not in have))
                shapes[table] = ((*columns, "rank"), True) if "rank" in have else (columns, False)
            self._op_shapes = shapes
        if rank:
            for table, (_, ranked) in shapes.items():
                if not ranked:
                    raise self._rank_refused(table, rank)
        return shapes

    def _retry(self, action: Callable[[], T], what: str) -> T:
        """Run ``action``, retrying SQLite lock errors with jittered backoff for up to ``lock_timeout``."""
        deadline = time.monotonic() + self.config.lock_timeout
        delay = 0.005
        while True:
            try:
                return action()
            except Exception as exc:
                cause = exc if _is_lock_error(exc) else exc.__cause__
                if cause is None or not _is_lock_error(cause):
                    raise
                if time.monotonic() >= deadline:
                    raise ReportDBError(
                        f"{self.path}: could not {what}: the database stayed locked for {self.config.lock_timeout:.0f} s "
                        f"({cause}); another process holds a write transaction"
                    ) from exc
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.5)

    # --- public API ---------------------------------------------------------------------------

    def put_tensor(
        self,
        tensor_id: int,
        data: Any,
        *,
        rank: int | None = None,
        role: Role | None = None,
        store_values: bool = True,
        **metadata: Any,
    ) -> bool:
        """Record a tensor: a numpy array, a torch tensor, a ``ttnn.Tensor`` or a ``LoadedTensor``.

        ``metadata`` takes the TensorSpec fields (``ttnn_dtype``, ``layout``, ``tile_shape``,
        ``memory_config`` as structured data or as the report's text...), ``source``, and the report
        row's ``device_id``, ``address``, ``buffer_type``, ``size``. ``role="output"`` marks an
        operation output (for ``store="outputs"``). Values are kept as the store policy says, and
        never with ``store_values=False``; the ``tensors`` row is always written. Returns False when
        the id was already recorded (then nothing is converted) and True otherwise; the data is
        committed by the next ``flush()``, or before this returns for tensors of ``sync_bytes`` or more.
        """
        self._check_usable()
        key = (int(tensor_id), self.rank if rank is None else int(rank))
        if not self._tensor_rows_ranked() and key[1]:
            raise self._rank_refused("tensors", key[1])
        with self._lock:
            if role == "output":
                self._outputs.add(key)
            keep = store_values and (
                self.config.store == "all" or (self.config.store == "outputs" and key in self._outputs)
            )
            if self._known.get(key, False) or (key in self._known and not keep):
                return False
        if key[1] not in self._loaded_ranks:
            self._load_known(key[1])
            if self._known.get(key, False):
                return False
        item = self._convert(key, data, metadata, keep)
        with self._lock:
            if self._known.get(key, False) or (key in self._known and not keep):  # another thread was faster
                return False
            self._known[key] = keep
        if item.nbytes >= self.config.sync_bytes and item.shards is not None:
            self._write_now(item)  # large: no copy, written by this thread
            return True
        if item.shards is not None and not item.owned:
            item.shards = [(c, a.copy()) for c, a in item.shards]
        self._enqueue(tensors=[item], nbytes=item.nbytes)
        return True

    def add_operation(
        self,
        operation_id: int,
        name: str,
        *,
        duration: float | None = None,
        arguments: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None,
        stack_trace: str | Sequence[str] | None = None,
        inputs: Sequence[int] = (),
        outputs: Sequence[int] = (),
        rank: int | None = None,
    ) -> None:
        """Record an operation, its arguments (text stored verbatim), stack trace and tensor links.

        Calling it again for the same id updates the name and (when given) the duration, as the legacy
        report wrote an operation once when it started and again with its duration when it ended.
        Non-string argument values are stored as ``str(value)``; a stack trace given as lines is joined
        with newlines.
        """
        self._check_usable()
        r = self.rank if rank is None else int(rank)
        shapes = self._operation_shapes(r)
        op = _int64(operation_id, "operations", "operation_id")
        name = _bindable(name, "operations", "name")
        rows: list[tuple[str, tuple[str, ...], tuple[Any, ...]]] = []
        if arguments is not None:
            columns, ranked = shapes["operation_arguments"]
            pairs = arguments.items() if isinstance(arguments, Mapping) else arguments
            for arg_name, value in pairs:
                key, text = str(arg_name), value if isinstance(value, str) else str(value)
                if not (key.isascii() and text.isascii()):  # text SQLite cannot take fails here, not at flush
                    _bindable(key, "operation_arguments", "name")
                    _bindable(text, "operation_arguments", "value")
                rows.append(("operation_arguments", columns, (op, key, text, r) if ranked else (op, key, text)))
        if stack_trace is not None:
            text = stack_trace if isinstance(stack_trace, str) else "\n".join(stack_trace)
            text = _bindable(text, "stack_traces", "stack_trace")
            columns, ranked = shapes["stack_traces"]
            rows.append(("stack_traces", columns, (op, text, r) if ranked else (op, text)))
        for table, tids in (("input_tensors", inputs), ("output_tensors", outputs)):
            columns, ranked = shapes[table]
            for index, tid in enumerate(tids):
                tid = _int64(tid, table, "tensor_id")
                rows.append((table, columns, (op, index, tid, r) if ranked else (op, index, tid)))
        with self._lock:
            self._outputs.update((int(t), r) for t in outputs)
        self._enqueue(operations=[(op, r, name, None if duration is None else float(duration))], rows=rows)

    def add_device(self, device_id: int, *, rank: int | None = None, **fields: Any) -> None:
        """Record a device row (``num_x_cores``, ``l1_bank_size``... as in the ``devices`` table)."""
        self.add_rows("devices", [{"device_id": int(device_id), "rank": self.rank if rank is None else rank, **fields}])

    def add_rows(self, table: str, rows: Iterable[Mapping[str, Any]]) -> None:
        """Append rows to a report table by column name (``buffers``, ``captured_graph``, ``errors``...): one the
        file holds (reportdb's own ``rdb_*`` tables excepted), or a report table of ``reportdb.models`` that it will
        create. Every row is checked now against the file's columns (``columns(table)``) and values against what
        SQLite stores, so a bad row raises here, with nothing of the call queued.

        Rows without a ``rank`` get the writer's rank when the table has that column. Where the file's table has
        none (ttnn before multi-host runs), rank 0 is left out and any other rank refused; tables that never had
        ranks (``source_files``, ``report_metadata``) take rows from any writer.
        """
        self._check_usable()
        have = self._columns_of(table)
        has_rank = "rank" in have
        ranked_table = has_rank or "rank" in (_model_columns(table) or ())
        out: list[tuple[str, tuple[str, ...], tuple[Any, ...]]] = []
        for row in rows:
            values = dict(row)
            explicit = "rank" in values
            rank = values.pop("rank", self.rank)
            if not isinstance(rank, (int, np.integer)) or isinstance(rank, bool):
                raise ReportDBError(f"table {table!r}: rank must be an integer, not {rank!r}")
            missing = [c for c in values if c not in have]
            if missing:
                raise self._no_columns(table, missing)
            if has_rank:
                values["rank"] = int(rank)
            elif rank and (explicit or ranked_table):
                raise self._rank_refused(table, int(rank))
            out.append((table, tuple(values), tuple(_bindable(v, table, c) for c, v in values.items())))
        self._enqueue(rows=out)

    def columns(self, table: str) -> tuple[str, ...]:
        """The columns ``add_rows`` may fill in ``table``: the report file's own (a report of an older ttnn has fewer,
        one without ``rank``, say), or, for a report table the file lacks, those it will be created with."""
        self._check_usable()
        return self._columns_of(table)

    def query(self, sql: str, parameters: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Commit what is queued, then run a read-only SELECT on this writer's connection."""
        self.flush()
        with self._io:
            with self._open().connection() as conn:
                return conn.execute(sql, tuple(parameters)).fetchall()

    def flush(self) -> None:
        """Write and COMMIT everything queued; when this returns, a crash cannot lose it."""
        self._raise_background_error()
        self._write_pending()

    def close(self) -> None:
        """Flush, stop the background thread and close this process's connection."""
        if self._closed:
            return
        if self._pid != os.getpid():  # a forked child's copy: nothing of ours to close
            self._forget_parent()
        self._closed = True
        self._wake.set()
        self._drain.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        try:
            self._write_pending()
            self._raise_background_error()
        finally:
            _LIVE.discard(self)
            with self._io:
                # The checkpoint connection first, so the Report's is this process's last one: closing, it checkpoints
                # what is left and, if no other writer has the file open, returns it to rollback-journal mode.
                checkpointer, self._checkpointer = self._checkpointer, None
                report, self._report = self._report, None
                try:
                    if checkpointer is not None:
                        checkpointer.close()
                finally:
                    if report is not None:
                        report.close()

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- internals ----------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._pid != os.getpid():
            self._forget_parent()
        if self._closed:
            raise ReportDBError(f"{self.path}: this Writer is closed")
        self._raise_background_error()

    def _raise_background_error(self) -> None:
        error, self._error = self._error, None
        if isinstance(error, RowsRefusedError):
            raise error  # the batch was committed, all but these rows
        if error is not None:
            raise ReportDBError(f"{self.path}: a background write failed: {error}") from error

    def _load_known(self, rank: int) -> None:
        """Note the ids of ``rank`` already stored in the file (by an earlier run, say), once per rank, so a put
        of one of them is skipped before any conversion and no put needs a query of its own. Ids another process
        stores later are skipped when the batch is written."""
        with self._io:
            with self._open().connection() as conn:
                stored = conn.execute("SELECT tensor_id FROM rdb_tensor WHERE rank=?", (rank,)).fetchall()
        with self._lock:
            for (tensor_id,) in stored:
                self._known[(tensor_id, rank)] = True
            self._loaded_ranks.add(rank)

    def _convert(self, key: tuple[int, int], data: Any, metadata: dict[str, Any], keep: bool) -> _TensorItem:
        """Turn any supported tensor into canonical shards, spec metadata and its ``tensors`` row."""
        if not metadata and type(data) is np.ndarray:  # the common case, without the general path's bookkeeping
            array = canonical(data)
            return _TensorItem(key[0], key[1], [((), array)] if keep else None, {},
                               {"shape": f"Shape({list(array.shape)})", "dtype": dtype_name(array.dtype)},
                               int(array.nbytes) if keep else 0, array is not data)
        from .spec import LoadedTensor

        meta = dict(metadata)
        row_extra = {k: meta.pop(k) for k in list(meta) if k in _ROW_FIELDS}
        unknown = set(meta) - _SPEC_FIELDS - {"source"}
        if unknown:
            raise ReportDBError(
                f"unknown tensor metadata {sorted(unknown)}; known: {sorted(_SPEC_FIELDS | _ROW_FIELDS | {'source'})}"
            )
        have = self._columns_of("tensors")
        if any(k not in have for k in row_extra):  # asked for explicitly: refused rather than dropped
            raise self._no_columns("tensors", (k for k in row_extra if k not in have))
        row: dict[str, Any] = {}
        owned = False
        module = type(data).__module__ or ""
        if module.startswith("ttnn"):
            from . import ttnn as adapter

            converted = adapter.convert(data, values=keep)
            shards, spec_meta, row = converted.shards, converted.metadata, converted.row
            meta = {**spec_meta, **meta}
            owned = True  # the adapter's arrays are fresh copies of the device or host buffers
        elif isinstance(data, LoadedTensor):
            shards = data.shards if keep else None
            meta = {**data.spec.as_metadata(), "source": data.source, **meta}
        elif module.startswith("torch"):
            array = _torch_to_numpy(data)
            shards = [((), array)] if keep else None
            row = {"shape": f"torch.Size({list(array.shape)})", "dtype": str(data.dtype)}
        else:
            array = np.asarray(data)
            shards = [((), array)] if keep else None
            row = {"shape": f"Shape({list(array.shape)})", "dtype": dtype_name(array.dtype)}
        if isinstance(meta.get("memory_config"), str):
            from .memconfig import parse_memory_config

            row.setdefault("memory_config", meta["memory_config"])
            meta["memory_config"] = parse_memory_config(meta["memory_config"])
        meta = {k: v for k, v in meta.items() if v is not None and (k != "transpose_tile" or v)}
        if shards is not None:
            originals = [a for _, a in shards]
            shards = [(tuple(int(c) for c in coord), canonical(a)) for coord, a in shards]
            owned = owned or all(c is not o for (_, c), o in zip(shards, originals))  # canonical() copied
        if meta.get("ttnn_dtype"):
            row["dtype"] = f"DataType.{meta['ttnn_dtype']}"
        if meta.get("layout"):
            row["layout"] = f"Layout.{meta['layout']}"
        if meta.get("storage_type"):
            row.setdefault("storage_type", f"StorageType.{meta['storage_type']}")
        row.update(row_extra)
        if "shape" not in row and shards:
            row["shape"] = f"Shape({list(shards[0][1].shape)})"
        row = {k: _bindable(v, "tensors", k) for k, v in row.items()}
        nbytes = sum(int(a.nbytes) for _, a in shards) if shards else 0
        return _TensorItem(key[0], key[1], shards, meta, row, nbytes, owned)

    def _enqueue(
        self,
        *,
        operations: Sequence[tuple[int, int, str | None, float | None]] = (),
        rows: Sequence[tuple[str, tuple[str, ...], tuple[Any, ...]]] = (),
        tensors: Sequence[_TensorItem] = (),
        nbytes: int = 0,
    ) -> None:
        cfg = self.config
        with self._lock:
            pending = self._pending
            if not len(pending):
                pending.since = time.monotonic()
            pending.operations.extend(operations)
            pending.rows.extend(rows)
            pending.tensors.extend(tensors)
            pending.nbytes += nbytes
            size, queued = len(pending), pending.nbytes
            full = size >= cfg.batch_items or queued >= cfg.batch_bytes
            due = cfg.batch_seconds > 0 and time.monotonic() - pending.since >= cfg.batch_seconds
            # The background thread starts on an eighth of a batch already: while the model waits for its device it
            # has the time, and what the caller adds meanwhile makes the next transaction larger (group commit).
            # Much less than that per commit would rewrite the same 64 KiB index pages for a handful of rows.
            eager = size >= cfg.batch_items // _EAGER or queued >= cfg.batch_bytes // _EAGER
            # Twice the batch limits queued: the background thread is behind, so the caller writes (and waits).
            # That bounds the memory held by copies to about four batches (queued, and one being written).
            behind = size >= 2 * cfg.batch_items or queued >= 2 * cfg.batch_bytes
            if self._thread is None and cfg.batch_seconds > 0:
                self._start_thread()
            background = self._thread is not None
        if background and not behind:
            if full or due or eager:
                self._drain.set()  # the background thread writes the batch; the caller's hot path goes on
        elif full or due:
            self._write_pending()

    def _start_thread(self) -> None:
        self._thread = threading.Thread(target=self._background, name="reportdb-writer", daemon=True)
        self._thread.start()

    def _background(self) -> None:
        """Commit full batches as soon as the caller hands them over (statistics, hashing and SQLite writes then
        run here, beside the model, not in its thread), and queued items that have waited ``batch_seconds``, so
        a quiet run still persists them."""
        period = self.config.batch_seconds
        while not self._wake.is_set():
            handed = self._drain.wait(period / 2)
            self._drain.clear()
            if self._wake.is_set():
                return  # close() writes what is left
            with self._lock:
                due = len(self._pending) and (handed or time.monotonic() - self._pending.since >= period)
            if due:
                try:
                    self._write_pending()
                except BaseException as exc:  # surfaced to the caller on its next call
                    self._error = exc

    def _take(self) -> _Pending:
        with self._lock:
            taken, self._pending = self._pending, _Pending()
        return taken

    def _write_pending(self) -> None:
        with self._io:
            taken = self._take()
            if len(taken):
                self._write(taken)

    def _write_now(self, item: _TensorItem) -> None:
        with self._io:
            taken = self._take()
            taken.tensors.append(item)
            self._write(taken)

    def _write(self, batch: _Pending) -> None:
        """One transaction for the whole batch, retried as a whole while the database is locked; rows a constraint of
        the file refuses are left out (the rest commits) and raised afterwards as :class:`RowsRefusedError`."""
        report = self._open()
        refused: list[str] = []
        created: dict[str, tuple[str, ...]] = {}

        def transaction() -> None:
            refused.clear()
            created.clear()
            with report.batch(), report.connection() as conn:
                self._write_rows(conn, batch, refused, created)
                if batch.tensors:
                    self._write_tensors(report, conn, batch.tensors, created)

        try:
            self._retry(transaction, "write to the report")
        except BaseException:
            with self._lock:  # the batch did not land: let the ids be recorded again
                for t in batch.tensors:
                    self._known.pop((t.tensor_id, t.rank), None)
            raise
        self._tables.update(created)
        self._unchecked_bytes += sum(t.nbytes for t in batch.tensors)
        self._unchecked_commits += 1
        if self._checkpointer is not None and (
            self._unchecked_bytes >= _CHECKPOINT_BYTES or self._unchecked_commits >= _CHECKPOINT_COMMITS
        ):
            self._checkpointer.poke()
            self._unchecked_bytes = self._unchecked_commits = 0
        if refused:
            shown = "; ".join(refused[:5]) + (f"; and {len(refused) - 5} more" if len(refused) > 5 else "")
            raise RowsRefusedError(
                f"{self.path}: {len(refused)} row(s) not written, refused by the report's constraints (everything "
                f"else was committed): {shown}"
            )

    def _ensure_table(self, conn: sqlite3.Connection, table: str, created: dict[str, tuple[str, ...]]) -> None:
        """Create a report table the file lacks (legacy ttnn's ``buffer_pages`` in a report with the newest schema,
        say) as its model declares it, in the batch's transaction, so its rows are not lost."""
        if table in self._tables or table in created:
            return
        for statement in _create_table_sql(table):
            conn.execute(statement)
        created[table] = tuple(r[1] for r in conn.execute(f"PRAGMA table_info({_quote(table)})"))
        if table == "tensors":
            self._unique_rows = _unique_tensor_rows(conn, created[table])

    def _write_rows(
        self, conn: sqlite3.Connection, batch: _Pending, refused: list[str], created: dict[str, tuple[str, ...]]
    ) -> None:
        """The batch's operations and report rows, set-based; when one breaks a constraint of the file, all of them
        again one by one, leaving out (and noting in ``refused``) those that fail."""
        if not batch.operations and not batch.rows:
            return
        for table in dict.fromkeys([*(["operations"] if batch.operations else []), *(r[0] for r in batch.rows)]):
            self._ensure_table(conn, table, created)
        conn.execute("SAVEPOINT rdb_rows")
        try:
            self._insert_rows(conn, batch, None)
        except sqlite3.IntegrityError:
            conn.execute("ROLLBACK TO rdb_rows")
            self._insert_rows(conn, batch, refused)
        conn.execute("RELEASE rdb_rows")

    def _insert_rows(self, conn: sqlite3.Connection, batch: _Pending, refused: list[str] | None) -> None:
        """Insert the batch's rows: by ``executemany`` when ``refused`` is None, else row by row into ``refused``."""

        def run(sql: str, rows: list[tuple[Any, ...]], table: str) -> None:
            if refused is None:
                conn.executemany(sql, rows)
                return
            for values in rows:
                try:
                    conn.execute(sql, values)  # a failed statement undoes itself; the transaction goes on
                except sqlite3.IntegrityError as exc:
                    refused.append(f"{table} {values!r:.200}: {exc}")

        if batch.operations:
            ranked = "rank" in self._columns_of("operations")
            where, extra = (" AND rank=?", ", rank") if ranked else ("", "")
            update = f"UPDATE operations SET name=?, duration=COALESCE(?, duration) WHERE operation_id=?{where}"
            insert = f"INSERT INTO operations(operation_id, name, duration{extra}) VALUES (?, ?, ?{', ?' if ranked else ''})"
            for op, rank, name, duration in batch.operations:
                key = (op, rank) if ranked else (op,)
                if not conn.execute(update, (name, duration, *key)).rowcount:
                    run(insert, [(op, name, duration, *key[1:])], "operations")
        for (table, columns), group in _grouped(batch.rows):
            names = ", ".join(_quote(c) for c in columns)
            run(f"INSERT INTO {_quote(table)}({names}) VALUES ({', '.join('?' * len(columns))})", group, table)

    def _write_tensors(
        self, report: Any, conn: sqlite3.Connection, items: list[_TensorItem], created: dict[str, tuple[str, ...]]
    ) -> None:
        """The legacy ``tensors`` rows, then every value in one ``put_tensors`` call (small ones set-based).

        The rows fill the columns the file's ``tensors`` table has. Where it is keyed on the tensor id (and rank),
        ``INSERT OR IGNORE`` lets that key skip ids already stored, about 3x faster than probing for each with
        ``NOT EXISTS``, which only files without the key need. Either way a row that breaks a key of another shape
        (a legacy ``UNIQUE(tensor_id)`` in a file that has ranks) is left out, not the batch.
        """
        self._ensure_table(conn, "tensors", created)
        have = created.get("tensors") or self._tables["tensors"]
        columns = [c for c in _TENSOR_ROW if c in have]
        ranked = "rank" in have
        names = ", ".join(("tensor_id", *columns, *(("rank",) if ranked else ())))
        width = 1 + len(columns) + ranked
        rows = [
            (item.tensor_id, *(item.row.get(c) for c in columns), *((item.rank,) if ranked else ())) for item in items
        ]
        if self._unique_rows:
            conn.executemany(f"INSERT OR IGNORE INTO tensors({names}) VALUES ({', '.join('?' * width)})", rows)
        else:
            key = "tensor_id=? AND rank=?" if ranked else "tensor_id=?"
            conn.executemany(
                f"INSERT OR IGNORE INTO tensors({names}) SELECT {', '.join('?' * width)}"
                f" WHERE NOT EXISTS (SELECT 1 FROM tensors WHERE {key})",
                [(*row, item.tensor_id, *((item.rank,) if ranked else ())) for row, item in zip(rows, items)],
            )
        values = [
            {"tensor_id": item.tensor_id, "rank": item.rank, "shards": item.shards, **item.metadata}
            for item in items
            if item.shards is not None
        ]
        if values:
            report.put_tensors(values, if_exists="skip", stats=self.config.stats)


def _grouped(
    rows: list[tuple[str, tuple[str, ...], tuple[Any, ...]]],
) -> Iterator[tuple[tuple[str, tuple[str, ...]], list[tuple[Any, ...]]]]:
    """Consecutive rows for the same table and columns, so each run becomes one ``executemany``."""
    start = 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or rows[i][:2] != rows[start][:2]:
            yield rows[start][:2], [r[2] for r in rows[start:i]]
            start = i


def _create_table_sql(table: str) -> list[str]:
    """``CREATE TABLE IF NOT EXISTS`` (and its indexes) for a report table as its model declares it, with the report
    schema's type names: NOT NULL, defaults, the integer key, references and UNIQUE constraints included."""
    from sqlalchemy import Float, Integer, UniqueConstraint

    model = _model_tables()[table]
    body = []
    for column in model.columns:
        if column.name == "rowid":  # SQLite's own, mapped by the model, never declared
            continue
        if column.primary_key:
            decl = f"{_quote(column.name)} INTEGER PRIMARY KEY"
        else:
            kind = "int" if isinstance(column.type, Integer) else "float" if isinstance(column.type, Float) else "text"
            decl = f"{_quote(column.name)} {kind}" + (" UNIQUE" if column.unique else "")
            decl += "" if column.nullable else " NOT NULL"
            if column.server_default is not None:
                decl += f" DEFAULT {column.server_default.arg}"
        for fk in column.foreign_keys:
            decl += f" REFERENCES {_quote(fk.column.table.name)}({_quote(fk.column.name)})"
        body.append(decl)
    for constraint in model.constraints:
        if isinstance(constraint, UniqueConstraint):
            body.append(f"UNIQUE({', '.join(_quote(c.name) for c in constraint.columns)})")
    statements = [f"CREATE TABLE IF NOT EXISTS {_quote(table)} ({', '.join(body)})"]
    for index in model.indexes:
        columns = ", ".join(_quote(c.name) for c in index.columns)
        statements.append(f"CREATE INDEX IF NOT EXISTS {_quote(str(index.name))} ON {_quote(table)} ({columns})")
    return statements


def _file_tables(conn: sqlite3.Connection) -> dict[str, tuple[str, ...]]:
    """The report tables of the file and their columns: every plain table but SQLite's, reportdb's own (``rdb_*``)
    and alembic's version table."""
    from .store.schema import VERSION_TABLE

    tables = {}
    for name, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE type='table'").fetchall():
        if name.startswith(("sqlite_", "rdb_")) or name == VERSION_TABLE or str(sql).lstrip().upper().startswith("CREATE VIRTUAL"):
            continue
        tables[name] = tuple(r[1] for r in conn.execute(f"PRAGMA table_info({_quote(name)})"))
    return tables


def _unique_tensor_rows(conn: sqlite3.Connection, columns: Sequence[str]) -> bool:
    """Whether the ``tensors`` table is keyed on exactly the ids the writer checks: UNIQUE(tensor_id, rank) in the
    newest report schema, UNIQUE(tensor_id) in a report from before ranks (``columns`` has no ``rank``)."""
    if not columns:
        return False
    key = {"tensor_id", "rank"} if "rank" in columns else {"tensor_id"}
    for _, name, unique, *_ in conn.execute("PRAGMA index_list(tensors)").fetchall():
        if unique and {r[2] for r in conn.execute(f"PRAGMA index_info({_quote(name)})")} == key:
            return True
    return False


def _torch_to_numpy(tensor: Any) -> np.ndarray:
    """A torch tensor's values as numpy, through same-width integer views for dtypes numpy lacks."""
    import ml_dtypes
    import torch

    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    views = {
        torch.bfloat16: (torch.int16, ml_dtypes.bfloat16),
        getattr(torch, "float8_e4m3fn", None): (torch.uint8, ml_dtypes.float8_e4m3fn),
        getattr(torch, "float8_e5m2", None): (torch.uint8, ml_dtypes.float8_e5m2),
    }
    if t.dtype in views:
        as_int, target = views[t.dtype]
        return t.contiguous().view(as_int).numpy().view(target)
    return t.numpy()


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """An exclusive advisory lock on the report folder while a process opens (maybe creates) the database.

    Two processes creating a brand-new report at once would both run the schema creation; this makes
    the second wait and then find the schema current. Locking the folder leaves no extra file behind.
    Where ``fcntl`` does not exist (Windows) it is a no-op, and SQLite's own locking must do.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
