"""SQLite connections with the settings reportdb relies on, shared by raw blob I/O and SQLAlchemy.

One ``sqlite3`` connection per Report: blob chunks go through it directly (``zeroblob`` +
``blobopen``, which SQLAlchemy does not expose), and the SQLAlchemy engine, made only when something needs it
(an ORM session, a schema upgrade: importing SQLAlchemy is most of a command's start-up), runs on the very same
connection through a StaticPool, so both see one transaction.

A report is untrusted input, so every connection is hardened: ``trusted_schema=OFF`` (no function with
side effects runs from the report's schema), SQLite's defensive mode where Python exposes it, triggers off
for writes where Python can say so, and a progress handler that stops any single call into SQLite after
:data:`STATEMENT_TIMEOUT` seconds (a recursive view can spin forever). A read-only connection never
writes a byte of the database or of its side files, and never creates one (see :func:`connect`).
"""

from __future__ import annotations

import contextlib
import contextvars
import sqlite3
import sys
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from ..errors import (
    ConstraintError, CorruptionError, DiskError, NotAReportError, QueryTimeoutError, ReadOnlyError, ReportClosedError,
    ReportDBError, ReportLockedError, ResourceLimitError, SchemaError, UnsafeReportError,
)
from .files import check_files, readonly_uri, write_open_advice

PAGE_SIZE = 65536
BUSY_TIMEOUT_MS = 60_000
#: Seconds one call into SQLite (a statement's execution up to its first row, or one fetch) may run before it
#: is stopped with QueryTimeoutError. Generous: reportdb's own statements take milliseconds.
STATEMENT_TIMEOUT = 10.0
#: Bytes of the file SQLite reads through a memory map (it clamps this to its build's limit, 2 GiB by default, and
#: falls back to read() where mapping fails, as under an address-space limit). Mapped, a large tensor is read several
#: times faster than copied through the page cache (figures: benchmarks/NOTES.md). Only where Python has ``blobopen``
#: (3.11+): a ``SELECT`` of a large value through the map is slower than without, and that is how Python 3.10 reads
#: chunks. SQLite shrinks a file only under an exclusive lock and remaps at
#: each read transaction; what a map cannot survive is a file truncated behind SQLite's back by another program
#: (SIGBUS), the risk SQLite's documentation names.
MMAP_SIZE = 1 << 31
#: SQLite virtual-machine instructions between two looks at the clock (a small fraction of the time bound).
_PROGRESS_STEPS = 20_000
#: The largest string or blob a read-only connection lets SQLite build (``SQLITE_LIMIT_LENGTH``, Python 3.11+). The
#: progress handler runs between virtual-machine instructions, never inside one, so one SQL function call of a hostile
#: schema (``printf('%.*c', 999000000, 'x')`` in a generated column or a view) could run for 39 s and allocate 1 GB
#: in a single step; capped here, such a call fails at once with SQLITE_TOOBIG and every step is bounded by this many
#: bytes of work. Chunks are read through ``blobopen``, which this limit does not apply to; reportdb's own SELECTs
#: of values are of small chunks and rows. Writable connections keep SQLite's own limit (a chunk may be up to
#: ``blobs.MAX_CHUNK_SIZE``); they refuse hostile schemas at open (``schema.check_safety``).
VALUE_LIMIT = 64 << 20
#: SQL functions whose one call can run for many seconds however small its result: ``printf('%.*c', 999000000, 'x')``
#: loops over its precision inside one step even once its output hit :data:`VALUE_LIMIT` (SQLite before 3.42; 28 s
#: here). Every connection refuses them in the report's own SQL (views, triggers: :func:`_authorize`).
SCHEMA_DENIED_FUNCTIONS = frozenset({"printf", "format"})
if TYPE_CHECKING:  # pragma: no cover
    from sqlalchemy import Engine


class Connection(sqlite3.Connection):
    """A ``sqlite3`` connection whose every call into SQLite is bounded in time.

    Each ``execute``/``fetch`` restarts the clock; the progress handler aborts a call that runs longer than
    ``timeout`` seconds, and that abort (sqlite3's OperationalError "interrupted") surfaces as QueryTimeoutError.
    """

    path: Path
    timeout: float
    #: Writes in a rollback journal while no other connection writes (:func:`solo_writes`); False: WAL at once.
    solo: bool
    #: Another writer was seen: the file is to be put in WAL mode (:func:`share_file`).
    handing_over: bool
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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cursors: weakref.WeakSet[sqlite3.Cursor] = weakref.WeakSet()

    def cursor(self, factory: Any = None) -> Any:  # SQLAlchemy's cursors are Cursors too
        try:
            made = super().cursor(factory or Cursor)
        except sqlite3.ProgrammingError as exc:  # a closed connection: ReportClosedError
            mapped = translate(exc, self.path, only_own=True)
            if mapped is None:
                raise
            raise mapped from exc
        self._cursors.add(made)
        return made

    def close(self) -> None:
        """Close the connection and the file at once. Since Python 3.11 ``close()`` leaves SQLite's connection open
        (a "zombie" holding the file) while any cursor of it is alive, and an error's traceback can keep one alive
        until the garbage collector runs, or for good from a frame that stays (a thread's): so every cursor this
        connection made is closed first, which finalizes its statement."""
        for made in list(self._cursors):
            with contextlib.suppress(sqlite3.Error):
                made.close()
        super().close()

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> Any:
        return self.cursor().executemany(sql, parameters)

    def fetch(self, sql: str, parameters: Any = (), /) -> list[Any]:
        """Every row of one statement: ``execute(...).fetchall()`` on sqlite3's own cursor, under one bound of
        ``timeout`` for both and with the same error mapping (cheaper than through :class:`Cursor`, for the
        statement of a small tensor's read)."""
        self._arm()
        try:
            return reopened(lambda: sqlite3.Connection.execute(self, sql, parameters).fetchall())
        except UnicodeDecodeError as exc:
            raise not_utf8(self.path, exc) from exc
        except sqlite3.Error as exc:
            mapped = translate(exc, self.path, stopped=self._stopped, timeout=self.timeout, only_own=True)
            if mapped is None:
                raise
            raise mapped from exc


#: How long a statement is tried again while SQLite cannot open the file's -wal/-shm (:func:`reopened`).
REOPEN_SECONDS = 1.0


def reopened(call: Callable[[], Any]) -> Any:
    """``call()``, tried again for up to :data:`REOPEN_SECONDS` while SQLite answers "unable to open database file"
    (SQLITE_CANTOPEN): a read-only connection meets that for a moment while a writer moves the file between a rollback
    journal and WAL (the -wal and -shm files come and go); a file that stays unopenable still fails."""
    deadline = None
    while True:
        try:
            return call()
        except sqlite3.OperationalError as exc:
            if error_kind(exc) != "cantopen":
                raise
            now = time.monotonic()
            deadline = deadline or now + REOPEN_SECONDS
            if now >= deadline:
                raise
            time.sleep(0.002)


def not_utf8(path: Path, exc: UnicodeDecodeError) -> CorruptionError:
    """A text value that is not UTF-8 (SQLite never stores one itself: the file's bytes were damaged or forged)."""
    return CorruptionError(f"{path}: a stored text is not UTF-8 ({exc}): the file is damaged; `reportdb verify` "
                           "checks it, and a copy from its source replaces it")


class Cursor(sqlite3.Cursor):
    """A cursor of :class:`Connection`: each call restarts the connection's clock and maps its errors."""

    connection: Connection

    def _call(self, method: Any, *args: Any) -> Any:
        conn = self.connection
        conn._arm()
        try:
            return method(*args)
        except UnicodeDecodeError as exc:
            raise not_utf8(conn.path, exc) from exc
        except sqlite3.Error as exc:
            mapped = translate(exc, conn.path, stopped=conn._stopped, timeout=conn.timeout, only_own=True)
            if mapped is None:
                raise
            raise mapped from exc

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        return self._call(reopened, lambda: super(Cursor, self).execute(sql, parameters))

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


#: SQLite's primary result codes (``sqlite_errorcode & 0xff``) by what they mean to a reportdb user.
_KINDS = {5: "busy", 6: "busy", 7: "memory", 8: "readonly", 9: "interrupt", 10: "disk", 11: "corrupt", 13: "full",
          14: "cantopen", 18: "toobig", 19: "constraint", 21: "closed", 23: "denied", 26: "notadb"}
#: The same from the message text, where Python (3.10) gives no code: the first phrase found wins.
_PHRASES = (("malformed", "corrupt"), ("not a database", "notadb"), ("disk is full", "full"),
            ("disk i/o", "disk"), ("locked", "busy"), ("busy", "busy"), ("too big", "toobig"),
            ("out of memory", "memory"), ("readonly database", "readonly"), ("interrupt", "interrupt"),
            ("closed database", "closed"), ("constraint failed", "constraint"), ("not authorized", "denied"),
            ("unable to open database file", "cantopen"))


def error_kind(exc: sqlite3.Error) -> str:
    """What SQLite error ``exc`` means: ``corrupt`` (damaged), ``notadb`` (not a SQLite database), ``full``, ``disk`` (I/O),
    ``busy`` (locked), ``constraint``, ``closed`` (misuse of a closed connection), ``toobig``, ``memory``,
    ``readonly``, ``interrupt``, ``denied`` (by :func:`_authorize`), ``cantopen`` (the file or its -wal/-shm) or ``other`` (a statement the schema cannot run). By SQLite's result code where
    Python gives it (3.11+), else by the message; a closed connection is Python's own ProgrammingError."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF in _KINDS:
        return _KINDS[code & 0xFF]
    if isinstance(exc, sqlite3.IntegrityError):
        return "constraint"
    message = str(exc).lower()
    if isinstance(exc, sqlite3.ProgrammingError) and "closed" in message:
        return "closed"
    return next((kind for phrase, kind in _PHRASES if phrase in message), "other")


def translate(
    exc: sqlite3.Error, path: Path, *, what: str | None = None, stopped: bool = False, timeout: float = STATEMENT_TIMEOUT,
    only_own: bool = False,
) -> ReportDBError | None:
    """The ReportDBError that an sqlite3 error on the report at ``path`` stands for (``what`` names the table or
    tensor being read), by SQLite's error code (:func:`error_kind`). ``stopped``: the progress handler aborted the
    statement. ``only_own``: map only the errors that mean the same whoever ran the statement (a timeout, a damaged
    file, a full disk, a value over the limit, a closed connection) and return None for the others (a file that is
    not a database among them: its opener names it, NotAReportError)."""
    where = f"{path}: {what}" if what else str(path)
    message = str(exc)
    kind = error_kind(exc)
    if stopped and kind == "interrupt":
        return QueryTimeoutError(
            f"{where}: a query ran longer than {timeout:g} s and was stopped; the report's schema may be hostile or "
            f"damaged (a recursive view, say). Check the file's origin, or copy it with `reportdb migrate`"
        )
    if kind == "corrupt":
        return CorruptionError(
            f"{where}: the database file is damaged or not a SQLite database ({message}); restore it from a copy, or "
            f"recover what is left with `sqlite3 {path} .recover`"
        )
    if kind == "full":
        return DiskError(f"{where}: the disk is full ({message}); nothing of the failed write was kept. Free some "
                         "space and run it again")
    if kind == "disk":
        return DiskError(f"{where}: the disk reported an I/O error ({message}); the file was not changed by it. Check "
                         "the device (or a network file system) and run it again")
    if kind == "closed":
        return ReportClosedError(f"{where}: the report is closed; open it again (reportdb.open) to go on using it")
    if kind in ("toobig", "memory"):
        return ResourceLimitError(
            f"{where}: a query made SQLite build a value over reportdb's limit of {VALUE_LIMIT} bytes, or run out of "
            f"memory ({message}); the report's schema may be hostile (an SQL function in a view or a generated "
            "column). Check the file's origin"
        )
    if kind == "denied":
        return UnsafeReportError(
            f"{where}: the report's SQL (a view or trigger) calls a function reportdb does not run from a report "
            f"({', '.join(sorted(SCHEMA_DENIED_FUNCTIONS))}: one call can run for many seconds; {message}). Check the "
            "file's origin"
        )
    if only_own:
        return None
    if kind == "notadb":
        return NotAReportError(f"{where}: not a SQLite database, or its header is damaged ({message})")
    if kind == "busy":
        return ReportLockedError(f"{where}: the database is locked by another process ({message}); try again when it is done")
    if kind == "constraint":
        return ConstraintError(f"{where}: the report's own constraints refused a write ({message}); nothing of it was "
                               "written")
    if kind == "readonly":
        return ReadOnlyError(f"{where}: the file cannot be written here ({message}); open it where it is writable")
    if kind == "cantopen":
        return ReportLockedError(
            f"{where}: SQLite could not open the file or its -wal/-shm side files ({message}): a writer switched its "
            "journal mode while it was being read, or they are not readable here; read it again"
        )
    return SchemaError(
        f"{where}: the report's tables are not laid out as this reportdb expects ({message}); was the file changed "
        "by another tool? `reportdb verify` checks it"
    )


def quoted(name: str) -> str:
    """``name`` as an SQL identifier (a table or column name from someone else's file): in double quotes, each
    double quote doubled."""
    return '"' + name.replace('"', '""') + '"'


def connect(path: Path, *, readonly: bool, timeout: float | None = None) -> sqlite3.Connection:
    """Open ``path`` in autocommit mode (transactions are explicit), hardened against a hostile schema.

    ``readonly=True`` never changes a byte or an mtime of the database or its side files, creates none, and
    works without write access to the file or its folder (see :func:`readonly_uri`); ``PRAGMA query_only``
    holds it to reads. ``timeout`` bounds each call into SQLite (default :data:`STATEMENT_TIMEOUT`).
    """
    check_files(path)
    if readonly:
        try:
            uri = readonly_uri(path)
        except OSError as exc:
            raise ReportDBError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, factory=Connection)
        if hasattr(conn, "setlimit"):
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, VALUE_LIMIT)
    else:
        conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, factory=Connection)
    assert isinstance(conn, Connection)
    conn.path = path
    conn.solo = not readonly and _SOLO.get()
    conn.handing_over = False
    conn.timeout = STATEMENT_TIMEOUT if timeout is None else timeout
    conn._arm()
    conn.set_progress_handler(conn._progress, _PROGRESS_STEPS)
    conn.set_authorizer(_authorize)
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
    except sqlite3.OperationalError as exc:
        conn.close()
        if readonly and "readonly" in str(exc):
            raise ReadOnlyError(write_open_advice(
                path,
                f"{path}: cannot be read without write access ({exc}): a hot journal beside it (a writer was killed "
                "mid-commit) needs rolling back. Open it once where it is writable (reportdb.open(path, 'a')), then "
                "read it"
            )) from exc
        raise
    except BaseException:
        conn.close()
        raise
    return conn


def connect_plain(path: Path, *, check_same_thread: bool = True) -> sqlite3.Connection:
    """A plain ``sqlite3`` connection (autocommit, SQLite's errors as they are, no time bound: for reportdb's own
    long steps on a file it writes itself, a migration's copy or a checkpoint), hardened like every connection
    (:func:`_harden`: ``trusted_schema=OFF``), waiting :data:`BUSY_TIMEOUT_MS` for locks, and refused where the file or
    a side file is not a regular file (:func:`check_files`)."""
    check_files(path)
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=check_same_thread)
    try:
        _harden(conn, readonly=False)
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    except BaseException:
        conn.close()
        raise
    return conn


def _authorize(action: int, arg1: str | None, arg2: str | None, database: str | None, source: str | None) -> int:
    """SQLite's authorizer of every :func:`connect` connection, asked as each statement is prepared (not at each step, and
    statements are cached): deny a :data:`SCHEMA_DENIED_FUNCTIONS` call that comes from a view or trigger of the
    report (``source`` names it; the caller's own SQL has none). The statement then fails with "not authorized"
    (UnsafeReportError, :func:`translate`)."""
    if action == sqlite3.SQLITE_FUNCTION and source is not None and str(arg2).lower() in SCHEMA_DENIED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def _harden(conn: sqlite3.Connection, *, readonly: bool) -> None:
    """No report-supplied SQL with side effects: ``trusted_schema=OFF`` everywhere; on Python 3.12+ also SQLite's
    defensive mode and, for writes, no triggers at all (the open-time checks refuse them on every version)."""
    conn.execute("PRAGMA trusted_schema=OFF")
    if sys.version_info >= (3, 12):
        conn.setconfig(sqlite3.SQLITE_DBCONFIG_DEFENSIVE, True)
        if not readonly:
            conn.setconfig(sqlite3.SQLITE_DBCONFIG_ENABLE_TRIGGER, False)


#: Set by :func:`solo_writes` for the connections opened inside it.
_SOLO: contextvars.ContextVar[bool] = contextvars.ContextVar("reportdb_solo_writes", default=False)


@contextlib.contextmanager
def solo_writes() -> Iterator[None]:
    """Connections opened inside this block write in a rollback journal while they are the file's only writer.

    WAL writes every page twice (the log, then the checkpoint into the file); a rollback journal writes the pages a
    transaction appends once and journals only the few existing pages it changes (b-tree interior pages, page 1):
    a 64 MiB tensor cost 148 instead of 205 CPU-ms. SQLite's locks keep it safe with any number of writers and
    readers (a reader never sees half a transaction; a crashed writer's hot journal is rolled back by the next
    writable open), but in this mode a writer's commit waits for readers and readers wait for it. So such a
    connection hands the file over to WAL as soon as it sees another writer (:func:`.journal.share_file`, before each
    transaction), and any connection opened outside this block puts the file in WAL at its first write, as before;
    connections still in rollback mode follow the file into WAL at their next transaction (SQLite reads the mode
    from the file's header)."""
    token = _SOLO.set(True)
    try:
        yield
    finally:
        _SOLO.reset(token)


def is_lock_error(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite saying another connection holds the lock (worth a retry, or a step to skip)."""
    return isinstance(exc, sqlite3.OperationalError) and error_kind(exc) == "busy"


def engine_for(conn: sqlite3.Connection, *, readonly: bool, before_write: Callable[[], None] | None = None) -> Engine:
    """A SQLAlchemy engine bound to ``conn``; its transactions start with BEGIN IMMEDIATE when writable, after
    ``before_write`` (which may set the journal mode: no transaction is open yet). SQLAlchemy is imported here, on
    first use, so commands that never need it (``reportdb info``, ``ls``) do not pay for its import."""
    from sqlalchemy import create_engine, event
    from sqlalchemy.pool import StaticPool

    # no reset on return: the pool's ROLLBACK would end whatever transaction the shared connection has then, a
    # Report's read snapshot included; a session ends its own transaction itself
    engine = create_engine("sqlite://", creator=lambda: conn, poolclass=StaticPool, pool_reset_on_return=None)
    begin = "BEGIN" if readonly else "BEGIN IMMEDIATE"

    @event.listens_for(engine, "begin")
    def _begin(connection) -> None:  # type: ignore[no-untyped-def]
        if before_write is not None:
            before_write()
        connection.exec_driver_sql(begin)

    return engine
