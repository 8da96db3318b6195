"""Device tensors against their golden records: every local and global comparison record a run wrote, recomputed.

Built on :func:`reportdb.compare`, so every row carries the full metric vector beside the recorded PCC, not PCC
alone; the results can be kept in the report's ``rdb_comparison`` table.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from ..errors import FormatError, ReportDBError
from ..numeric.metrics import Comparison
from ..numeric.streamed import compare_stored
from ..results import Result

if TYPE_CHECKING:
    from ..report import Report

RECORD_TABLES = {"local": "local_tensor_comparison_records", "global": "global_tensor_comparison_records"}


@dataclass(frozen=True)
class GoldenRecord(Result):
    """One golden comparison record as the report holds it: its kind (``"local"`` or ``"global"``), the tensor and
    its golden tensor, the desired and the recorded PCC and whether the run recorded a match."""

    kind: str
    tensor_id: int
    rank: int
    golden_tensor_id: int | None
    desired_pcc: float | None
    recorded_pcc: float | None
    recorded_matches: bool | None


@dataclass(frozen=True)
class GoldenResult(GoldenRecord):
    """A golden comparison record recomputed: the record and, when both tensors are stored, the full metric vector;
    ``status`` says ``"compared"`` or why not."""

    metrics: Comparison | None
    status: str

    @property
    def passed(self) -> bool | None:
        """Whether the recomputed comparison passed; None when it was not compared."""
        return None if self.metrics is None else self.metrics.passed

    def _html_fields(self) -> list[tuple[str, Any]]:
        """The record's fields, then the headline metrics instead of the whole vector."""
        head = [(k, v) for k, v in super()._html_fields() if k != "metrics"]
        m = self.metrics
        return head if m is None else head + [
            ("pcc", m.pcc), ("pcc_ttmetal", m.pcc_ttmetal), ("max_abs_error", m.max_abs_error), ("ulp_max", m.ulp_max),
            ("passed", m.passed), ("flags", ", ".join(m.flags)),
        ]  # fmt: skip


def golden_records(report: "Report") -> list[GoldenRecord]:
    """Every local, then every global comparison record of the report, each table's oldest first."""
    return [
        GoldenRecord(kind, tensor_id, rank, golden_id, desired, recorded, None if matches is None else bool(matches))
        for kind, table in RECORD_TABLES.items()
        for tensor_id, golden_id, matches, desired, recorded, rank in _records(report, table)
    ]


def compare_golden(
    report: "Report", *, rtol: float = 1e-5, atol: float = 1e-8, pcc: float | None = None, store: bool = True
) -> list[GoldenResult]:
    """Recompute every local and global comparison record whose two tensors are stored, one result per record.

    ``pcc`` overrides each record's desired PCC. With ``store`` (and the report open with mode ``"a"``) the
    results go into ``rdb_comparison``.
    """
    results = [_recompute(report, record, rtol, atol, pcc) for record in golden_records(report)]
    if store and report.mode == "a":
        _store(report, results)
    return results


def _recompute(report: "Report", record: GoldenRecord, rtol: float, atol: float, pcc: float | None) -> GoldenResult:
    """One record's result: its metric vector when both tensors are stored, else why it was not compared."""
    tensor_id, golden_id, rank = record.tensor_id, record.golden_tensor_id, record.rank
    threshold = pcc if pcc is not None else (record.desired_pcc if record.desired_pcc is not None else 0.99)
    metrics: Comparison | None = None
    if not report.has_tensor(tensor_id, rank):
        status = "tensor not stored"
    elif golden_id is None or not report.has_tensor(golden_id, rank):
        status = "golden tensor not stored"
    else:
        try:
            metrics = compare_stored(report, tensor_id, report, golden_id, rank, rtol=rtol, atol=atol, pcc=threshold)
            status = "compared"
        except ReportDBError as exc:  # e.g. a multi-device tensor that cannot be assembled
            status = f"not compared: {exc}"
    return GoldenResult(**{f.name: getattr(record, f.name) for f in fields(record)}, metrics=metrics, status=status)


def table_columns(conn: Any, table: str) -> set[str]:
    """The columns a report table has (none when it is absent): older reports lack ``rank`` and some tables."""
    return {r[1] for r in conn.exec_driver_sql(f"PRAGMA table_info({table})")}


def _records(report: "Report", table: str) -> list[tuple[Any, ...]]:
    """The rows of a comparison record table, oldest first; none when the table is absent or empty.

    Reports of every age are read: a column an older report lacks (``rank``, say) reads as NULL (rank as 0),
    but a table without ``tensor_id`` is not a comparison record table and is refused with a FormatError.
    """
    with report.session() as session:
        conn = session.connection()
        columns = table_columns(conn, table)
        if not columns:
            return []
        if "tensor_id" not in columns:
            raise FormatError(f"{report.path}: table {table} has no tensor_id column; it holds no comparison records")
        defaults = {"golden_tensor_id": "NULL", "matches": "NULL", "desired_pcc": "NULL", "actual_pcc": "NULL", "rank": "0"}
        selected = ", ".join(name if name in columns else default for name, default in defaults.items())
        return [tuple(r) for r in conn.exec_driver_sql(f"SELECT tensor_id, {selected} FROM {table} ORDER BY rowid")]


def _store(report: "Report", results: list[GoldenResult]) -> None:
    """Keep the compared results in ``rdb_comparison``, one row per record (a rerun replaces its rows)."""
    now = time.time()
    rows = [
        (
            r.kind, r.tensor_id, r.rank, r.golden_tensor_id, r.desired_pcc, r.recorded_pcc,
            r.metrics.pcc, int(r.metrics.passed), json.dumps(r.metrics.to_dict(), allow_nan=False), now,
        )
        for r in results
        if r.metrics is not None
    ]  # fmt: skip
    if not rows:  # nothing compared: an empty executemany is an error to SQLAlchemy, and there is nothing to keep
        return
    with report.session() as session:
        session.connection().exec_driver_sql(
            "INSERT INTO rdb_comparison(kind, tensor_id, rank, golden_tensor_id, desired_pcc, recorded_pcc, pcc, passed,"
            " metrics, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT(kind, tensor_id, rank) DO UPDATE SET golden_tensor_id=excluded.golden_tensor_id,"
            " desired_pcc=excluded.desired_pcc, recorded_pcc=excluded.recorded_pcc, pcc=excluded.pcc,"
            " passed=excluded.passed, metrics=excluded.metrics, created_at=excluded.created_at",
            rows,
        )
        session.commit()
