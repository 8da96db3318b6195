"""How a file being written keeps its journal and pages: WAL or a rollback journal while one writer works alone
(:func:`~reportdb.store.engine.solo_writes`), the hand-over to WAL when another writer appears, and the finish that
leaves one self-contained file with pages fitted to its size.
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import TYPE_CHECKING, Iterator

from .._lazy import lazy_module
from ..errors import DiskError, QueryTimeoutError, ResourceLimitError
from .engine import BUSY_TIMEOUT_MS, PAGE_SIZE, is_lock_error, quoted

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
else:  # numpy is imported on first use (the page-size estimate of a finished file)
    np = lazy_module("numpy", globals(), "np")

#: The rollback journal of a file written solo: kept between transactions with its header zeroed at each commit
#: (the cheapest small commit of the three journal modes, benchmarks/NOTES.md); DELETE again when the writer closes,
#: so no side file stays.
SOLO_JOURNAL = "persist"


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
