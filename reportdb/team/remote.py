"""A report in a team store, read through the same API as a SQLite report: ``reportdb.open("postgresql://.../NAME")``.

At open, the report's tables (everything but the chunk bytes, see ``pull.build``) are restored into a private
SQLite file in a temporary folder, with every ``rdb_chunk`` row present and its bytes left empty. A read
(``tensor``, ``shards``, ``verify_tensor``) first fetches the chunks it needs (for a window, only those the
window spans) from the server by address, one query per call, into that file, then runs the very code a local report runs: the same row checks,
crc32 on every read, window planning, ORM ``session()`` with the models of ``reportdb.models``, statistics. So a
remote report answers as the pulled file would, report tables of every age included, and costs the server only what
is read. The private file is deleted on ``close()``; chunks read stay cached in it until then.
"""

from __future__ import annotations

import dataclasses
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
from ..errors import ReportDBError
from ..store import engine as engine_mod, windows
from . import server
from .pull import build, find


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
            super().__init__(mirror, "r")
        except BaseException:
            self._pg.close()
            shutil.rmtree(self._folder, ignore_errors=True)
            raise

    def __repr__(self) -> str:
        return f"RemoteReport({self.url!r}, {self.name!r})"

    def _fault_in(self, tensor_id: int, rank: int, window: Any = None) -> None:
        """Fetch the bytes of the tensor's chunks that this copy does not hold yet; for a ``window`` of a tensor of
        one shard, only the chunks the window spans (a window that cannot be planned fetches nothing: the read that
        follows refuses it)."""
        with self._lock:
            if window is not None:
                info, blob_ids = self._info(tensor_id, rank)
                if len(info.shards) == 1:
                    shard = info.shards[0]
                    try:
                        lo, hi = windows.plan_window(shard.shape, numpy_dtype(shard.dtype).itemsize, window).span
                    except ReportDBError:
                        return
                    sql = ("SELECT bc.chunk_id FROM rdb_blob_chunk bc JOIN rdb_blob b ON b.id = bc.blob_id"
                           " WHERE bc.blob_id = ? AND b.chunk_size > 0"
                           " AND bc.idx BETWEEN ? / b.chunk_size AND (? - 1) / b.chunk_size")
                    self._fetch(self._fill.execute(sql, (blob_ids[0], lo, max(hi, lo + 1))).fetchall(), tensor_id)
                    return
            self._fetch(self._fill.execute(
                "SELECT DISTINCT bc.chunk_id FROM rdb_tensor t JOIN rdb_shard s ON s.tensor_pk = t.id"
                " JOIN rdb_blob_chunk bc ON bc.blob_id = s.blob_id WHERE t.tensor_id = ? AND t.rank = ?",
                (tensor_id, rank),
            ).fetchall(), tensor_id)

    def _fetch(self, rows: list[Any], tensor_id: int) -> None:
        """Copy the bytes of the chunks ``rows`` name (``(chunk_id,)`` rows) from the server, one query."""
        needed = [r[0] for r in rows if type(r[0]) is int and r[0] not in self._filled]
        if not needed:
            return
        with server.mapped(self._store, f"reading tensor {tensor_id} of {self.name!r}"), self._pg.transaction():
            with self._pg.cursor().copy(
                "COPY (SELECT rc.chunk_id, c.data FROM team_report_chunk rc JOIN team_chunk c ON c.digest = rc.digest"
                " AND c.codec = rc.codec AND c.crc32 = rc.crc32 WHERE rc.report_id = %s AND rc.chunk_id = ANY(%s))"
                " TO STDOUT (FORMAT BINARY)", (self._found.id, needed),
            ) as copy:
                copy.set_types(["int8", "bytea"])
                self._fill.execute("BEGIN")
                try:
                    for chunk_id, data in copy.rows():
                        self._fill.execute("UPDATE rdb_chunk SET data = ? WHERE id = ?", (data, chunk_id))
                        self._filled.add(chunk_id)
                    self._fill.execute("COMMIT")
                except BaseException:
                    self._fill.execute("ROLLBACK")
                    raise

    # The reads below take the local report's arguments as they are (``**kwargs``), so they follow its API.

    def tensor(self, tensor_id: int, rank: int = 0, **kwargs: Any) -> np.ndarray:
        window = kwargs.get("window")
        if window is None and kwargs.get("rows") is not None:
            window = (kwargs["rows"],)
        self._fault_in(tensor_id, rank, None if kwargs.get("device") is not None else window)
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
        problems = [p for p in super().check_store() if "rdb_chunk rows whose stored bytes" not in p]
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
