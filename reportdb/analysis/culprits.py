"""Culprits and victims: which operation introduced an error, told apart from those that only inherited it.

ttnn's comparison mode records, per output, a *local* comparison (the op's golden function on the inputs the device
actually had: the op's own error) and a *global* one (the golden chain from the start: the error accumulated so far).
Roles, per output tensor:

* ``culprit``: its local comparison fails (the operation is wrong by itself);
* ``victim``: its global comparison fails while its local one passes (the error came with its inputs);
* ``pass``: neither fails.

Where an output has no compared local record (a report of global records only), its role is told by where the error
first grows: ``error_growth_db`` = 10 log10 of the output's global error energy ratio (error over golden energy,
``10^(-sqnr/10)``) over the worst such ratio among the global records of the producing operation's inputs (an input
without one counts as exact). A failing output whose error grows by more than :data:`GROWTH_DB` (the error at least
doubles here) is the ``culprit``, the others ``victim``; such reports are ranked by that growth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Iterable, Iterator, Sequence

from ..results import Result, html_table
from .graph import TensorGraph
from .peers import Anomaly, PeerOutput, anomalies
from .records import GoldenResult

#: A failing output whose global error energy grows by more than this over its inputs' worst (3 dB: it at least
#: doubles) introduced the error, where no local record says so.
GROWTH_DB = 3.0


@dataclass(frozen=True)
class Culprit(Result):
    """The first culprit in execution order: its operation, output tensor, rank and operation name."""

    operation_id: int | None
    tensor_id: int
    name: str | None
    rank: int = 0


@dataclass(frozen=True)
class GoldenComparison(Result):
    """Every golden record recomputed (``records``, in the report's order: local records, then global ones), the
    ``first_culprit`` in execution order (None when no output is a culprit), and whether the report holds global
    records only (``global_only``: roles then come from the error's growth). Iterating it, ``len`` and indexing
    give the records, as the list ``compare_golden`` used to return. ``growth_db`` is the growth that makes a
    culprit where only global records tell (:data:`GROWTH_DB`). ``anomalies``: outputs whose local error is far out
    of line with the same operation's on the same shape (``analysis/peers.py``), failing or not."""

    records: tuple[GoldenResult, ...]
    first_culprit: Culprit | None
    global_only: bool
    growth_db: float = GROWTH_DB
    anomalies: tuple[Anomaly, ...] = ()

    def __iter__(self) -> Iterator[GoldenResult]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> GoldenResult:
        return self.records[index]

    def counts(self) -> dict[str, int]:
        """Records compared, passed, failed and not compared; outputs (tensors) that are culprits and victims."""
        compared = [r for r in self.records if r.verdict is not None]
        roles = {(r.rank, r.tensor_id): r.role for r in self.records}
        return {
            "compared": len(compared), "passed": sum(1 for r in compared if r.passed),
            "failed": sum(1 for r in compared if not r.passed), "not_compared": len(self.records) - len(compared),
            "culprits": sum(1 for v in roles.values() if v == "culprit"),
            "victims": sum(1 for v in roles.values() if v == "victim"),
        }

    def ranked(self) -> list[GoldenResult]:
        """The compared records worst first: by local error where local records exist (culprits before victims),
        else failing records first, by the error's growth, then by the error."""
        compared = [r for r in self.records if r.metrics is not None]
        if self.global_only:  # failing first, then by growth (an input without error makes any error infinite growth)
            return sorted(compared, key=lambda r: (
                bool(r.passed), -(r.error_growth_db if r.error_growth_db is not None else -math.inf), -_error_ratio(r)
            ))
        local = {(r.rank, r.tensor_id): _error_ratio(r) for r in compared if r.kind == "local"}
        return sorted(compared, key=lambda r: (-local.get((r.rank, r.tensor_id), -1.0), r.kind != "local"))

    def to_dict(self) -> dict[str, Any]:
        """``first_culprit``, ``global_only``, the counts, then the records (each with its ``role``)."""
        return {
            "first_culprit": None if self.first_culprit is None else self.first_culprit.to_dict(),
            "global_only": self.global_only, "growth_db": self.growth_db, "counts": self.counts(),
            "anomalies": [a.to_dict() for a in self.anomalies], "records": [r.to_dict() for r in self.records],
        }

    def _repr_html_(self) -> str:
        """The records as one table, roles and verdicts beside the headline figures."""
        header = ("kind", "op", "name", "tensor", "golden", "recorded pcc", "pcc", "sqnr dB", "verdict", "role")
        rows = [
            (r.kind, r.operation_id, r.name, r.tensor_id, r.golden_tensor_id, r.recorded_pcc,
             None if r.metrics is None else r.metrics.pcc, None if r.metrics is None else r.metrics.sqnr_db,
             r.verdict or r.status, r.role)
            for r in self.records
        ]
        first = self.first_culprit
        caption = "GoldenComparison: first culprit " + (
            "none" if first is None else f"operation {first.operation_id} {first.name} (tensor {first.tensor_id})"
        )
        return html_table(header, rows, caption=caption)


def _error_ratio(result: GoldenResult) -> float:
    """Error energy over golden energy (``10^(-sqnr/10)``): 0 without error, inf for errors on a zero golden."""
    m = result.metrics
    if m is None:
        return 0.0
    if m.shape_mismatch or m.nonfinite_mismatch:
        return math.inf
    if m.sqnr_db is None:
        return math.inf if m.max_abs_error else 0.0
    return 10.0 ** (-m.sqnr_db / 10.0)


def _growth_db(out: float, inputs: float) -> float | None:
    """10 log10(out / inputs), +inf for error where the inputs had none; None without error."""
    if out == 0.0:
        return None
    if inputs == 0.0 or math.isinf(out) and not math.isinf(inputs):
        return math.inf
    if math.isinf(out):
        return 0.0
    return 10.0 * math.log10(out / inputs)


def assign_roles(results: Sequence[GoldenResult], graphs: dict[int, TensorGraph]) -> GoldenComparison:
    """The records with their roles and error growth, and the first culprit in execution order."""
    local = {(r.rank, r.tensor_id): r for r in results if r.kind == "local" and r.verdict is not None}
    glob = {(r.rank, r.tensor_id): r for r in results if r.kind == "global" and r.verdict is not None}
    global_only = not any(r.kind == "local" for r in results) and bool(glob)
    roles: dict[tuple[int, int], str] = {}
    growth: dict[tuple[int, int], float | None] = {}
    for key, out in glob.items():
        graph = graphs.get(key[0], TensorGraph())
        made = graph.producer.get(key[1])
        inputs = graph.inputs.get(made[0], []) if made is not None else []
        worst_input = max((_error_ratio(glob[(key[0], t)]) for t in inputs if (key[0], t) in glob), default=0.0)
        growth[key] = _growth_db(_error_ratio(out), worst_input)
    for key in local.keys() | glob.keys():
        lo, g = local.get(key), glob.get(key)
        if lo is not None and not lo.passed:
            roles[key] = "culprit"
        elif g is not None and not g.passed:
            grown = growth.get(key)
            roles[key] = "victim" if lo is not None or grown is None or grown <= GROWTH_DB else "culprit"
        else:
            roles[key] = "pass"
    records = tuple(
        replace(r, role=roles.get((r.rank, r.tensor_id)), error_growth_db=growth.get((r.rank, r.tensor_id)))
        for r in results
    )
    culprits = [k for k, v in roles.items() if v == "culprit"]
    first = None
    if culprits:
        rank, tensor_id = min(culprits, key=lambda k: (graphs.get(k[0], TensorGraph()).order(k[1]), k[0]))
        graph = graphs.get(rank, TensorGraph())
        made = graph.producer.get(tensor_id)
        first = Culprit(None if made is None else made[0], tensor_id, graph.op_name(tensor_id), rank)
    return GoldenComparison(records, first, global_only, anomalies=anomalies(_peer_outputs(local.values())))


def _peer_outputs(results: Iterable[GoldenResult]) -> list[PeerOutput]:
    """The compared local records as peers see them (an operation's own error; global errors grow with depth)."""
    return [
        PeerOutput(r.operation_id, r.tensor_id, r.rank, r.name, r.metrics.shape_a, r.metrics.dtype_a, r.metrics.sqnr_db)
        for r in results
        if r.metrics is not None and r.name is not None and not r.metrics.shape_mismatch
    ]
