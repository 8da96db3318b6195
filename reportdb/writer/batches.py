"""The Writer's machinery between a call and a COMMIT: the queue of what was added, the background thread that
commits it in batches, one batch written in one transaction, and the retries while another process holds the lock.

The thread starts once an eighth of a batch (count or bytes) is queued and takes everything queued by then, so
batches grow when the model outpaces it; the caller writes itself only when two full batches are waiting, which
bounds the memory held. A batch is one ``BEGIN IMMEDIATE`` transaction, retried as a whole with jittered backoff
while SQLite says the database is locked; rows a constraint of the file refuses are left out and reported.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence, TypeVar

from ..errors import ReportLockedError
from ..store.engine import is_lock_error
from ..store.journal import share_file
from ..store.writeback import start_writeback
from .config import WriterConfig
from .tables import FileTables, Operation, Row
from .values import TensorItem

if TYPE_CHECKING:  # pragma: no cover
    from ..report import Report

T = TypeVar("T")

#: The background thread starts once 1/_EAGER of a batch (count or bytes) is queued.
_EAGER = 8


@dataclass
class Pending:
    """Everything queued since the last commit, in the order it must be written."""

    operations: list[Operation] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    tensors: list[TensorItem] = field(default_factory=list)
    nbytes: int = 0
    since: float = 0.0

    def __len__(self) -> int:
        return len(self.operations) + len(self.rows) + len(self.tensors)


class BatchQueue:
    """What a Writer's process queued, and the background thread that commits it (statistics, hashing and SQLite
    writes then run beside the model, not in its thread).

    ``write`` commits one batch; it is called holding ``io`` (the lock of the Writer's connection), from the
    background thread or from a caller that must wait. An error in the background thread is kept for the caller's
    next call (:meth:`take_error`).
    """

    def __init__(self, config: WriterConfig, io: threading.RLock, write: Callable[[Pending], None],
                 idle: Callable[[], None] | None = None) -> None:
        self.config = config
        self.io = io
        self._write = write
        self._idle = idle  # called by the background thread once per quiet stretch (nothing queued for a while)
        self._fresh = False  # something was queued since the idle callback last ran
        self._lock = threading.Lock()  # guards the queue; taken after io, never before
        self._pending = Pending()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()  # set by stop(): the background thread ends
        self._drain = threading.Event()  # set when a full batch is waiting for the background thread

    def add(
        self,
        *,
        operations: Sequence[Operation] = (),
        rows: Sequence[Row] = (),
        tensors: Sequence[TensorItem] = (),
        nbytes: int = 0,
    ) -> None:
        """Queue items for the next batch; hand a due batch to the background thread, or write it here when that
        thread is behind (or there is none: ``batch_seconds=0``)."""
        cfg = self.config
        with self._lock:
            pending = self._pending
            if not len(pending):
                pending.since = time.monotonic()
            pending.operations.extend(operations)
            pending.rows.extend(rows)
            pending.tensors.extend(tensors)
            pending.nbytes += nbytes
            self._fresh = True
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
                self._thread = threading.Thread(target=self._background, name="reportdb-writer", daemon=True)
                self._thread.start()
            background = self._thread is not None
        if background and not behind:
            if full or due or eager:
                self._drain.set()  # the background thread writes the batch; the caller's hot path goes on
        elif full or due:
            self.write_pending()

    def write_pending(self) -> None:
        """Write and commit everything queued, in this thread."""
        with self.io:
            taken = self._take()
            if len(taken):
                self._write(taken)

    def write_now(self, item: TensorItem) -> None:
        """Write what is queued and ``item`` (a large tensor, not copied) in one transaction, in this thread."""
        with self.io:
            taken = self._take()
            taken.tensors.append(item)
            self._write(taken)

    def take_error(self) -> BaseException | None:
        """The error of the background thread's last failed write, once (None: none)."""
        error, self._error = self._error, None
        return error

    def stop(self) -> None:
        """End the background thread (what is still queued stays, for :meth:`write_pending`)."""
        self._wake.set()
        self._drain.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _take(self) -> Pending:
        with self._lock:
            taken, self._pending = self._pending, Pending()
        return taken

    def _background(self) -> None:
        """Commit full batches as soon as the caller hands them over, and queued items that have waited
        ``batch_seconds``, so a quiet run still persists them."""
        period = self.config.batch_seconds
        while not self._wake.is_set():
            handed = self._drain.wait(period / 2)
            self._drain.clear()
            if self._wake.is_set():
                return  # close() writes what is left
            with self._lock:
                empty = not len(self._pending)
                due = not empty and (handed or time.monotonic() - self._pending.since >= period)
                idle = empty and not handed and self._fresh and self._idle is not None
            if due:
                try:
                    self.write_pending()
                except BaseException as exc:  # surfaced to the caller on its next call
                    self._error = exc
            elif idle:
                self._run_idle()

    def _run_idle(self) -> None:
        """The idle callback, once per quiet stretch. Under ``io``: a batch the caller's thread is writing gives its
        buffers back when its commit ends, so the callback waits for that (run in between, it dropped the buffers
        before they came back, and they were kept until something was queued again)."""
        assert self._idle is not None
        with self.io:
            with self._lock:
                if len(self._pending):  # queued meanwhile: not quiet after all
                    return
                self._fresh = False
            self._idle()


def write_batch(
    report: Report, tables: FileTables, batch: Pending, *, stats: bool, retry: Callable[[Callable[[], None], str], None],
    writeback: bool = False,
) -> list[str]:
    """One transaction for the whole batch, retried as a whole by ``retry`` while the database is locked; rows a
    constraint of the file refuses are left out (the rest commits) and returned, one description each.

    The legacy ``tensors`` rows go in before the values: the small ones in one ``put_tensors`` call (set-based), then
    each tensor prepared ahead (``ahead.py``) with, when ``writeback`` (a durable Writer), the file's writeback started
    after it (``store.writeback``), so the commit's fsync does not wait for the whole batch. Ids another process
    stored meanwhile are skipped."""
    refused: list[str] = []
    created: dict[str, tuple[str, ...]] = {}

    def transaction() -> None:
        refused.clear()
        created.clear()
        with report.connection() as conn:
            share_file(conn)  # another writer at work: hand the file over to WAL first (a no-op once in WAL)
        with report.batch(), report.connection() as conn:
            tables.write_rows(conn, batch.operations, batch.rows, refused, created)
            if batch.tensors:
                tables.write_tensor_rows(conn, batch.tensors, created)
                valued = [item for item in batch.tensors if item.shards is not None]
                rest = [_values(item) for item in valued if item.prepared is None]
                if rest:
                    report.put_tensors(rest, if_exists="skip", stats=stats)
                for item in valued:
                    if item.prepared is not None:  # prepared ahead: 1 MiB or more
                        report.put_tensors([{**_values(item), "_prepared": item.prepared.result()}], if_exists="skip",
                                           stats=stats)
                        if writeback:
                            start_writeback(report.path)

    retry(transaction, "write to the report")
    tables.commit(created)
    return refused


def _values(item: TensorItem) -> dict[str, Any]:
    """A queued tensor as ``Report.put_tensors`` takes it."""
    return {"tensor_id": item.tensor_id, "rank": item.rank, "shards": item.shards, **item.metadata}


def retry_locked(action: Callable[[], T], what: str, path: Path, timeout: float) -> T:
    """Run ``action``, retrying SQLite lock errors (raised or the cause of what was raised) with jittered backoff
    for up to ``timeout`` seconds, then raise :class:`ReportLockedError` saying what could not be done."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        try:
            return action()
        except Exception as exc:
            cause = exc if is_lock_error(exc) else exc.__cause__
            if cause is None or not is_lock_error(cause):
                raise
            # Only the text outlives this block: the error's traceback holds the frames of the failed statement
            # (their cursors), and a reference to it from this frame would keep them, and so the connection's file
            # handles and locks, alive past the connection's close until the garbage collector ran.
            message, cause = str(cause), None
            if time.monotonic() >= deadline:
                raise ReportLockedError(
                    f"{path}: could not {what}: the database stayed locked for {timeout:.0f} s ({message}); another "
                    "process holds a write transaction"
                ) from exc
        time.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, 0.5)


@contextlib.contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
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
