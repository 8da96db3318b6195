"""SQLite connections with the settings reportdb relies on, shared by raw blob I/O and SQLAlchemy.

One ``sqlite3`` connection per Report: blob chunks go through it directly (``zeroblob`` +
``blobopen``, which SQLAlchemy does not expose), and the SQLAlchemy engine, made only when something needs it
(an ORM session, a schema upgrade: importing SQLAlchemy takes about 0.2 s), runs on the very same
connection through a StaticPool, so both see one transaction.

A report is untrusted input, so every connection is hardened: ``trusted_schema=OFF`` (no function with
side effects runs from the report's schema), SQLite's defensive mode where Python exposes it, triggers off
for writes where Python can say so, and a progress handler that stops any single call into SQLite after
:data:`STATEMENT_TIMEOUT` seconds (a recursive view can spin forever). A read-only connection never
writes a byte of the database or of its side files, and never creates one (see :func:`connect`).
"""

from __future__ import annotations

import sqlite3
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from ..errors import CorruptionError, QueryTimeoutError, ReadOnlyError, ReportDBError, ReportLockedError, SchemaError

PAGE_SIZE = 65536
BUSY_TIMEOUT_MS = 60_000
#: Seconds one call into SQLite (a statement's execution up to its first row, or one fetch) may run before it
#: is stopped with QueryTimeoutError. Generous: reportdb's own statements take milliseconds.
STATEMENT_TIMEOUT = 10.0
#: Bytes of the file SQLite reads through a memory map (it clamps this to its build's limit, 2 GiB by default, and
#: falls back to read() where mapping fails, as under an address-space limit). Reading a 64 MiB tensor through the
#: page cache copied it at ~1 GB/s on a 2-core VM; mapped, ~7 GB/s (blobopen: 4 MiB in 0.19 instead of 0.74 ms).
#: Only where Python has ``blobopen`` (3.11+): a ``SELECT`` of a 4 MiB value through the map took 5.3 instead of
#: 0.9 ms, and that is how Python 3.10 reads chunks. SQLite shrinks a file only under an exclusive lock and remaps at
#: each read transaction; what a map cannot survive is a file truncated behind SQLite's back by another program
#: (SIGBUS), the risk SQLite's documentation names.
MMAP_SIZE = 1 << 31
#: SQLite virtual-machine instructions between two looks at the clock (~0.1-1 ms of work).
_PROGRESS_STEPS = 20_000
_HEADER = b"SQLite format 3\x00"

if TYPE_CHECKING:  # pragma: no cover
    from sqlalchemy import Engine


class Connection(sqlite3.Connection):
    """A ``sqlite3`` connection whose every call into SQLite is bounded in time.

    Each ``execute``/``fetch`` restarts the clock; the progress handler aborts a call that runs longer than
    ``timeout`` seconds, and that abort (sqlite3's OperationalError "interrupted") surfaces as QueryTimeoutError.
    """

    path: Path
    timeout: float
    _since: float
    _stopped: bool

    def _arm(self) -> None:
        self._since = time.monotonic()
        self._stopped = False

    def _progress(self) -> int:
        if time.monotonic() - self._since > self.timeout:
            self._stopped = True
            return 1
        return 0

    def cursor(self, factory: Any = None) -> Any:  # SQLAlchemy's cursors are Cursors too
        return super().cursor(factory or Cursor)

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> Any:
        return self.cursor().executemany(sql, parameters)

    def fetch(self, sql: str, parameters: Any = (), /) -> list[Any]:
        """Every row of one statement: ``execute(...).fetchall()`` on sqlite3's own cursor, under one bound of
        ``timeout`` for both and with the same error mapping (about 1 us less than through :class:`Cursor`, for the
        statement of a small tensor's read)."""
        self._arm()
        try:
            return sqlite3.Connection.execute(self, sql, parameters).fetchall()
        except sqlite3.Error as exc:
            mapped = translate(exc, self.path, stopped=self._stopped, timeout=self.timeout, only_own=True)
            if mapped is None:
                raise
            raise mapped from exc


class Cursor(sqlite3.Cursor):
    """A cursor of :class:`Connection`: each call restarts the connection's clock and maps its errors."""

    connection: Connection

    def _call(self, method: Any, *args: Any) -> Any:
        conn = self.connection
        conn._arm()
        try:
            return method(*args)
        except sqlite3.Error as exc:
            mapped = translate(exc, conn.path, stopped=conn._stopped, timeout=conn.timeout, only_own=True)
            if mapped is None:
                raise
            raise mapped from exc

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        return self._call(super().execute, sql, parameters)

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> Any:
        return self._call(super().executemany, sql, parameters)

    def fetchone(self) -> Any:
        return self._call(super().fetchone)

    def fetchmany(self, size: int | None = None) -> list[Any]:
        return self._call(super().fetchmany) if size is None else self._call(super().fetchmany, size)

    def fetchall(self) -> list[Any]:
        return self._call(super().fetchall)

    def __next__(self) -> Any:
        return self._call(super().__next__)


def translate(
    exc: sqlite3.Error, path: Path, *, what: str | None = None, stopped: bool = False, timeout: float = STATEMENT_TIMEOUT,
    only_own: bool = False,
) -> ReportDBError | None:
    """The ReportDBError that an sqlite3 error on the report at ``path`` stands for (``what`` names the table or
    tensor being read). ``stopped``: the progress handler aborted the statement. ``only_own``: map only the errors
    that mean the same whoever ran the statement (a timeout, a damaged file) and return None for the others."""
    where = f"{path}: {what}" if what else str(path)
    message = str(exc)
    code = getattr(exc, "sqlite_errorname", "")
    if stopped and "interrupt" in message:
        return QueryTimeoutError(
            f"{where}: a query ran longer than {timeout:g} s and was stopped; the report's schema may be hostile or "
            f"damaged (a recursive view, say). Check the file's origin, or copy it with `reportdb migrate`"
        )
    if code.startswith("SQLITE_CORRUPT") or "malformed" in message:
        return CorruptionError(
            f"{where}: the database file is damaged ({message}); restore it from a copy, or recover what is left with "
            f"`sqlite3 {path} .recover`"
        )
    if only_own:
        return None
    if isinstance(exc, sqlite3.OperationalError) and ("locked" in message or "busy" in message):
        return ReportLockedError(f"{where}: the database is locked by another process ({message}); try again when it is done")
    if isinstance(exc, sqlite3.OperationalError):
        return SchemaError(
            f"{where}: the report's tables are not laid out as this reportdb expects ({message}); was the file changed "
            "by another tool? `reportdb verify` checks it"
        )
    return CorruptionError(f"{where}: cannot be read ({message}); the database file is damaged or not a report")


def quoted(name: str) -> str:
    """``name`` as an SQL identifier (a table or column name from someone else's file): in double quotes, each
    double quote doubled."""
    return '"' + name.replace('"', '""') + '"'


def _side(path: Path, suffix: str) -> Path:
    return Path(f"{path}{suffix}")


def readonly_uri(path: Path) -> str:
    """The URI that reads ``path`` without writing or creating anything.

    A rollback-journal file opens with ``mode=ro``. A WAL file (header bytes 18/19 == 2) would make ``mode=ro``
    create ``-wal`` and ``-shm`` (or fail where the folder is not writable), so: with no side files, or an empty
    ``-wal`` and no ``-shm`` (no connection is live, all is in the file), it opens ``immutable=1``; with both
    side files it reads through the existing ``-shm`` opened read-only (``readonly_shm=1``), which also sees
    what a live writer has committed. A ``-wal`` holding content with no ``-shm`` to read it through cannot be
    read without creating a file: that is refused rather than silently reading stale data.
    """
    wal, shm = _side(path, "-wal"), _side(path, "-shm")
    base = path.resolve().as_uri()
    with path.open("rb") as f:
        header = f.read(100)
    is_wal = len(header) == 100 and header.startswith(_HEADER) and header[18] == 2 and header[19] == 2
    wal_size = wal.stat().st_size if wal.exists() else None
    if wal_size is not None and shm.exists():
        return f"{base}?mode=ro&readonly_shm=1"
    if wal_size:
        raise ReadOnlyError(
            f"{path}: its {wal.name} holds {wal_size} bytes of committed changes not yet copied into the database, "
            f"and there is no {shm.name} to read them through without creating a file (a writer crashed, or the file "
            f"was copied without it). Open it once with write access (`reportdb upgrade {path}`, or "
            f"reportdb.open(path, 'a')) to fold them in, then read it"
        )
    if is_wal or wal_size is not None:
        return f"{base}?immutable=1"
    return f"{base}?mode=ro"


def connect(path: Path, *, readonly: bool, timeout: float | None = None) -> sqlite3.Connection:
    """Open ``path`` in autocommit mode (transactions are explicit), hardened against a hostile schema.

    ``readonly=True`` never changes a byte or an mtime of the database or its side files, creates none, and
    works without write access to the file or its folder (see :func:`readonly_uri`); ``PRAGMA query_only``
    holds it to reads. ``timeout`` bounds each call into SQLite (default :data:`STATEMENT_TIMEOUT`).
    """
    if readonly:
        try:
            uri = readonly_uri(path)
        except OSError as exc:
            raise ReportDBError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, factory=Connection)
    else:
        conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, factory=Connection)
    assert isinstance(conn, Connection)
    conn.path = path
    conn.timeout = STATEMENT_TIMEOUT if timeout is None else timeout
    conn._arm()
    conn.set_progress_handler(conn._progress, _PROGRESS_STEPS)
    try:
        _harden(conn, readonly=readonly)
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA cache_size=-65536")  # 64 MiB
        if hasattr(conn, "blobopen"):
            conn.execute(f"PRAGMA mmap_size={MMAP_SIZE}")
        if readonly:
            conn.execute("PRAGMA query_only=ON")
        else:
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA secure_delete=OFF")
    except BaseException:
        conn.close()
        raise
    return conn


def _harden(conn: sqlite3.Connection, *, readonly: bool) -> None:
    """No report-supplied SQL with side effects: ``trusted_schema=OFF`` everywhere; on Python 3.12+ also SQLite's
    defensive mode and, for writes, no triggers at all (the open-time checks refuse them on every version)."""
    conn.execute("PRAGMA trusted_schema=OFF")
    if sys.version_info >= (3, 12):
        conn.setconfig(sqlite3.SQLITE_DBCONFIG_DEFENSIVE, True)
        if not readonly:
            conn.setconfig(sqlite3.SQLITE_DBCONFIG_ENABLE_TRIGGER, False)


def set_write_mode(conn: sqlite3.Connection, *, new_file: bool) -> None:
    """synchronous=NORMAL; a new file also gets 64 KiB pages (4 KiB pages cap writes) and WAL at once. An existing
    file switches to WAL at its first write (:func:`start_wal`), so an open that writes nothing changes nothing."""
    if new_file:
        conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
        start_wal(conn)
    conn.execute("PRAGMA synchronous=NORMAL")


def start_wal(conn: sqlite3.Connection) -> None:
    """WAL while a report is written: readers do not block the writer, commits append (outside a transaction). A
    small file finished with small pages (:func:`finish_writing`) first gets :data:`PAGE_SIZE` pages back, so a report
    that grows again is written at full speed."""
    if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        _repage(conn, PAGE_SIZE)
    conn.execute("PRAGMA journal_mode=WAL")


#: A finished report of at most this many bytes is rewritten with :data:`SMALL_PAGE_SIZE` pages when its writer
#: closes (a VACUUM: a few ms here), unless that could renumber rows (:func:`_rowids_movable`). 64 KiB pages make writes fast but cost a page per table and index, ~4 MB for a
#: report's ~60, which a report of two small tensors must not carry (measured here, 2 x 4 KiB tensors: 4.06 MB with
#: 64 KiB pages, 1.0 MB with 16 KiB, 0.27 MB with 4 KiB; ingest of 64 MiB tensors 316, 262 and 206 MB/s).
SMALL_FILE = 8 << 20
SMALL_PAGE_SIZE = 4096


def _repage(conn: sqlite3.Connection, page_size: int) -> None:
    """Rewrite a file of at most :data:`SMALL_FILE` bytes in rollback-journal mode with ``page_size`` pages
    (VACUUM, all or nothing); skipped silently while another connection holds a lock on it, and for a file where a
    VACUUM could renumber rows (:func:`_rowids_movable`)."""
    found = conn.execute("PRAGMA page_size").fetchone()[0]
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    if found == page_size or found * pages > SMALL_FILE or conn.in_transaction or _rowids_movable(conn):
        return
    conn.execute("PRAGMA busy_timeout=0")
    try:
        conn.execute(f"PRAGMA page_size={page_size}")
        conn.execute("VACUUM")
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc) and "busy" not in str(exc):
            raise
    finally:
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")


def _rowids_movable(conn: sqlite3.Connection) -> bool:
    """Whether a VACUUM could change rows: it may renumber the rowids of tables without an INTEGER PRIMARY KEY, which
    matters where the rowid is a row's only identity (a table without a declared primary key: the legacy report
    tables, whose rowids the visualizer and reportdb's models read), so any such table holding rows rules it out."""
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'").fetchall():
        table = quoted(name)
        if any(r[5] for r in conn.execute(f"PRAGMA table_info({table})").fetchall()):
            continue  # a declared key: the rowid itself (INTEGER PRIMARY KEY, kept), or a key of its own
        try:
            if conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is not None:
                return True
        except sqlite3.OperationalError:  # a table this SQLite cannot read (a virtual one): leave the file alone
            return True
    return False


def finish_writing(conn: sqlite3.Connection) -> bool:
    """Put a file written in WAL mode back into rollback-journal mode, so the database is one self-contained file
    again (copyable alone, readable from read-only media), with small pages if it is small (:data:`SMALL_FILE`).
    Only the last connection can do it: while another one is open SQLite answers busy, which is accepted silently
    (that one finishes the file when it closes). Returns whether the file is now in rollback-journal mode."""
    if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        return True
    conn.execute("PRAGMA busy_timeout=0")
    try:
        done = str(conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0]).lower() == "delete"
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            return False
        raise
    if done:
        _repage(conn, SMALL_PAGE_SIZE)
    return done


def engine_for(conn: sqlite3.Connection, *, readonly: bool, before_write: Callable[[], None] | None = None) -> Engine:
    """A SQLAlchemy engine bound to ``conn``; its transactions start with BEGIN IMMEDIATE when writable, after
    ``before_write`` (which may set the journal mode: no transaction is open yet). SQLAlchemy is imported here, on
    first use, so commands that never need it (``reportdb info``, ``ls``) do not pay for its import."""
    from sqlalchemy import create_engine, event
    from sqlalchemy.pool import StaticPool

    engine = create_engine("sqlite://", creator=lambda: conn, poolclass=StaticPool)
    begin = "BEGIN" if readonly else "BEGIN IMMEDIATE"

    @event.listens_for(engine, "begin")
    def _begin(connection) -> None:  # type: ignore[no-untyped-def]
        if before_write is not None:
            before_write()
        connection.exec_driver_sql(begin)

    return engine
