"""``replay --store``: keep each replayed reference as a tensor of the report and its result as a comparison record.

The reference gets a new tensor id above every id the report uses; the result goes into ``rdb_comparison`` with kind
``"replay"`` (``"replay_chain"`` for ``--chain``: global records) (the metric vector, the verdict's failed criteria
and the policy's criteria beside it) and, where ttnn's ``local_tensor_comparison_records`` (``global_...`` for a
chain) table has no record of that output yet, into it as ttnn writes one (tt-metal's
PCC as ``actual_pcc``, the policy's PCC as ``desired_pcc``), so ``compare --golden``, the page and ttnn-visualizer
show it. A record ttnn wrote is never replaced. Legacy originals are refused: run ``reportdb migrate`` first.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ReadOnlyError
from .graph import table_columns

if TYPE_CHECKING:
    from ..report import Report
    from ..spec import Distribution, Shards
    from .policy import Policy
    from .replay_rows import ReplayRow

#: ``rdb_comparison.kind`` of a replayed result: isolated (local), chained (global).
KINDS = {False: "replay", True: "replay_chain"}
#: ttnn's record table each kind also goes to.
TABLES = {False: "local_tensor_comparison_records", True: "global_tensor_comparison_records"}


class ReplayStore:
    """Writes one report's replay results as they are made (the report open with mode ``"a"``)."""

    @staticmethod
    def check(report: "Report", mode: str = "a") -> None:
        """ReadOnlyError unless ``report`` is a reportdb database (not a legacy original) open with ``mode``."""
        if report.schema_revision is None:
            raise ReadOnlyError(f"{report.path} is a legacy report database (the original), not a reportdb one; --store "
                                "writes reportdb's tables, so run `reportdb migrate` first; nothing was changed")
        if report.mode != mode:
            raise ReadOnlyError(f"{report.path} is open read-only: replay(store=True) needs mode 'a'")

    def __init__(self, report: "Report", rank: int, *, chain: bool = False) -> None:
        self.check(report)
        self.report, self.rank = report, rank
        self.kind, self.table = KINDS[chain], TABLES[chain]
        with report.session() as session:
            conn = session.connection()
            ids = [conn.exec_driver_sql(f"SELECT max(tensor_id) FROM {t}").scalar() for t in ("rdb_tensor", "tensors")
                   if "tensor_id" in table_columns(conn, t)]
            self.columns = table_columns(conn, self.table)
            self.previous: dict[int, int] = dict(conn.exec_driver_sql(
                "SELECT tensor_id, golden_tensor_id FROM rdb_comparison WHERE kind=? AND rank=?", (self.kind, rank)).fetchall())
        self.next_id = max([int(i) for i in ids if i is not None] + [0]) + 1

    def keep(self, row: "ReplayRow", expected: "np.ndarray | Shards", policy: "Policy",
             distribution: "Distribution | None" = None) -> None:
        """Store one compared row's reference tensor and its records (a rerun reuses the reference stored before):
        one array, or each device's reference (``[(mesh_coordinate, array), ...]``) laid out by the stored output's
        ``distribution``."""
        assert row.metrics is not None and row.output_tensor_id is not None and row.dtype is not None
        output = row.output_tensor_id
        golden_id = self.previous.get(output)
        if golden_id is None or not self.report.has_tensor(golden_id, self.rank):
            golden_id, self.next_id = self.next_id, self.next_id + 1
            if isinstance(expected, np.ndarray):
                self.report.put_tensor(golden_id, np.ascontiguousarray(expected), rank=self.rank)
            else:
                self.report.put_tensor(golden_id, rank=self.rank, shards=expected, distribution=distribution)
            self.previous[output] = golden_id
        desired = policy.pcc_threshold(row.name, row.dtype)
        details = dict(row.metrics.to_dict(), replay={
            "operation_id": row.operation_id, "output_index": row.output_index, "operation": row.name,
            "failed": list(row.failed),
            "criteria": policy.criteria_for(row.name, row.dtype).to_dict(), "dtype": row.dtype})
        with self.report.session() as session:
            conn = session.connection()
            conn.exec_driver_sql(
                "INSERT INTO rdb_comparison(kind, tensor_id, rank, golden_tensor_id, desired_pcc, recorded_pcc, pcc, passed,"
                " metrics, created_at) VALUES (?, ?, ?, ?, ?, NULL, ?, ?, ?, ?) ON CONFLICT(kind, tensor_id, rank) DO UPDATE"
                " SET golden_tensor_id=excluded.golden_tensor_id, desired_pcc=excluded.desired_pcc, pcc=excluded.pcc,"
                " passed=excluded.passed, metrics=excluded.metrics, created_at=excluded.created_at",
                (self.kind, output, self.rank, golden_id, desired, row.metrics.pcc, int(bool(row.passed)),
                 json.dumps(details, allow_nan=False, default=str), time.time()),
            )
            self._record(conn, output, golden_id, bool(row.passed), desired, row.metrics.pcc_ttmetal)
            session.commit()

    def _record(self, conn: object, output: int, golden_id: int, passed: bool, desired: float,
                      actual: float | None) -> None:
        """The ttnn-style record of the output, unless the table is absent or ttnn recorded one already."""
        columns = self.columns
        if not {"tensor_id", "golden_tensor_id", "matches", "desired_pcc", "actual_pcc"} <= columns:
            return
        ranked = "rank" in columns
        where = "tensor_id=?" + (" AND rank=?" if ranked else "")
        key = (output, self.rank) if ranked else (output,)
        found = conn.exec_driver_sql(f"SELECT golden_tensor_id FROM {self.table} WHERE {where}", key).fetchone()  # type: ignore[attr-defined]
        if found is not None and found[0] != golden_id:
            return  # a record ttnn wrote: kept
        if found is not None:
            conn.exec_driver_sql(f"DELETE FROM {self.table} WHERE {where}", key)  # type: ignore[attr-defined]
        names = "tensor_id, golden_tensor_id, matches, desired_pcc, actual_pcc" + (", rank" if ranked else "")
        values = (output, golden_id, int(passed), desired, actual) + ((self.rank,) if ranked else ())
        conn.exec_driver_sql(f"INSERT INTO {self.table}({names}) VALUES ({', '.join('?' * len(values))})", values)  # type: ignore[attr-defined]
