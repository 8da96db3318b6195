"""SQLite connections with the settings reportdb relies on, shared by raw blob I/O and SQLAlchemy.

One ``sqlite3`` connection per Report: blob chunks go through it directly (``zeroblob`` +
``blobopen``, which SQLAlchemy does not expose), and the SQLAlchemy engine runs on the very same
connection through a StaticPool, so both see one transaction.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.pool import StaticPool

PAGE_SIZE = 65536
BUSY_TIMEOUT_MS = 60_000


def connect(path: Path, *, readonly: bool) -> sqlite3.Connection:
    """Open ``path`` in autocommit mode (transactions are explicit); read-only opens never write."""
    if readonly:
        uri = f"{path.resolve().as_uri()}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    else:
        conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA cache_size=-65536")  # 64 MiB
    if not readonly:
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA secure_delete=OFF")
    return conn


def set_write_mode(conn: sqlite3.Connection, *, new_file: bool) -> None:
    """WAL with synchronous=NORMAL; a new file first gets 64 KiB pages (4 KiB pages cap writes)."""
    if new_file:
        conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")


def engine_for(conn: sqlite3.Connection, *, readonly: bool) -> Engine:
    """A SQLAlchemy engine bound to ``conn``; its transactions start with BEGIN IMMEDIATE when writable."""
    engine = create_engine("sqlite://", creator=lambda: conn, poolclass=StaticPool)
    begin = "BEGIN" if readonly else "BEGIN IMMEDIATE"

    @event.listens_for(engine, "begin")
    def _begin(connection) -> None:  # type: ignore[no-untyped-def]
        connection.exec_driver_sql(begin)

    return engine
