"""``pull``: a report of the team store back into a self-contained SQLite report, exactly as it was pushed.

The file is built under a temporary name beside its destination (its tables from their stored ``CREATE`` text, their
rows, the chunks streamed out of the server with a binary ``COPY``, then the indexes), checked with ``check_store``
and only then linked into place: a failed or interrupted pull leaves nothing at the destination, and an existing file
there is never overwritten. The same builder, without the chunk bytes, makes the private copy that a remote report
reads through (``remote.py``).
"""

from __future__ import annotations

import os
import queue
import shutil
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..results import Result
from ..errors import CorruptionError, OutputPathError, ReportNotFoundError
from . import server, tables

if TYPE_CHECKING:  # pragma: no cover
    import psycopg

Progress = Callable[[int, int], None]
#: Chunks received and not yet written, at most (4 MiB each by default).
QUEUED_CHUNKS = 8


@dataclass
class PullResult(Result):
    name: str
    path: str
    chunks: int
    bytes: int
    seconds: float


@dataclass(frozen=True)
class Found:
    """A published report of the store: its id and what its row says."""

    id: int
    name: str
    info: dict[str, Any]
    stored_bytes: int


def find(conn: "psycopg.Connection[Any]", store: server.StoreURL, name: str) -> Found:
    """The published report called ``name``; ReportNotFoundError otherwise (a push still under way included)."""
    if not server.ensure_schema(conn, store, create=False):
        raise ReportNotFoundError(f"{store.display}: no report {name!r} (the store is empty)")
    with server.mapped(store, f"looking up {name!r}"), conn.transaction():
        row = conn.execute(
            "SELECT id, info, stored_bytes FROM team_report WHERE name = %s AND state = 'ready'", (name,)
        ).fetchone()
    if row is None:
        raise ReportNotFoundError(f"{store.display}: no report {name!r}; `reportdb reports {store.display}` lists them")
    return Found(int(row[0]), name, row[1] if isinstance(row[1], dict) else {}, int(row[2] or 0))


_CHUNKS_SQL = (
    "SELECT rc.chunk_id, rc.digest, rc.nbytes, rc.crc32, NULLIF(rc.codec, ''), {data} FROM team_report_chunk rc"
    " JOIN team_chunk c ON c.digest = rc.digest AND c.codec = rc.codec AND c.crc32 = rc.crc32"
    " WHERE rc.report_id = {report_id} ORDER BY rc.chunk_id"
)


def build(
    conn: "psycopg.Connection[Any]", store: server.StoreURL, found: Found, dest: Path, *, with_data: bool,
    progress: Progress | None = None,
) -> tuple[int, int]:
    """Restore the report into the new file ``dest`` (chunk bytes only ``with_data``; else empty placeholders that
    a remote report fills on demand); returns (chunks, bytes of chunk data). The caller removes ``dest`` on failure."""
    what = f"{store.display}: report {found.name!r}"
    sq = tables.new_database(dest, int(found.info.get("page_size") or 4096), int(found.info.get("user_version") or 0))
    n_chunks = n_bytes = 0
    try:
        with server.mapped(store, f"reading {found.name!r}"), conn.transaction():
            defs = [
                tables.TableDef(r[1], r[2], r[3], tuple(r[4] or ()), bool(r[5]))
                for r in conn.execute(
                    "SELECT ord, name, kind, ddl, columns, has_rowid FROM team_table WHERE report_id = %s ORDER BY ord",
                    (found.id,),
                )
            ]
            by_ord = dict(enumerate(defs))
            sq.execute("BEGIN")
            for t in defs:
                if t.kind != "index":
                    tables.create_table(sq, t, what)
            with conn.cursor(name="team_rows") as rows:  # server side: parts stream, never all in memory
                rows.itersize = 8
                rows.execute("SELECT table_ord, data FROM team_rows WHERE report_id = %s ORDER BY table_ord, part", (found.id,))
                for ord_, data in rows:
                    into = by_ord.get(ord_)
                    if into is None or into.kind != "table":
                        raise CorruptionError(f"{what}: stored rows belong to no table (#{ord_}); push the report again")
                    tables.insert_rows(sq, into, tables.decode_rows(bytes(data), len(into.insert_columns), what), what)
            chunk_def = next((t for t in defs if t.kind == "chunks"), None)
            expected = conn.execute("SELECT COUNT(*), COALESCE(SUM(nbytes), 0) FROM team_report_chunk WHERE report_id = %s",
                                    (found.id,)).fetchone()
            if chunk_def is not None:
                n_chunks, n_bytes = _restore_chunks(conn, sq, found, chunk_def, with_data, what,
                                                    int(expected[1]) if expected else 0, progress)
            if expected is None or n_chunks != expected[0]:
                raise CorruptionError(f"{what}: {int(expected[0]) - n_chunks if expected else '?'} of its chunks are "
                                      "missing from the store; push the report again")
        for t in defs:
            if t.kind == "index":
                tables.create_table(sq, t, what)
        sq.execute("COMMIT")
        sq.execute("PRAGMA journal_mode=DELETE")
    finally:
        sq.close()
    return n_chunks, n_bytes


def _restore_chunks(
    conn: "psycopg.Connection[Any]", sq: Any, found: Found, chunk_def: tables.TableDef, with_data: bool, what: str,
    total: int, progress: Progress | None,
) -> tuple[int, int]:
    """The report's rdb_chunk rows, their bytes streamed out with a binary COPY (or empty placeholders).

    A second thread writes them into SQLite (which releases the GIL while it writes) as this one receives the next
    ones, so the server's sending and the file's writing overlap; at most QUEUED_CHUNKS wait between the two."""
    columns = chunk_def.columns
    order = {"id": 0, "digest": 1, "nbytes": 2, "crc32": 3, "codec": 4, "data": 5}
    sql = (f"INSERT INTO rdb_chunk ({', '.join(tables.quoted(c) for c in columns)})"
           f" VALUES ({', '.join('?' * len(columns))})")
    n = nbytes = 0
    pending: queue.Queue[tuple[Any, ...] | None] = queue.Queue(maxsize=QUEUED_CHUNKS)
    failed: list[BaseException] = []

    def write() -> None:
        while (row := pending.get()) is not None:
            if not failed:
                try:
                    sq.execute(sql, row)
                except BaseException as exc:  # handed to the receiving thread, which raises it
                    failed.append(exc)

    writer = threading.Thread(target=write, name="reportdb-pull-writer", daemon=True)
    writer.start()
    query = _CHUNKS_SQL.format(data="c.data" if with_data else "''::bytea", report_id=int(found.id))
    try:
        with conn.cursor().copy(f"COPY ({query}) TO STDOUT (FORMAT BINARY)") as copy:
            copy.set_types(["int8", "bytea", "int8", "int8", "text", "bytea"])
            for row in copy.rows():
                if failed:
                    break
                pending.put(tuple(row[order[c]] for c in columns))
                n += 1
                nbytes += int(row[2]) if with_data else 0
                if progress is not None and with_data and n % 16 == 0:
                    progress(nbytes, total)
    finally:
        pending.put(None)
        writer.join()
    if failed:
        exc = failed[0]
        if isinstance(exc, sqlite3.Error):
            raise CorruptionError(f"{what}: its chunks cannot be restored ({exc}); push the report again") from exc
        raise exc
    if progress is not None and with_data:
        progress(nbytes, total)
    return n, nbytes


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
         progress: Progress | None = None) -> PullResult:
    """Pull report ``name`` (or the name the URL ends with) into ``out`` (default: a folder of that name here)."""
    from ..report import Report

    started = time.perf_counter()
    store = server.parse_url(url, name=name, need_name=True)
    assert store.name is not None
    target, made = destination(out if out is not None else store.name)
    conn = server.connect(store)
    partial = target.with_name(f".{target.name}.pull-{os.getpid()}")
    try:
        found = find(conn, store, store.name)
        if made is not None:
            try:
                made.mkdir(parents=True)
            except OSError as exc:
                raise OutputPathError(f"{made}: cannot be created ({exc.strerror or exc})") from None
        try:
            n_chunks, n_bytes = build(conn, store, found, partial, with_data=True, progress=progress)
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
    return PullResult(found.name, str(target), n_chunks, n_bytes, time.perf_counter() - started)
