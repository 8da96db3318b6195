"""One run against another: the outputs of matched operations compared, and the first divergence marked.

Built on :func:`reportdb.compare`'s metrics, streamed window by window (``numeric/streamed.py``), so every row
carries the full metric vector, not PCC alone, and memory stays bounded whatever the tensors' size.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..errors import ReportDBError
from ..numeric.metrics import Comparison
from ..numeric.streamed import compare_stored
from ..results import Result, html_table
from .golden import table_columns

if TYPE_CHECKING:
    from ..report import Report


@dataclass(frozen=True)
class _Op:
    """One operation of a run: its id, its name and its output tensors."""

    operation_id: int
    name: str
    outputs: dict[int, int]  # output_index -> tensor_id


@dataclass(frozen=True)
class RunRow(Result):
    """One matched operation output of two runs: the operations (A's and B's ids, A's name), the output index, the
    two tensors, the headline figures and flags beside the full metric vector, or (``status``) why it was not
    compared; ``first_divergence`` marks the first row that does not pass."""

    operation_id_a: int
    operation_id_b: int
    name: str
    output_index: int
    tensor_a: int
    tensor_b: int
    shape: tuple[int, ...] | None = None
    pcc: float | None = None
    max_abs_error: float | None = None
    ulp_max: int | None = None
    flags: tuple[str, ...] = ()
    passed: bool | None = None
    metrics: Comparison | None = None
    status: str = "compared"
    first_divergence: bool = False


@dataclass(frozen=True)
class OperationRef(Result):
    """An operation of one run that has no partner in the other."""

    operation_id: int
    name: str


@dataclass(frozen=True)
class RunComparison(Result):
    """Run B against the reference run A: how operations were matched (``"id"`` or ``"name order"``), one row
    per matched output, the first divergence (the first row that does not pass, None when all do) and the
    operations of each run left unmatched."""

    matched_by: str
    rows: tuple[RunRow, ...]
    first_divergence: RunRow | None
    unmatched_a: tuple[OperationRef, ...]
    unmatched_b: tuple[OperationRef, ...]

    def _repr_html_(self) -> str:
        """The rows as one table, the first divergence marked."""
        header = ("", "op A", "op B", "name", "out", "shape", "pcc", "max abs err", "ulp max", "flags", "status")
        rows = [
            (">>" if r.first_divergence else "", r.operation_id_a, r.operation_id_b, r.name, r.output_index, r.shape,
             r.pcc, r.max_abs_error, r.ulp_max, ", ".join(r.flags), r.status)
            for r in self.rows
        ]  # fmt: skip
        caption = f"RunComparison: {len(self.rows)} outputs, operations matched by {self.matched_by}"
        return html_table(header, rows, caption=caption)


def compare_runs(
    a: "Report", b: "Report", *, rank: int = 0, rtol: float = 1e-5, atol: float = 1e-8, pcc: float = 0.99
) -> RunComparison:
    """Compare run ``b`` against the reference run ``a``, one row per matched operation output.

    Operations match by id when every operation of the shorter run has the same name under the same id
    in the other; otherwise by the order of their names (a longest-common-subsequence alignment), so an
    inserted or removed operation shifts nothing. Outputs match by output index. The first row that
    does not pass is marked ``first_divergence``.
    """
    ops_a, ops_b = _operations(a, rank), _operations(b, rank)
    pairs, matched_by = _match(ops_a, ops_b)
    rows: list[RunRow] = []
    for op_a, op_b in pairs:
        for index in sorted(op_a.outputs.keys() & op_b.outputs.keys()):
            rows.append(_compare_output(a, b, op_a, op_b, index, rank, rtol, atol, pcc))
    first = next((i for i, r in enumerate(rows) if r.passed is False), None)
    if first is not None:
        rows[first] = replace(rows[first], first_divergence=True)
    paired_a = {p[0].operation_id for p in pairs}
    paired_b = {p[1].operation_id for p in pairs}
    return RunComparison(
        matched_by=matched_by,
        rows=tuple(rows),
        first_divergence=None if first is None else rows[first],
        unmatched_a=tuple(OperationRef(o.operation_id, o.name) for o in ops_a if o.operation_id not in paired_a),
        unmatched_b=tuple(OperationRef(o.operation_id, o.name) for o in ops_b if o.operation_id not in paired_b),
    )


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
) -> RunRow:
    """The row of one matched output: the headline figures and flags beside the full metrics, or why it was not
    compared (a tensor not stored, or one that cannot be assembled)."""
    ta, tb = op_a.outputs[index], op_b.outputs[index]
    row = RunRow(op_a.operation_id, op_b.operation_id, op_a.name, index, ta, tb)
    missing = [side for side, report, tensor_id in (("A", a, ta), ("B", b, tb)) if not report.has_tensor(tensor_id, rank)]
    if missing:
        return replace(row, status="tensor not stored in " + " and ".join(missing))
    try:  # window by window: memory stays bounded by a few windows whatever the tensors' size
        metrics = compare_stored(b, tb, a, ta, rank, rtol=rtol, atol=atol, pcc=pcc)
    except ReportDBError as exc:
        return replace(row, status=f"not compared: {exc}")
    return replace(
        row, shape=metrics.shape_a, pcc=metrics.pcc, max_abs_error=metrics.max_abs_error, ulp_max=metrics.ulp_max,
        flags=metrics.flags, passed=metrics.passed, metrics=metrics,
    )  # fmt: skip
