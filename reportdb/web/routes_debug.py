"""The debugging endpoints of the web API, views of ``reportdb.analysis``: a report's golden records recomputed with
culprit and victim roles and the first culprit (``compare_golden``), one operation's context (``operation_context``),
where in a tensor the error is (``locate``: worst tiles, the tile map, devices and cores, each core's region) and
the part of the golden a device's shard is compared with (``golden-part``). The page shows what
these answer; no verdict is made here or in the page, the blueprint's one tolerance policy makes them all."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from flask import Blueprint, Response, request

from ..analysis.culprits import GoldenComparison
from ..analysis.golden import compare_golden
from ..analysis.grids import matrix_dims, shard_layout
from ..analysis.locate import locate
from ..analysis.ops import operation_context
from ..errors import InvalidArgumentError, SpecError
from ..numeric.stats import compute_stats
from ..numeric.streamed import WINDOW_ELEMENTS
from . import limits, params
from .answers import answer, error_answer
from .context import lookup, policy, settings
from .params import ApiError
from .reports import Served
from .sources import pair, tensor_id_of

if TYPE_CHECKING:
    from ..numeric.metrics import Comparison
    from ..store.rows import TensorInfo


@dataclass(frozen=True)
class Golden:
    """The golden analysis of a report as a request finds it: done (``analysis``; None where the report is too large
    for a request or the analysis failed, ``error`` then saying why), or still running in the background
    (``pending``, with ``progress``)."""

    analysis: GoldenComparison | None
    pending: bool = False
    error: dict[str, Any] | None = None
    progress: dict[str, Any] | None = None

    def fields(self, waited: bool) -> dict[str, Any]:
        """What the operation list and the overview say of it: ``pending``, ``analysis`` (running or done, seconds)
        and ``analysis_error`` (the error answer the analysis gave, with its ``status``); nothing to a request that
        waited for it, whose answers stay as they were (``api/reports/NAME/golden`` answers the error)."""
        if waited:
            return {}
        return {"pending": self.pending, "analysis": self.progress, "analysis_error": self.error}


def golden_analysis(one: Served, *, required: bool, wait: bool = True) -> Golden:
    """Every golden record of ``one`` recomputed under the request's policy, with roles: run once per report and
    policy in the background (however many requests ask) and kept for later requests. With ``wait`` the request
    waits for it, else it is answered ``pending`` meanwhile. A report whose tensors are more than a request compares:
    a 413 when ``required``, else no analysis (the operation list then shows recorded verdicts only); a failed
    analysis raised when ``required``, else described in ``error``."""
    look, key = lookup(), ("golden-analysis", str(one.path))
    found: GoldenComparison | None = look.cached(key)
    if found is not None:
        return Golden(found)
    total = one.tensor_totals()[1]
    if total > limits.MAX_RUN_BYTES:
        if not required:
            return Golden(None)
        raise ApiError(413, f"report {one.name} stores {total:,} bytes of tensors, more than a request compares "
                            f"({limits.MAX_RUN_BYTES:,})", "run `reportdb compare REPORT --golden` on the command line")
    budget, chosen = settings().budget, policy()

    def work() -> GoldenComparison:
        kept: GoldenComparison | None = look.cached(key)  # kept by a flight that ended as this one started
        if kept is not None:
            return kept
        with budget.hold(2 * WINDOW_ELEMENTS * 48 + one.chunk_bytes(), "the golden records of a report"):
            with one.engine() as own:
                return compare_golden(own, policy=chosen, store=False)

    flight = look.shared.analyses.start((look.policy, key), work, lambda result: look.keep(key, result))
    if wait:
        flight.done.wait()
    if not flight.done.is_set():
        return Golden(None, pending=True, progress=flight.progress())
    if flight.error is None:
        return Golden(flight.result, progress=flight.progress())
    if required:
        raise flight.error
    failed = error_answer(flight.error, look.names())
    return Golden(None, error={"status": failed.status_code, **failed.get_json()}, progress=flight.progress())


def roles_of(analysis: GoldenComparison | None, rank: int) -> dict[tuple[str, int], dict[str, Any]]:
    """Each record's recomputed verdict (``pass``/``fail``, failed criteria, PCC) and its output's role, by
    (kind, tensor id), for one rank."""
    if analysis is None:
        return {}
    return {
        (r.kind, r.tensor_id): {"role": r.role, "verdict": r.verdict, "failed": list(r.failed), "status": r.status,
                                "pcc": None if r.metrics is None else r.metrics.pcc,
                                "sqnr_db": None if r.metrics is None else r.metrics.sqnr_db,
                                "error_db": _error_db(r.metrics)}
        for r in analysis.records if r.rank == rank
    }


def _error_db(m: Comparison | None) -> float | None:
    """The SQNR the engine's worst-first order ranks a record by: +inf without error, -inf where SQNR cannot see
    the error (a shape or NaN/Inf mismatch, errors on a zero golden); None when not compared."""
    if m is None:
        return None
    if m.shape_mismatch or m.nonfinite_mismatch:
        return -math.inf
    if m.sqnr_db is None:
        return -math.inf if m.max_abs_error else math.inf
    return m.sqnr_db


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
    analysis = golden_analysis(one, required=True).analysis
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
        })
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
                try:
                    found = operation_context(own, operation_id, rank=rank, policy=policy()).to_dict()
                except InvalidArgumentError:  # its only refusal, an unknown operation: 404 as an unknown tensor
                    raise ApiError(404, f"report {one.name} has no operation {operation_id} on rank {rank}",
                                   "GET api/reports/<report>/operations lists the report's operations") from None
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
        info = _locatable(one, tid, rank)
        with settings().budget.hold(2 * WINDOW_ELEMENTS * 64 + one.chunk_bytes(tid, rank), f"locating errors in tensor {tid}"):
            with one.engine() as own:
                found = locate(own, tid, golden=kind, rank=rank, device=device, policy=policy(),
                               top=top).to_dict()
        _place_cores(info, found)
        lookup().keep(key, found)
    return answer({"report": one.name, **found})


def runs_where() -> Response:
    """Where run B's output (``b``, ``tensor_b``) differs from run A's (``a``, ``tensor_a``): its worst tiles and its
    per-core entries, as ``reportdb locate B ID --against A:ID`` finds them (A is the reference)."""
    args = request.args
    served = {}
    for side in ("a", "b"):
        if not args.get(side) or not args.get(f"tensor_{side}"):
            raise ApiError(400, f"parameter {side} or tensor_{side} is missing",
                           "give a=<report>&b=<report>&tensor_a=<id>&tensor_b=<id>")
        served[side] = lookup().get(args[side])
    a, b = served["a"], served["b"]
    tid_a, tid_b = tensor_id_of(args["tensor_a"]), tensor_id_of(args["tensor_b"])
    rank = params.integer(args, "rank", 0)
    top = params.integer(args, "top", 10, low=1, high=1000)
    key = ("locate-runs", str(a.path), tid_a, str(b.path), tid_b, rank, top)
    found = lookup().cached(key)
    if found is None:
        info = _locatable(b, tid_b, rank)
        _locatable(a, tid_a, rank)
        cost = 2 * WINDOW_ELEMENTS * 64 + a.chunk_bytes(tid_a, rank) + b.chunk_bytes(tid_b, rank)
        with settings().budget.hold(cost, f"locating where tensor {tid_b} differs from run A's"):
            with b.engine() as own, a.engine() as other:
                found = locate(own, tid_b, against=(other, tid_a), rank=rank, policy=policy(), top=top).to_dict()
        _place_cores(info, found)
        lookup().keep(key, found)
    return answer({"a": a.name, "b": b.name, **found})


def _locatable(one: Served, tid: int, rank: int) -> TensorInfo:
    """A tensor's info, refused (413) when it holds more elements than a request locates in."""
    info = one.report.tensor_info(tid, rank)
    size = math.prod(info.shape or max((s.shape for s in info.shards), key=math.prod, default=()))
    if size > limits.MAX_COMPARE_ELEMENTS:
        raise ApiError(413, f"tensor {tid} holds {size:,} elements, more than {limits.MAX_COMPARE_ELEMENTS:,} a "
                            "request locates in", "run `reportdb locate` on the command line; it has no such bound")
    return info


def _place_cores(info: TensorInfo, found: dict[str, Any]) -> None:
    """Give each core entry of a located tensor (one device's cores) its region of the 2-D view."""
    if found["cores"] and all(c["device"] is None for c in found["cores"]):
        core_regions(info, tuple(found["shape"]), found["cores"])


def golden_part(kind: str, tensor_id: str) -> Response:
    """What a device shard is compared with (``device=r,c``): the box of the golden tensor the shard covers by the
    distribution (the whole golden for a replica; None when the golden is itself sharded per device) and that part's
    statistics, so the page shows the device's golden, not the whole one, beside the shard."""
    args = request.args
    one = lookup().pick(args.get("report") or None)
    device = params.device(args)
    if device is None:
        raise ApiError(400, "golden-part needs device=r,c", "the assembled tensor's golden is the whole golden tensor")
    record, actual, golden = pair(one, kind, tensor_id_of(tensor_id), params.integer(args, "rank", 0), device)
    if golden.size > limits.MAX_COMPARE_ELEMENTS:
        raise ApiError(413, f"the golden part holds {golden.size:,} elements, more than {limits.MAX_COMPARE_ELEMENTS:,} "
                            "a request reads", "compare on the command line: `reportdb locate --device`")
    with settings().budget.hold(golden.cost(golden.size, 24), f"the golden part of tensor {actual.tensor_id}"):
        stats = compute_stats(golden.read(()))
    counts, edges = stats.pop("hist_counts", None), stats.pop("hist_edges", None)
    histogram = None if counts is None else {"edges": edges, "counts": counts}
    box = None if golden.part is None else [[s.start, s.stop] for s in golden.part]
    return answer({"report": one.name, "kind": kind, "tensor_id": actual.tensor_id, "golden_tensor_id": golden.tensor_id,
                   "device": list(device), "shape": list(golden.shape), "box": box, "stats": stats,
                   "histogram": histogram})


#: The most rows (all matrices' rows of a part) whose shard keys are worked out to place the cores on the page.
MAX_REGION_ROWS = 1 << 22


def core_regions(info: TensorInfo, shape: tuple[int, ...], cores: list[dict[str, Any]]) -> None:
    """Add to each core entry the ``region`` of the 2-D view its shard first covers (``index``: the leading indices,
    ``y``, ``x``: ``[start, stop)`` rows and columns), so the page takes the heatmap there from the core map; None for
    a shard of padding only, or where the rows are too many to place."""
    tiled = (info.spec.layout or "").upper() == "TILE"
    tile = tuple(info.spec.tile_shape or (32, 32)) if tiled else None
    try:
        layout = shard_layout(info.spec.memory_config, shape, None if tile is None else (int(tile[0]), int(tile[1])))
    except SpecError:
        layout = None
    lead, h, w = matrix_dims(shape)
    matrices = math.prod(lead)
    if layout is None or matrices * h > MAX_REGION_ROWS:
        return
    keys = layout.row_keys(0, matrices, 0, h).reshape(matrices, h)
    for entry in cores:
        key, column = divmod(int(entry["shard"]), layout.col_shards)
        x0, x1 = column * layout.shard_width, min((column + 1) * layout.shard_width, w)
        hits = np.argwhere(keys == key)
        if x0 >= w or not len(hits):
            entry["region"] = None
            continue
        b, y0 = (int(v) for v in hits[0])
        y1 = y0 + int(np.count_nonzero(keys[b, y0:] == key))
        index = [int(i) for i in np.unravel_index(b, lead)] if lead else []
        entry["region"] = {"index": index, "y": [y0, y1], "x": [x0, x1]}


def register(bp: Blueprint) -> None:
    """Add the debugging endpoints to ``bp``."""
    bp.add_url_rule("/api/reports/<report>/golden", view_func=golden)
    bp.add_url_rule("/api/reports/<report>/operations/<op_id>", view_func=operation)
    bp.add_url_rule("/api/locate/<kind>/<tensor_id>", view_func=where)
    bp.add_url_rule("/api/runs/locate", view_func=runs_where)
    bp.add_url_rule("/api/golden-part/<kind>/<tensor_id>", view_func=golden_part)
