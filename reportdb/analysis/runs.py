"""One run against another: the outputs of matched operations compared, and the first divergence marked.

Built on :func:`reportdb.compare`, so every row carries the full metric vector, not PCC alone.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ReportDBError
from ..numeric.metrics import FLAGS, compare
from .golden import table_columns

if TYPE_CHECKING:
    from ..report import Report


@dataclass(frozen=True)
class _Op:
    """One operation of a run: its id, its name and its output tensors."""

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
    """The operations of ``rank`` in id order with their outputs; reports without a ``rank`` column hold one rank."""
    with report.session() as session:
        conn = session.connection()

        def rows(sql: str, table: str) -> Any:
            ranked = "rank" in table_columns(conn, table)
            return conn.exec_driver_sql(sql.format(where=" WHERE rank=?" if ranked else ""), (rank,) if ranked else ())

        outputs: dict[int, dict[int, int]] = {}
        for op_id, index, tensor_id in rows("SELECT operation_id, output_index, tensor_id FROM output_tensors{where}", "output_tensors"):
            outputs.setdefault(op_id, {})[index] = tensor_id
        return [
            _Op(op_id, name or "", outputs.get(op_id, {}))
            for op_id, name in rows("SELECT operation_id, name FROM operations{where} ORDER BY operation_id", "operations")
        ]


def _match(ops_a: list[_Op], ops_b: list[_Op]) -> tuple[list[tuple[_Op, _Op]], str]:
    """Pairs of matching operations and how they were matched (``"id"`` or ``"name order"``, see compare_runs)."""
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
    """The row of one matched output: the headline figures and flags beside the full metrics, or why it was not
    compared (a tensor not stored, or one that cannot be assembled)."""
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
