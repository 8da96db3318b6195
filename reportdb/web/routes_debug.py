"""The debugging endpoints of the web API, views of ``reportdb.analysis``: a report's golden records recomputed with
culprit and victim roles and the first culprit (``compare_golden``), one operation's context (``operation_context``)
and where in a tensor the error is (``locate``: worst tiles, the tile map, devices and cores). The page shows what
these answer; no verdict is made here or in the page, the blueprint's one tolerance policy makes them all."""

from __future__ import annotations

import math
from typing import Any

from flask import Blueprint, Response, request

from ..analysis.culprits import GoldenComparison
from ..analysis.golden import compare_golden
from ..analysis.locate import locate
from ..analysis.ops import operation_context
from ..errors import ReportDBError
from ..numeric.streamed import WINDOW_ELEMENTS
from . import limits, params
from .answers import answer
from .context import lookup, policy, settings
from .params import ApiError
from .reports import Served
from .sources import tensor_id_of


def golden_analysis(one: Served, *, required: bool) -> GoldenComparison | None:
    """Every golden record of ``one`` recomputed under the blueprint's policy, with roles (kept for later requests).
    A report whose tensors are more than a request compares: a 413 when ``required``, else None (the operation list
    then shows recorded verdicts only)."""
    key = ("golden-analysis", str(one.path))
    found: GoldenComparison | None = lookup().cached(key)
    if found is not None:
        return found
    with lookup().alone(key):  # the page's first requests (list, overview) all ask: computed once
        return _golden_analysis(one, key, required=required)


def _golden_analysis(one: Served, key: tuple[str, str], *, required: bool) -> GoldenComparison | None:
    """``golden_analysis`` once no other request is computing it: kept meanwhile, else computed and kept."""
    found: GoldenComparison | None = lookup().cached(key)
    if found is not None:
        return found
    total = one.tensor_totals()[1]
    if total > limits.MAX_RUN_BYTES:
        if not required:
            return None
        raise ApiError(413, f"report {one.name} stores {total:,} bytes of tensors, more than a request compares "
                            f"({limits.MAX_RUN_BYTES:,})", "run `reportdb compare REPORT --golden` on the command line")
    with settings().budget.hold(2 * WINDOW_ELEMENTS * 48 + one.chunk_bytes(), "the golden records of a report"):
        try:
            with one.engine() as own:
                found = compare_golden(own, policy=policy(), store=False)
        except (ReportDBError, ValueError, TypeError):
            # A report the engine cannot analyse (e.g. operation ids that are no numbers, which the engine's graph
            # does not take): the list falls back to recorded verdicts; the golden endpoint says why.
            if required:
                raise
            return None
    lookup().keep(key, found)
    return found


def roles_of(analysis: GoldenComparison | None, rank: int) -> dict[tuple[str, int], dict[str, Any]]:
    """Each record's recomputed verdict (``pass``/``fail``, failed criteria, PCC) and its output's role, by
    (kind, tensor id), for one rank."""
    if analysis is None:
        return {}
    return {
        (r.kind, r.tensor_id): {"role": r.role, "verdict": r.verdict, "failed": list(r.failed), "status": r.status,
                                "pcc": None if r.metrics is None else r.metrics.pcc,
                                "sqnr_db": None if r.metrics is None else r.metrics.sqnr_db}
        for r in analysis.records if r.rank == rank
    }  # fmt: skip


def error_rank(analysis: GoldenComparison | None, rank: int) -> dict[int, int]:
    """Each output tensor's place in the engine's worst-first order (by local error where local records exist)."""
    if analysis is None:
        return {}
    order: dict[int, int] = {}
    for i, r in enumerate(analysis.ranked()):
        if r.rank == rank:
            order.setdefault(r.tensor_id, i)
    return order


def golden(report: str) -> Response:
    """Every golden record of a report recomputed: counts, the first culprit in execution order, whether only global
    records exist, and each record with its verdict and role (the metric vectors left out: compare-tensor has them)."""
    one = lookup().get(report)
    analysis = golden_analysis(one, required=True)
    assert analysis is not None
    records = []
    for r in analysis.records:
        m = r.metrics
        records.append({
            "kind": r.kind, "tensor_id": r.tensor_id, "rank": r.rank, "golden_tensor_id": r.golden_tensor_id,
            "operation_id": r.operation_id, "name": r.name, "desired_pcc": r.desired_pcc, "recorded_pcc": r.recorded_pcc,
            "pcc": None if m is None else m.pcc, "sqnr_db": None if m is None else m.sqnr_db,
            "max_abs_error": None if m is None else m.max_abs_error, "verdict": r.verdict, "failed": list(r.failed),
            "role": r.role, "error_growth_db": r.error_growth_db, "status": r.status,
        })  # fmt: skip
    first = analysis.first_culprit
    return answer({"report": one.name, "first_culprit": None if first is None else first.to_dict(),
                   "global_only": analysis.global_only, "counts": analysis.counts(), "records": records})


def operation(report: str, op_id: str) -> Response:
    """One operation's context: name, arguments, stack trace and its source lines, duration, devices, and each input
    and output with its producer, consumers and golden comparisons judged by the blueprint's policy."""
    one = lookup().get(report)
    rank = params.integer(request.args, "rank", 0)
    operation_id = tensor_id_of(op_id)
    key = ("operation", str(one.path), operation_id, rank)
    found = lookup().cached(key)
    if found is None:
        with settings().budget.hold(2 * WINDOW_ELEMENTS * 48 + one.chunk_bytes(), f"the context of operation {operation_id}"):
            with one.engine() as own:
                found = operation_context(own, operation_id, rank=rank, policy=policy()).to_dict()
        lookup().keep(key, found)
    return answer({"report": one.name, **found})


def where(kind: str, tensor_id: str) -> Response:
    """Where a tensor's error against its golden (``kind`` local or global) is: its worst tiles, the per-tile error
    map, and per device and per core entries (``reportdb.locate``)."""
    args = request.args
    one = lookup().pick(args.get("report") or None)
    if kind not in ("local", "global"):
        raise ApiError(404, f"no comparison kind {kind[:40]!r}", "use locate/local/<id> or locate/global/<id>")
    rank = params.integer(args, "rank", 0)
    top = params.integer(args, "top", 10, low=1, high=1000)
    device = params.device(args)
    tid = tensor_id_of(tensor_id)
    key = ("locate", str(one.path), kind, tid, rank, device, top)
    found = lookup().cached(key)
    if found is None:
        info = one.report.tensor_info(tid, rank)
        size = math.prod(info.shape or max((s.shape for s in info.shards), key=math.prod, default=()))
        if size > limits.MAX_COMPARE_ELEMENTS:
            raise ApiError(413, f"tensor {tid} holds {size:,} elements, more than {limits.MAX_COMPARE_ELEMENTS:,} a "
                                "request locates in", "run `reportdb locate` on the command line; it has no such bound")
        with settings().budget.hold(2 * WINDOW_ELEMENTS * 64 + one.chunk_bytes(tid, rank), f"locating errors in tensor {tid}"):
            with one.engine() as own:
                found = locate(own, tid, golden=kind, rank=rank, device=device, policy=policy(),
                               top=top).to_dict()
        lookup().keep(key, found)
    return answer({"report": one.name, **found})


def register(bp: Blueprint) -> None:
    """Add the debugging endpoints to ``bp``."""
    bp.add_url_rule("/api/reports/<report>/golden", view_func=golden)
    bp.add_url_rule("/api/reports/<report>/operations/<op_id>", view_func=operation)
    bp.add_url_rule("/api/locate/<kind>/<tensor_id>", view_func=where)
