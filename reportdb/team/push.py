"""``push``: a report database into the team store, atomic, idempotent and resumable.

The order of the work is what makes it safe:

1. The report is read once (read only, as ``reportdb.open`` reads it): its tables serialized (``tables.py``), its
   chunk rows listed, and a digest of all of it computed; that digest identifies the report's content.
2. A ``staging`` report row is claimed under the name (or found: a push that was killed left it), and the report's
   chunk references are written and committed *before* any bytes move. Garbage collection (``delete``) only removes
   chunks no reference names, so it never takes a chunk that a push counts on.
3. The chunks the store lacks are uploaded in batches (``jobs`` connections, each batch one transaction): one
   prepared ``INSERT ... ON CONFLICT DO NOTHING`` per chunk with binary parameters straight into the shared table,
   in key order (concurrent pushers of overlapping reports insert in one order, so they never deadlock; a chunk
   another push stored first is skipped). Each batch holds the garbage collector's advisory lock *shared*, and
   ``delete`` takes it exclusively, so "already stored, skip it" is never answered by a chunk being collected. A
   batch also holds the staging row (``FOR KEY SHARE``), so a delete or the collector of stale rows (``gc.py``)
   waits for it, and the next batch stops if the row is gone; after each batch the row is marked active. A SIGKILL
   loses at most the batch in flight; a rerun finds the staging row and uploads only what is still missing, and if
   nobody reruns it, the next push or delete collects it after a day.
   Each chunk's crc32 and content address (BLAKE3 or sha256, the report's kind) are checked before it is shared: a
   damaged or lying report cannot put wrong bytes under an address other reports use.
   In a store whose chunks live in object storage (``objects.py``), a batch uploads its chunks as objects instead
   (on one pool of ``jobs x PUTS_PER_JOB`` threads, each object confirmed by the server) and writes their
   ``team_object`` rows in its transaction, after the last is confirmed: no committed row names an absent object.
4. One last transaction writes the tables, rows and history and flips the row to ``ready``: the report is visible
   whole or not at all. Pushing the same content again under the same name stores nothing.
"""

from __future__ import annotations

import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..results import Result
from ..errors import CorruptionError, InvalidArgumentError, ReportExistsError, TeamStoreError
from ..store import blobs, codec as codec_mod, engine as engine_mod
from . import gc, objects, server, tables

if TYPE_CHECKING:  # pragma: no cover
    import psycopg

Progress = Callable[[int, int], None]
#: Bytes of chunks per upload transaction: few commits for the bytes sent, and a kill loses little.
BATCH_BYTES = 64 << 20
#: Objects in flight to object storage per upload connection (read, checked and sent by the push's jobs x
#: PUTS_PER_JOB put threads): a push holds at most that many chunks in memory, whatever the report's size.
PUTS_PER_JOB = 4


@dataclass(frozen=True)
class ChunkRef:
    """One row of the report's rdb_chunk, without its bytes."""

    chunk_id: int
    digest: bytes
    codec: str  # '' for raw bytes
    crc32: int
    nbytes: int
    stored: int  # length of the stored bytes


@dataclass
class PushResult(Result):
    """What a push did: ``created`` False when this content was already stored under the name (nothing new)."""

    name: str
    digest: str
    created: bool
    chunks: int = 0
    chunks_uploaded: int = 0
    bytes_uploaded: int = 0
    stored_bytes: int = 0
    left_out: list[str] = field(default_factory=list)
    seconds: float = 0.0
    stale_collected: int = 0  # staging rows of killed pushes collected first (gc.py)


@dataclass
class _Snapshot:
    """The report as read in step 1."""

    layout: tables.Layout
    parts: list[tuple[int, int, bytes]]  # (table ord, part no, encoded rows)
    counts: dict[int, int]  # rows per table ord
    chunks: list[ChunkRef]
    digest: bytes
    facts: dict[str, Any]
    history: list[tuple[Any, ...]]


def default_name(path: Path) -> str:
    """A report's name when none is given: its folder's name (``reports/1234/db.sqlite`` -> ``1234``)."""
    return path.parent.name if path.name == "db.sqlite" else path.stem


def _int(value: Any) -> int | None:
    return value if type(value) is int and -(2**63) <= value < 2**63 else None


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    result = float(value)
    return result if math.isfinite(result) else None


def _count(value: Any) -> int | None:
    """An integer stored as an integer or an integral float (``matches`` was a float column in 2024)."""
    number = _float(value)
    return int(number) if number is not None and number.is_integer() and abs(number) < 2**63 else None


def _columns(conn: Any, table: str) -> set[str]:
    return {str(r[1]) for r in conn.execute(f"PRAGMA table_info({tables.quoted(table)})")}


def _facts(conn: Any, names: set[str]) -> dict[str, Any]:
    """The listing facts of a report: ttnn version and capture time (ttnn 0.81's report_metadata), counts, bytes."""
    facts: dict[str, Any] = {"ttnn_version": None, "captured_at": None, "n_operations": None, "n_tensors": 0,
                             "logical_bytes": 0, "stored_bytes": 0}
    if "report_metadata" in names and {"key", "value"} <= _columns(conn, "report_metadata"):
        meta = dict(conn.execute("SELECT key, value FROM report_metadata WHERE key IN ('version', 'capture_timestamp_ns')"))
        facts["ttnn_version"] = str(meta["version"]) if meta.get("version") is not None else None
        stamp = meta.get("capture_timestamp_ns")
        try:
            facts["captured_at"] = datetime.fromtimestamp(int(str(stamp)) / 1e9, timezone.utc) if stamp is not None else None
        except (ValueError, OverflowError, OSError):
            facts["captured_at"] = None
    if "operations" in names:
        facts["n_operations"] = conn.execute("SELECT COUNT(*) FROM operations").fetchone()[0]
    if "rdb_tensor" in names:
        n, logical = conn.execute("SELECT COUNT(*), COALESCE(SUM(nbytes), 0) FROM rdb_tensor").fetchone()
        facts["n_tensors"], facts["logical_bytes"] = _int(n), _int(logical)
    return facts


def _history(conn: Any, names: set[str]) -> list[tuple[Any, ...]]:
    """Every operation output that has a golden comparison record, with its metrics (``team_history`` rows without
    the report id). Reports of every age: ``rank`` where the tables have it, rdb_comparison where it exists."""
    if not {"operations", "output_tensors"} <= names:
        return []
    op_cols, out_cols = _columns(conn, "operations"), _columns(conn, "output_tensors")
    if not {"operation_id", "name"} <= op_cols or not {"operation_id", "tensor_id"} <= out_cols:
        return []
    found: list[tuple[Any, ...]] = []
    for kind in ("local", "global"):
        records = f"{kind}_tensor_comparison_records"
        if records not in names:
            continue
        rec_cols = _columns(conn, records)
        if "tensor_id" not in rec_cols:
            continue
        ranked = "rank" in out_cols
        rank = "ot.rank" if ranked else "0"
        on_op = " AND o.rank = ot.rank" if ranked and "rank" in op_cols else ""
        on_rec = " AND r.rank = ot.rank" if ranked and "rank" in rec_cols else ""
        pick = ", ".join(f"r.{c}" if c in rec_cols else "NULL" for c in ("golden_tensor_id", "desired_pcc", "actual_pcc", "matches"))
        computed = "NULL, NULL, NULL"
        join = ""
        if "rdb_comparison" in names:
            computed = "c.pcc, c.passed, c.metrics"
            join = f" LEFT JOIN rdb_comparison c ON c.kind = '{kind}' AND c.tensor_id = ot.tensor_id AND c.rank = {rank}"
        output_index = "ot.output_index" if "output_index" in out_cols else "NULL"
        sql = (f"SELECT o.name, o.operation_id, {output_index}, ot.tensor_id, {rank}, '{kind}', {pick}, {computed}"
               f" FROM output_tensors ot JOIN operations o ON o.operation_id = ot.operation_id{on_op}"
               f" JOIN {records} r ON r.tensor_id = ot.tensor_id{on_rec}{join}")
        for row in conn.execute(sql):
            name = row[0] if isinstance(row[0], str) else (None if row[0] is None else str(row[0]))
            if name is None:
                continue
            metrics = None
            if isinstance(row[12], str):
                import json

                try:
                    metrics = json.loads(row[12])
                except ValueError:
                    metrics = None
            passed = None if row[11] is None or not isinstance(row[11], (int, float)) else bool(row[11])
            found.append((name, _int(row[1]), _int(row[2]), _int(row[3]), _int(row[4]), kind, _int(row[6]),
                          _float(row[7]), _float(row[8]), _count(row[9]),
                          _float(row[10]), passed, metrics))
    return found


def snapshot(path: Path) -> _Snapshot:
    """Step 1: read the report (read only) and digest its content."""
    from ..report import Report

    with Report(path, "r") as report, report.connection() as conn:
        try:
            layout = tables.read_layout(conn, path)
            digest = tables.layout_digest(layout)
            parts: list[tuple[int, int, bytes]] = []
            counts: dict[int, int] = {}
            for ord_, table in enumerate(layout.tables):
                if table.kind != "table":
                    continue
                counts[ord_] = 0
                for part_no, (data, n) in enumerate(tables.iter_parts(conn, table, path)):
                    parts.append((ord_, part_no, data))
                    counts[ord_] += n
                    digest.update(f"{ord_}:{part_no}:{len(data)}:".encode())
                    digest.update(data)
            chunks = []
            names = {tables.folded(t.name) for t in layout.tables if t.kind != "index"}  # as SQLite compares them
            if tables.CHUNK_TABLE in names:
                chunk_cols = _columns(conn, tables.CHUNK_TABLE)
                codec = "codec" if "codec" in chunk_cols else "NULL"
                for row in conn.execute(
                    f"SELECT id, digest, nbytes, crc32, {codec}, length(data), typeof(data) FROM rdb_chunk ORDER BY id"
                ):
                    ref = ChunkRef(row[0], row[1], row[4] or "", row[3], row[2], row[5] or 0)
                    if (type(ref.chunk_id) is not int or not isinstance(ref.digest, bytes) or len(ref.digest) != 32
                            or type(ref.nbytes) is not int or type(ref.crc32) is not int or not isinstance(ref.codec, str)
                            or row[6] != "blob"):
                        raise CorruptionError(f"{path}: rdb_chunk row {row[0]!r} is malformed; the database file is damaged")
                    chunks.append(ref)
                    digest.update(b"%d:%s:%s:%d:%d;" % (ref.chunk_id, ref.digest.hex().encode(), ref.codec.encode(),
                                                        ref.crc32, ref.nbytes))
            facts = _facts(conn, names)
            facts["stored_bytes"] = sum(c.stored for c in chunks)
            history = _history(conn, names)
        except Exception as exc:
            import sqlite3

            if isinstance(exc, sqlite3.Error):
                mapped = engine_mod.translate(exc, path, what="reading the report to push")
                assert mapped is not None
                raise mapped from exc
            raise
    return _Snapshot(layout, parts, counts, chunks, digest.digest(), facts, history)


def _check_chunk(ref: ChunkRef, data: bytes, path: Path, address: str) -> None:
    """A chunk's bytes are what its row says (crc32 of the stored bytes, content address of kind ``address`` of the
    raw ones) before they are shared with every report that has the same address. The store keys chunks by the
    address as it is, whatever its kind: content pushed by a sha256 report and by a BLAKE3 one is kept once per kind,
    and two kinds cannot be made to collide (both are cryptographic, 256 bits)."""
    where = f"{path}: chunk {ref.chunk_id}"
    if blobs.crc32(data) != ref.crc32:
        raise CorruptionError(f"{where} fails its crc32 check; the report is damaged: `reportdb verify {path}` names the tensors")
    raw = data if not ref.codec else codec_mod.decompress(ref.codec, data, ref.nbytes, where)
    if len(raw) != ref.nbytes or blobs.content_address(address, raw) != ref.digest:
        raise CorruptionError(f"{where} does not match its {address} address; the report is damaged: `reportdb verify {path}`")


def _claim(conn: "psycopg.Connection[Any]", name: str, snap: _Snapshot, tags: list[str], display: str) -> tuple[int, bool]:
    """Step 2a: the staging row of this push (new, or left by a killed one), or ``(id, False)`` when this very
    content is already published under ``name``."""
    while True:
        with conn.transaction():
            row = conn.execute("SELECT id, digest, state FROM team_report WHERE name = %s FOR UPDATE", (name,)).fetchone()
            if row is None:
                created = conn.execute(
                    "INSERT INTO team_report (name, digest, state, tags, info) VALUES (%s, %s, 'staging', %s, %s)"
                    " ON CONFLICT (name) DO NOTHING RETURNING id",
                    (name, snap.digest, _jsonb(tags), _jsonb({"page_size": snap.layout.page_size,
                                                             "user_version": snap.layout.user_version,
                                                             "left_out": snap.layout.left_out})),
                ).fetchone()
                if created is None:
                    continue  # another push claimed the name between our look and our insert: look again
                return int(created[0]), True
        if bytes(row[1]) == snap.digest and row[2] == "staging":
            with conn.transaction():  # resumed: its row is active again (gc.py collects rows untouched for long)
                conn.execute("UPDATE team_report SET pushed_at = now() WHERE id = %s", (row[0],))
        if bytes(row[1]) != snap.digest:
            what = "a push of different content under this name is under way or was interrupted" if row[2] == "staging" \
                else "a different report is stored under this name"
            raise ReportExistsError(
                f"{display}: {what} ({name!r}); push under another name, or remove it first with "
                f"`reportdb delete {display} {name}`"
            )
        return int(row[0]), row[2] != "ready"


def _jsonb(value: Any) -> Any:
    from psycopg.types.json import Jsonb

    return Jsonb(value)


def _write_references(conn: "psycopg.Connection[Any]", report_id: int, chunks: Sequence[ChunkRef]) -> None:
    """Step 2b: the report's chunk references, committed before any bytes move (a rerun writes them again)."""
    with conn.transaction():
        conn.execute("DELETE FROM team_report_chunk WHERE report_id = %s", (report_id,))
        with conn.cursor().copy(
            "COPY team_report_chunk (report_id, chunk_id, digest, codec, crc32, nbytes) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["int8", "int8", "bytea", "text", "int8", "int8"])
            for c in chunks:
                copy.write_row((report_id, c.chunk_id, c.digest, c.codec, c.crc32, c.nbytes))


def _missing(conn: "psycopg.Connection[Any]", report_id: int, held_in: str) -> set[int]:
    """The chunk ids of this report whose bytes the store lacks (no row in ``held_in``, ``team_chunk`` or
    ``team_object``), read under the collector's shared lock."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock_shared(%s)", (server.GC_LOCK,))
        return {r[0] for r in conn.execute(
            f"SELECT rc.chunk_id FROM team_report_chunk rc LEFT JOIN {held_in} c"
            " ON c.digest = rc.digest AND c.codec = rc.codec AND c.crc32 = rc.crc32"
            " WHERE rc.report_id = %s AND c.digest IS NULL", (report_id,))}


#: How a chunk is stored: one prepared INSERT per chunk, binary parameters. The server stores 4 MiB values sent as
#: parameters faster than in a binary COPY (``bench_team.py``: faster in 6 runs of 7, e.g. 259 against 217 MB/s; its
#: binary COPY passes each value through its raw and attribute buffers first), and ``ON CONFLICT DO NOTHING`` skips a
#: chunk another push stored meanwhile (its pre-check reads the index before any byte is written).
_INSERT_CHUNK = ("INSERT INTO team_chunk (digest, codec, crc32, nbytes, data) VALUES (%b, %s, %s, %s, %b)"
                 " ON CONFLICT DO NOTHING")


class _Putters:
    """The threads that read, check and upload objects for every upload connection of a push (jobs x PUTS_PER_JOB:
    one pool, so that while one connection waits for its batch's last objects the others' keep it busy), each with
    its own read-only connection to the report."""

    def __init__(self, path: Path, threads: int) -> None:
        self.path = path
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="reportdb-push-put")
        self.local = threading.local()
        self.opened: list[Any] = []
        self.lock = threading.Lock()

    def connection(self) -> Any:
        """This thread's connection to the report (opened on its first chunk)."""
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = engine_mod.connect(self.path, readonly=True)
            with self.lock:
                self.opened.append(conn)
        return conn

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        for conn in self.opened:
            conn.close()


class _Uploader:
    """One upload connection (and its own read-only connection to the report): step 3, one batch at a time."""

    def __init__(self, store: server.StoreURL, path: Path, report_id: int, bucket: objects.ObjectStore | None,
                 putters: _Putters | None) -> None:
        self.store, self.path, self.report_id, self.bucket, self.putters = store, path, report_id, bucket, putters
        self.pg = server.connect(store)
        self.sqlite = engine_mod.connect(path, readonly=True)
        self.address = blobs.address_kind(self.sqlite)
        self.reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reportdb-push-read")

    def upload(self, batch: Sequence[ChunkRef]) -> tuple[int, int]:
        """Store the batch's chunks the store still lacks, in key order (see the module's docstring); returns
        (chunks, bytes) this push stored (not those another push stored first).

        Each chunk is read from the report and checked in the reader thread while the server stores the one before
        (hashing and the server's work overlap: both release the GIL)."""
        with self.pg.transaction():
            self.pg.execute("SELECT pg_advisory_xact_lock_shared(%s)", (server.GC_LOCK,))
            held = self.pg.execute("SELECT 1 FROM team_report WHERE id = %s AND state = 'staging' FOR KEY SHARE",
                                   (self.report_id,)).fetchone()
            if held is None:  # deleted (or collected as stale): uploading on would leave chunks nothing references
                raise TeamStoreError(f"{self.store.display}: the report being pushed was deleted meanwhile; push it again")
            present = {(bytes(r[0]), r[1], r[2]) for r in self.pg.execute(
                f"SELECT digest, codec, crc32 FROM {'team_chunk' if self.bucket is None else 'team_object'}"
                " WHERE digest = ANY(%s)", ([c.digest for c in batch],))}
            todo = [c for c in batch if (c.digest, c.codec, c.crc32) not in present]
            if self.bucket is not None and self.putters is not None:
                return self._put_objects(self.bucket, self.putters, todo)
            stored = stored_bytes = 0
            cursor = self.pg.cursor()
            ahead = self.reader.submit(self._checked, todo[0]) if todo else None
            for i, ref in enumerate(todo):
                assert ahead is not None
                data = ahead.result()
                ahead = self.reader.submit(self._checked, todo[i + 1]) if i + 1 < len(todo) else None
                cursor.execute(_INSERT_CHUNK, (ref.digest, ref.codec, ref.crc32, ref.nbytes, data), prepare=True)
                if cursor.rowcount == 1:  # 0: another push stored it first (skipped)
                    stored, stored_bytes = stored + 1, stored_bytes + len(data)
        return stored, stored_bytes

    def _put_objects(self, bucket: objects.ObjectStore, putters: _Putters, todo: Sequence[ChunkRef]) -> tuple[int, int]:
        """The batch's chunks as objects, on the push's put threads (a queued chunk holds no bytes: each is read
        when a thread takes it), each confirmed (``ObjectStore.put``); then their ``team_object`` rows, in the
        batch's transaction: a row is only ever written for a confirmed object."""
        for _ in objects.ordered(todo, lambda ref: self._put(bucket, putters, ref), len(todo), putters.pool):
            pass
        inserted = self.pg.execute(
            "INSERT INTO team_object (digest, codec, crc32, nbytes, stored) SELECT * FROM unnest(%s::bytea[],"
            " %s::text[], %s::int8[], %s::int8[], %s::int8[]) ON CONFLICT DO NOTHING RETURNING stored",
            ([c.digest for c in todo], [c.codec for c in todo], [c.crc32 for c in todo], [c.nbytes for c in todo],
             [c.stored for c in todo])).fetchall()
        return len(inserted), sum(int(r[0]) for r in inserted)

    def _put(self, bucket: objects.ObjectStore, putters: _Putters, ref: ChunkRef) -> None:
        """Read and check one chunk (on this thread's own connection to the report) and upload it, confirmed."""
        data = blobs.chunk_bytes(putters.connection(), ref.chunk_id)
        _check_chunk(ref, data, self.path, self.address)
        bucket.put(bucket.key(ref.digest, ref.codec, ref.crc32), data, ref.crc32)

    def _checked(self, ref: ChunkRef) -> bytes:
        """A chunk's stored bytes, read from the report and checked (``_check_chunk``)."""
        data = blobs.chunk_bytes(self.sqlite, ref.chunk_id)
        _check_chunk(ref, data, self.path, self.address)
        return data

    def close(self) -> None:
        self.reader.shutdown(wait=True, cancel_futures=True)
        self.sqlite.close()
        self.pg.close()


def _batches(chunks: Sequence[ChunkRef]) -> list[list[ChunkRef]]:
    """Chunks in key order cut into BATCH_BYTES batches (key order: see the module's docstring)."""
    out: list[list[ChunkRef]] = []
    size = 0
    for ref in sorted(chunks, key=lambda c: (c.digest, c.codec, c.crc32)):
        if not out or size + ref.stored > BATCH_BYTES:
            out.append([])
            size = 0
        out[-1].append(ref)
        size += ref.stored
    return out


def _upload(store: server.StoreURL, path: Path, report_id: int, todo: list[ChunkRef], jobs: int,
            progress: Progress | None, heartbeat: Callable[[], None], bucket: objects.ObjectStore | None) -> tuple[int, int]:
    """Step 3 over ``jobs`` connections; progress is reported, and the staging row marked active (``heartbeat``),
    from this thread after each batch."""
    batches = _batches(todo)
    total = sum(c.stored for c in todo)
    done = sent = sent_bytes = 0
    if progress is not None:
        progress(0, total)
    if not batches:
        return 0, 0
    local = threading.local()
    uploaders: list[_Uploader] = []
    putters = None if bucket is None else _Putters(path, jobs * PUTS_PER_JOB)
    lock = threading.Lock()

    def work(batch: list[ChunkRef]) -> tuple[int, int]:
        uploader = getattr(local, "uploader", None)
        if uploader is None:
            uploader = local.uploader = _Uploader(store, path, report_id, bucket, putters)
            with lock:
                uploaders.append(uploader)
        return uploader.upload(batch)

    try:
        with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(batches)))) as pool:
            futures = [(pool.submit(work, b), sum(c.stored for c in b)) for b in batches]
            try:
                for future, size in futures:
                    n, nbytes = future.result()
                    sent, sent_bytes, done = sent + n, sent_bytes + nbytes, done + size
                    heartbeat()
                    if progress is not None:
                        progress(done, total)
            except BaseException:
                for future, _ in futures:
                    future.cancel()
                raise
    finally:
        for uploader in uploaders:
            uploader.close()
        if putters is not None:
            putters.close()
    return sent, sent_bytes


def _heartbeat(conn: "psycopg.Connection[Any]", report_id: int) -> None:
    """Mark the staging row active (its own short transaction; compatible with the uploaders' ``FOR KEY SHARE``)."""
    with conn.transaction():
        conn.execute("UPDATE team_report SET pushed_at = now() WHERE id = %s AND state = 'staging'", (report_id,))


def _publish(conn: "psycopg.Connection[Any]", report_id: int, snap: _Snapshot, display: str, held_in: str) -> bool:
    """Step 4, one transaction: tables, rows, history, and the row made ``ready``. False when a concurrent push of the
    same content published it first; an error when the staging row was deleted meanwhile."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock_shared(%s)", (server.GC_LOCK,))
        row = conn.execute("SELECT state FROM team_report WHERE id = %s FOR UPDATE", (report_id,)).fetchone()
        if row is None:
            raise TeamStoreError(f"{display}: the report being pushed was deleted meanwhile; push it again")
        if row[0] == "ready":
            return False
        lacking = conn.execute(
            f"SELECT COUNT(*) FROM team_report_chunk rc LEFT JOIN {held_in} c"
            " ON c.digest = rc.digest AND c.codec = rc.codec AND c.crc32 = rc.crc32"
            " WHERE rc.report_id = %s AND c.digest IS NULL", (report_id,)).fetchone()
        if lacking and lacking[0]:
            raise TeamStoreError(f"{display}: {lacking[0]} chunks are missing after the upload; push the report again")
        for name in ("team_table", "team_rows", "team_history"):
            conn.execute(f"DELETE FROM {name} WHERE report_id = %s", (report_id,))
        cur = conn.cursor()
        with cur.copy("COPY team_table (report_id, ord, name, kind, ddl, columns, has_rowid, n_rows) FROM STDIN") as copy:
            for ord_, t in enumerate(snap.layout.tables):
                copy.write_row((report_id, ord_, t.name, t.kind, t.ddl, _jsonb(list(t.columns)), t.has_rowid,
                                snap.counts.get(ord_)))
        with cur.copy("COPY team_rows (report_id, table_ord, part, data) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["int8", "int4", "int4", "bytea"])
            for ord_, part, data in snap.parts:
                copy.write_row((report_id, ord_, part, data))
        with cur.copy(
            "COPY team_history (report_id, op_name, operation_id, output_index, tensor_id, rank, kind, golden_tensor_id,"
            " desired_pcc, actual_pcc, matches, pcc, passed, metrics) FROM STDIN"
        ) as copy:
            for h in snap.history:
                copy.write_row((report_id, *h[:-1], None if h[-1] is None else _jsonb(h[-1])))
        f = snap.facts
        conn.execute(
            "UPDATE team_report SET state = 'ready', pushed_at = now(), ttnn_version = %s, captured_at = %s,"
            " n_operations = %s, n_tensors = %s, logical_bytes = %s, stored_bytes = %s WHERE id = %s",
            (f["ttnn_version"], f["captured_at"], f["n_operations"], f["n_tensors"], f["logical_bytes"],
             f["stored_bytes"], report_id),
        )
    return True


def push(
    report: str | os.PathLike[str], url: str, *, name: str | None = None, tags: Sequence[str] = (), jobs: int = 2,
    progress: Progress | None = None, stale_after: timedelta | float | None = None, chunks: str | None = None,
) -> PushResult:
    """Push the report (a folder or its database) to the store at ``url`` under ``name`` (or the name the URL ends
    with, or the report folder's name). ``progress(done_bytes, total_bytes)`` is called as chunks are uploaded.
    ``chunks`` (``s3://BUCKET/PREFIX``) makes a new store keep its chunk bytes in that bucket (``objects.py``); the
    store remembers it, so it is never needed again (given, it must be the same). First, the staging rows of pushes
    killed more than ``stale_after`` ago (a day by default, see ``gc.py``) are collected with the chunks only they
    referenced."""
    from ..report import resolve_path

    started = time.perf_counter()
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise InvalidArgumentError(f"jobs must be a number of connections from 1 up, not {jobs!r}")
    tag_list = list(tags)
    if not all(isinstance(t, str) and t for t in tag_list):
        raise InvalidArgumentError(f"tags must be non-empty strings, not {tag_list!r}")
    path = resolve_path(report)
    age = gc.stale_after(stale_after)
    store = server.parse_url(url, name=name)
    chosen = store.name or default_name(path)
    server.check_name(chosen)
    snap = snapshot(path)
    result = PushResult(chosen, snap.digest.hex(), False, chunks=len(snap.chunks), stored_bytes=snap.facts["stored_bytes"],
                        left_out=list(snap.layout.left_out))
    conn = server.connect(store)
    try:
        server.ensure_schema(conn, store, create=True)
        bucket = objects.adopt(conn, store, chunks, connections=jobs * PUTS_PER_JOB + 4)
        held_in = "team_chunk" if bucket is None else "team_object"
        result.stale_collected = gc.collect_stale(conn, store, age, bucket)[0]
        with server.mapped(store, f"pushing {chosen!r}"):
            report_id, todo = _claim(conn, chosen, snap, tag_list, store.display)
            if todo:
                _write_references(conn, report_id, snap.chunks)
                missing = _missing(conn, report_id, held_in)
                sent, sent_bytes = _upload(store, path, report_id, [c for c in snap.chunks if c.chunk_id in missing],
                                           jobs, progress, lambda: _heartbeat(conn, report_id), bucket)
                result.chunks_uploaded, result.bytes_uploaded = sent, sent_bytes
                result.created = _publish(conn, report_id, snap, store.display, held_in)
    finally:
        conn.close()
    result.seconds = time.perf_counter() - started
    return result
