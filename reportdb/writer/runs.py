"""Which run a Writer joins: the one writing the report now, or a new one after a finished run, never a mix of two.

Every open Writer holds a shared ``flock`` on the database file (the lock goes with its process, a crash included).
A Writer that opens a file no other Writer holds, and finds operations or tensors of its rank there, would write a
second run into a finished one: the first run's ids answered as if recorded, its operations updated, its links
doubled. That is refused (:class:`ReportExistsError` naming the report and the remedies) unless the Writer was made
with ``append=True``; then what was there stays as it was, and an operation or tensor value of an id already in the
report is refused when it is recorded (values of a tensor the report lists without values, as ttnn 0.81's own
``db.sqlite`` does, are added). Where ``fcntl`` does not exist (Windows) no run is told from another.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ReportExistsError, TensorExistsError
from ..store import files


@dataclass
class Earlier:
    """What the file held for a rank when an appending Writer opened it: operation ids and ids of stored values."""

    operations: set[int] = field(default_factory=set)
    tensors: set[int] = field(default_factory=set)

    def check_operation(self, path: Path, operation_id: int, rank: int) -> None:
        if operation_id in self.operations:
            raise ReportExistsError(
                f"{path}: operation {operation_id} (rank {rank}) was written by an earlier run; an appending Writer adds "
                "to a report and never changes what is there: record it under a new id, or write a new report"
            )

    def check_tensor(self, path: Path, tensor_id: int, rank: int) -> None:
        if tensor_id in self.tensors:
            raise TensorExistsError(
                f"{path}: tensor {tensor_id} (rank {rank}) has values from an earlier run; an appending Writer keeps "
                "them: record these under a new id, or write a new report"
            )


def _has_rank_column(conn: sqlite3.Connection, table: str) -> bool:
    return any(row[1] == "rank" for row in conn.execute(f'PRAGMA table_info("{table}")'))


def _ids(conn: sqlite3.Connection, table: str, column: str, rank: int, tables: set[str]) -> set[int]:
    """The ids of ``rank`` in ``table`` (a table without a rank column holds rank 0 only)."""
    if table not in tables:
        return set()
    if _has_rank_column(conn, table):
        rows = conn.execute(f'SELECT DISTINCT "{column}" FROM "{table}" WHERE rank=?', (rank,)).fetchall()
    else:
        rows = conn.execute(f'SELECT DISTINCT "{column}" FROM "{table}"').fetchall() if rank == 0 else []
    return {int(r[0]) for r in rows if isinstance(r[0], int)}


class RunLock:
    """The shared lock an open Writer holds on its database file, and the decision made when it was taken."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None
        self.pid = os.getpid()  # the process that took the lock (a forked child holds a copy of its descriptor)

    def join(self, conn: sqlite3.Connection, rank: int, *, append: bool) -> Earlier | None:
        """Take the lock; refuse a finished run of ``rank`` unless ``append``. Returns what an appending Writer must
        leave alone (None: nothing to guard, a new report or a run in progress that this Writer joins)."""
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            return None
        self.fd, self.pid = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)), os.getpid()
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another Writer has it open: a run in progress, which this one joins
            fcntl.flock(self.fd, fcntl.LOCK_SH)
            return None
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            earlier = Earlier(_ids(conn, "operations", "operation_id", rank, tables),
                              _ids(conn, "rdb_tensor", "tensor_id", rank, tables))
            if (earlier.operations or earlier.tensors) and not append:
                raise ReportExistsError(
                    f"{self.path}: the report holds a finished run (rank {rank}: {len(earlier.operations)} operations, "
                    f"{len(earlier.tensors)} tensors with values); a second run would mix with it. Write the new run "
                    "to another path, remove this report first to replace it, or pass Writer(..., append=True) to add "
                    "to it (what is there is kept; ids it already has are refused)"
                )
            fcntl.flock(self.fd, fcntl.LOCK_SH)  # held while this Writer is open: later Writers join its run
        except BaseException:
            self.release()
            raise
        return earlier if earlier.operations or earlier.tensors else None

    def release(self) -> None:
        """Let go of the lock. The descriptor is unlocked, not closed outright: closing it would also drop SQLite's
        POSIX locks this process holds on the file (a connection still open, in this Writer or another), so it is
        closed once the file is free of them (:func:`reportdb.store.files.let_go`). A forked child only lets go of its
        copy: the flock belongs to the descriptor it shares with the parent, whose Writer still holds it."""
        fd, self.fd = self.fd, None
        if fd is not None:
            if self.pid == os.getpid():
                import fcntl

                with contextlib.suppress(OSError):
                    fcntl.flock(fd, fcntl.LOCK_UN)
            files.let_go(fd)
