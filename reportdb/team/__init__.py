"""A team report store on PostgreSQL: many reports from many hosts in one database, tensors shared by content.

``push`` a report (atomic, idempotent by content digest, resumable, ``jobs`` connections), ``pull`` it back as a
self-contained SQLite report, ``list_reports`` with filters, ``delete`` one (chunks no other report uses are
collected, safely while others push), ``history`` of an operation's metrics against golden across runs, and
``open_remote`` (also ``reportdb.open("postgresql://HOST/DATABASE/NAME")``) to read one with the same API as a
SQLite report. ``merge`` joins the per-rank reports of a multi-host run into one (no server needed).

A store may keep its chunk bytes in S3-compatible object storage instead (``push(..., chunks="s3://B/P")`` on its
first push, ``objects.py``); ``verify`` re-reads every chunk of a store and names its damaged reports, ``collect``
removes what nothing names.

The server needs PostgreSQL 12 or newer and no extension; the store's tables are created on the first push. The
design (what is shared, what is kept per report, how concurrent pushes and deletes stay safe, how killed pushes are
collected) is in the docstrings of ``schema.py``, ``push.py``, ``gc.py``, ``pull.py``, ``remote.py`` and
``objects.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime, timedelta, timezone
from typing import Any

from ..errors import InvalidArgumentError, ReportNotFoundError
from ..results import Result
from . import gc, objects, server
from .merge import MergeResult, merge
from .server import is_store_url, report_url
from .check import StoreVerifyResult, verify
from .pull import PullResult, pull
from .push import PushResult, push

__all__ = ["push", "pull", "list_reports", "delete", "collect", "verify", "history", "open_remote", "report_url", "is_store_url", "merge",
           "PushResult", "PullResult", "MergeResult", "DeleteResult", "CollectResult", "StoreVerifyResult"]

@dataclass(frozen=True)
class StoredReport(Result):
    """One published report of a team store, as ``reportdb reports`` lists it (``digest``: its content's, in hex)."""

    name: str
    ttnn_version: str | None
    captured_at: datetime | None
    pushed_at: datetime
    n_operations: int
    n_tensors: int
    logical_bytes: int
    stored_bytes: int
    tags: tuple[str, ...]
    digest: str
    state: str = "ready"  # 'staging': a push under way, or killed (``pushed_at`` is then its last activity)


_LIST_COLUMNS = tuple(f.name for f in fields(StoredReport))


def _report_filters(prefix: str, name: str | None, tag: str | None, *, staging: bool = False) -> tuple[list[str], list[Any]]:
    """WHERE clauses and their parameters that keep the ready reports (and the staging ones with ``staging``) whose
    name holds ``name`` and tags ``tag``."""
    clauses, params = ([] if staging else [f"{prefix}state = 'ready'"]), []  # type: list[str], list[Any]
    if name:
        clauses.append(f"strpos({prefix}name, %s) > 0")
        params.append(name)
    if tag:
        from psycopg.types.json import Jsonb

        clauses.append(f"{prefix}tags @> %s")
        params.append(Jsonb([tag]))
    return clauses, params


def _since(value: datetime | str | None) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value if value is None or value.tzinfo else value.replace(tzinfo=timezone.utc)
    try:
        parsed = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"since must be a date or time (ISO 8601, 2026-11-30 or 2026-11-30T08:00), not {value!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def list_reports(url: str, *, name: str | None = None, tag: str | None = None,
                 since: datetime | str | None = None, limit: int | None = None,
                 include_staging: bool = False) -> list[StoredReport]:
    """The published reports of the store, newest push first: name, ttnn version, capture and push times,
    operations, tensors, logical and stored bytes, tags, content digest. ``name``: a substring of the name; ``tag``:
    one of its tags; ``since``: pushed at or after (a datetime or ISO text, UTC unless it says);
    ``include_staging``: also pushes under way or killed (``state`` 'staging', ``pushed_at`` their last activity;
    ``delete`` removes one, and the next push or delete collects those untouched for a day)."""
    store = server.parse_url(url)
    since_at = _since(since)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidArgumentError(f"limit must be a positive number, not {limit!r}")
    conn = server.connect(store)
    try:
        if not server.ensure_schema(conn, store, create=False):
            return []
        clauses, params = _report_filters("", name, tag, staging=include_staging)
        if since_at is not None:
            clauses.append("pushed_at >= %s")
            params.append(since_at)
        sql = (f"SELECT {', '.join(_LIST_COLUMNS)} FROM team_report WHERE {' AND '.join(clauses) or 'TRUE'}"
               f" ORDER BY pushed_at DESC, id DESC" + (f" LIMIT {int(limit)}" if limit else ""))
        with server.mapped(store, "listing reports"):
            rows = conn.execute(sql.encode(), params).fetchall()
    finally:
        conn.close()
    listed = [dict(zip(_LIST_COLUMNS, row)) for row in rows]
    counts = ("n_tensors", "logical_bytes", "stored_bytes")  # NULL while a push stages
    return [StoredReport(**{**r, **{k: r[k] or 0 for k in counts}, "digest": bytes(r["digest"]).hex(),
                            "tags": tuple(r["tags"]) if isinstance(r["tags"], list) and all(
                                isinstance(t, str) for t in r["tags"]) else ()}) for r in listed]


@dataclass(frozen=True)
class DeleteResult(Result):
    """What ``delete`` removed: the report ``name``, and the chunks no other report used (their count and raw bytes)."""

    name: str
    chunks_collected: int
    bytes_collected: int


def delete(url: str, name: str | None = None, *, stale_after: timedelta | float | None = None) -> DeleteResult:
    """Remove report ``name`` (published, or a push's leftover staging row) and collect the chunks that no other
    report references; then collect the staging rows of pushes killed more than ``stale_after`` ago (``gc.py``:
    the order of the work, and why it is safe while others push)."""
    store = server.parse_url(url, name=name, need_name=True)
    assert store.name is not None
    age = gc.stale_after(stale_after)
    conn = server.connect(store)
    try:
        if not server.ensure_schema(conn, store, create=False):
            raise ReportNotFoundError(f"{store.display}: no report {store.name!r} (the store is empty)")
        bucket = objects.open_store(conn, store)
        with server.mapped(store, f"deleting {store.name!r}"):
            row = conn.execute("SELECT id FROM team_report WHERE name = %s FOR UPDATE", (store.name,)).fetchone()
            if row is None:
                conn.rollback()
                raise ReportNotFoundError(f"{store.display}: no report {store.name!r}")
            collected, nbytes = gc.remove(conn, [row[0]], bucket)
        _, stale_chunks, stale_bytes = gc.collect_stale(conn, store, age, bucket)
    finally:
        conn.close()
    return DeleteResult(store.name, collected + stale_chunks, nbytes + stale_bytes)


@dataclass(frozen=True)
class CollectResult(Result):
    """What ``collect`` removed: staging rows of killed pushes (``stale``), the chunks only they used, and objects
    in the store's bucket that nothing named (``objects``; 0 in a store keeping chunks in PostgreSQL)."""

    stale: int
    chunks_collected: int
    bytes_collected: int
    objects: int


#: How old an object without a row must be before ``collect`` deletes it.
OBJECT_GRACE = timedelta(hours=1)


def collect(url: str, *, stale_after: timedelta | float | None = None,
            grace: timedelta | float = OBJECT_GRACE) -> CollectResult:
    """Garbage-collect the store: the staging rows of pushes killed more than ``stale_after`` ago (as every push
    and delete does) and, in a store keeping chunks in object storage, the objects under its prefix that no row and
    no push under way names, older than ``grace`` (a timedelta or seconds; 0 takes all). Safe while others push
    (``gc.py``); lists the whole bucket, so it is run now and then (``reportdb gc``), not on every delete."""
    store = server.parse_url(url)
    age = gc.stale_after(stale_after)
    if isinstance(grace, bool) or not isinstance(grace, (timedelta, int, float)) or \
            (grace if isinstance(grace, timedelta) else timedelta(seconds=grace)) < timedelta(0):
        raise InvalidArgumentError(f"grace must be a timedelta or a number of seconds from 0 up, not {grace!r}")
    conn = server.connect(store)
    try:
        if not server.ensure_schema(conn, store, create=False):
            return CollectResult(0, 0, 0, 0)
        bucket = objects.open_store(conn, store)
        stale, chunks, nbytes = gc.collect_stale(conn, store, age, bucket)
        swept = 0 if bucket is None else gc.collect_objects(
            conn, store, bucket, grace if isinstance(grace, timedelta) else timedelta(seconds=grace))
    finally:
        conn.close()
    return CollectResult(stale, chunks, nbytes, swept)


@dataclass(frozen=True)
class HistoryRow(Result):
    """One output of an operation in one run of a team store against its golden: the record the run wrote and, where
    the report kept a recomputation, its PCC, verdict and metric vector; with a policy (``history(policy=...)``) that
    vector's ``verdict`` under it (``"pass"``/``"fail"``, None without metrics or when they were counted at other
    tolerances than the policy's) and the ``failed`` criteria."""

    report: str
    captured_at: datetime | None
    pushed_at: datetime
    ttnn_version: str | None
    operation_id: int
    output_index: int | None
    tensor_id: int
    rank: int
    kind: str
    golden_tensor_id: int | None
    desired_pcc: float | None
    actual_pcc: float | None
    matches: bool | None
    pcc: float | None
    passed: bool | None
    metrics: dict[str, Any] | None
    verdict: str | None = None
    failed: tuple[str, ...] = ()


def history(url: str, op_name: str, *, name: str | None = None, tag: str | None = None,
            limit: int | None = None, policy: Any = None) -> list[HistoryRow]:
    """An operation's outputs against golden across the store's reports, oldest run first, in one indexed query:
    per report and output, the recorded comparison (desired and actual PCC, matches) and, where the report stored a
    recomputation (``reportdb compare --golden --store``), the recomputed PCC, pass/fail and the full metrics.
    ``name``/``tag`` restrict the reports as ``list_reports`` does; ``limit`` keeps the newest runs; ``policy`` (a
    ``reportdb.Policy`` or a TOML file's path) judges each stored metric vector."""
    store = server.parse_url(url)
    if not isinstance(op_name, str) or not op_name:
        raise InvalidArgumentError(f"give an operation name (such as ttnn.add), not {op_name!r}")
    conn = server.connect(store)
    try:
        if not server.ensure_schema(conn, store, create=False):
            return []
        clauses, params = _report_filters("r.", name, tag)
        clauses.insert(0, "h.op_name = %s")
        params.insert(0, op_name)
        columns = ("r.name, r.captured_at, r.pushed_at, r.ttnn_version, h.operation_id, h.output_index, h.tensor_id,"
                   " h.rank, h.kind, h.golden_tensor_id, h.desired_pcc, h.actual_pcc, h.matches, h.pcc, h.passed, h.metrics")
        order = "COALESCE(r.captured_at, r.pushed_at), r.id, h.operation_id, h.output_index, h.kind"
        sql = f"SELECT {columns} FROM team_history h JOIN team_report r ON r.id = h.report_id WHERE {' AND '.join(clauses)}"
        if limit is not None:
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise InvalidArgumentError(f"limit must be a positive number, not {limit!r}")
            sql += (f" AND r.id IN (SELECT r2.id FROM team_report r2 WHERE r2.state = 'ready' AND EXISTS (SELECT 1 FROM"
                    f" team_history h2 WHERE h2.report_id = r2.id AND h2.op_name = %s)"
                    f" ORDER BY COALESCE(r2.captured_at, r2.pushed_at) DESC, r2.id DESC LIMIT {int(limit)})")
            params.append(op_name)
        with server.mapped(store, f"reading the history of {op_name!r}"):
            rows = conn.execute(f"{sql} ORDER BY {order}".encode(), params).fetchall()
    finally:
        conn.close()
    found = [HistoryRow(*row) for row in rows]
    if policy is None:
        return found
    from ..analysis.policy import judge_stored

    return [row if row.metrics is None else _judged(row, judge_stored(policy, row.metrics, op_name,
                                                                       accumulated=row.kind == "global"))
            for row in found]


def _judged(row: HistoryRow, verdict: Any) -> HistoryRow:
    """The row with the policy's verdict on its stored metrics (None when they cannot be judged by it)."""
    from dataclasses import replace

    return row if verdict is None else replace(row, verdict="pass" if verdict.passed else "fail", failed=verdict.failed)


def open_remote(url: str) -> Any:
    """The report ``postgresql://HOST/DATABASE/NAME`` (a :class:`reportdb.team.remote.RemoteReport`, a Report)."""
    from .remote import RemoteReport

    return RemoteReport(url)
