"""The golden comparison records a report holds (``local_tensor_comparison_records`` and
``global_tensor_comparison_records``) and each one recomputed: the full metric vector of the device tensor against its
golden, judged by a tolerance policy. :mod:`.culprits` assigns roles over these results and :mod:`.golden` runs the
whole analysis; both build on this module, which needs neither.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from ..errors import FormatError, ReportDBError
from ..numeric.metrics import Comparison
from ..numeric.streamed import compare_stored
from ..results import Result
from .graph import TensorGraph, judged_dtype, table_columns
from .places import placed_notes
from .policy import Policy

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
    ``status`` says ``"compared"`` or why not. The producing operation (``operation_id``, ``name``), the policy's
    ``verdict`` (``"pass"`` or ``"fail"``, None when not compared) with the ``failed`` criteria, and the output's
    ``role`` (``culprit``, ``victim``, ``pass``; None when it cannot be told); ``error_growth_db`` is the output's
    global error over the worst global error of the producing operation's inputs, in dB (reports with global records
    only are ranked by it); ``notes`` say what the verdict saw (the worst tile, a fidelity shrink: ``Verdict.notes``), the worst tile's core
    and device named (``analysis/places.py``)."""

    metrics: Comparison | None
    status: str
    operation_id: int | None = None
    name: str | None = None
    verdict: str | None = None
    failed: tuple[str, ...] = ()
    role: str | None = None
    error_growth_db: float | None = None
    notes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool | None:
        """Whether the recomputed comparison passed the policy; None when it was not compared."""
        return None if self.verdict is None else self.verdict == "pass"

    def _html_fields(self) -> list[tuple[str, Any]]:
        """The record's fields, then the headline metrics instead of the whole vector."""
        head = [(k, v) for k, v in super()._html_fields() if k != "metrics"]
        m = self.metrics
        return head if m is None else head + [
            ("pcc", m.pcc), ("pcc_ttmetal", m.pcc_ttmetal), ("max_abs_error", m.max_abs_error), ("ulp_max", m.ulp_max),
            ("sqnr_db", m.sqnr_db), ("flags", ", ".join(m.flags)),
        ]


def golden_records(report: "Report") -> list[GoldenRecord]:
    """Every local, then every global comparison record of the report, each table's oldest first."""
    return [
        GoldenRecord(kind, tensor_id, rank, golden_id, desired, recorded, None if matches is None else bool(matches))
        for kind, table in RECORD_TABLES.items()
        for tensor_id, golden_id, matches, desired, recorded, rank in _records(report, table)
    ]


def recompute(
    report: "Report", record: GoldenRecord, policy: Policy, graph: TensorGraph, *, explicit_pcc: bool
) -> GoldenResult:
    """One record's result: its metric vector and verdict when both tensors are stored, else why it was not compared."""
    tensor_id, golden_id, rank = record.tensor_id, record.golden_tensor_id, record.rank
    made = graph.producer.get(tensor_id)
    op_name = graph.op_name(tensor_id)
    base: dict[str, Any] = {f.name: getattr(record, f.name) for f in fields(record)}
    base.update(operation_id=None if made is None else made[0], name=op_name)
    if not report.has_tensor(tensor_id, rank):
        return GoldenResult(**base, metrics=None, status="tensor not stored")
    if golden_id is None or not report.has_tensor(golden_id, rank):
        return GoldenResult(**base, metrics=None, status="golden tensor not stored")
    dtype = judged_dtype(report, graph, tensor_id, rank)
    rule = policy.rule_for(op_name, dtype)
    if not explicit_pcc and (rule is None or rule.criteria.pcc is None) and _usable_pcc(record.desired_pcc):
        policy = policy.with_overrides(pcc=record.desired_pcc)  # held to the PCC the run asked for
    rtol, atol = policy.tolerances(op_name, dtype)
    try:
        metrics = compare_stored(report, tensor_id, report, golden_id, rank, rtol=rtol, atol=atol,
                                 pcc=policy.pcc_threshold(op_name, dtype))
    except ReportDBError as exc:  # e.g. a multi-device tensor that cannot be assembled
        return GoldenResult(**base, metrics=None, status=f"not compared: {exc}")
    # a global golden carries the golden chain's error so far: no value-keeping rule (policy.judge)
    verdict = policy.judge(metrics, op=op_name, dtype=dtype, accumulated=record.kind == "global")
    notes = placed_notes(report, tensor_id, verdict.worst_tile, verdict.notes, rank=rank, tile=metrics.tile_shape)
    return GoldenResult(
        **base, metrics=metrics, status="compared", verdict="pass" if verdict.passed else "fail", failed=verdict.failed,
        notes=notes,
    )


def _usable_pcc(value: float | None) -> bool:
    """Whether a record's desired PCC (someone else's number) can be a threshold."""
    return value is not None and math.isfinite(value) and -1.0 <= value <= 1.0


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
