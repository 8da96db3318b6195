"""``pull``: a report of the team store back into a self-contained SQLite report, exactly as it was pushed.

The file is built under a temporary name beside its destination (its tables from their stored ``CREATE`` text, their
rows, the chunks streamed out of the server with a binary ``COPY``, then the indexes), checked with ``check_store``
and only then linked into place: a failed or interrupted pull leaves nothing at the destination, and an existing file
there is never overwritten.

What comes out of a store is proven, not trusted (a store is shared: anyone with write access to it can change its
rows). The report's content digest, which push computed over its tables' definitions, rows and chunk addresses, is
computed again over what the server sends, and every chunk's bytes are checked against their crc32 and content
address as they arrive: a row edited in ``team_rows``, a table definition or chunk list changed, a byte of
``team_chunk.data`` flipped (even with its crc32 forged to match) fails the pull with a CorruptionError. The same
builder, without the chunk bytes, makes the private copy that a remote report reads through (``remote.py``; its
rows proven by the same digest, each chunk it fetches later by ``prove_chunk``).

The chunk bytes go from libpq's receive buffer into the file without a copy in between (a ``bytea`` loader that gives
memoryviews, ``zeroblob`` + ``blobopen``), through a SQLite page cache that holds two chunks, and the file is synced
as it grows (beside the writing): fresh 4 MiB buffers per chunk (page faults) and a large cache flushed at the end
cost more than the copies. Nothing the server sends back is trusted to size anything: names, table texts, column
lists, row parts and chunks each have a bound, checked (the server is asked not to send what exceeds it) before use.

In a store keeping chunk bytes in object storage (``objects.py``), the same rows come from ``team_object`` and each
chunk's bytes from its object, ``objects.FETCH_AHEAD`` fetched (and proven, in the fetching threads) ahead of the
one being written: an object's size is checked against its row before its body is read.
"""

from __future__ import annotations

import os
import queue
import shutil
import sqlite3
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from ..results import Result
from ..errors import CorruptionError, InvalidArgumentError, OutputPathError, ReportNotFoundError, excerpt
from ..store import blobs, codec as codec_mod
from . import objects, server, tables

if TYPE_CHECKING:  # pragma: no cover
    import psycopg

Progress = Callable[[int, int], None]
#: Chunks received and not yet written, at most (4 MiB each by default).
QUEUED_CHUNKS = 8
#: While chunks are written, the file is synced every SYNC_BYTES (on a thread beside the writing one, which goes on
#: writing), so that the final fsync before the file is linked into place has little left to write.
SYNC_BYTES = 32 << 20
#: SQLite's page cache while chunks are written (KiB), at least: they are written once, so a big cache only delays
#: them. It grows to hold the pages of the two largest chunks seen (``_write_cache_kib``): a chunk's ``zeroblob`` pages
#: must still be cached when its bytes are written over them, else SQLite writes the zeros out and reads them back.
WRITE_CACHE_KIB = 4096
#: Bounds on what the server sends back, checked before anything is sized from it: a store is data from others too.
MAX_TABLES = 100_000
MAX_COLUMNS = 32_767
MAX_NAME_BYTES = 4096
MAX_DDL_BYTES = 1 << 20
MAX_CHUNKS = 50_000_000


@dataclass
class PullResult(Result):
    name: str
    path: str
    chunks: int
    bytes: int
    seconds: float
    digest: str  # the content digest proven (hex), as push reported it


@dataclass(frozen=True)
class Found:
    """A published report of the store: its id and what its row says."""

    id: int
    name: str
    info: dict[str, Any]
    stored_bytes: int
    digest: bytes  # the content digest push computed (``push.snapshot``)


def find(conn: "psycopg.Connection[Any]", store: server.StoreURL, name: str) -> Found:
    """The published report called ``name``; ReportNotFoundError otherwise (a push still under way included)."""
    if not server.ensure_schema(conn, store, create=False):
        raise ReportNotFoundError(f"{store.display}: no report {name!r} (the store is empty)")
    with server.mapped(store, f"looking up {name!r}"), conn.transaction():
        row = conn.execute(
            "SELECT id, CASE WHEN octet_length(info::text) <= %s THEN info END, stored_bytes, digest FROM team_report"
            " WHERE name = %s AND state = 'ready'", (MAX_DDL_BYTES, name)
        ).fetchone()
    if row is None:
        raise ReportNotFoundError(f"{store.display}: no report {name!r}; `reportdb reports {store.display}` lists them")
    stored, digest = row[2], row[3]
    if type(row[0]) is not int or not (stored is None or type(stored) is int and stored >= 0) \
            or not isinstance(digest, bytes) or len(digest) != 32:
        raise CorruptionError(f"{store.display}: the row of report {name!r} is malformed; push the report again")
    return Found(row[0], name, row[1] if isinstance(row[1], dict) else {}, stored or 0, digest)


#: A report's chunk rows with their stored size; the bytes only when that size fits the row (else NULL, refused).
_CHUNKS_SQL = (
    "SELECT rc.chunk_id, rc.digest, rc.nbytes, rc.crc32, NULLIF(rc.codec, ''), octet_length(c.data)::int8,"
    " CASE WHEN octet_length(c.data) <= LEAST(rc.nbytes, {limit}) THEN {data} END FROM team_report_chunk rc"
    " JOIN team_chunk c ON c.digest = rc.digest AND c.codec = rc.codec AND c.crc32 = rc.crc32"
    " WHERE rc.report_id = {report_id} ORDER BY rc.chunk_id"
)


#: The same for a store keeping chunk bytes in object storage: the object's size from its ``team_object`` row, the
#: bytes fetched from the bucket (``_from_objects``).
_OBJECTS_SQL = (
    "SELECT rc.chunk_id, rc.digest, rc.nbytes, rc.crc32, NULLIF(rc.codec, ''), c.stored, NULL::bytea"
    " FROM team_report_chunk rc JOIN team_object c ON c.digest = rc.digest AND c.codec = rc.codec AND c.crc32 = rc.crc32"
    " WHERE rc.report_id = {report_id} ORDER BY rc.chunk_id"
)


def _from_objects(rows: Iterable[Any], bucket: objects.ObjectStore, address: str,
                  what: str) -> Iterator[tuple[Any, ...]]:
    """The chunk rows with their bytes fetched from ``bucket`` (``objects.FETCH_AHEAD`` in flight, in order); each
    row is checked (``_chunk_problem``) before its size bounds a fetch, the object's size against it, and its bytes
    (``prove_chunk``, by content address of kind ``address``) in the fetching thread, beside the other fetches."""

    def fetch(row: tuple[Any, ...]) -> bytes:
        problem = _chunk_problem(row, False)
        if problem is not None:
            raise CorruptionError(f"{what}: the store sent {problem}; refused (push the report again)")
        data = bucket.get(bucket.key(row[1], row[4] or "", row[3]), row[5], f"{what}, chunk {row[0]}")
        prove_chunk((*row[:6], data), address, what)
        return data

    copied = ((r[0], bytes(r[1]) if r[1] is not None else None, *r[2:6], None) for r in rows)  # views of the message
    for row, data in objects.ordered(copied, fetch):
        yield (*row[:6], data)


def _file_facts(found: Found, what: str) -> tuple[int, int]:
    """The page size and user_version the report file had (from its row's ``info``), checked."""
    page_size, user_version = found.info.get("page_size", 4096), found.info.get("user_version", 0)
    if type(page_size) is not int or page_size & (page_size - 1) or not 512 <= page_size <= 65536:
        raise CorruptionError(f"{what}: its stored page size {page_size!r} is not one SQLite has; push the report again")
    if type(user_version) is not int or not -(2**31) <= user_version < 2**31:
        raise CorruptionError(f"{what}: its stored user_version {user_version!r} is not a 32-bit number; push the report again")
    return page_size, user_version


def _table_defs(conn: "psycopg.Connection[Any]", found: Found, what: str) -> list[tables.TableDef]:
    """The report's tables and indexes as stored, each field checked (kinds, sizes, column lists) before use; the
    server sends no name or text above its bound (it sends its size instead, which is refused)."""
    rows = conn.execute(
        "SELECT ord, CASE WHEN octet_length(name) <= %(n)s THEN name END, octet_length(name), kind,"
        " CASE WHEN octet_length(ddl) <= %(d)s THEN ddl END, octet_length(ddl),"
        " CASE WHEN octet_length(columns::text) <= %(d)s THEN columns END, octet_length(columns::text), has_rowid"
        " FROM team_table WHERE report_id = %(id)s ORDER BY ord LIMIT %(limit)s",
        {"n": MAX_NAME_BYTES, "d": MAX_DDL_BYTES, "id": found.id, "limit": MAX_TABLES + 1},
    ).fetchall()
    if len(rows) > MAX_TABLES:
        raise CorruptionError(f"{what}: the store lists more than {MAX_TABLES} tables for it; refused")
    defs = []
    for expected, (ord_, name, name_len, kind, ddl, ddl_len, columns, columns_len, has_rowid) in enumerate(rows):
        label = f"{what}: stored table #{ord_}"
        if ord_ != expected:
            raise CorruptionError(f"{what}: its stored tables are not numbered 0, 1, 2...; push the report again")
        if not isinstance(name, str) or not name:
            raise CorruptionError(f"{label} has no usable name ({name_len} bytes, at most {MAX_NAME_BYTES}); refused")
        if kind not in ("table", "index", "chunks"):
            raise CorruptionError(f"{label} ({name!r}) is of unknown kind {kind!r}; refused")
        if (ddl is None and ddl_len is not None) or (ddl is None and name != "sqlite_sequence") or \
                (ddl is not None and not isinstance(ddl, str)):
            raise CorruptionError(f"{label} ({name!r}) has no usable definition ({ddl_len} bytes, at most "
                                  f"{MAX_DDL_BYTES}); refused")
        if columns is None and kind != "index" or columns is not None and not (
                isinstance(columns, list) and len(columns) <= MAX_COLUMNS
                and all(isinstance(c, str) and 0 < len(c) <= MAX_NAME_BYTES for c in columns)):
            raise CorruptionError(f"{label} ({name!r}) has no usable column list ({columns_len} bytes, at most "
                                  f"{MAX_COLUMNS} names); refused")
        if not isinstance(has_rowid, bool):
            raise CorruptionError(f"{label} ({name!r}) has no usable rowid flag ({has_rowid!r}); refused")
        defs.append(tables.TableDef(name, kind, ddl, tuple(columns or ()), has_rowid))
    return defs


def build(
    conn: "psycopg.Connection[Any]", store: server.StoreURL, found: Found, dest: Path, *, with_data: bool,
    progress: Progress | None = None, bucket: objects.ObjectStore | None = None,
) -> tuple[int, int]:
    """Restore the report into the new file ``dest`` (chunk bytes only ``with_data``, from ``bucket`` in a store
    keeping them there; else empty placeholders that a remote report fills on demand); returns (chunks, bytes of
    chunk data). The caller removes ``dest`` on failure.

    Every size the server sends back is checked before anything is sized from it (``_table_defs``, the rows' parts
    against ``tables.MAX_PART_BYTES``, each chunk against its row): a store is someone else's data too."""
    what = f"{store.display}: report {found.name!r}"
    page_size, user_version = _file_facts(found, what)
    sq = tables.new_database(dest, page_size, user_version)
    n_chunks = n_bytes = 0
    try:
        with server.mapped(store, f"reading {found.name!r}"), conn.transaction():
            defs = _table_defs(conn, found, what)
            digest = tables.layout_digest(tables.Layout(defs, page_size=page_size, user_version=user_version))
            by_ord = dict(enumerate(defs))
            sq.execute("BEGIN")
            for t in defs:
                if t.kind != "index":
                    tables.create_table(sq, t, what)
            with conn.cursor(name="team_rows") as rows:  # server side: parts stream, never all in memory
                rows.itersize = 1  # a part may be up to MAX_PART_BYTES
                rows.execute("SELECT table_ord, part, CASE WHEN octet_length(data) <= %s THEN data END, octet_length(data)"
                             " FROM team_rows WHERE report_id = %s ORDER BY table_ord, part",
                             (tables.MAX_PART_BYTES, found.id))
                for ord_, part, data, size in rows:
                    into = by_ord.get(ord_)
                    if into is None or into.kind != "table":
                        raise CorruptionError(f"{what}: stored rows belong to no table (#{ord_}); push the report again")
                    if data is None or len(data) != size:
                        raise CorruptionError(
                            f"{what}: part {part} of the stored rows of table {into.name!r} is {size} bytes, not a part "
                            f"a push writes (at most {tables.MAX_PART_BYTES}, sent whole); refused")
                    data = bytes(data)
                    digest.update(f"{ord_}:{part}:{len(data)}:".encode())
                    digest.update(data)
                    tables.insert_rows(sq, into, tables.decode_rows(data, len(into.insert_columns), what), what)
            chunk_def = next((t for t in defs if t.kind == "chunks"), None)
            expected = conn.execute("SELECT COUNT(*), COALESCE(SUM(nbytes), 0) FROM team_report_chunk WHERE report_id = %s",
                                    (found.id,)).fetchone()
            if expected is None or type(expected[0]) is not int or not 0 <= expected[0] <= MAX_CHUNKS:
                raise CorruptionError(f"{what}: the store lists {expected and expected[0]!r} chunks for it, more than "
                                      f"{MAX_CHUNKS}; refused")
            if chunk_def is not None:
                n_chunks, n_bytes = _restore_chunks(conn, sq, dest, chunk_def, found, with_data, what,
                                                    int(expected[1]), expected[0], progress, digest, bucket)
            if n_chunks != expected[0]:
                raise CorruptionError(f"{what}: {expected[0] - n_chunks} of its chunks are missing from the store; "
                                      "push the report again")
            if digest.digest() != found.digest:
                raise CorruptionError(
                    f"{what}: what the store holds for it does not match the digest it was pushed with (its rows, tables "
                    "or chunk list were changed in the store); refused: push it again from the original report")
        for t in defs:
            if t.kind == "index":
                tables.create_table(sq, t, what)
        sq.execute("COMMIT")
        sq.execute("PRAGMA journal_mode=DELETE")
    finally:
        sq.close()
    return n_chunks, n_bytes


def view_loader() -> Any:
    """A psycopg loader giving ``bytea`` values as memoryviews of the received message: a chunk's bytes go from
    libpq's buffer into the file without a copy in between (and without a fresh 4 MiB allocation per chunk, whose
    page faults cost more than the copy)."""
    from psycopg.adapt import Loader
    from psycopg.pq import Format

    class ViewLoader(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> Any:
            return data

    return ViewLoader


def _chunk_problem(row: Any, with_data: bool) -> str | None:
    """What is wrong with a chunk row the server sent (``None``: nothing), checked before its size is used."""
    chunk_id, digest, nbytes, crc32, codec, size, data = row
    if type(chunk_id) is not int or type(nbytes) is not int or type(crc32) is not int or type(size) is not int:
        return "a chunk row without its numbers"
    if digest is None or len(digest) != 32 or not 0 <= crc32 < 2**32 or codec not in (None, "zstd"):
        return f"chunk {chunk_id} has a malformed address"
    if not 0 < nbytes <= blobs.MAX_CHUNK_SIZE:
        return f"chunk {chunk_id} claims {nbytes} bytes (at most {blobs.MAX_CHUNK_SIZE})"
    if codec is None and size != nbytes or codec is not None and not 0 < size <= nbytes:
        return f"chunk {chunk_id} holds {size} bytes, not the {nbytes} its row gives"
    if with_data and (data is None or len(data) != size):
        return f"chunk {chunk_id} came with {'no' if data is None else len(data)} bytes, not {size}"
    return None


def _restore_chunks(
    conn: "psycopg.Connection[Any]", sq: Any, dest: Path, chunk_def: tables.TableDef, found: Found, with_data: bool,
    what: str, total: int, count: int, progress: Progress | None, digest: Any, bucket: objects.ObjectStore | None,
) -> tuple[int, int]:
    """The report's rdb_chunk rows, their bytes streamed out with a binary COPY (or empty placeholders).

    Each row is checked (``_chunk_problem``) before anything is sized from it, and goes into the report's content
    ``digest`` (as push computed it); each chunk's bytes are checked against its crc32 and content address
    (``prove_chunk``) before they are written. A second thread writes them into
    SQLite (which releases the GIL while it writes) as this one receives the next ones, so the server's sending and
    the file's writing overlap; at most QUEUED_CHUNKS wait between the two. Where the sqlite3 module has
    ``blobopen`` (3.11+), a chunk's row is inserted with a ``zeroblob`` of its size and its bytes written into it
    straight from the received message; every SYNC_BYTES written, a third thread syncs the file while the writing
    goes on (the next sync waits for the one before)."""
    columns = chunk_def.columns
    order = {"id": 0, "digest": 1, "nbytes": 2, "crc32": 3, "codec": 4, "data": 6}
    direct = with_data and hasattr(sq, "blobopen")
    values = ", ".join("zeroblob(?)" if c == "data" and direct else "?" for c in columns)
    sql = f"INSERT INTO rdb_chunk ({', '.join(tables.quoted(c) for c in columns)}) VALUES ({values})"
    n = nbytes = 0
    pending: queue.Queue[tuple[Any, ...] | None] = queue.Queue(maxsize=QUEUED_CHUNKS)
    failed: list[BaseException] = []
    address = blobs.address_kind(sq) if with_data else ""  # the report's rows (its rdb_meta) are restored by now
    page_size = int(sq.execute("PRAGMA page_size").fetchone()[0])

    def write() -> None:
        unsynced = 0
        cache_kib = WRITE_CACHE_KIB
        syncing: Future[None] | None = None
        # its own descriptor of the file SQLite writes, to sync it as it grows: on a thread of its own, so that the
        # writes go on while the disk takes the earlier ones
        with open(dest, "rb") as synced, ThreadPoolExecutor(1, thread_name_prefix="reportdb-pull-sync") as syncer:
            while (row := pending.get()) is not None:
                if failed:
                    continue
                try:
                    data = row[6]
                    if direct and _write_cache_kib(len(data), page_size) > cache_kib:
                        cache_kib = _write_cache_kib(len(data), page_size)
                        sq.execute(f"PRAGMA cache_size=-{cache_kib}")
                    params = [(len(data) if direct else data) if c == "data" else row[order[c]] for c in columns]
                    sq.execute(sql, params)
                    if direct:
                        with sq.blobopen("rdb_chunk", "data", row[0]) as blob:
                            blob.write(data)
                    unsynced += len(data)
                    if unsynced >= SYNC_BYTES and (syncing is None or syncing.done()):
                        if syncing is not None:
                            syncing.result()  # a failed sync fails the pull
                        syncing = syncer.submit(getattr(os, "fdatasync", os.fsync), synced.fileno())  # none on macOS
                        unsynced = 0
                except BaseException as exc:  # handed to the receiving thread, which raises it
                    failed.append(exc)
            try:
                if syncing is not None:
                    syncing.result()
            except BaseException as exc:
                failed.append(exc)

    if with_data:  # a small page cache: chunk pages reach the file (and its periodic syncs) as they are written
        sq.execute(f"PRAGMA cache_size=-{WRITE_CACHE_KIB}")
    writer = threading.Thread(target=write, name="reportdb-pull-writer", daemon=True)
    writer.start()
    if bucket is not None:
        query = _OBJECTS_SQL.format(report_id=int(found.id))
    else:
        query = _CHUNKS_SQL.format(data="c.data" if with_data else "''::bytea", report_id=int(found.id),
                                   limit=int(blobs.MAX_CHUNK_SIZE))
    try:
        cursor = conn.cursor()
        cursor.adapters.register_loader("bytea", view_loader())
        with cursor.copy(f"COPY ({query}) TO STDOUT (FORMAT BINARY)") as copy:
            copy.set_types(["int8", "bytea", "int8", "int8", "text", "int8", "bytea"])
            rows: Iterable[Any] = copy.rows()
            if bucket is not None and with_data:
                rows = _from_objects(rows, bucket, address, what)
            for row in rows:
                if failed:
                    break
                problem = _chunk_problem(row, with_data) if n < count else f"more than the {count} chunks it lists"
                if problem is not None:
                    raise CorruptionError(f"{what}: the store sent {problem}; refused (push the report again)")
                address_ = bytes(row[1])
                digest.update(b"%d:%s:%s:%d:%d;" % (row[0], address_.hex().encode(), (row[4] or "").encode(), row[3], row[2]))
                if with_data and bucket is None:  # here, while the writing thread writes the chunks before it
                    prove_chunk(row, address, what)
                pending.put((row[0], address_, row[2], row[3], row[4], row[5], row[6] if with_data else b""))
                n += 1
                nbytes += row[2] if with_data else 0
                if progress is not None and with_data and n % 16 == 0:
                    progress(nbytes, total)
    finally:
        pending.put(None)
        writer.join()
    sq.execute(f"PRAGMA cache_size=-{tables.RESTORE_CACHE_KIB}")
    if failed:
        exc = failed[0]
        if isinstance(exc, sqlite3.Error):
            raise CorruptionError(f"{what}: its chunks cannot be restored ({exc}); push the report again") from exc
        raise exc
    if progress is not None and with_data:
        progress(nbytes, total)
    return n, nbytes


def _write_cache_kib(nbytes: int, page_size: int) -> int:
    """The page cache (KiB) that holds two chunks of ``nbytes`` bytes (their overflow pages, each holding
    ``page_size - 4`` bytes, and a page of slack each), and never less than WRITE_CACHE_KIB."""
    pages = nbytes // (page_size - 4) + 2
    return max(WRITE_CACHE_KIB, 2 * pages * page_size // 1024)


def prove_chunk(row: tuple[Any, ...], address: str, what: str) -> None:
    """A chunk's bytes as the store sent them are those its row names: their crc32, and the content address (of the
    report's kind ``address``) of the raw bytes, decompressed if stored compressed (to the size the row was checked
    to allow). The address is what a forged crc32 cannot fake."""
    chunk_id, address_, nbytes, crc32, codec, _, data = row
    if blobs.crc32(data) != crc32:
        raise CorruptionError(f"{what}: the bytes the store holds for chunk {chunk_id} fail their crc32 check (changed "
                              "in the store); refused: push the report again from the original")
    raw = data if codec is None else codec_mod.decompress(codec, bytes(data), nbytes, f"{what}: chunk {chunk_id}")
    if blobs.content_address(address, raw) != address_:
        raise CorruptionError(f"{what}: the bytes the store holds for chunk {chunk_id} do not match its {address} content "
                              "address (changed in the store); refused: push the report again from the original")


def destination(out: str | os.PathLike[str]) -> tuple[Path, Path | None]:
    """The database file a pull writes for ``out`` (a folder, made if missing, gets ``db.sqlite``; a path ending in
    ``.sqlite`` or ``.db`` is the file), and the folder this pull makes (to remove on failure), if any."""
    out = Path(out)
    if out.suffix in (".sqlite", ".db") and not out.is_dir():
        if not out.parent.is_dir():
            raise OutputPathError(f"{out.parent}: no such folder to pull into")
        target, made = out, None
    else:
        made = None if out.exists() else out
        if out.exists() and not out.is_dir():
            raise OutputPathError(f"{out}: exists and is not a folder")
        target = out / "db.sqlite"
    if target.exists() or target.is_symlink():
        raise OutputPathError(f"{target}: already exists; pull into a new folder (nothing was changed)")
    return target, made


def pull(url: str, name: str | None = None, out: str | os.PathLike[str] | None = None, *,
         progress: Progress | None = None, digest: str | None = None) -> PullResult:
    """Pull report ``name`` (or the name the URL ends with) into ``out`` (default: a folder of that name here).

    Every row and chunk is proven against the content digest the store keeps for the report; that proves the store
    consistent, not honest. ``digest`` (the hex digest ``push`` printed) pins the content: a store holding anything
    else under that name is refused before a byte is written."""
    from ..report import Report

    expected = _expected_digest(digest)
    started = time.perf_counter()
    store = server.parse_url(url, name=name, need_name=True)
    assert store.name is not None
    target, made = destination(out if out is not None else store.name)
    conn = server.connect(store)
    partial = target.with_name(f".{target.name}.pull-{os.getpid()}")
    try:
        found = find(conn, store, store.name)
        bucket = objects.open_store(conn, store)
        if expected is not None and found.digest != expected:
            raise CorruptionError(
                f"{store.display}: report {found.name!r} has content digest {found.digest.hex()}, not the "
                f"{expected.hex()} asked for: the store holds other content under that name; nothing was written"
            )
        if made is not None:
            try:
                made.mkdir(parents=True)
            except OSError as exc:
                raise OutputPathError(f"{made}: cannot be created ({exc.strerror or exc})") from None
        try:
            n_chunks, n_bytes = build(conn, store, found, partial, with_data=True, progress=progress, bucket=bucket)
            with open(partial, "rb+") as f:
                os.fsync(f.fileno())
            with Report(partial, "r") as report:
                problems = report.check_store()
            if problems:
                raise CorruptionError(f"{store.display}: report {found.name!r} came back damaged: {problems[0]}")
            os.link(partial, target)  # never replaces a file that appeared meanwhile
        except BaseException:
            if made is not None:
                shutil.rmtree(made, ignore_errors=True)
                made = None
            raise
        finally:
            for suffix in ("", "-journal", "-wal", "-shm"):
                Path(f"{partial}{suffix}").unlink(missing_ok=True)
    except FileExistsError:
        raise OutputPathError(f"{target}: appeared while pulling; nothing was changed") from None
    finally:
        conn.close()
    return PullResult(found.name, str(target), n_chunks, n_bytes, time.perf_counter() - started, found.digest.hex())


def _expected_digest(digest: str | None) -> bytes | None:
    """The content digest a pull is pinned to (64 hex digits, as push reports it), or None."""
    if digest is None:
        return None
    try:
        raw = bytes.fromhex(digest)
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise InvalidArgumentError(f"digest must be the 64 hex digits push printed, not {excerpt(digest)}")
    return raw
