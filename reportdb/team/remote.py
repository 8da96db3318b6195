"""A report in a team store, read through the same API as a SQLite report: ``reportdb.open("postgresql://.../NAME")``.

At open, the report's tables (everything but the chunk bytes, see ``pull.build``) are restored into a private
SQLite file in a temporary folder, with every ``rdb_chunk`` row present and its bytes left empty. A read
(``tensor``, ``shards``, ``verify_tensor``) first fetches the chunks it needs (one shard's with ``device=``; for a
window, only those it spans, in only the shards it overlaps) from the server by address, one query per call, each
checked against its row before it is stored, into that file, then runs the very code a local report runs: the same row checks,
crc32 on every read, window planning, ORM ``session()`` with the models of ``reportdb.models``, statistics. So a
remote report answers as the pulled file would, report tables of every age included, and costs the server only what
is read. The private file is deleted on ``close()``; chunks read stay cached in it until then.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from ..report import Report
from ..results import ReportSummary
from ..spec import Shards
from ..dtypes import numpy_dtype
from ..errors import CorruptionError, ReportDBError
from ..store import blobs, engine as engine_mod, rows as rows_mod, windows
from . import server
from .pull import build, find, prove_chunk, view_loader


class RemoteReport(Report):
    """A published report of a team store; read only. ``url`` is the store URL without a password, ``name`` the
    report's name."""

    def __init__(self, url: str) -> None:
        store = server.parse_url(url, need_name=True)
        assert store.name is not None
        self.url, self.name, self._store = store.display, store.name, store
        self._pg = server.connect(store)
        self._folder = Path(tempfile.mkdtemp(prefix="reportdb-remote-"))
        try:
            self._found = find(self._pg, store, store.name)
            mirror = self._folder / "db.sqlite"
            build(self._pg, store, self._found, mirror, with_data=False)
            self._fill = engine_mod.connect(mirror, readonly=False)
            self._fill.execute("PRAGMA journal_mode=OFF")  # a private cache: nothing to roll back to
            self._fill.execute("PRAGMA synchronous=OFF")
            self._filled: set[int] = set()
            self._chunk_address = blobs.address_kind(self._fill)
            super().__init__(mirror, "r")
            self._memo.group = 1  # the mirror holds only the chunks fetched for a read: list no others
        except BaseException:
            self._pg.close()
            shutil.rmtree(self._folder, ignore_errors=True)
            raise

    def __repr__(self) -> str:
        return f"RemoteReport({self.url!r}, {self.name!r})"

    def _fault_in(self, tensor_id: int, rank: int, window: Any = None, device: Any = None) -> None:
        """Fetch the bytes of the chunks a read needs that this copy does not hold yet: with ``device``, only that
        shard's (or those of a ``window`` of it); for a ``window``, only the chunks it spans, in only the shards it
        overlaps (as ``Report.tensor`` reads them). A read that cannot be planned fetches nothing: the local read
        that follows refuses it with its own message."""
        with self._lock:
            try:
                info, blob_ids = self._info(tensor_id, rank)
                wanted: list[tuple[int, Any]] = [(i, None) for i in range(len(info.shards))]
                if device is not None:
                    wanted = [(self._device_shard(info, device), window)]
                elif window is not None and len(info.shards) == 1:
                    wanted = [(0, window)]
                elif window is not None and info.shape is not None and all(
                        s.dtype == info.shards[0].dtype for s in info.shards):
                    boxes = rows_mod.shard_boxes(info)
                    if boxes is not None:
                        wanted = [(index, part) for index, part, _ in windows.split_window(info.shape, window, boxes)[1]]
                needed: set[int] = set()
                for index, part in wanted:
                    needed |= self._chunk_ids(blob_ids[index], info.shards[index], part)
            except ReportDBError:
                return
            self._fetch(sorted(needed), tensor_id)

    def _chunk_ids(self, blob_id: int, shard: Any, window: Any) -> set[int]:
        """The chunk ids of blob ``blob_id`` (the bytes of ``shard``) that hold ``window`` of it (all with None)."""
        if window is None:
            rows = self._fill.execute("SELECT chunk_id FROM rdb_blob_chunk WHERE blob_id = ?", (blob_id,)).fetchall()
        else:
            lo, hi = windows.plan_window(shard.shape, numpy_dtype(shard.dtype).itemsize, window).span
            rows = self._fill.execute(
                "SELECT bc.chunk_id FROM rdb_blob_chunk bc JOIN rdb_blob b ON b.id = bc.blob_id"
                " WHERE bc.blob_id = ? AND b.chunk_size > 0 AND bc.idx BETWEEN ? / b.chunk_size AND (? - 1) / b.chunk_size",
                (blob_id, lo, max(hi, lo + 1))).fetchall()
        return {r[0] for r in rows if type(r[0]) is int}

    def _fetch(self, chunk_ids: list[int], tensor_id: int) -> None:
        """Copy the bytes of chunks ``chunk_ids`` from the server, one query. Each chunk the server sends is checked
        against this copy's row before it is stored: one it was asked for, once, of the size the row gives (the
        server does not even send bytes above that size), with the crc32 and content address the row gives
        (``pull.prove_chunk``; the rows were proven by the report's digest at open); one missing is a CorruptionError."""
        codec = "codec" if self._has_codec else "NULL"
        expected = {
            r[0]: (r[1], r[2], r[3], r[4]) for r in self._fill.execute(
                f"SELECT id, nbytes, {codec}, digest, crc32 FROM rdb_chunk WHERE length(data) = 0"
                " AND id IN (SELECT value FROM json_each(?))",
                (json.dumps([c for c in chunk_ids if c not in self._filled]),))
        }
        if not expected:
            return
        what = f"{self.url}: report {self.name!r}, tensor {tensor_id}"
        with server.mapped(self._store, f"reading tensor {tensor_id} of {self.name!r}"), self._pg.transaction():
            cursor = self._pg.cursor()
            cursor.adapters.register_loader("bytea", view_loader())
            with cursor.copy(
                "COPY (SELECT rc.chunk_id, octet_length(c.data)::int8, CASE WHEN octet_length(c.data) <= LEAST(rc.nbytes,"
                " %s) THEN c.data END FROM team_report_chunk rc JOIN team_chunk c ON c.digest = rc.digest"
                " AND c.codec = rc.codec AND c.crc32 = rc.crc32 WHERE rc.report_id = %s AND rc.chunk_id = ANY(%s))"
                " TO STDOUT (FORMAT BINARY)", (blobs.MAX_CHUNK_SIZE, self._found.id, list(expected)),
            ) as copy:
                copy.set_types(["int8", "int8", "bytea"])
                self._fill.execute("BEGIN")
                added: list[int] = []
                try:
                    for chunk_id, size, data in copy.rows():
                        nbytes, compressed, address, crc = expected.pop(chunk_id, (None, None, None, None))
                        if nbytes is None or data is None or len(data) != size or not (
                                size == nbytes if compressed is None else 0 < size <= nbytes):
                            raise CorruptionError(
                                f"{what}: the store sent chunk {chunk_id} with {size} bytes, which its row "
                                f"({'not asked for' if nbytes is None else f'{nbytes} bytes'}) does not allow; refused")
                        prove_chunk((chunk_id, address, nbytes, crc, compressed, size, data), self._chunk_address, what)
                        self._fill.execute("UPDATE rdb_chunk SET data = ? WHERE id = ?", (data, chunk_id))
                        added.append(chunk_id)
                    if expected:
                        raise CorruptionError(f"{what}: the store lacks {len(expected)} of its chunks; push the report again")
                    self._fill.execute("COMMIT")
                except BaseException:
                    self._fill.execute("ROLLBACK")
                    raise
                self._filled.update(added)

    # The reads below take the local report's arguments as they are (``**kwargs``), so they follow its API.

    def tensor(self, tensor_id: int, rank: int = 0, **kwargs: Any) -> np.ndarray:
        window = kwargs.get("window")
        if window is None and kwargs.get("rows") is not None:
            window = (kwargs["rows"],)
        self._fault_in(tensor_id, rank, window, kwargs.get("device"))
        return super().tensor(tensor_id, rank, **kwargs)

    def shards(self, tensor_id: int, rank: int = 0, **kwargs: Any) -> Shards:
        self._fault_in(tensor_id, rank)
        return super().shards(tensor_id, rank, **kwargs)

    def verify_tensor(self, tensor_id: int, rank: int = 0, **kwargs: Any) -> int:
        self._fault_in(tensor_id, rank)
        return super().verify_tensor(tensor_id, rank, **kwargs)

    def check_store(self) -> list[str]:
        """The local checks on the report's rows (but chunk sizes, whose bytes are on the server), and the server's:
        every chunk the report references is stored, with the size its row gives."""
        with self._reading("the tensor tables") as conn:
            problems = rows_mod.store_problems(conn, self.path, self._tables, has_codec=self._has_codec, chunk_sizes=False)
        with server.mapped(self._store, f"checking {self.name!r}"), self._pg.transaction():
            row = self._pg.execute(
                "SELECT COUNT(*) FILTER (WHERE c.digest IS NULL), COUNT(*) FILTER (WHERE c.nbytes <> rc.nbytes)"
                " FROM team_report_chunk rc LEFT JOIN team_chunk c ON c.digest = rc.digest AND c.codec = rc.codec"
                " AND c.crc32 = rc.crc32 WHERE rc.report_id = %s", (self._found.id,)).fetchone()
        if row and row[0]:
            problems.append(f"{self.url}: report {self.name!r} references {row[0]} chunks the store lacks")
        if row and row[1]:
            problems.append(f"{self.url}: report {self.name!r} has {row[1]} chunks whose stored size is not their row's")
        return problems

    def summary(self) -> ReportSummary:
        """As a local report's, with the report's URL as its path and its chunks' stored bytes from the server."""
        return dataclasses.replace(super().summary(), path=f"{self.url}/{quote(self.name, safe='')}",
                                   stored_bytes=self._found.stored_bytes)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._fill.close()
            self._pg.close()
            shutil.rmtree(self._folder, ignore_errors=True)
