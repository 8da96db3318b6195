"""The Writer: operations, their links and tensor values, written while a model runs.

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

Rows are checked against the file's own tables when they are added (``tables.py``); rows that pass every check can
still break a constraint of the file (a duplicate key another process wrote first, a dangling ``source_file_id``):
those rows alone are left out, the rest of the batch is committed, and the next call raises
:class:`RowsRefusedError` naming them. The settings and their ``REPORTDB_*`` variables are in ``config.py``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import random
import sqlite3
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal, Mapping, Sequence, TypeVar

from ..errors import ReportLockedError, RowsRefusedError, WriterError
from ..store.checkpoint import AUTOCHECKPOINT_PAGES, Checkpointer
from .config import StorePolicy, WriterConfig
from .tables import FileTables, Operation, Row
from .values import TensorItem, split_metadata, tensor_item

Role = Literal["input", "output"]
T = TypeVar("T")

#: The background thread starts once 1/_EAGER of a batch (count or bytes) is queued.
_EAGER = 8


@dataclass
class _Pending:
    """Everything queued since the last commit, in the order it must be written."""

    operations: list[Operation] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    tensors: list[TensorItem] = field(default_factory=list)
    nbytes: int = 0
    since: float = 0.0

    def __len__(self) -> int:
        return len(self.operations) + len(self.rows) + len(self.tensors)


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

    The class is the public API and the per-process state its threads share (queue, connection, known ids); the
    file's tables and row checks are :class:`~reportdb.writer.tables.FileTables`, value conversion is
    :mod:`reportdb.writer.values`.
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
        from ..report import resolve_path

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
        self._tables: FileTables | None = None  # the file's report tables, read once per open
        self._checkpointer: Checkpointer | None = None  # this process's WAL checkpoints, off the committing thread
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
        from ..report import Report

        def attempt() -> Any:
            with _folder_lock(self.path.parent):
                report = Report(self.path, "a", chunk_size=self.config.chunk_size, compression=self.config.compression)
            if not self.config.durable:
                with report.connection() as conn:
                    conn.execute("PRAGMA synchronous=OFF")
            return report

        self._report = self._retry(attempt, "open the report")
        with self._report.connection() as conn:
            self._tables = FileTables(self.path, conn)
            if self.config.durable:
                # Checkpoints (a copy and two fsyncs) go to a thread of their own, so commits do not wait for the
                # disk; SQLite's own stays as a backstop at 4x its default size, for a WAL that grows faster than
                # that thread copies it back. Without fsyncs a checkpoint is only a copy, cheaper in the committing
                # thread than handed to another, so durable=False keeps SQLite's.
                conn.execute(f"PRAGMA wal_autocheckpoint={AUTOCHECKPOINT_PAGES}")
                self._checkpointer = Checkpointer(self.path, synchronous="NORMAL")
        return self._report

    def _file(self) -> FileTables:
        """The report tables of this process's open file, opening it first if needed."""
        if self._tables is None:
            with self._io:
                self._open()
        assert self._tables is not None
        return self._tables

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
                    raise ReportLockedError(
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
        tables = self._file()
        if not tables.tensor_rows_ranked() and key[1]:
            raise tables.rank_refused("tensors", key[1])
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
        meta, row_extra = split_metadata(metadata) if metadata else ({}, {})
        if row_extra:
            tables.check_tensor_row(row_extra)
        item = tensor_item(key[0], key[1], data, meta, row_extra, keep)
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
        operation, rows = self._file().operation_rows(
            operation_id, name, duration, r, arguments, stack_trace, inputs, outputs
        )
        with self._lock:
            self._outputs.update((int(t), r) for t in outputs)
        self._enqueue(operations=[operation], rows=rows)

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
        self._enqueue(rows=self._file().table_rows(table, rows, self.rank))

    def columns(self, table: str) -> tuple[str, ...]:
        """The columns ``add_rows`` may fill in ``table``: the report file's own (a report of an older ttnn has fewer,
        one without ``rank``, say), or, for a report table the file lacks, those it will be created with."""
        self._check_usable()
        return self._file().columns(table)

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
            raise WriterError(f"{self.path}: this Writer is closed")
        self._raise_background_error()

    def _raise_background_error(self) -> None:
        error, self._error = self._error, None
        if isinstance(error, RowsRefusedError):
            raise error  # the batch was committed, all but these rows
        if error is not None:
            raise WriterError(f"{self.path}: a background write failed: {error}") from error

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

    def _enqueue(
        self,
        *,
        operations: Sequence[Operation] = (),
        rows: Sequence[Row] = (),
        tensors: Sequence[TensorItem] = (),
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

    def _write_now(self, item: TensorItem) -> None:
        with self._io:
            taken = self._take()
            taken.tensors.append(item)
            self._write(taken)

    def _write(self, batch: _Pending) -> None:
        """One transaction for the whole batch, retried as a whole while the database is locked; rows a constraint of
        the file refuses are left out (the rest commits) and raised afterwards as :class:`RowsRefusedError`.

        The legacy ``tensors`` rows go in before the values, which go in one ``put_tensors`` call (small ones
        set-based); ids another process stored meanwhile are skipped there."""
        report = self._open()
        tables = self._file()
        refused: list[str] = []
        created: dict[str, tuple[str, ...]] = {}

        def transaction() -> None:
            refused.clear()
            created.clear()
            with report.batch(), report.connection() as conn:
                tables.write_rows(conn, batch.operations, batch.rows, refused, created)
                if batch.tensors:
                    tables.write_tensor_rows(conn, batch.tensors, created)
                    values = [
                        {"tensor_id": item.tensor_id, "rank": item.rank, "shards": item.shards, **item.metadata}
                        for item in batch.tensors
                        if item.shards is not None
                    ]
                    if values:
                        report.put_tensors(values, if_exists="skip", stats=self.config.stats)

        try:
            self._retry(transaction, "write to the report")
        except BaseException:
            with self._lock:  # the batch did not land: let the ids be recorded again
                for t in batch.tensors:
                    self._known.pop((t.tensor_id, t.rank), None)
            raise
        tables.commit(created)
        if self._checkpointer is not None:
            self._checkpointer.committed(sum(t.nbytes for t in batch.tensors))
        if refused:
            shown = "; ".join(refused[:5]) + (f"; and {len(refused) - 5} more" if len(refused) > 5 else "")
            raise RowsRefusedError(
                f"{self.path}: {len(refused)} row(s) not written, refused by the report's constraints (everything "
                f"else was committed): {shown}"
            )
