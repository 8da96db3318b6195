"""The connection a Report holds and its read transactions: one around the statements of a read (:func:`snapshot`),
the snapshot a read-only Report keeps across its reads (:class:`ReportConnection`), the thread that ends a held
snapshot once it is old enough (:class:`Reaper`), so no Report holds a lock on its file for long, and the caller's
own transactions (``batch``, ``session``, ``connection``). ``reportdb.report.Report`` is built on
:class:`ReportConnection`; nothing here reads a tensor.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ClassVar, Iterator, Literal, Protocol

from .errors import CorruptionError, QueryTimeoutError, ReadOnlyError, ResourceLimitError, SchemaError
from . import recognize
from .store import blobs, engine as engine_mod, journal, rows as rows_mod, schema, windows

if TYPE_CHECKING:  # pragma: no cover
    from sqlalchemy import Engine
    from sqlalchemy.orm import Session, sessionmaker

Mode = Literal["r", "a"]


class Expiring(Protocol):
    """What the reaper asks of a Report (:class:`ReportConnection`): to end its snapshot, unless a read holds it."""

    def _expire(self) -> bool: ...


class Reaper:
    """One daemon thread for the whole process that ends every Report's held read transaction once it is
    ``seconds()`` old (``reportdb.report.SNAPSHOT_SECONDS``), so a Report left idle (a viewer between clicks, a
    notebook) never holds a lock on its file for longer than that. Started at the first snapshot; it sleeps while no Report holds one. Reports are kept by
    weak reference: one dropped without ``close()`` is collected as before (its connection's locks go with it)."""

    def __init__(self, seconds: Callable[[], float]) -> None:
        self._seconds = seconds  # how long a snapshot is held, asked at each look
        self.reset()

    def seconds(self) -> float:
        """How long a snapshot is held, as of now."""
        return self._seconds()

    def reset(self) -> None:
        """Forget the thread and every Report (a forked child has neither)."""
        self._cond = threading.Condition(threading.Lock())
        self._due: dict[int, tuple[float, weakref.ref[Expiring]]] = {}
        self._started = False
        self._wake = float("inf")  # when the thread looks next (monotonic time)

    def schedule(self, report: Expiring, at: float) -> None:
        """End ``report``'s snapshot at monotonic time ``at`` (or soon after, when a read is holding the Report then)."""
        with self._cond:
            if not self._started:
                threading.Thread(target=self._run, name="reportdb-snapshots", daemon=True).start()
                self._started = True
            if at < self._wake:  # sooner than the thread would look: wake it
                self._cond.notify()
            self._due[id(report)] = (at, weakref.ref(report))

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due:
                    self._wake = float("inf")
                    self._cond.wait()
                now = time.monotonic()
                self._wake = min(at for at, _ in self._due.values())
                if self._wake > now:
                    self._cond.wait(self._wake - now)
                    continue
                due = [(key, ref) for key, (at, ref) in self._due.items() if at <= now]
                for key, _ in due:
                    del self._due[key]
            for key, ref in due:
                report = ref()
                if report is not None and not report._expire():
                    with self._cond:  # a read holds the Report: look again a snapshot's time later
                        self._due.setdefault(key, (time.monotonic() + self._seconds(), ref))


@contextlib.contextmanager
def snapshot(conn: sqlite3.Connection) -> Iterator[None]:
    """One read transaction around the statements of a read, unless one is open already (the Report's own snapshot,
    ``Report._renew``, or ``batch()``): SQLite then
    takes and checks its shared lock once instead of once per statement (most of a window's SQL time), and every row read comes from one state of the file."""
    if conn.in_transaction:
        yield
        return
    conn.execute("BEGIN")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    if conn.in_transaction:
        conn.execute("COMMIT")


class _Reading:
    """``ReportConnection._reading``: a class rather than a generator, as every read enters one (a generator-based
    context manager costs measurably more per read, benchmarks/NOTES.md). Entering renews the Report's snapshot
    where it keeps one (``ReportConnection._renew``)."""

    __slots__ = ("report", "what")

    def __init__(self, report: ReportConnection, what: str) -> None:
        self.report, self.what = report, what

    def __enter__(self) -> sqlite3.Connection:
        report = self.report
        report._lock.acquire()
        report._reads += 1
        if report._hold and report._held_until <= time.monotonic() and not report._raw:
            try:
                try:
                    report._renew()
                except sqlite3.OperationalError as exc:
                    if report._reads > 1 or not report._reconnects(exc):  # an outer read holds the connection
                        raise
                    report._renew()  # on the new connection, once
            except BaseException as exc:
                self.__exit__(type(exc), exc, None)  # releases the lock; raises a SQLite error as what it stands for
                raise
        return report._conn

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        report = self.report
        try:
            if isinstance(exc, sqlite3.OperationalError) and report._reads == 1 and not report._depth | report._raw:
                report._reconnects(exc)  # this read failed; the next one runs on a connection that can open the file
        finally:
            report._reads -= 1
            report._lock.release()
        what = self.what
        if isinstance(exc, sqlite3.Error):
            mapped = engine_mod.translate(exc, self.report.path, what=what)
            assert mapped is not None
            raise mapped from exc
        if isinstance(exc, (CorruptionError, QueryTimeoutError)) and what not in str(exc):
            raise type(exc)(f"{what}: {exc}") from exc
        if isinstance(exc, MemoryError):
            raise ResourceLimitError(
                f"{self.report.path}: {what}: reading it needs more memory than this process can have; read a window "
                "of it instead (report.tensor(tensor_id, window=np.s_[:64]), which costs memory in proportion to the "
                "window)"
            ) from exc


class ReportConnection:
    """What a Report holds to use its file: the connection and the lock every use of it takes, the read snapshot a
    read-only Report keeps (:meth:`_renew`) with the rows and blocks it remembers while the file is unchanged, and
    the caller's own transactions. ``reportdb.report.Report`` opens the file; :meth:`_attach` takes what it opened."""

    #: The thread that ends this kind of Report's snapshots, which also says how long one is held
    #: (``reportdb.report``'s, whose time is ``reportdb.report.SNAPSHOT_SECONDS``).
    _reaper: ClassVar[Reaper]

    _conn: sqlite3.Connection
    schema_revision: str | None
    _wal: bool  # this connection has put the file in WAL mode (else at its first write)
    _engine: Engine | None  # made by session(), on first use: SQLAlchemy's ORM is slow to import
    _sessions: sessionmaker[Session] | None
    _tables: set[str]  # the file's table names, as SQLite compares names
    _has_codec: bool  # False for an older schema read as it is
    _has_block_crc: bool  # schema 0005 on: windows check only the blocks they read
    _address: str | None  # the file's content address kind, asked when first written or verified
    _verified: windows.VerifiedBlocks  # blocks this Report has checked: read again without a crc
    _memo: rows_mod.ReadMemo  # rows read and checked, while the file is unchanged
    _parsed: rows_mod.ParsedCache  # specs and shapes decoded, by their stored text: each parsed once

    def __init__(self, path: Path, mode: Mode) -> None:
        self.path = path
        self.mode = mode
        self._lock = threading.RLock()
        self._depth = 0
        self._hold = False  # whether reads keep a snapshot (set once the file is open: mode "r", not WAL)
        self._held = False  # this Report's own snapshot is open now (:meth:`_renew`)
        self._held_until = 0.0  # monotonic time it ends (0: none held)
        self._raw = 0  # depth of connection() blocks: reads inside one begin no snapshot (the caller's SQL runs as is)
        self._reads = 0  # depth of _reading() blocks: only the outermost may replace the connection (_reconnects)
        self._closed = False

    def _attach(self, conn: sqlite3.Connection, revision: str | None, new_file: bool) -> None:
        """Take the connection ``schema.open_database`` made and learn what the file holds."""
        self._conn, self.schema_revision = conn, revision
        self._wal = new_file
        self._engine = None
        self._sessions = None
        self._tables = {schema.folded(name) for name in self._table_names()}
        self._has_codec = "rdb_chunk" in self._tables and any(
            r[1] == "codec" for r in self._conn.execute("PRAGMA table_info(rdb_chunk)")
        )
        self._has_block_crc = "rdb_chunk_crc" in self._tables
        self._address = None
        self._verified = windows.VerifiedBlocks()
        self._memo = rows_mod.ReadMemo(self._verified)
        self._parsed = rows_mod.ParsedCache()
        self._hold = self.mode == "r"

    def _start_writing(self) -> None:
        """Put the file in WAL mode before this connection's first write transaction (an open that writes nothing
        leaves the file as it was; ``close`` puts it back in rollback-journal mode)."""
        if not self._wal:
            journal.start_wal(self._conn)
            self._wal = True

    def _table_names(self) -> set[str]:
        return {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}

    def session(self) -> Session:
        """An ORM session on this report (models in ``reportdb.models``); commit it yourself.

        The SQLAlchemy engine, on this report's own connection, is made at the first call: a Report used only for
        tensors and counts (``reportdb info``, ``ls``) never imports the ORM."""
        with self._lock:
            if self._sessions is None:
                from sqlalchemy.orm import sessionmaker

                self._engine = engine_mod.engine_for(  # read only: the session's transaction is its own, not a snapshot
                    self._conn, readonly=self.mode == "r", before_write=self._start_writing if self.mode == "a" else self._release
                )
                self._sessions = sessionmaker(bind=self._engine)
                # SQLAlchemy's first connect ends with a ROLLBACK on this shared connection: run it here, under the
                # lock and with no snapshot open, so it cannot race the reaper ending one (nor end one a read holds)
                self._end_snapshot()
                self._engine.connect().close()
            return self._sessions()

    @contextlib.contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """The report's raw ``sqlite3`` connection (autocommit mode), held exclusively for the block, for SQL the
        API does not cover: bulk rows into report tables, PRAGMAs, ad-hoc queries. Inside ``batch()`` the
        statements join its transaction; outside, each commits on its own (a snapshot this Report keeps is ended first).
        Tensor tables are the API's to write."""
        with self._lock:
            self._release()
            self._raw += 1
            try:
                yield self._conn
            finally:
                self._raw -= 1

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Group many writes into one transaction (much faster for small tensors); all or nothing."""
        self._check_writable()
        with self._lock:
            outer = self._depth == 0
            if outer:
                self._start_writing()
                self._conn.execute("BEGIN IMMEDIATE")
            self._depth += 1
            try:
                yield
            except BaseException as exc:
                self._depth -= 1
                if outer and self._conn.in_transaction:  # SQLite rolled back itself on a full disk or an I/O error
                    self._conn.execute("ROLLBACK")
                self._raise_mapped(exc)
                raise
            self._depth -= 1
            if outer:
                try:
                    self._conn.execute("COMMIT")
                except BaseException as exc:
                    if self._conn.in_transaction:  # a failed COMMIT leaves the transaction open: all or nothing
                        self._conn.execute("ROLLBACK")
                    self._raise_mapped(exc)
                    raise

    def _raise_mapped(self, exc: BaseException) -> None:
        """Raise the ReportDBError a write's SQLite error means whoever wrote (a full disk, an I/O error, damage, a
        closed report: ``engine.translate(only_own=True)``); return for any other exception, to be raised as it is."""
        if isinstance(exc, sqlite3.Error):
            mapped = engine_mod.translate(exc, self.path, what="writing", only_own=True)
            if mapped is not None:
                raise mapped from exc

    def _reading(self, what: str) -> _Reading:
        """The connection, held for the block, with every SQLite error in it raised as the ReportDBError it stands
        for (damage, a timeout, a schema not laid out as expected), naming ``what`` (a table or a tensor)."""
        return _Reading(self, what)

    def _renew(self) -> None:
        """Begin this Report's snapshot, ending an expired one first (under ``_lock``, from ``_reading``).

        The snapshot is a read transaction kept open across reads for ``self._reaper.seconds()`` (``SNAPSHOT_SECONDS``): SQLite then takes its
        file locks once for many reads instead of at every statement, and the rows and blocks this Report remembers
        (``rows.ReadMemo``) are checked against ``PRAGMA data_version`` once per snapshot instead of once per read. It
        can never serve stale data: while it holds its shared lock on a rollback-journal file, no other connection can
        commit (a writer waits for it to end; SQLite's pending lock then keeps new snapshots back, so a writer is not
        starved). In WAL mode a snapshot would go on seeing the file as it was while a writer commits, so a WAL file
        read by this Report keeps none: each read is its own transaction, as in mode "a" (whose writes a snapshot
        would collide with). Within a transaction of the caller's (``session()``, a ``BEGIN`` in ``connection()``)
        reads join it and none is begun."""
        conn = self._conn
        self._end_snapshot()
        if conn.in_transaction:
            return
        conn.execute("BEGIN")
        try:
            self._memo.sync(conn)  # its first read takes the shared lock: the file as of now, for the whole snapshot
            wal = journal.journal_mode(conn) == "wal"
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        if wal:
            self._hold = False
            conn.execute("ROLLBACK")
            return
        self._held = True
        self._held_until = time.monotonic() + self._reaper.seconds()
        self._verified.handles.keep(conn)  # chunks read in this snapshot keep their blob handles until it ends
        self._reaper.schedule(self, self._held_until)

    def _end_snapshot(self) -> None:
        """End this Report's snapshot if one is open (under ``_lock``): a read transaction, so a rollback, which cannot
        fail for want of a lock, releases it."""
        if self._held:
            self._held, self._held_until = False, 0.0
            self._verified.handles.close()  # open blob statements would keep the read transaction open
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")

    def _release(self) -> None:
        """End this Report's snapshot, taking ``_lock`` (before the caller's own SQL: ``connection()``, a session)."""
        with self._lock:
            self._end_snapshot()

    def _expire(self) -> bool:
        """The reaper's call: end the snapshot if its time is up. False when a read holds the Report right now (the
        reaper looks again later; never waits here, so one busy Report does not hold back the others').

        Its ROLLBACK runs in the reaper's thread, holding SQLite's connection mutex while the authorizer calls back
        into Python for the GIL; a statement run on the connection at that moment without ``_lock`` would hold the GIL
        and wait for that mutex: both threads stuck for good. So every statement on ``_conn`` runs under ``_lock``."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._held and self._held_until <= time.monotonic():
                self._end_snapshot()
        except sqlite3.Error:  # a read transaction's rollback fails only on a closed connection, which holds no lock
            self._held, self._held_until = False, 0.0  # (and the reaper thread, every Report's, must live on)
        finally:
            self._lock.release()
        return True

    def _reconnects(self, exc: sqlite3.OperationalError) -> bool:
        """After ``exc``, open the file afresh in place of a read-only connection that SQLite can no longer open it
        through (under ``_lock``); whether it did.

        A read-only connection made for a rollback-journal file reads through a writer's ``-shm`` once the writer
        puts the file in WAL mode (``files.readonly_uri``). Should the writer then close while this connection holds
        no lock, SQLite folds the WAL in and deletes the ``-shm`` but leaves the header saying WAL: this connection
        meets "unable to open database file" at every read from then on, while a new one reads the file as it now
        is. Nothing is remembered across: the rows and blocks checked are checked again."""
        if self.mode != "r" or self._closed or engine_mod.error_kind(exc) != "cantopen":
            return False
        opened = schema.open_database(self.path, writing=False, existed=True)
        try:
            recognize.check(opened.conn, self.path, empty_ok=False)
        except BaseException:
            opened.conn.close()
            raise
        self._end_snapshot()
        if self._engine is not None:
            self._engine.dispose()  # its sessions were on the old connection (StaticPool)
        self._conn.close()
        self._attach(opened.conn, opened.revision, opened.new_file)
        return True

    def _sync(self, conn: sqlite3.Connection) -> None:
        """Make the rows and blocks this Report remembers current for the read about to run: once per snapshot where
        one is held (done by :meth:`_renew`), else in each read transaction."""
        if not self._held:
            self._memo.sync(conn)

    def _check_writable(self) -> None:
        if self.mode != "a":
            raise ReadOnlyError(f"{self.path} is open read-only; open it with mode='a' to write")

    def _require_store(self) -> None:
        if "rdb_tensor" not in self._tables:
            raise SchemaError(
                f"{self.path} predates reportdb's tensor tables; run `reportdb upgrade {self.path}` or open it with mode='a'"
            )

    def _address_kind(self) -> str:
        """The file's content address kind (``blobs.address_kind``): fixed when its schema reached 0006, so asked once
        (under the lock, as every statement on the connection: see :meth:`_expire`)."""
        if self._address is None:
            with self._reading("table rdb_meta") as conn:
                self._address = blobs.address_kind(conn)
        return self._address
