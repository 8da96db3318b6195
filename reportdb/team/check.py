"""``verify`` of a team store (``reportdb verify postgresql://HOST/DATABASE[/NAME]``): which published reports are
damaged, because a chunk they name is missing (its row or, in a store keeping chunks in object storage, its object
deleted behind the store's back) or its bytes were changed (crc32 or content address wrong, an object of another
size). Every distinct chunk the reports name is read once and re-hashed; memory is bounded by
``objects.FETCH_AHEAD`` chunks, whatever the store's size.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from ..errors import CorruptionError, MissingObjectError, ReportDBError, ReportNotFoundError
from ..results import Result
from ..store import blobs, codec as codec_mod
from . import objects, server
from .pull import find

if TYPE_CHECKING:  # pragma: no cover
    import psycopg

Key = tuple[bytes, str, int]


@dataclass(frozen=True)
class DamagedReport(Result):
    """A published report of the store that cannot come back whole: its chunks whose bytes are ``missing`` and
    those whose bytes were ``changed`` (counts), and the first problem in words."""

    name: str
    missing: int
    changed: int
    first: str


@dataclass(frozen=True)
class StoreVerifyResult(Result):
    """What ``verify`` proved of a store (``url``, without its password): ``ok`` when every chunk of every report
    checked is there and intact; the reports and distinct chunks checked, the bytes re-hashed, where the chunks live
    (``s3://...`` or ``postgresql``) and every damaged report."""

    url: str
    ok: bool
    reports: int
    chunks: int
    bytes_checked: int
    chunks_in: str
    damaged: tuple[DamagedReport, ...]
    seconds: float


def _problem(key: Key, nbytes: int, data: Any) -> str | None:
    """What is wrong with the stored bytes ``data`` of chunk ``key`` (None: nothing): their crc32, and the content
    address of the raw bytes, of either kind a report may use (the store keys chunks by the address as it is)."""
    digest, codec, crc32 = key
    if blobs.crc32(data) != crc32:
        return "its bytes fail their crc32 check"
    try:
        raw = data if not codec else codec_mod.decompress(codec, bytes(data), nbytes, f"chunk {digest.hex()[:16]}")
    except ReportDBError as exc:
        return str(exc)
    if len(raw) != nbytes or not any(blobs.content_address(kind, raw) == digest
                                          for kind in (blobs.NEW_ADDRESS, blobs.OLD_ADDRESS)):
        return "its bytes do not match its content address"
    return None


def _chunks_sql(report_id: int | None, bucket: objects.ObjectStore | None) -> str:
    """The distinct chunks the published reports (or report ``report_id``) name: key, raw size, stored size (None
    when the store has no row for it)."""
    held = "team_chunk" if bucket is None else "team_object"
    size = "octet_length(c.data)::int8" if bucket is None else "c.stored"
    only = "" if report_id is None else f" AND r.id = {int(report_id)}"
    return (f"SELECT DISTINCT rc.digest, rc.codec, rc.crc32, rc.nbytes, {size} FROM team_report_chunk rc"
            f" JOIN team_report r ON r.id = rc.report_id AND r.state = 'ready'{only}"
            f" LEFT JOIN {held} c ON c.digest = rc.digest AND c.codec = rc.codec AND c.crc32 = rc.crc32")


def _checked(store: server.StoreURL, bucket: objects.ObjectStore | None,
             rows: Iterable[Any]) -> Iterator[tuple[Key, str | None, bool, int]]:
    """(key, problem or None, whether the bytes are missing, bytes read) for each chunk of ``rows``."""

    def read(row: Any) -> tuple[str | None, bool, int]:
        key: Key = (bytes(row[0]), row[1], row[2])
        if row[4] is None:
            return "the store has no bytes for it", True, 0
        if not 0 < row[3] <= blobs.MAX_CHUNK_SIZE or not 0 < row[4] <= row[3]:
            return f"its stored size {row[4]} does not fit its {row[3]} bytes", False, 0
        try:
            if bucket is not None:
                data = bucket.get(bucket.key(*key), row[4], f"chunk {key[0].hex()}")
            else:
                conn = getattr(local, "conn", None)
                if conn is None:
                    conn = local.conn = server.connect(store, autocommit=True)
                    with lock:
                        opened.append(conn)
                with server.mapped(store, "verifying the store"):
                    found = conn.execute("SELECT data FROM team_chunk WHERE digest = %s AND codec = %s AND crc32 = %s",
                                         key).fetchone()
                if found is None:
                    return "the store has no bytes for it", True, 0
                data = found[0]
        except MissingObjectError as exc:
            return str(exc), True, 0
        except CorruptionError as exc:
            return str(exc), False, 0
        return _problem(key, row[3], data), False, len(data)

    local, lock = threading.local(), threading.Lock()
    opened: list[Any] = []  # the readers' own connections (a store keeping chunks in PostgreSQL)
    try:
        for row, (problem, missing, nbytes) in objects.ordered(rows, read, objects.FETCH_AHEAD if bucket else 2):
            yield (bytes(row[0]), row[1], row[2]), problem, missing, nbytes
    finally:
        for conn in opened:
            conn.close()


def verify(url: str, *, repair: bool = False) -> StoreVerifyResult:
    """Re-read every chunk the store's published reports name (or, for a URL that names a report, that report's),
    check each against its crc32 and content address, and say which reports are damaged. Never raises for a damaged
    chunk: each is counted against the reports that name it. ``repair`` forgets the damaged chunks' bytes (their
    rows), so that pushing a damaged report again uploads them anew instead of counting on them."""
    started = time.perf_counter()
    store = server.parse_url(url)
    conn = server.connect(store)
    try:
        if not server.ensure_schema(conn, store, create=False):
            if store.name is not None:
                raise ReportNotFoundError(f"{store.display}: no report {store.name!r} (the store is empty)")
            return StoreVerifyResult(store.display, True, 0, 0, 0, "postgresql", (), time.perf_counter() - started)
        bucket = objects.open_store(conn, store)
        report_id = None
        if store.name is not None:
            report_id = find(conn, store, store.name).id
        bad: dict[Key, tuple[str, bool]] = {}
        checked = chunks = 0
        with server.mapped(store, "verifying the store"), conn.transaction():
            reports = conn.execute("SELECT COUNT(*) FROM team_report WHERE state = 'ready'"
                                   + ("" if report_id is None else f" AND id = {int(report_id)}")).fetchone()
            with conn.cursor(name="team_verify") as rows:  # server side: the keys stream, never all in memory
                rows.itersize = 1000
                rows.execute(_chunks_sql(report_id, bucket).encode())
                for key, problem, missing, nbytes in _checked(store, bucket, rows):
                    chunks, checked = chunks + 1, checked + nbytes
                    if problem is not None:
                        bad[key] = (problem, missing)
        damaged = _damaged(conn, store, bad, report_id)
        if repair and bad:
            _forget(conn, store, list(bad), "team_chunk" if bucket is None else "team_object")
    finally:
        conn.close()
    return StoreVerifyResult(store.display, not damaged, int(reports[0]) if reports else 0, chunks, checked,
                             "postgresql" if bucket is None else bucket.location, damaged,
                             time.perf_counter() - started)


def _forget(conn: "psycopg.Connection[Any]", store: server.StoreURL, keys: list[Key], held: str) -> None:
    """Delete the rows of chunks ``keys`` from ``held`` under the collector's lock held exclusively (``gc.py``): no
    push is then between finding one stored and publishing, and the next push of a report naming one uploads it."""
    with server.mapped(store, "forgetting damaged chunks"), conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (server.GC_LOCK,))
        conn.execute(f"DELETE FROM {held} WHERE (digest, codec, crc32) IN (SELECT * FROM unnest(%s::bytea[],"
                     " %s::text[], %s::int8[]))", ([k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]))


def _damaged(conn: "psycopg.Connection[Any]", store: server.StoreURL, bad: dict[Key, tuple[str, bool]],
             report_id: int | None) -> tuple[DamagedReport, ...]:
    """The published reports naming a chunk of ``bad``, with their counts of missing and changed chunks."""
    if not bad:
        return ()
    found: dict[str, list[Any]] = {}
    with server.mapped(store, "naming the damaged reports"), conn.transaction():
        for name, digest, codec, crc32 in conn.execute(
            "SELECT r.name, rc.digest, rc.codec, rc.crc32 FROM team_report_chunk rc JOIN team_report r"
            " ON r.id = rc.report_id AND r.state = 'ready' WHERE rc.digest = ANY(%s)"
            + ("" if report_id is None else f" AND r.id = {int(report_id)}") + " ORDER BY r.name, rc.chunk_id",
            ([k[0] for k in bad],)):
            hit = bad.get((bytes(digest), codec, crc32))
            if hit is not None:
                entry = found.setdefault(name, [0, 0, hit[0]])
                entry[0 if hit[1] else 1] += 1
    return tuple(DamagedReport(name, m, c, first) for name, (m, c, first) in sorted(found.items()))
