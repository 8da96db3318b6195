"""Device tensors against their golden records: every local and global comparison record a run wrote, recomputed
and judged by one tolerance policy, and each output's role: the culprit that introduced an error, or its victims.

Built on :func:`reportdb.compare`, so every row carries the full metric vector beside the recorded PCC, not PCC
alone; the results can be kept in the report's ``rdb_comparison`` table. Roles (``analysis/culprits.py``): an output
whose local comparison fails is a ``culprit``, one whose global comparison fails while its local passes a ``victim``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .culprits import GoldenComparison, assign_roles
from .graph import TensorGraph, opened, tensor_graph
from .policy import Policy, as_policy
from .records import RECORD_TABLES, GoldenRecord, GoldenResult, golden_records, recompute

if TYPE_CHECKING:
    from ..report import Report

__all__ = ["RECORD_TABLES", "GoldenRecord", "GoldenResult", "compare_golden", "golden_records"]


def compare_golden(
    report: "Report | str | Path", *, policy: "Policy | str | Path | None" = None, rtol: float | None = None,
    atol: float | None = None, pcc: float | None = None, store: bool = True,
) -> GoldenComparison:
    """Recompute every local and global comparison record whose two tensors are stored, judge each by ``policy`` (a
    :class:`Policy`, a TOML file's path, or None for the dtype-aware defaults) and tell culprits from victims.

    ``report`` is a Report or a path (opened for reading). Each record is held to its desired PCC unless ``pcc`` is
    given or a policy rule sets one; ``rtol``/``atol``/``pcc``, when given, replace the policy's criteria everywhere.
    With ``store`` (and the report open with mode ``"a"``) the results go into ``rdb_comparison``.
    """
    judge = as_policy(policy).with_overrides(rtol=rtol, atol=atol, pcc=pcc)
    with opened(report) as rep:
        graphs: dict[int, TensorGraph] = {}
        results = []
        for record in golden_records(rep):
            if record.rank not in graphs:
                graphs[record.rank] = tensor_graph(rep, record.rank)
            results.append(recompute(rep, record, judge, graphs[record.rank], explicit_pcc=pcc is not None))
        comparison = assign_roles(results, graphs)
        if store and rep.mode == "a":
            _store(rep, comparison.records)
    return comparison


def _store(report: "Report", results: "tuple[GoldenResult, ...]") -> None:
    """Keep the compared results in ``rdb_comparison``, one row per record (a rerun replaces its rows)."""
    now = time.time()
    rows = [
        (
            r.kind, r.tensor_id, r.rank, r.golden_tensor_id, r.desired_pcc, r.recorded_pcc,
            r.metrics.pcc, int(bool(r.passed)), json.dumps(r.metrics.to_dict(), allow_nan=False), now,
        )
        for r in results
        if r.metrics is not None
    ]
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
