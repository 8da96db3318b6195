"""One run against another: the outputs of matched operations compared by value, judged, and the first divergence
marked.

Built on :func:`reportdb.compare`'s metrics, streamed window by window (``numeric/streamed.py``), so every row
carries the full metric vector, not PCC alone, and memory stays bounded whatever the tensors' size. Each compared
output gets a ``verdict`` under one tolerance policy (``analysis/policy.py``, its defaults by dtype): ``identical``
(the same dtype and bytes), ``within_tolerance`` (every criterion holds, the worst 32x32 tile's SQNR among them, so
one wrong tile of a large output is not hidden by the whole tensor's figures), or ``diverges`` (``failed`` names the
criteria that do not). The first divergence is the first ``diverges`` output in A's execution order.
"""

from __future__ import annotations

import difflib
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ReportDBError
from ..numeric.metrics import Comparison
from ..numeric.streamed import compare_stored
from ..results import Result, html_table
from .graph import OperationRef, TensorGraph, judged_dtype, opened, tensor_graph
from .places import placed_notes
from .policy import Policy, as_policy

if TYPE_CHECKING:
    from ..report import Report

#: The verdicts of a compared output, best first.
VERDICTS = ("identical", "within_tolerance", "diverges")


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
    compared; ``verdict`` (``identical``, ``within_tolerance``, ``diverges``; None when not compared) with the names of
    the ``failed`` criteria and the verdict's ``notes`` (what a failed criterion saw: the worst tile and its SQNR,
    the fitted scale; the worst tile's core and device in B's run, the side measured: ``analysis/places.py``);
    ``passed`` is False exactly for ``diverges``; ``first_divergence`` marks the first diverging row in execution
    order. ``metrics`` measures B's output against A's (A is the expected side); its
    ``shape_a``/``dtype_a`` describe A's tensor, as ``tensor_a`` names it, and ``shape_b``/``dtype_b`` B's."""

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
    verdict: str | None = None
    failed: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunComparison(Result):
    """Run B against the reference run A: how operations were matched (``"id"`` or ``"name order"``), one row
    per matched output, the first divergence (the first diverging row in execution order, None when none
    diverges) and the operations of each run left unmatched. ``compared`` counts the rows compared; the others
    (a tensor not stored, one that cannot be assembled) are ``not_compared``: a run of nothing compared passes
    nothing."""

    matched_by: str
    rows: tuple[RunRow, ...]
    first_divergence: RunRow | None
    unmatched_a: tuple[OperationRef, ...]
    unmatched_b: tuple[OperationRef, ...]

    @property
    def compared(self) -> int:
        """The rows whose tensors were compared."""
        return sum(1 for r in self.rows if r.verdict is not None)

    @property
    def not_compared(self) -> int:
        """The rows that could not be compared (``status`` says why)."""
        return len(self.rows) - self.compared

    def counts(self) -> dict[str, int]:
        """How many rows got each verdict, and how many were not compared."""
        return {**{v: sum(1 for r in self.rows if r.verdict == v) for v in VERDICTS}, "not_compared": self.not_compared}

    def to_dict(self) -> dict[str, Any]:
        """``first_divergence`` first (its row: A's and B's operation and tensor, the name, the verdict and failed
        criteria, the metrics; None when nothing diverges), the verdict counts, then every other field as before."""
        data = super().to_dict()
        return {"first_divergence": data.pop("first_divergence"), "counts": self.counts(), **data}

    def _repr_html_(self) -> str:
        """The rows as one table, the first divergence marked."""
        header = ("", "op A", "op B", "name", "out", "shape", "pcc", "max abs err", "ulp max", "flags", "status",
                  "verdict", "failed")
        rows = [
            (">>" if r.first_divergence else "", r.operation_id_a, r.operation_id_b, r.name, r.output_index, r.shape,
             r.pcc, r.max_abs_error, r.ulp_max, ", ".join(r.flags), r.status, r.verdict, ", ".join(r.failed))
            for r in self.rows
        ]
        caption = f"RunComparison: {len(self.rows)} outputs, operations matched by {self.matched_by}"
        return html_table(header, rows, caption=caption)


def compare_runs(
    a: "Report | str | Path", b: "Report | str | Path", *, rank: int = 0, policy: "Policy | str | Path | None" = None,
    rtol: float | None = None, atol: float | None = None, pcc: float | None = None,
) -> RunComparison:
    """Compare run ``b`` against the reference run ``a`` (each a Report or a path), one row per matched output.

    Operations match by id when every operation of the shorter run has the same name under the same id
    in the other; otherwise by the order of their names (a longest-common-subsequence alignment), so an
    inserted or removed operation shifts nothing. Outputs match by output index. Each output is judged by
    ``policy`` (a :class:`Policy`, a TOML file's path, or None for the dtype-aware defaults), by A's operation
    name and tensor dtype; ``rtol``/``atol``/``pcc``, when given, replace the policy's criteria everywhere.
    """
    judge = as_policy(policy).with_overrides(rtol=rtol, atol=atol, pcc=pcc)
    with ExitStack() as stack:
        report_a, report_b = stack.enter_context(opened(a)), stack.enter_context(opened(b))
        graph_a = tensor_graph(report_a, rank)
        ops_a, ops_b = _operations(graph_a), _operations(tensor_graph(report_b, rank))
        pairs, matched_by = _match(ops_a, ops_b)
        rows: list[RunRow] = []
        for op_a, op_b in pairs:
            for index in sorted(op_a.outputs.keys() & op_b.outputs.keys()):
                rows.append(_compare_output(report_a, report_b, graph_a, op_a, op_b, index, rank, judge))
    first = next((i for i, r in enumerate(rows) if r.verdict == "diverges"), None)
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


def _operations(graph: TensorGraph) -> list[_Op]:
    """The operations of a rank's graph in id order with their outputs."""
    return [_Op(op_id, name, graph.outputs.get(op_id, {})) for op_id, name in sorted(graph.names.items())]


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
    a: "Report", b: "Report", graph_a: TensorGraph, op_a: _Op, op_b: _Op, index: int, rank: int, policy: Policy
) -> RunRow:
    """The row of one matched output: the headline figures, the verdict and the full metrics, or why it was not
    compared (a tensor not stored, or one that cannot be assembled)."""
    ta, tb = op_a.outputs[index], op_b.outputs[index]
    row = RunRow(op_a.operation_id, op_b.operation_id, op_a.name, index, ta, tb)
    missing = [side for side, report, tensor_id in (("A", a, ta), ("B", b, tb)) if not report.has_tensor(tensor_id, rank)]
    if missing:
        return replace(row, status="tensor not stored in " + " and ".join(missing))
    dtype = judged_dtype(a, graph_a, ta, rank)
    rtol, atol = policy.tolerances(op_a.name, dtype)
    try:  # window by window: memory stays bounded by a few windows whatever the tensors' size
        metrics = compare_stored(b, tb, a, ta, rank, rtol=rtol, atol=atol, pcc=policy.pcc_threshold(op_a.name, dtype))
    except ReportDBError as exc:
        return replace(row, status=f"not compared: {exc}")
    # B is measured against A (A's values are the expected side), but the row names the runs: its shape_a/dtype_a
    # describe tensor_a, A's output, as tensor_a does, and shape_b/dtype_b B's
    metrics = replace(metrics, shape_a=metrics.shape_b, shape_b=metrics.shape_a, dtype_a=metrics.dtype_b,
                      dtype_b=metrics.dtype_a)
    # run A's output carries A's own error so far, not B's inputs moved: no value-keeping rule (policy.judge)
    verdict = policy.judge(metrics, op=op_a.name, dtype=dtype, accumulated=True)
    name = "identical" if metrics.bitwise_equal else "within_tolerance" if verdict.passed else "diverges"
    return replace(
        row, shape=metrics.shape_a, pcc=metrics.pcc, max_abs_error=metrics.max_abs_error, ulp_max=metrics.ulp_max,
        flags=metrics.flags, passed=name != "diverges", metrics=metrics, verdict=name,
        failed=() if name == "identical" else verdict.failed,
        notes=() if name == "identical" else placed_notes(b, tb, verdict.worst_tile, verdict.notes, rank=rank,
                                                          tile=metrics.tile_shape),
    )
