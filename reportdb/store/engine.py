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
import os
import sqlite3
import stat
import sys
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from .._lazy import lazy_module

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
else:  # numpy is imported on first use: opening a report and reading its metadata need none
    np = lazy_module("numpy", globals(), "np")

from ..errors import (
    ConstraintError, CorruptionError, DiskError, NotAReportError, QueryTimeoutError, ReadOnlyError, ReportClosedError,
    ReportDBError, ReportLockedError, ResourceLimitError, SchemaError, UnsafeReportError, excerpt,
)

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
#: The side files SQLite may open beside a database: every one must be a regular file (:func:`check_files`).
SIDE_FILES = ("-journal", "-wal", "-shm")
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
            code = getattr(exc, "sqlite_errorcode", None)
            if (code & 0xFF if code is not None else None) != 14 and "unable to open database file" not in str(exc):
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
          18: "toobig", 19: "constraint", 21: "closed", 23: "denied", 26: "notadb"}
#: The same from the message text, where Python (3.10) gives no code: the first phrase found wins.
_PHRASES = (("malformed", "corrupt"), ("not a database", "notadb"), ("disk is full", "full"),
            ("disk i/o", "disk"), ("locked", "busy"), ("busy", "busy"), ("too big", "toobig"),
            ("out of memory", "memory"), ("readonly database", "readonly"), ("interrupt", "interrupt"),
            ("closed database", "closed"), ("constraint failed", "constraint"), ("not authorized", "denied"))


def error_kind(exc: sqlite3.Error) -> str:
    """What SQLite error ``exc`` means: ``corrupt`` (damaged), ``notadb`` (not a SQLite database), ``full``, ``disk`` (I/O),
    ``busy`` (locked), ``constraint``, ``closed`` (misuse of a closed connection), ``toobig``, ``memory``,
    ``readonly``, ``interrupt``, ``denied`` (by :func:`_authorize`) or ``other`` (a statement the schema cannot run). By SQLite's result code where
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
    return SchemaError(
        f"{where}: the report's tables are not laid out as this reportdb expects ({message}); was the file changed "
        "by another tool? `reportdb verify` checks it"
    )


def quoted(name: str) -> str:
    """``name`` as an SQL identifier (a table or column name from someone else's file): in double quotes, each
    double quote doubled."""
    return '"' + name.replace('"', '""') + '"'


def _side(path: Path, suffix: str) -> Path:
    return Path(f"{path}{suffix}")


def readonly_uri(path: Path) -> str:
    """The URI that reads ``path`` without writing or creating anything.

    A rollback-journal file opens with ``mode=ro&readonly_shm=1``: should a writer put it in WAL mode while this
    connection is open (:func:`share_file`), it reads through the writer's ``-shm`` without writing its read mark
    there (another process's connection; within one process SQLite shares one mapping of the ``-shm``). A WAL file
    (header bytes 18/19 == 2) would make ``mode=ro`` create ``-wal`` and ``-shm`` (or fail where the folder is not
    writable), so: with no side files, or an empty
    ``-wal`` and no ``-shm`` (no connection is live, all is in the file), it opens ``immutable=1``; with both
    side files it reads through the existing ``-shm`` opened read-only (``readonly_shm=1``), which also sees
    what a live writer has committed. A ``-wal`` holding content with no ``-shm`` to read it through cannot be
    read without creating a file: that is refused rather than silently reading stale data.
    """
    wal, shm = _side(path, "-wal"), _side(path, "-shm")
    base = path.resolve().as_uri()
    header = _header(path)
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
    return f"{base}?mode=ro&readonly_shm=1"


def _kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def check_files(path: Path) -> None:
    """Refuse a database, or a side file SQLite would open beside it (``-journal``, ``-wal``, ``-shm``), that is not a
    regular file: opening a FIFO blocks until someone writes to it (every command hung), and a device reads as
    anything (``/dev/zero`` read as an empty report). Looked at with ``stat``, which opens nothing: the database may be
    a symbolic link to a regular file (SQLite then keeps its side files beside the link's target, looked at too), a
    side file must be a regular file itself. UnsafeReportError names what was found and what to do."""
    try:
        found = path.stat()
    except FileNotFoundError:
        found = None
    except OSError as exc:
        raise ReportDBError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    if found is not None and not stat.S_ISREG(found.st_mode):
        raise UnsafeReportError(
            f"{path}: is {_kind_of(found.st_mode)}, not a regular file; reportdb reads a report only from a regular "
            "file (reading this one could block forever or read endless bytes). Check what put it there"
        )
    real = os.path.realpath(path) if found is not None and os.path.islink(path) else str(path)
    for base in {str(path), real}:
        for suffix in SIDE_FILES:
            try:
                mode = os.lstat(base + suffix).st_mode
            except OSError:
                continue
            if not stat.S_ISREG(mode):
                raise UnsafeReportError(
                    f"{base}{suffix}: is {_kind_of(mode)}, not a regular file, where SQLite keeps the database's "
                    f"{suffix[1:]} file; opening it could block forever or write elsewhere. Remove it (nothing of the "
                    f"report is in it), then open {path} again"
                )
        named = _super_journal(base + "-journal")
        if named is not None:
            raise UnsafeReportError(
                f"{base}-journal: names {excerpt(named.decode('utf-8', 'replace'))} as its super-journal (a transaction "
                "across several databases, which reportdb never writes): rolling it back makes SQLite read that file "
                "and delete it, wherever it is. If you trust the report, remove its -journal and run `reportdb verify` "
                "(the unfinished transaction the journal would undo may be left half-written); else ask for a copy "
                "made after its writer finished"
            )


#: The magic number that begins every journal header and ends a super-journal record (SQLite's pager.c).
_JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")


def _super_journal(journal: str) -> bytes | None:
    """The super-journal name a rollback journal ends with, or None. SQLite (``readSuperJournal``) finds it at the
    journal's end: the name, its length, its checksum and the journal magic; a journal with one is rolled back by
    reading the named file as a list of journals and then deleting it. Read without blocking; every name SQLite could
    take is found (its page-number and checksum checks are not needed to refuse one)."""
    try:
        fd = os.open(journal, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return None  # no journal (or none readable, which SQLite could not roll back either)
    try:
        found = os.fstat(fd)
        size = found.st_size
        if not stat.S_ISREG(found.st_mode) or size < 20:
            return None
        tail = os.pread(fd, 16, size - 16)
        length = int.from_bytes(tail[:4], "big")
        if tail[8:] != _JOURNAL_MAGIC or not 0 < length <= min(size - 20, 1 << 16):
            return None
        return os.pread(fd, length, size - 16 - length).rstrip(b"\0") or None
    finally:
        os.close(fd)


def _header(path: Path) -> bytes:
    """The first 100 bytes of the database file, read without blocking (``O_NONBLOCK``: a FIFO swapped in after
    :func:`check_files` looked would block an ordinary open)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafeReportError(f"{path}: is not a regular file; reportdb reads a report only from a regular file")
        return os.read(fd, 100)
    finally:
        os.close(fd)


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
            raise ReadOnlyError(
                f"{path}: cannot be read without write access ({exc}): a hot journal beside it (a writer was killed "
                "mid-commit) needs rolling back. Open it once where it is writable (reportdb.open(path, 'a')), then "
                "read it"
            ) from exc
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
#: The rollback journal of a file written solo: kept between transactions with its header zeroed at each commit
#: (the cheapest small commit of the three journal modes, benchmarks/NOTES.md); DELETE again when the writer closes,
#: so no side file stays.
SOLO_JOURNAL = "persist"


@contextlib.contextmanager
def solo_writes() -> Iterator[None]:
    """Connections opened inside this block write in a rollback journal while they are the file's only writer.

    WAL writes every page twice (the log, then the checkpoint into the file); a rollback journal writes the pages a
    transaction appends once and journals only the few existing pages it changes (b-tree interior pages, page 1):
    a 64 MiB tensor cost 148 instead of 205 CPU-ms. SQLite's locks keep it safe with any number of writers and
    readers (a reader never sees half a transaction; a crashed writer's hot journal is rolled back by the next
    writable open), but in this mode a writer's commit waits for readers and readers wait for it. So such a
    connection hands the file over to WAL as soon as it sees another writer (:func:`share_file`, before each
    transaction), and any connection opened outside this block puts the file in WAL at its first write, as before;
    connections still in rollback mode follow the file into WAL at their next transaction (SQLite reads the mode
    from the file's header)."""
    token = _SOLO.set(True)
    try:
        yield
    finally:
        _SOLO.reset(token)


def journal_mode(conn: sqlite3.Connection) -> str:
    """The connection's journal mode, lower case (``wal``, ``delete``, ``truncate``...)."""
    return str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()


def set_write_mode(conn: sqlite3.Connection, *, new_file: bool) -> None:
    """synchronous=NORMAL; a new file also gets 64 KiB pages (4 KiB pages cap writes) and WAL at once, or, on a
    :func:`solo_writes` connection, a rollback journal. An existing file switches at its first write
    (:func:`start_wal`), so an open that writes nothing changes nothing."""
    if new_file:
        conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
        start_wal(conn)
    conn.execute("PRAGMA synchronous=NORMAL")
    fit_cache(conn)


def fit_cache(conn: sqlite3.Connection) -> None:
    """Set the connection's page cache again to the size it has (a negative size is in KiB), so SQLite counts it in
    the file's own pages. A size set before a new file's 64 KiB page size was known (or before a repage) stays
    counted in 4 KiB pages: 16x the pages, and the cache grew by every page a transaction wrote instead of reusing
    its buffers (measured: 64 MiB more memory and ~16K page faults per 64 MiB tensor written, up to 1 GiB)."""
    size = conn.execute("PRAGMA cache_size").fetchone()[0]
    conn.execute(f"PRAGMA cache_size={int(size)}")


def start_wal(conn: sqlite3.Connection) -> None:
    """Ready the file for writing before this connection's first write transaction: WAL (readers do not block the
    writer, commits append), or, on a :func:`solo_writes` connection of a file not in WAL mode already, a rollback
    journal (:data:`SOLO_JOURNAL`). A small file finished with small pages (:func:`finish_writing`) first gets
    :data:`PAGE_SIZE` pages back, so a report that grows again is written at full speed."""
    mode = journal_mode(conn)
    if mode != "wal":
        _repage(conn, PAGE_SIZE)
    if getattr(conn, "solo", False) and mode != "wal":
        if mode != SOLO_JOURNAL:
            conn.execute(f"PRAGMA journal_mode={SOLO_JOURNAL}")
        return
    conn.execute("PRAGMA journal_mode=WAL")


def share_file(conn: sqlite3.Connection) -> bool:
    """Before a write transaction of a :func:`solo_writes` connection: hand the file over to WAL if another
    connection is writing it now, and give a small file its :data:`PAGE_SIZE` pages back if another writer's close
    repaged it meanwhile. Returns whether the file is in WAL mode.

    The probe is a ``BEGIN IMMEDIATE`` that does not wait: it fails only while another connection holds a write
    transaction (readers never make it fail). The switch to WAL is itself a small write transaction that SQLite
    skips, answering the old mode, while another connection holds a lock: then this raises sqlite3's "database is
    locked" for the caller to retry with backoff, and the connection, no longer solo, tries the switch again at
    each call until the file is in WAL. It stays there until the file's last connection closes."""
    if journal_mode(conn) == "wal":
        if getattr(conn, "solo", False):
            conn.solo = False  # type: ignore[attr-defined]
        return True
    if conn.in_transaction or not (getattr(conn, "solo", False) or getattr(conn, "handing_over", False)):
        return False
    if not conn.handing_over:  # type: ignore[attr-defined]
        if not _other_writer(conn):
            _repage(conn, PAGE_SIZE)
            return False
        conn.solo, conn.handing_over = False, True  # type: ignore[attr-defined]
    if str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower() != "wal":
        raise sqlite3.OperationalError("database is locked (another connection holds a lock; WAL not yet on)")
    conn.handing_over = False  # type: ignore[attr-defined]
    return True


def is_lock_error(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite saying another connection holds the lock (worth a retry, or a step to skip)."""
    return isinstance(exc, sqlite3.OperationalError) and error_kind(exc) == "busy"


@contextlib.contextmanager
def not_waiting(conn: sqlite3.Connection) -> Iterator[None]:
    """Statements in this block fail at once on a lock another connection holds (``busy_timeout=0``), for the
    optional steps that are skipped rather than waited for; the usual :data:`BUSY_TIMEOUT_MS` again after it."""
    conn.execute("PRAGMA busy_timeout=0")
    try:
        yield
    finally:
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")


def _other_writer(conn: sqlite3.Connection) -> bool:
    """Whether another connection holds a write transaction on the file now: a ``BEGIN IMMEDIATE`` that does not
    wait fails (readers never make it fail)."""
    with not_waiting(conn):
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if not is_lock_error(exc):
                raise
            return True
        conn.execute("ROLLBACK")
        return False


#: A finished report of at most this many bytes is always rewritten with :data:`SMALL_PAGE_SIZE` pages when its
#: writer closes (a VACUUM: a few ms; rowids kept, see :func:`_repage`). 64 KiB pages make
#: writes fast but cost a page per table and index, ~4 MB for a report's ~60, which a report of two small tensors must
#: not carry (sizes and ingest speeds by page size: benchmarks/NOTES.md).
SMALL_FILE = 8 << 20
#: A larger finished report, up to this size, is rewritten too where :func:`_small_pages_saving` expects it to shrink
#: by :data:`REPAGE_GAIN` of its size. A VACUUM costs a fraction of what writing the report cost, and shrinks reports
#: of small tensors by about a third and reports of MiB-sized tensors by a few percent (benchmarks/NOTES.md). So the
#: rewrite is paid
#: where it gives back at least a tenth of the file, and never for more than a few seconds of VACUUM (which also needs
#: the file's size in temporary space). A file written again gets its 64 KiB pages back (:func:`start_wal`) only up to
#: :data:`SMALL_FILE`: a larger one (a legacy report ttnn wrote with 4 KiB pages, say) is appended to as it is.
REPAGE_MAX = 256 << 20
REPAGE_GAIN = 0.10
#: The bound on the rewrite's statements (instead of :data:`STATEMENT_TIMEOUT`): past it the rewrite is dropped.
REPAGE_SECONDS = 120.0
SMALL_PAGE_SIZE = 4096


def _repage(conn: sqlite3.Connection, page_size: int) -> None:
    """Rewrite the file in rollback-journal mode with ``page_size`` pages, all or nothing: to larger pages a file of
    at most :data:`SMALL_FILE` bytes, to smaller ones such a file or one of at most :data:`REPAGE_MAX` bytes that
    would shrink by :data:`REPAGE_GAIN`. Skipped silently when SQLite refuses it (another connection's lock, say); once
    done, the page cache is counted in the new pages (:func:`fit_cache`).

    One ``VACUUM``: a single transaction under the file's exclusive lock, so a commit of another writer is either in
    the copy or waits for it (a copy made aside and copied back could overwrite a commit made in between). A VACUUM
    renumbers the rowids of a table without a declared key and without an index, and where such a table holds rows
    (the legacy report tables: a Writer's ``tensors`` rows, say) the rowid is the row's identity: those tables get an
    empty index for the rewrite (``WHERE 0``: no entries), with which SQLite copies rows with their rowids, dropped
    after it. A file with a table this SQLite cannot read (a virtual one) is left alone."""
    found = conn.execute("PRAGMA page_size").fetchone()[0]
    if found == page_size or conn.in_transaction:
        return
    size = found * conn.execute("PRAGMA page_count").fetchone()[0]
    if size > (REPAGE_MAX if page_size < found else SMALL_FILE):
        return
    if page_size < found and size > SMALL_FILE and _small_pages_saving(conn, found, page_size) < REPAGE_GAIN * size:
        return
    keyless = _keyless_tables(conn)
    if keyless is None:
        return
    bound = getattr(conn, "timeout", None)
    if bound is not None:  # a rewrite of up to REPAGE_MAX bytes may take longer than one statement's usual bound
        conn.timeout = max(bound, REPAGE_SECONDS)  # type: ignore[attr-defined]
    try:
        with not_waiting(conn), _rowids_kept(conn, keyless):
            conn.execute(f"PRAGMA page_size={page_size}")
            conn.execute("VACUUM")
        fit_cache(conn)
    except (QueryTimeoutError, DiskError, ResourceLimitError, sqlite3.OperationalError):
        # All or nothing, and only an optimization: the file is as it was. Locked by another connection, out of
        # temporary space, or a table SQLite cannot copy here (a collation this process lacks): written as it is.
        pass
    finally:
        if bound is not None:
            conn.timeout = bound  # type: ignore[attr-defined]


#: The names of the empty indexes :func:`_rowids_kept` adds for a VACUUM (a killed writer's are dropped by the next).
_KEEP_ROWIDS = "rdb_keep_rowids_"


@contextlib.contextmanager
def _rowids_kept(conn: sqlite3.Connection, keyless: list[str]) -> Iterator[None]:
    """An empty index (``WHERE 0``) on each of the ``keyless`` tables that has none while the block runs: SQLite's
    VACUUM copies the rows of a table with an index with their rowids, and renumbers them (closing gaps) otherwise."""
    stale = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type='index' AND substr(name, 1, ?) = ?", (len(_KEEP_ROWIDS), _KEEP_ROWIDS)
    ).fetchall()]
    bare = [name for name in keyless if not conn.execute(f"PRAGMA index_list({quoted(name)})").fetchall()]
    made = [f"{_KEEP_ROWIDS}{n}" for n in range(len(bare))]
    if not (stale or made):
        yield
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        for index in stale:
            conn.execute(f"DROP INDEX {quoted(index)}")
        for index, table in zip(made, bare):
            column = conn.execute(f"PRAGMA table_info({quoted(table)})").fetchone()[1]
            conn.execute(f"CREATE INDEX {quoted(index)} ON {quoted(table)}({quoted(column)}) WHERE 0")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    try:
        yield
    finally:
        if made:
            with contextlib.suppress(sqlite3.OperationalError):  # a lock: dropped by the next rewrite instead
                conn.execute("BEGIN IMMEDIATE")
                for index in made:
                    conn.execute(f"DROP INDEX IF EXISTS {quoted(index)}")
                conn.execute("COMMIT")
            if conn.in_transaction:
                conn.execute("ROLLBACK")


def _keyless_tables(conn: sqlite3.Connection) -> list[str] | None:
    """The tables holding rows whose only identity is their rowid (no declared primary key: the legacy report
    tables, whose rowids the visualizer and reportdb's models read), which a VACUUM could renumber; None where a
    table cannot be read by this SQLite (a virtual one)."""
    found = []
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'").fetchall():
        table = quoted(name)
        if any(r[5] for r in conn.execute(f"PRAGMA table_info({table})").fetchall()):
            continue  # a declared key: the rowid itself (INTEGER PRIMARY KEY, kept), or a key of its own
        try:
            if conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is not None:
                found.append(name)
        except sqlite3.OperationalError:
            return None
    return found


def _record_space(payload: np.ndarray, page: int) -> np.ndarray:
    """Bytes table rows of ``payload`` bytes take in a file of ``page``-byte pages: in their leaf page when they fit,
    else their local part plus whole overflow pages (SQLite's spill rule, file format section 1.6)."""
    largest = page - 35
    least = (page - 12) * 32 // 255 - 23
    local = least + (payload - least) % (page - 4)
    local = np.where(local > largest, least, local)
    spilled = local + -(-(payload - local) // (page - 4)) * page
    # A row never straddles leaf pages: rows of a third to a whole page leave the rest of theirs empty.
    per_leaf = np.maximum(1, (page - 8) // (payload + 4))
    return np.where(payload <= largest, page / per_leaf, spilled)


def _small_pages_saving(conn: sqlite3.Connection, page: int, small: int) -> int:
    """Bytes the file would shrink by with ``small`` instead of ``page`` pages, estimated without reading it: each
    b-tree's last, part-filled page (half a page each, on average), and each stored chunk's overflow pages, from the
    chunks' lengths (``length()`` of a blob reads its row's header only). It leaves out what it cannot see cheaply
    (b-trees smaller than a page save a whole one), so it errs small. Free pages count whole: the VACUUM drops them."""
    trees = conn.execute("SELECT count(*) FROM sqlite_master WHERE rootpage > 0").fetchone()[0]
    saving = trees * (page - small) // 2 + page * conn.execute("PRAGMA freelist_count").fetchone()[0]
    names = {str(r[0]).lower() for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()}
    if "rdb_chunk" in names:
        rows = conn.execute("SELECT length(data) + 48 FROM rdb_chunk WHERE data IS NOT NULL").fetchall()
        lengths = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        saving += int((_record_space(lengths, page) - _record_space(lengths, small)).sum())
    return saving


def finish_writing(conn: sqlite3.Connection) -> bool:
    """Put a file written in WAL mode (or in :data:`SOLO_JOURNAL` mode) back into DELETE mode, so the database is
    one self-contained file again (copyable alone, readable from read-only media), with small pages if it is small
    (:data:`SMALL_FILE`). Leaving WAL takes the last connection: while another one is open SQLite answers busy,
    which is accepted silently (that one finishes the file when it closes). Returns whether the file is now in
    rollback-journal mode."""
    mode = journal_mode(conn)
    if mode not in ("wal", SOLO_JOURNAL):
        return True
    try:
        with not_waiting(conn):
            done = str(conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0]).lower() == "delete"
    except sqlite3.OperationalError as exc:
        if is_lock_error(exc):
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
