"""The reports a server offers: named at start, opened read-only once, looked up by name (never by path).

Each served report is one read-only :class:`reportdb.Report` for tensor reads and fixed statements, whose connection
is guarded by the Report's own lock, so the server's threads share it (SQLite work is serialized per report, numpy
work is not). The engine's functions (``reportdb.analysis``: golden roles, run against run, an operation's context,
locate) open ORM sessions, whose transactions span many calls and so cannot share a connection with other threads:
each such request borrows a read-only Report of its own from a small pool (:meth:`Served.engine`). The report tables
(operations, their tensors, golden comparison records) are read with fixed statements, so the store's statement time
bound applies and no request text ever becomes SQL.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Hashable, Iterator, Sequence

from ..analysis.golden import RECORD_TABLES, GoldenRecord as Record
from ..errors import InvalidArgumentError, ReportDBError, SchemaError
from ..report import Report, resolve_path
from ..store import engine
from ..store.blobs import MAX_CHUNK_SIZE
from .analyses import Analyses
from .params import ApiError

#: The tables the API reads besides reportdb's own, with the columns it reads from them.
_READ = {
    "operations": ("operation_id", "name"),
    "input_tensors": ("operation_id", "input_index", "tensor_id"),
    "output_tensors": ("operation_id", "output_index", "tensor_id"),
    "tensors": ("tensor_id", "shape", "dtype"),
    "rdb_comparison": ("kind", "tensor_id", "rank", "pcc", "passed"),
    **{table: ("tensor_id", "golden_tensor_id", "matches", "desired_pcc", "actual_pcc") for table in RECORD_TABLES.values()},
}


@dataclass(frozen=True)
class Operation:
    """One operation of a report with the ids of its input and output tensors, in argument order."""

    id: int
    name: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


def report_names(paths: Sequence[str | os.PathLike[str]]) -> dict[str, Path]:
    """Each report's name (the database file's stem, or its folder's name for ``.../db.sqlite``), made unique with
    ``-2``, ``-3`` in the order given, mapped to its database file."""
    names: dict[str, Path] = {}
    for given in paths:
        db = resolve_path(given)
        base = (db.parent.name if db.name == "db.sqlite" else db.stem) or "report"
        name, n = base, 1
        while name in names:
            n += 1
            name = f"{base}-{n}"
        names[name] = db
    return names


#: Idle read-only Reports a served report keeps for the engine's requests (more are opened while more run at once).
ENGINE_POOL = 4


class Served:
    """One report being served: its name, database file, read-only Report and the columns of its report tables."""

    def __init__(self, name: str, path: Path) -> None:
        self.name = name
        self.path = path
        self._pool_lock = threading.Lock()
        self._idle: list[Report] = []
        self._closed = False
        self.report = Report(path, "r")
        try:
            with self.sql("the report tables") as conn:
                present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                self.columns: dict[str, set[str]] = {
                    t: {r[1] for r in conn.execute(f"PRAGMA table_info({engine.quoted(t)})")} for t in _READ if t in present
                }
        except BaseException:
            self.report.close()
            raise
        self.has_store = "rdb_tensor" in present
        self._chunk_lock = threading.Lock()
        self._chunk_bytes: dict[tuple[int | None, int], int] = {}

    @contextlib.contextmanager
    def sql(self, what: str) -> Iterator[sqlite3.Connection]:
        """The report's connection for fixed statements on ``what``; a SQLite error is the ReportDBError it stands for
        (a timeout, damage) or, for a table not laid out as a TTNN report's, a SchemaError."""
        with self.report.connection() as conn:
            try:
                yield conn
            except sqlite3.Error as exc:
                mapped = engine.translate(exc, self.path, what=what)
                raise (mapped or SchemaError(f"{self.path}: {what} cannot be read as a TTNN report's: {exc}")) from exc

    def readable(self, table: str, *columns: str) -> bool:
        """Whether ``table`` exists with every one of ``columns``."""
        return table in self.columns and set(columns) <= self.columns[table]

    def _rank_filter(self, table: str, rank: int) -> tuple[str, tuple[int, ...]]:
        """``WHERE rank=?`` for a table that has a ``rank`` column; older reports hold one rank (0) and have none."""
        if "rank" in self.columns.get(table, ()):
            return " WHERE rank=?", (rank,)
        return ("", ()) if rank == 0 else (" WHERE 0", ())

    def count(self, table: str) -> int:
        """The rows of a report table (0 when it is absent)."""
        if table not in self.columns:
            return 0
        with self.sql(f"table {table}") as conn:
            return int(conn.execute(f"SELECT COUNT(*) FROM {engine.quoted(table)}").fetchone()[0])

    def metadata(self, key: str) -> str | None:
        """A value of the ``report_metadata`` table (ttnn 0.81 and later), None when absent."""
        with self.sql("table report_metadata") as conn:
            present = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='report_metadata'").fetchone()
            if present is None:
                return None
            row = conn.execute("SELECT value FROM report_metadata WHERE key=?", (key,)).fetchone()
        return None if row is None or row[0] is None else str(row[0])

    def records(self, kind: str, rank: int = 0, tensor_id: int | None = None) -> dict[int, Record]:
        """The golden comparison records of ``kind`` (``local`` or ``global``) for ``rank``, by tensor id (the last
        one of a tensor recorded twice); only ``tensor_id``'s when given."""
        table = RECORD_TABLES[kind]
        if not self.readable(table, "tensor_id"):
            return {}
        cols = self.columns[table]
        picked = ", ".join(c if c in cols else "NULL" for c in ("golden_tensor_id", "matches", "desired_pcc", "actual_pcc"))
        where, args = self._rank_filter(table, rank)
        if tensor_id is not None:
            where, args = f"{where or ' WHERE 1'} AND tensor_id=?", (*args, tensor_id)
        with self.sql(f"table {table}") as conn:
            rows = conn.execute(f"SELECT tensor_id, {picked} FROM {table}{where} ORDER BY rowid", args).fetchall()
        found: dict[int, Record] = {}
        for tid, golden, matches, desired, recorded in rows:
            if isinstance(tid, int):
                found[tid] = Record(
                    kind, tid, rank, golden if isinstance(golden, int) else None, _real(desired), _real(recorded),
                    None if matches is None else bool(matches),
                )
        return found

    def record(self, kind: str, tensor_id: int, rank: int) -> Record:
        """The record of one tensor (read alone: every hover of the page asks), or a 404 saying where records are."""
        found = self.records(kind, rank, tensor_id).get(tensor_id)
        if found is None:
            raise ApiError(404, f"report {self.name}: tensor {tensor_id} (rank {rank}) has no {kind} comparison record",
                           f"GET api/reports/{self.name}/operations lists the tensors with records")
        return found

    def stored_results(self) -> dict[tuple[str, int, int], tuple[float | None, bool | None]]:
        """PCC and verdict of every comparison ``reportdb compare --golden --store`` kept in ``rdb_comparison``."""
        if not self.readable("rdb_comparison", *_READ["rdb_comparison"]):
            return {}
        with self.sql("table rdb_comparison") as conn:
            rows = conn.execute("SELECT kind, tensor_id, rank, pcc, passed FROM rdb_comparison").fetchall()
        return {(k, t, r): (_real(p), None if ok is None else bool(ok)) for k, t, r, p, ok in rows}

    def operations(self, rank: int = 0) -> list[Operation]:
        """Every operation of ``rank`` in id order with its input and output tensor ids (rows whose ids are no
        numbers left out; a position that is none counts as 0). Sorted and filtered by SQLite, grouped here: a
        5,000-operation report's links are 10,000 rows."""
        if not self.readable("operations", "operation_id"):
            return []
        links: dict[str, dict[int, tuple[int, ...]]] = {}
        with self.sql("the operation tables") as conn:
            for table, index in (("input_tensors", "input_index"), ("output_tensors", "output_index")):
                links[table] = {}
                if self.readable(table, "operation_id", "tensor_id"):
                    where, args = self._rank_filter(table, rank)
                    where = f"{where or ' WHERE 1'} AND typeof(operation_id) = 'integer' AND typeof(tensor_id) = 'integer'"
                    position = f"CASE WHEN typeof({index}) = 'integer' THEN {index} ELSE 0 END" if index in self.columns[table] else "rowid"
                    rows = conn.execute(f"SELECT operation_id, tensor_id FROM {table}{where} "
                                        f"ORDER BY operation_id, {position}, tensor_id", args).fetchall()
                    links[table] = {op_id: tuple(t for _, t in group) for op_id, group in itertools.groupby(rows, key=_first)}
            where, args = self._rank_filter("operations", rank)
            name = "name" if "name" in self.columns["operations"] else "''"
            rows = conn.execute(f"SELECT operation_id, {name} FROM operations{where} ORDER BY operation_id", args).fetchall()
        inputs, outputs = links["input_tensors"], links["output_tensors"]
        return [
            Operation(op_id, "" if op_name is None else str(op_name), inputs.get(op_id, ()), outputs.get(op_id, ()))
            for op_id, op_name in rows
            if isinstance(op_id, int)
        ]

    def producer(self, tensor_id: int, rank: int = 0) -> str | None:
        """The name of the operation that output ``tensor_id`` (what a tolerance policy's rules match), or None."""
        if not (self.readable("output_tensors", "operation_id", "tensor_id") and self.readable("operations", "operation_id", "name")):
            return None
        where, args = self._rank_filter("output_tensors", rank)
        where = f"{where or ' WHERE 1'} AND o.tensor_id=?".replace("rank=?", "o.rank=?")
        with self.sql("the operation tables") as conn:
            row = conn.execute(f"SELECT p.name FROM output_tensors o JOIN operations p ON p.operation_id = o.operation_id"
                               f"{where} ORDER BY o.rowid LIMIT 1", (*args, tensor_id)).fetchone()
        return row[0] if row is not None and isinstance(row[0], str) else None

    def tensor_totals(self) -> tuple[int, int, int]:
        """Stored tensors: how many, their logical bytes in all and the largest one's (no tensor bytes read)."""
        if not self.has_store:
            return 0, 0, 0
        with self.sql("table rdb_tensor") as conn:
            count, total, largest = conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(nbytes), 0), COALESCE(MAX(nbytes), 0) FROM rdb_tensor"
            ).fetchone()
        return int(count), int(total), int(largest)

    def chunk_bytes(self, tensor_id: int | None = None, rank: int = 0) -> int:
        """The most bytes one chunk of ``tensor_id`` (None: of any tensor) unpacks to: a read holds a whole chunk
        however small its window, so this is part of what a request reserves of the memory budget. A value that is
        no size counts as the largest chunk reportdb reads (the store refuses more)."""
        if not self.has_store:
            return 0
        key = (tensor_id, rank)
        with self._chunk_lock:
            if key in self._chunk_bytes:
                return self._chunk_bytes[key]
        sql = ("SELECT MAX(MIN(b.chunk_size, b.nbytes)) FROM rdb_blob b" if tensor_id is None else
               "SELECT MAX(MIN(b.chunk_size, b.nbytes)) FROM rdb_tensor t JOIN rdb_shard s ON s.tensor_pk = t.id "
               "JOIN rdb_blob b ON b.id = s.blob_id WHERE t.tensor_id = ? AND t.rank = ?")
        with self.sql("table rdb_blob") as conn:
            row = conn.execute(sql, () if tensor_id is None else (tensor_id, rank)).fetchone()
        found = row[0] if row is not None else None
        nbytes = found if isinstance(found, int) and 0 <= found <= MAX_CHUNK_SIZE else (0 if found is None else MAX_CHUNK_SIZE)
        with self._chunk_lock:
            self._chunk_bytes[key] = nbytes
        return nbytes

    def stored_keys(self) -> set[tuple[int, int]]:
        """Every stored ``(tensor_id, rank)`` (fetched at once: 15,000 rows row by row took ~0.2 s)."""
        if not self.has_store:
            return set()
        with self.sql("table rdb_tensor") as conn:
            return {(t, r) for t, r in conn.execute("SELECT tensor_id, rank FROM rdb_tensor").fetchall()}

    @contextlib.contextmanager
    def engine(self) -> Iterator[Report]:
        """A read-only Report of this file for this request alone, for the engine's functions: they open ORM
        sessions, whose transactions must not interleave with other threads' work on one connection. Taken from the
        idle ones (at most :data:`ENGINE_POOL` kept), else opened; closed at the end when the report was closed
        meanwhile or enough are idle."""
        with self._pool_lock:
            if self._closed:
                raise ApiError(503, f"report {self.name} is no longer served", "the server is stopping; try again")
            report = self._idle.pop() if self._idle else None
        if report is None:
            report = Report(self.path, "r")
        try:
            yield report
        finally:
            with self._pool_lock:
                keep = not self._closed and len(self._idle) < ENGINE_POOL
                if keep:
                    self._idle.append(report)
            if not keep:
                report.close()

    def close(self) -> None:
        """Close the shared Report and the idle pooled ones (one lent out closes when its request ends)."""
        with self._pool_lock:
            self._closed = True
            idle, self._idle = self._idle, []
        try:
            for report in idle:
                report.close()
        finally:
            self.report.close()


def _first(row: tuple[Any, ...]) -> Any:
    """A row's first column (what ``operations`` groups links by)."""
    return row[0]


def _real(value: Any) -> float | None:
    """A stored number as a float; anything else (NULL, text) as None."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class ServedReports:
    """The fixed set of served reports by name, the reports a host app's resolver opened (by path, the least recently
    used idle one closed beyond ``max_resolved``), and the comparison results computed while serving them (a small
    LRU, so the operation list shows what was recomputed)."""

    CACHE_SIZE = 512

    def __init__(self, paths: Sequence[str | os.PathLike[str]], *, resolving: bool = False, max_resolved: int = 16) -> None:
        if not paths and not resolving:
            raise InvalidArgumentError("name at least one report to serve (or give a resolver)")
        self.max_resolved = max_resolved
        self._resolved: collections.OrderedDict[Path, tuple[Served, int]] = collections.OrderedDict()
        self._resolved_lock = threading.Lock()
        self.by_name: dict[str, Served] = {}
        try:
            for name, path in report_names(paths).items():
                self.by_name[name] = Served(name, path)
        except BaseException:
            self.close()
            raise
        self._lock = threading.Lock()
        self._cache: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()
        #: The golden analyses running in the background (or failed), per policy and report.
        self.analyses = Analyses()

    @contextlib.contextmanager
    def resolved(self, path: str | os.PathLike[str]) -> Iterator[Served]:
        """The report at ``path`` (a resolver's answer), opened read-only on first use and kept open for the next
        requests; it is not closed while a request holds it."""
        db = resolve_path(path)
        with self._resolved_lock:
            entry = self._resolved.get(db)
            if entry is None:
                served = Served(report_names([db]).popitem()[0], db)
                self._resolved[db] = entry = (served, 0)
                self._close_idle()
            served, users = entry
            self._resolved[db] = (served, users + 1)
            self._resolved.move_to_end(db)
        try:
            yield served
        finally:
            with self._resolved_lock:
                served, users = self._resolved[db]
                self._resolved[db] = (served, users - 1)
                self._close_idle()

    def _close_idle(self) -> None:
        """Close the least recently used idle resolved reports beyond ``max_resolved`` (the lock is held)."""
        for db in [db for db, (_, users) in self._resolved.items() if users == 0][: max(0, len(self._resolved) - self.max_resolved)]:
            self._resolved.pop(db)[0].close()

    def cached(self, key: Hashable) -> Any:
        """A result kept under ``key``, or None."""
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        return None

    def keep(self, key: Hashable, value: Any) -> None:
        """Keep a result (the least recently used goes when the cache is full)."""
        with self._lock:
            self._cache[key] = value
            self._cache.move_to_end(key)
            while len(self._cache) > self.CACHE_SIZE:
                self._cache.popitem(last=False)

    def close(self) -> None:
        """Close every report (each closes even when another fails)."""
        problems: list[ReportDBError] = []
        with self._resolved_lock:
            resolved = [served for served, _ in self._resolved.values()]
            self._resolved.clear()
        for served in [*self.by_name.values(), *resolved]:
            try:
                served.close()
            except ReportDBError as exc:
                problems.append(exc)
        if problems:
            raise problems[0]
