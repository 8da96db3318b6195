"""Comparisons over whole reports: device tensors against their golden records, and one run against another.

Both build on :func:`reportdb.compare`, so every row carries the full metric vector, not PCC alone.
"""

from __future__ import annotations

import difflib
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .compare import compare
from .errors import FormatError, ReportDBError

if TYPE_CHECKING:
    from .report import Report

RECORD_TABLES = {"local": "local_tensor_comparison_records", "global": "global_tensor_comparison_records"}
FLAGS = ("shape_mismatch", "nonfinite_mismatch", "scale_or_offset_error", "constant_input")


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


def _columns(conn: Any, table: str) -> set[str]:
    """The columns a report table has (none when it is absent): older reports lack ``rank`` and some tables."""
    return {r[1] for r in conn.exec_driver_sql(f"PRAGMA table_info({table})")}


def _records(report: "Report", table: str) -> list[tuple[Any, ...]]:
    """The rows of a comparison record table, oldest first; none when the table is absent or empty.

    Reports of every age are read: a column an older report lacks (``rank``, say) reads as NULL (rank as 0),
    but a table without ``tensor_id`` is not a comparison record table and is refused with a FormatError.
    """
    with report.session() as session:
        conn = session.connection()
        columns = _columns(conn, table)
        if not columns:
            return []
        if "tensor_id" not in columns:
            raise FormatError(f"{report.path}: table {table} has no tensor_id column; it holds no comparison records")
        defaults = {"golden_tensor_id": "NULL", "matches": "NULL", "desired_pcc": "NULL", "actual_pcc": "NULL", "rank": "0"}
        selected = ", ".join(name if name in columns else default for name, default in defaults.items())
        return [tuple(r) for r in conn.exec_driver_sql(f"SELECT tensor_id, {selected} FROM {table} ORDER BY rowid")]


def _store(report: "Report", results: list[dict[str, Any]]) -> None:
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


@dataclass(frozen=True)
class _Op:
    operation_id: int
    name: str
    outputs: dict[int, int]  # output_index -> tensor_id


def compare_runs(
    a: "Report", b: "Report", *, rank: int = 0, rtol: float = 1e-5, atol: float = 1e-8, pcc: float = 0.99
) -> dict[str, Any]:
    """Compare run ``b`` against the reference run ``a``, one row per matched operation output.

    Operations match by id when every operation of the shorter run has the same name under the same id
    in the other; otherwise by the order of their names (a longest-common-subsequence alignment), so an
    inserted or removed operation shifts nothing. Outputs match by output index. The first row that
    does not pass is marked ``first_divergence``.
    """
    ops_a, ops_b = _operations(a, rank), _operations(b, rank)
    pairs, matched_by = _match(ops_a, ops_b)
    rows: list[dict[str, Any]] = []
    for op_a, op_b in pairs:
        for index in sorted(op_a.outputs.keys() & op_b.outputs.keys()):
            rows.append(_compare_output(a, b, op_a, op_b, index, rank, rtol, atol, pcc))
    first = next((i for i, r in enumerate(rows) if r["passed"] is False), None)
    for i, row in enumerate(rows):
        row["first_divergence"] = i == first
    paired_a = {p[0].operation_id for p in pairs}
    paired_b = {p[1].operation_id for p in pairs}
    return {
        "matched_by": matched_by,
        "rows": rows,
        "first_divergence": None if first is None else rows[first],
        "unmatched_a": [{"operation_id": o.operation_id, "name": o.name} for o in ops_a if o.operation_id not in paired_a],
        "unmatched_b": [{"operation_id": o.operation_id, "name": o.name} for o in ops_b if o.operation_id not in paired_b],
    }


def _operations(report: "Report", rank: int) -> list[_Op]:
    with report.session() as session:
        conn = session.connection()

        def rows(sql: str, table: str) -> Any:
            ranked = "rank" in _columns(conn, table)
            return conn.exec_driver_sql(sql.format(where=" WHERE rank=?" if ranked else ""), (rank,) if ranked else ())

        outputs: dict[int, dict[int, int]] = {}
        for op_id, index, tensor_id in rows("SELECT operation_id, output_index, tensor_id FROM output_tensors{where}", "output_tensors"):
            outputs.setdefault(op_id, {})[index] = tensor_id
        return [
            _Op(op_id, name or "", outputs.get(op_id, {}))
            for op_id, name in rows("SELECT operation_id, name FROM operations{where} ORDER BY operation_id", "operations")
        ]


def _match(ops_a: list[_Op], ops_b: list[_Op]) -> tuple[list[tuple[_Op, _Op]], str]:
    by_id_b = {o.operation_id: o for o in ops_b}
    same = [(o, by_id_b[o.operation_id]) for o in ops_a if o.operation_id in by_id_b and by_id_b[o.operation_id].name == o.name]
    if len(same) == min(len(ops_a), len(ops_b)):
        return same, "id"
    matcher = difflib.SequenceMatcher(a=[o.name for o in ops_a], b=[o.name for o in ops_b], autojunk=False)
    pairs = [(ops_a[blk.a + k], ops_b[blk.b + k]) for blk in matcher.get_matching_blocks() for k in range(blk.size)]
    return pairs, "name order"


def _compare_output(
    a: "Report", b: "Report", op_a: _Op, op_b: _Op, index: int, rank: int, rtol: float, atol: float, pcc: float
) -> dict[str, Any]:
    ta, tb = op_a.outputs[index], op_b.outputs[index]
    row: dict[str, Any] = {
        "operation_id_a": op_a.operation_id, "operation_id_b": op_b.operation_id, "name": op_a.name,
        "output_index": index, "tensor_a": ta, "tensor_b": tb, "shape": None, "pcc": None,
        "max_abs_error": None, "ulp_max": None, "flags": [], "passed": None, "metrics": None,
    }  # fmt: skip
    missing = [side for side, report, tensor_id in (("A", a, ta), ("B", b, tb)) if not report.has_tensor(tensor_id, rank)]
    if missing:
        row["status"] = "tensor not stored in " + " and ".join(missing)
        return row
    try:
        metrics = compare(b.tensor(tb, rank), a.tensor(ta, rank), rtol=rtol, atol=atol, pcc=pcc)
    except ReportDBError as exc:
        row["status"] = f"not compared: {exc}"
        return row
    row.update(
        status="compared", shape=metrics["shape_a"], pcc=metrics["pcc"], max_abs_error=metrics["max_abs_error"],
        ulp_max=metrics["ulp_max"], flags=[f for f in FLAGS if metrics.get(f)], passed=metrics["passed"], metrics=metrics,
    )  # fmt: skip
    return row
