"""The Writer: operations, their links and tensor values, written while a model runs.

A run calls ``put_tensor`` and ``add_operation`` from its hot path, so the writer keeps the cost there
small: tensors are copied into memory and written in batches (one ``BEGIN IMMEDIATE`` transaction per
batch) by a background thread, so statistics, hashing and SQLite writes run beside the model rather than in
its thread (the queue, the thread and the transaction are in ``batches.py``). Tensors of ``sync_bytes`` or more
are written at once by the calling thread without a copy, and ids already stored are skipped before any
conversion. Small tensors go in set-based (``Report.put_tensors``). ``flush()`` returns only after COMMIT: that
is the point from which a crash (even SIGKILL) cannot lose the data: SQLite's rollback journal (while this process
writes alone) and its WAL (once other writers join, see ``config.py``) are both consistent across application
crashes.

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
import threading
import weakref
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence, TypeVar

from ..errors import InvalidArgumentError, RowsRefusedError, WriterError
from ..store.checkpoint import AUTOCHECKPOINT_PAGES, Checkpointer
from ..store.engine import solo_writes
from ..store.journal import journal_mode
from .batches import BatchQueue, Pending, folder_lock, retry_locked, write_batch
from .config import StorePolicy, WriterConfig
from .ahead import AHEAD_MIN, prepare_ahead
from .copies import CopyBuffers
from .runs import Earlier, RunLock
from .tables import FileTables
from .values import split_metadata, tensor_item

Role = Literal["input", "output"]
T = TypeVar("T")

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
    Options left as None come from the environment (``WriterConfig.from_env``); ``config`` replaces both, and is
    refused beside any option given as an argument.

    One report holds one run. Writers open at the same time (ranks, processes, threads) write the same run; a Writer
    opened on a report whose run has finished (no Writer has it open) and that holds operations or tensors of its rank
    raises :class:`~reportdb.errors.ReportExistsError` naming the report: write to another path, remove the report to
    replace it, or pass ``append=True`` to add to it, keeping what is there (an operation id or tensor values it
    already holds are then refused, :mod:`reportdb.writer.runs`).

    The class is the public API and the per-process state its threads share (connection, known ids); the queue and
    its background thread are :class:`~reportdb.writer.batches.BatchQueue`, the file's tables and row checks
    :class:`~reportdb.writer.tables.FileTables`, value conversion :mod:`reportdb.writer.values`.
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
        wal: bool | None = None,
        append: bool = False,
    ) -> None:
        if config is not None:  # which should win is a guess either way: say so instead of dropping the arguments
            options = dict(store=store, chunk_size=chunk_size, compression=compression, stats=stats,
                           batch_items=batch_items, batch_bytes=batch_bytes, batch_seconds=batch_seconds,
                           sync_bytes=sync_bytes, lock_timeout=lock_timeout, durable=durable, wal=wal)
            given = sorted(name for name, value in options.items() if value is not None)
            if given:
                raise InvalidArgumentError(
                    f"Writer got config= and {', '.join(given)}: give the options in the config "
                    "(dataclasses.replace(config, ...)) or as arguments, not both")
        self.config = config or WriterConfig.from_env(
            store=store, chunk_size=chunk_size, compression=compression, stats=stats, batch_items=batch_items,
            batch_bytes=batch_bytes, batch_seconds=batch_seconds, sync_bytes=sync_bytes, lock_timeout=lock_timeout,
            durable=durable, wal=wal,
        )
        p = Path(path)
        if p.suffix not in (".sqlite", ".db", ".sqlite3") and not p.is_file():
            p.mkdir(parents=True, exist_ok=True)
        from ..report import resolve_path

        self.path = resolve_path(p)
        self.rank = int(rank)
        self.append = bool(append)
        self._closed = False
        self._run = RunLock(self.path)
        self._earlier: Earlier | None = None  # what an appending Writer found (and keeps) of its rank
        self._joined = False  # the run was decided (once per Writer, not again in a forked child)
        self._init_process_state()
        self._open()  # fail early (bad path, newer schema...) rather than on the first background flush
        _LIVE.add(self)

    def _init_process_state(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()  # guards the bookkeeping sets
        self._io = threading.RLock()  # guards the connection; taken before _lock, never after
        # At most what the queue holds at once (two batches queued, up to two more being written), so a run that keeps
        # it busy copies into buffers it has used before; dropped when the queue has been empty for half of
        # ``batch_seconds`` (a quiet run does not keep them).
        self._copies = CopyBuffers(4 * self.config.batch_bytes)
        self._queue = BatchQueue(self.config, self._io, self._write, idle=self._copies.clear)
        self._report: Any = None
        self._tables: FileTables | None = None  # the file's report tables, read once per open
        self._checkpointer: Checkpointer | None = None  # this process's WAL checkpoints, off the committing thread
        self._known: dict[tuple[int, int], bool] = {}  # id -> whether its values are recorded
        self._loaded_ranks: set[int] = set()  # ranks whose stored ids are in _known
        self._outputs: set[tuple[int, int]] = set()

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
            with folder_lock(self.path.parent), contextlib.nullcontext() if self.config.wal else solo_writes():
                report = Report(self.path, "a", chunk_size=self.config.chunk_size, compression=self.config.compression)
                if not self._joined:
                    try:
                        with report.connection() as conn:
                            self._earlier = self._run.join(conn, self.rank, append=self.append)
                    except BaseException:
                        report.close()
                        raise
                    self._joined = True
            if not self.config.durable:
                with report.connection() as conn:
                    conn.execute("PRAGMA synchronous=OFF")
            return report

        self._report = self._retry(attempt, "open the report")
        with self._report.connection() as conn:
            self._tables = FileTables(self.path, conn)
            if self.config.durable:
                # Checkpoints (a copy and two fsyncs) go to a thread of their own (started once the file is in WAL
                # mode, see _write), so commits do not wait for the disk; SQLite's own stays as a backstop at 4x its
                # default size, for a WAL that grows faster than that thread copies it back. Without fsyncs a
                # checkpoint is only a copy, cheaper in the committing thread than handed to another, so
                # durable=False keeps SQLite's.
                conn.execute(f"PRAGMA wal_autocheckpoint={AUTOCHECKPOINT_PAGES}")
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
        return retry_locked(action, what, self.path, self.config.lock_timeout)

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
        if self._earlier is not None and key[1] == self.rank:
            self._earlier.check_tensor(self.path, key[0], key[1])
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
            self._queue.write_now(item)  # large: no copy, written by this thread
            return True
        if item.shards is not None and not item.owned:
            item.shards = [(c, self._copies.copy(a, item.buffers)) for c, a in item.shards]
        if item.shards is not None and item.nbytes >= AHEAD_MIN:
            report = self._open()
            item.prepared = prepare_ahead(item.shards, chunk_size=report.chunk_size, stats=self.config.stats,
                                          address=report._address_kind())
        self._queue.add(tensors=[item], nbytes=item.nbytes)
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
        if self._earlier is not None and r == self.rank:
            self._earlier.check_operation(self.path, int(operation_id), r)
        operation, rows = self._file().operation_rows(
            operation_id, name, duration, r, arguments, stack_trace, inputs, outputs
        )
        with self._lock:
            self._outputs.update((int(t), r) for t in outputs)
        self._queue.add(operations=[operation], rows=rows)

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
        self._queue.add(rows=self._file().table_rows(table, rows, self.rank))

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
        self._queue.write_pending()

    def close(self) -> None:
        """Flush, stop the background thread and close this process's connection."""
        if self._closed:
            return
        if self._pid != os.getpid():  # a forked child's copy: nothing of ours to close
            self._forget_parent()
        self._closed = True
        self._queue.stop()
        try:
            self._queue.write_pending()
            self._raise_background_error()
        finally:
            _LIVE.discard(self)
            self._copies.clear()
            with self._io:
                # The checkpoint connection first, so the Report's is this process's last one: closing, it checkpoints
                # what is left and, if no other writer has the file open, returns it to rollback-journal mode.
                checkpointer, self._checkpointer = self._checkpointer, None
                report, self._report = self._report, None
                try:
                    if checkpointer is not None:
                        checkpointer.close()
                finally:
                    try:
                        if report is not None:
                            report.close()
                    finally:
                        self._run.release()

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
        error = self._queue.take_error()
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

    def _write(self, batch: Pending) -> None:
        """Commit one batch (:func:`~reportdb.writer.batches.write_batch`); if it did not land, its tensor ids may be
        recorded again. Rows a constraint of the file refused (the rest was committed) are raised afterwards as
        :class:`RowsRefusedError`."""
        try:
            refused = write_batch(self._open(), self._file(), batch, stats=self.config.stats, retry=self._retry,
                                  writeback=self.config.durable)
        except BaseException:
            with self._lock:
                for t in batch.tensors:
                    self._known.pop((t.tensor_id, t.rank), None)
            raise
        finally:  # written or given up: nothing reads these copies any more
            self._copies.give_back([buffer for t in batch.tensors for buffer in t.buffers])
        if self._checkpointer is None and self.config.durable:
            with self._report.connection() as conn:  # a rollback journal (one writer) has no WAL to checkpoint
                if journal_mode(conn) == "wal":
                    self._checkpointer = Checkpointer(self.path, synchronous="NORMAL")
        if self._checkpointer is not None:
            self._checkpointer.committed(sum(t.nbytes for t in batch.tensors))
        if refused:
            shown = "; ".join(refused[:5]) + (f"; and {len(refused) - 5} more" if len(refused) > 5 else "")
            raise RowsRefusedError(
                f"{self.path}: {len(refused)} row(s) not written, refused by the report's constraints (everything "
                f"else was committed): {shown}"
            )
