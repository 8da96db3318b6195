"""What every step of a legacy folder migration shares: its errors, the folder's file names, the migration log,
and small SQLite helpers.

The error classes are part of the public API (``reportdb.legacy`` re-exports them).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Callable

from ..errors import (
    MigrationError, MigrationWriteError, NotAReportFolderError, UnreadableTensorFileError, UnsafeFolderError, VerificationError,
)
from ..report import DB_NAME
from ..store.engine import BUSY_TIMEOUT_MS

__all__ = [
    "DB_NAME", "PARTIAL_NAME", "TENSORS_DIR", "SQLITE_SIDE", "Progress", "MigrationError", "NotAReportFolderError",
    "VerificationError", "UnreadableTensorFileError", "UnsafeFolderError", "MigrationWriteError", "MigrationLog",
    "user_tables", "rel_path", "kept", "leave_wal",
]

PARTIAL_NAME = ".db.sqlite.reportdb-partial"
TENSORS_DIR = "tensors"
SQLITE_SIDE = ("-wal", "-shm", "-journal")

Progress = Callable[[int, int, int, int], None]  # files done, files total, bytes done, bytes total


class MigrationLog:
    """Rows of ``rdb_migration_log`` for one run."""

    def __init__(self, conn: sqlite3.Connection, run_id: str) -> None:
        self.conn = conn
        self.run_id = run_id

    def add(
        self,
        kind: str,
        *,
        tensor_id: int | None = None,
        rank: int | None = None,
        path: str | None = None,
        message: str | None = None,
        detail: Any = None,
    ) -> None:
        """Insert one row (in the caller's open transaction, if any)."""
        self.conn.execute(
            "INSERT INTO rdb_migration_log(run_id, created_at, kind, tensor_id, rank, path, message, detail)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (self.run_id, time.time(), kind, tensor_id, rank, path, message, None if detail is None else json.dumps(detail)),
        )


def user_tables(conn: sqlite3.Connection, schema: str = "main") -> set[str]:
    """The names of the tables of ``schema`` (``main`` or an attached ``src``), SQLite's own left out."""
    return {
        r[0]
        for r in conn.execute(f"SELECT name FROM {schema}.sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")
    }


def rel_path(root: Path, path: Path) -> str:
    """``path`` relative to the report folder ``root`` (``tensors/5.bin``), as logs and summaries name files."""
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def kept(partial: Path, todo: str = "make room") -> str:
    """The end of an error message: which partial file keeps the work done so far, and how to resume."""
    try:
        size = os.lstat(partial).st_size
    except FileNotFoundError:
        return f"nothing was kept: {todo} and run the same command again"
    return (
        f"{partial} ({size / 2**20:.1f} MiB) keeps the work done so far: {todo} and run the same command again to "
        f"resume, or delete {partial.name} to give up"
    )


def leave_wal(conn: sqlite3.Connection, db: Path) -> None:
    """Switch to the rollback journal; SQLite refuses (without waiting) while another connection reads, so retry."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            if str(conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0]).lower() == "delete":
                return
        except sqlite3.OperationalError:
            pass
        if time.monotonic() > deadline:
            raise MigrationError(f"{db}: could not leave WAL mode (another process keeps it open)")
        time.sleep(0.01)
