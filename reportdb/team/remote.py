"""A report in a team store, read through the same API as a SQLite report: ``reportdb.open("postgresql://.../NAME")``.

At open, the report's tables (everything but the chunk bytes, see ``pull.build``) are restored into a private
SQLite file in a temporary folder, with every ``rdb_chunk`` row present and its bytes left empty. The Report on that
file reads through a chunk source of its own (:class:`RemoteChunks`, ``reportdb.chunk_source``): a read
(``tensor``, ``shards``, ``verify_tensor``) first has it fetch the chunks it needs (one shard's with ``device=``; for a
window, only those it spans, in only the shards it overlaps) from the server by address, one query per call, each
checked against its row before it is stored, into that file, then runs the very code a local report runs: the same row checks,
crc32 on every read, window planning, ORM ``session()`` with the models of ``reportdb.models``, statistics. So a
remote report answers as the pulled file would, report tables of every age included, and costs the server only what
is read. The private file is deleted on ``close()``; chunks read stay cached in it until then. In a store keeping
chunk bytes in object storage, a read fetches the objects of the chunks it needs instead, checked the same way.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence
from urllib.parse import quote

from ..chunk_source import ChunkSource, ShardRead
from ..dtypes import numpy_dtype
from ..errors import CorruptionError
from ..report import Report
from ..results import ReportSummary
from ..store import blobs, engine as engine_mod, windows
from . import objects, server
from .pull import build, find, prove_chunk, view_loader


class RemoteChunks(ChunkSource):
    """The chunks of report ``name`` in a team store, fetched into a private copy of its rows (:attr:`path`, in a
    temporary folder this source deletes on ``close()``) as reads need them. ``url`` is the store URL without a
    password."""

    complete = False
    layout_group = 1  # the copy holds only the chunks fetched for past reads: list no others with them

    def __init__(self, url: str) -> None:
        store = server.parse_url(url, need_name=True)
        assert store.name is not None
        self.url, self.name, self._store = store.display, store.name, store
        self._pg = server.connect(store)
        self._folder = Path(tempfile.mkdtemp(prefix="reportdb-remote-"))
        try:
            self._found = find(self._pg, store, store.name)
            self._bucket = objects.open_store(self._pg, store)
            self.path = self._folder / "db.sqlite"
            build(self._pg, store, self._found, self.path, with_data=False, bucket=self._bucket)
            self._fill = engine_mod.connect(self.path, readonly=False)
        except BaseException:
            self._pg.close()
            shutil.rmtree(self._folder, ignore_errors=True)
            raise
        try:
            self._fill.execute("PRAGMA journal_mode=OFF")  # a private cache: nothing to roll back to
            self._fill.execute("PRAGMA synchronous=OFF")
            self._filled: set[int] = set()
            self._chunk_address = blobs.address_kind(self._fill)
            self._has_codec = any(r[1] == "codec" for r in self._fill.execute("PRAGMA table_info(rdb_chunk)"))
        except BaseException:
            self.close()
            raise

    def missing(self, reads: Sequence[ShardRead]) -> list[int]:
        """The chunks of ``reads`` (for a window, only those it spans) whose bytes this copy has not fetched yet."""
        needed: set[int] = set()
        for blob_id, shard, window in reads:
            if window is None:
                rows = self._fill.execute("SELECT chunk_id FROM rdb_blob_chunk WHERE blob_id = ?", (blob_id,)).fetchall()
            else:
                lo, hi = windows.plan_window(shard.shape, numpy_dtype(shard.dtype).itemsize, window).span
                rows = self._fill.execute(
                    "SELECT bc.chunk_id FROM rdb_blob_chunk bc JOIN rdb_blob b ON b.id = bc.blob_id WHERE bc.blob_id = ?"
                    " AND b.chunk_size > 0 AND bc.idx BETWEEN ? / b.chunk_size AND (? - 1) / b.chunk_size",
                    (blob_id, lo, max(hi, lo + 1))).fetchall()
            needed.update(r[0] for r in rows if type(r[0]) is int and r[0] not in self._filled)
        return sorted(needed)

    def fetch(self, chunk_ids: list[int], what: str) -> None:
        """Copy the bytes of chunks ``chunk_ids`` from the server, one query. Each chunk the server sends is checked
        against this copy's row before it is stored: one it was asked for, once, of the size the row gives (the
        server does not even send bytes above that size), with the crc32 and content address the row gives
        (``pull.prove_chunk``; the rows were proven by the report's digest at open); one missing is a CorruptionError."""
        codec = "codec" if self._has_codec else "NULL"
        expected = {
            r[0]: (r[1], r[2], r[3], r[4]) for r in self._fill.execute(
                f"SELECT id, nbytes, {codec}, digest, crc32 FROM rdb_chunk WHERE length(data) = 0"
                " AND id IN (SELECT value FROM json_each(?))", (json.dumps(chunk_ids),))
        }
        if not expected:
            return
        named = f"{self.url}: report {self.name!r}, {what}"
        with server.mapped(self._store, f"reading {what} of {self.name!r}"), self._pg.transaction():
            if self._bucket is None:
                cursor = self._pg.cursor()
                cursor.adapters.register_loader("bytea", view_loader())
                with cursor.copy(
                    "COPY (SELECT rc.chunk_id, octet_length(c.data)::int8, CASE WHEN octet_length(c.data) <= LEAST("
                    "rc.nbytes, %s) THEN c.data END FROM team_report_chunk rc JOIN team_chunk c ON c.digest = rc.digest"
                    " AND c.codec = rc.codec AND c.crc32 = rc.crc32 WHERE rc.report_id = %s AND rc.chunk_id = ANY(%s))"
                    " TO STDOUT (FORMAT BINARY)", (blobs.MAX_CHUNK_SIZE, self._found.id, list(expected)),
                ) as copy:
                    copy.set_types(["int8", "int8", "bytea"])
                    self._store_chunks(copy.rows(), expected, named)
            else:
                sizes = self._pg.execute(
                    "SELECT rc.chunk_id, c.stored FROM team_report_chunk rc JOIN team_object c ON c.digest = rc.digest"
                    " AND c.codec = rc.codec AND c.crc32 = rc.crc32 WHERE rc.report_id = %s AND rc.chunk_id = ANY(%s)",
                    (self._found.id, list(expected))).fetchall()
                self._store_chunks(self._objects(sizes, expected, named), expected, named)

    def _objects(self, sizes: list[tuple[Any, Any]], expected: dict[int, tuple[Any, ...]],
                 named: str) -> Iterator[tuple[Any, Any, Any]]:
        """(chunk id, size, bytes) of the chunks ``sizes`` lists (id, object size), fetched from the bucket by the
        address, codec and crc32 of this copy's proven row; a size its row does not allow is not fetched (None)."""
        assert self._bucket is not None
        bucket = self._bucket

        def fetch(item: tuple[Any, Any]) -> bytes | None:
            chunk_id, size = item
            nbytes, compressed, address, crc = expected.get(chunk_id, (None, None, None, None))
            if nbytes is None or type(size) is not int or not (size == nbytes if compressed is None else 0 < size <= nbytes):
                return None
            return bucket.get(bucket.key(address, compressed or "", crc), size, f"{named}, chunk {chunk_id}")

        for (chunk_id, size), data in objects.ordered(sizes, fetch):
            yield chunk_id, size, data

    def _store_chunks(self, received: Iterable[tuple[Any, Any, Any]], expected: dict[int, tuple[Any, ...]],
                      named: str) -> None:
        """Write the (chunk id, size, bytes) the store sent into this copy, each checked against the copy's row
        before it is stored (see ``fetch``), in one transaction: all of them or none."""
        self._fill.execute("BEGIN")
        added: list[int] = []
        try:
            for chunk_id, size, data in received:
                nbytes, compressed, address, crc = expected.pop(chunk_id, (None, None, None, None))
                if nbytes is None or data is None or len(data) != size or not (
                        size == nbytes if compressed is None else 0 < size <= nbytes):
                    raise CorruptionError(
                        f"{named}: the store sent chunk {chunk_id} with {size} bytes, which its row "
                        f"({'not asked for' if nbytes is None else f'{nbytes} bytes'}) does not allow; refused")
                prove_chunk((chunk_id, address, nbytes, crc, compressed, size, data), self._chunk_address, named)
                self._fill.execute("UPDATE rdb_chunk SET data = ? WHERE id = ?", (data, chunk_id))
                added.append(chunk_id)
            if expected:
                raise CorruptionError(f"{named}: the store lacks {len(expected)} of its chunks; push the report again")
            self._fill.execute("COMMIT")
        except BaseException:
            self._fill.execute("ROLLBACK")
            raise
        self._filled.update(added)

    def store_problems(self) -> list[str]:
        """The server's check of the chunks: every chunk the report references is stored, with the size its row gives
        (the copy's rows are checked as a local report's, but for the chunks' stored sizes, whose bytes are here)."""
        with server.mapped(self._store, f"checking {self.name!r}"), self._pg.transaction():
            row = self._pg.execute(
                "SELECT COUNT(*) FILTER (WHERE c.digest IS NULL), COUNT(*) FILTER (WHERE c.nbytes <> rc.nbytes)"
                f" FROM team_report_chunk rc LEFT JOIN {'team_chunk' if self._bucket is None else 'team_object'} c ON c.digest = rc.digest AND c.codec = rc.codec"
                " AND c.crc32 = rc.crc32 WHERE rc.report_id = %s", (self._found.id,)).fetchone()
        problems = []
        if row and row[0]:
            problems.append(f"{self.url}: report {self.name!r} references {row[0]} chunks the store lacks")
        if row and row[1]:
            problems.append(f"{self.url}: report {self.name!r} has {row[1]} chunks whose stored size is not their row's")
        return problems

    def summary(self, local: ReportSummary) -> ReportSummary:
        """As a local report's, with the report's URL as its path and its chunks' stored bytes from the server."""
        return dataclasses.replace(local, path=f"{self.url}/{quote(self.name, safe='')}",
                                   stored_bytes=self._found.stored_bytes)

    def close(self) -> None:
        """Close both connections and delete the private copy."""
        try:
            self._fill.close()
        finally:
            self._pg.close()
            shutil.rmtree(self._folder, ignore_errors=True)


class RemoteReport(Report):
    """A published report of a team store; read only: a Report of the private copy of its rows that reads through
    :class:`RemoteChunks`. ``url`` is the store URL without a password, ``name`` the report's name."""

    def __init__(self, url: str) -> None:
        self._source = source = RemoteChunks(url)
        self.url, self.name = source.url, source.name
        try:
            super().__init__(source.path, "r")
        except BaseException:
            source.close()
            raise

    def __repr__(self) -> str:
        return f"RemoteReport({self.url!r}, {self.name!r})"
