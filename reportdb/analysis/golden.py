"""Device tensors against their golden records: every local and global comparison record a run wrote, recomputed.

Built on :func:`reportdb.compare`, so every row carries the full metric vector beside the recorded PCC, not PCC
alone; the results can be kept in the report's ``rdb_comparison`` table.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from ..errors import FormatError, ReportDBError
from ..numeric.metrics import compare

if TYPE_CHECKING:
    from ..report import Report

RECORD_TABLES = {"local": "local_tensor_comparison_records", "global": "global_tensor_comparison_records"}


def compare_golden(
    report: "Report", *, rtol: float = 1e-5, atol: float = 1e-8, pcc: float | None = None, store: bool = True
) -> list[dict[str, Any]]:
    """Recompute every local and global comparison record whose two tensors are stored.

    Each result holds the record (tensor, golden tensor, desired and recorded PCC, recorded match) and,
    when both tensors are stored, the full metric vector; ``pcc`` overrides each record's desired PCC.
    With ``store`` (and the report open with mode ``"a"``) the results go into ``rdb_comparison``.
    """
    results: list[dict[str, Any]] = []
    for kind, table in RECORD_TABLES.items():
        for tensor_id, golden_id, matches, desired, recorded, rank in _records(report, table):
            threshold = pcc if pcc is not None else (desired if desired is not None else 0.99)
            row: dict[str, Any] = {
                "kind": kind, "tensor_id": tensor_id, "rank": rank, "golden_tensor_id": golden_id,
                "desired_pcc": desired, "recorded_pcc": recorded,
                "recorded_matches": None if matches is None else bool(matches), "metrics": None,
            }  # fmt: skip
            if not report.has_tensor(tensor_id, rank):
                row["status"] = "tensor not stored"
            elif golden_id is None or not report.has_tensor(golden_id, rank):
                row["status"] = "golden tensor not stored"
            else:
                try:
                    row["metrics"] = compare(
                        report.tensor(tensor_id, rank), report.tensor(golden_id, rank), rtol=rtol, atol=atol, pcc=threshold
                    )
                    row["status"] = "compared"
                except ReportDBError as exc:  # e.g. a multi-device tensor that cannot be assembled
                    row["status"] = f"not compared: {exc}"
            results.append(row)
    if store and report.mode == "a":
        _store(report, results)
    return results


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


def _store(report: "Report", results: list[dict[str, Any]]) -> None:
    """Keep the compared results in ``rdb_comparison``, one row per record (a rerun replaces its rows)."""
    now = time.time()
    rows = [
        (
            r["kind"], r["tensor_id"], r["rank"], r["golden_tensor_id"], r["desired_pcc"], r["recorded_pcc"],
            r["metrics"]["pcc"], int(r["metrics"]["passed"]), json.dumps(r["metrics"], allow_nan=False), now,
        )
        for r in results
        if r["metrics"] is not None
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
