"""The comparison endpoints of the web API: a tensor against its golden tensor (metrics and verdict, under
ttnn-visualizer's field names too), its error heatmap, one point, an error histogram; and run against run."""

from __future__ import annotations

import math
from typing import Iterator

import numpy as np
from flask import Blueprint, Response, request

from ..analysis.runs import compare_runs
from ..numeric.streamed import WINDOW_ELEMENTS, compare_streamed, flat_windows
from . import limits, params, tolerances, views
from .answers import answer, values_json
from .context import lookup, policy, settings
from .heatmaps import grid_cells, heatmap_answer, region, rows
from .params import ApiError
from .reports import Record, Served
from .sources import Source, pair, same_shape, tensor_id_of, verdict_key


def _pair_of(kind: str, tensor_id: str) -> tuple[Served, Record, Source, Source]:
    """The report (``report=`` or the request's own), record, actual and golden sources a comparison URL names."""
    args = request.args
    one = lookup().pick(args.get("report") or None)
    record, actual, golden = pair(one, kind, tensor_id_of(tensor_id), params.integer(args, "rank", 0), params.device(args))
    return one, record, actual, golden


def _plan(one: Served, record: Record, actual: Source) -> tolerances.Plan:
    """The tolerances and criteria of a request on ``actual``: the request's, else the policy's for the operation
    that produced it and its dtype."""
    dtype = tolerances.policy_dtype(actual.info.spec.ttnn_dtype, actual.info.dtype)
    return tolerances.plan(request.args, policy(), one.producer(actual.tensor_id, actual.rank), dtype,
                           record.desired_pcc)


def _error_grid(actual: Source, golden: Source, area: views.Region, error: str, rtol: float, atol: float, what: str) -> np.ndarray:
    """The ``error`` of ``actual`` against ``golden`` over ``area``, pooled band by band into the heatmap's grid under
    the memory budget (``what`` names the request in a refusal)."""

    def band(y0: int, y1: int) -> np.ndarray:
        return views.errors(rows(actual, area, y0, y1), rows(golden, area, y0, y1), error, rtol=rtol, atol=atol)

    elements = views.BAND_ELEMENTS // 4
    cost = actual.cost(2 * elements, 64) + golden.cost(2 * elements, 16) + 64 * grid_cells(area)
    with settings().budget.hold(cost, what):
        return views.pool_region(area, band, signed=False, elements=elements)


def compare_tensor(kind: str, tensor_id: str) -> Response:
    """A tensor against its golden tensor: every metric, the policy's verdict, and ttnn-visualizer's ``comparison``
    object (its field names: ``matches`` is the verdict, ``actual_pcc`` the PCC computed here)."""
    one, record, actual, golden = _pair_of(kind, tensor_id)
    plan = _plan(one, record, actual)
    for side in (actual, golden):
        if side.size > limits.MAX_COMPARE_ELEMENTS:
            raise ApiError(413, f"tensor {side.tensor_id} holds {side.size:,} elements, more than "
                                f"{limits.MAX_COMPARE_ELEMENTS:,} a comparison reads in one request",
                           "compare a device shard (device=r,c), or run `reportdb compare --golden` on the command "
                           "line, which has no such bound")
    key = ("compare", str(one.path), kind, actual.tensor_id, actual.rank, actual.device, plan.rtol, plan.atol, plan.pcc)
    comparison = lookup().cached(key)
    if comparison is None:
        cost = actual.cost(WINDOW_ELEMENTS, 48) + golden.cost(WINDOW_ELEMENTS, 16)
        with settings().budget.hold(cost, f"the comparison of tensor {actual.tensor_id}"):
            comparison = compare_streamed(actual.read, golden.read, actual.shape, golden.shape, actual.dtype,
                                          golden.dtype, rtol=plan.rtol, atol=plan.atol, pcc=plan.pcc)
        lookup().keep(key, comparison)
    verdict = plan.judge(comparison, tolerances.policy_dtype(actual.info.spec.ttnn_dtype, actual.info.dtype))
    metrics = comparison.to_dict()
    if actual.device is None and plan.source == "policy":
        lookup().keep(verdict_key(one, kind, actual.tensor_id, actual.rank), (metrics.get("pcc"), verdict.passed))
    return answer({
        "report": one.name, "kind": kind, "tensor_id": actual.tensor_id, "golden_tensor_id": golden.tensor_id,
        "rank": actual.rank, "device": None if actual.device is None else list(actual.device),
        "comparison": {"tensor_id": actual.tensor_id, "golden_tensor_id": golden.tensor_id, "matches": verdict.passed,
                       "desired_pcc": plan.pcc, "actual_pcc": metrics.get("pcc")},
        "record": {"golden_tensor_id": record.golden_tensor_id, "desired_pcc": record.desired_pcc,
                   "recorded_pcc": record.recorded_pcc, "recorded_matches": record.recorded_matches,
                   "pcc": metrics.get("pcc"), "passed": verdict.passed},
        "tolerances": plan.to_json(), "verdict": verdict.to_dict(), "metrics": metrics, "passed": verdict.passed,
    })


def compare_heatmap(kind: str, tensor_id: str) -> Response:
    """The error of a tensor against its golden tensor (abs, rel, ulp or the mismatch mask) pooled over a region."""
    args = request.args
    one, record, actual, golden = _pair_of(kind, tensor_id)
    same_shape(actual, golden)
    error = params.choice(args, "error", views.ERROR_KINDS)
    fmt = params.choice(args, "format", ("png", "json"))
    plan = _plan(one, record, actual)
    rtol, atol = plan.rtol, plan.atol
    area = region(args, actual.shape, fmt)
    grid = _error_grid(actual, golden, area, error, rtol, atol, f"an error heatmap of tensor {actual.tensor_id}")
    return heatmap_answer(area, grid, error, fmt, {"tensor_id": actual.tensor_id, "golden_tensor_id": golden.tensor_id,
                                                   "error": error, "rtol": rtol, "atol": atol})


def compare_point(kind: str, tensor_id: str) -> Response:
    """One element of a tensor and of its golden tensor, with its errors and whether it is within tolerance."""
    one, record, actual, golden = _pair_of(kind, tensor_id)
    same_shape(actual, golden)
    at = params.index(request.args, "at")
    if at is None or len(at) != len(actual.shape):
        raise ApiError(400, f"at must give one index per axis of the shape {list(actual.shape)}",
                       "e.g. at=" + ",".join("0" for _ in actual.shape))
    plan = _plan(one, record, actual)
    rtol, atol = plan.rtol, plan.atol
    actual.plan(at)  # out of range: a 400 before any read
    with settings().budget.hold(actual.cost(1, 64) + golden.cost(1, 64), f"a point of tensor {actual.tensor_id}"):
        a, g = actual.read(at).reshape(1), golden.read(at).reshape(1)
    errs = {kind: views.errors(a, g, kind, rtol=rtol, atol=atol)[0] for kind in views.ERROR_KINDS}
    allowed = atol + rtol * abs(float(g[0])) if math.isfinite(float(g[0])) else None
    return answer({
        "index": [i % n for i, n in zip(at, actual.shape)], "actual": values_json(a)[0], "golden": values_json(g)[0],
        "abs_error": values_json(np.array([errs["abs"]]))[0], "rel_error": values_json(np.array([errs["rel"]]))[0],
        "ulp": values_json(np.array([errs["ulp"]]))[0], "tolerances": {"rtol": rtol, "atol": atol},
        "allowed": allowed, "mismatch": bool(errs["mask"]),
    })


def compare_histogram(kind: str, tensor_id: str) -> Response:
    """A histogram of the element errors (abs, rel or ulp) of a tensor against its golden tensor."""
    args = request.args
    one, record, actual, golden = _pair_of(kind, tensor_id)
    same_shape(actual, golden)
    error = params.choice(args, "error", ("abs", "rel", "ulp"))
    bins = params.integer(args, "bins", 64, low=1, high=limits.MAX_BINS)
    if actual.size > limits.MAX_POOL_ELEMENTS:
        raise ApiError(413, f"tensor {actual.tensor_id} holds {actual.size:,} elements, more than "
                            f"{limits.MAX_POOL_ELEMENTS:,} per request", "use the heatmap endpoint on a region")
    plan = _plan(one, record, actual)
    rtol, atol = plan.rtol, plan.atol
    elements = views.BAND_ELEMENTS // 4

    def bands() -> Iterator[np.ndarray]:
        for window in flat_windows(actual.shape, elements):
            yield views.errors(actual.read(window), golden.read(window), error, rtol=rtol, atol=atol)

    with settings().budget.hold(actual.cost(elements, 64) + golden.cost(elements, 16),
                                f"an error histogram of tensor {actual.tensor_id}"):
        return answer({"error": error, **views.error_histogram(bands, bins)})


def runs() -> Response:
    """Run against run: every matched output of report ``a`` against report ``b``'s, the first divergence first."""
    args = request.args
    names = {}
    for side in ("a", "b"):
        if not args.get(side):
            raise ApiError(400, f"parameter {side} is missing", "give a=<report>&b=<report> (GET api/reports lists them)")
        names[side] = lookup().get(args[side])
    # tolerances the request gives replace the policy's everywhere; absent ones stay the policy's, per dtype
    rtol = params.optional_number(args, "rtol", low=0.0, high=1e300)
    atol = params.optional_number(args, "atol", low=0.0, high=1e300)
    pcc = params.optional_number(args, "pcc", low=-1.0, high=1.0)
    rank = params.integer(args, "rank", 0)
    for one in names.values():
        total = one.tensor_totals()[1]
        if total > limits.MAX_RUN_BYTES:
            raise ApiError(413, f"report {one.name} stores {total:,} bytes of tensors, more than a request compares "
                                f"({limits.MAX_RUN_BYTES:,})", "run `reportdb compare A B` on the command line; it has "
                                                               "no such bound")
    key = ("runs", str(names["a"].path), str(names["b"].path), rank, rtol, atol, pcc)
    result = lookup().cached(key)
    if result is None:
        cost = 2 * WINDOW_ELEMENTS * 48 + names["a"].chunk_bytes() + names["b"].chunk_bytes()
        with settings().budget.hold(cost, "run against run"):
            with names["a"].engine() as report_a, names["b"].engine() as report_b:
                result = compare_runs(report_a, report_b, rank=rank, policy=policy(),
                                      rtol=rtol, atol=atol, pcc=pcc).to_dict()
        lookup().keep(key, result)
    return answer({"a": names["a"].name, "b": names["b"].name, "matched_by": result.get("matched_by"),
                   "first_divergence": result.get("first_divergence"), "items": result.get("rows", []),
                   "unmatched_a": result.get("unmatched_a", []), "unmatched_b": result.get("unmatched_b", [])})


def runs_heatmap() -> Response:
    """One matched pair of run against run as a heatmap over a region: ``side`` a or b (values, pooled by max
    |value|) or error (``error`` abs, rel, ulp or mask of A against B at the request's or the policy's tolerances),
    so the page draws A, B and their difference with the same zoom."""
    args = request.args
    sources = []
    for side in ("a", "b"):
        if not args.get(side):
            raise ApiError(400, f"parameter {side} is missing", "give a=<report>&b=<report>&tensor_a=<id>&tensor_b=<id>")
        served = lookup().get(args[side])
        tensor = args.get(f"tensor_{side}") or ""
        sources.append(Source(served, tensor_id_of(tensor), params.integer(args, "rank", 0), params.device(args)))
    a, b = same_shape(sources[0], sources[1])
    shown = params.choice(args, "side", ("a", "b", "error"))
    fmt = params.choice(args, "format", ("png", "json"))
    area = region(args, a.shape, fmt)
    if shown != "error":
        one = a if shown == "a" else b
        cost = one.cost(2 * views.BAND_ELEMENTS, max(one.dtype.itemsize, 4) + 16) + 64 * grid_cells(area)
        with settings().budget.hold(cost, f"a heatmap of tensor {one.tensor_id}"):
            grid = views.pool_region(area, lambda y0, y1: views.as_float(rows(one, area, y0, y1)))
        return heatmap_answer(area, grid, None, fmt, {"tensor_id": one.tensor_id, "dtype": one.info.dtype})
    error = params.choice(args, "error", views.ERROR_KINDS)
    dtype = tolerances.policy_dtype(b.info.spec.ttnn_dtype, b.info.dtype)
    plan = tolerances.plan(args, policy(), b.served.producer(b.tensor_id, b.rank), dtype, None)
    rtol, atol = plan.rtol, plan.atol
    grid = _error_grid(b, a, area, error, rtol, atol, f"the difference of tensors {a.tensor_id} and {b.tensor_id}")
    return heatmap_answer(area, grid, error, fmt, {"tensor_a": a.tensor_id, "tensor_b": b.tensor_id, "error": error,
                                                   "rtol": rtol, "atol": atol})


def register(bp: Blueprint) -> None:
    """Add the comparison endpoints to ``bp`` (the compare-tensor paths are those ttnn-visualizer proposed for its own)."""
    bp.add_url_rule("/api/compare-tensor/<kind>/<tensor_id>", view_func=compare_tensor)
    bp.add_url_rule("/api/compare-tensor/<kind>/<tensor_id>/heatmap", view_func=compare_heatmap)
    bp.add_url_rule("/api/compare-tensor/<kind>/<tensor_id>/point", view_func=compare_point)
    bp.add_url_rule("/api/compare-tensor/<kind>/<tensor_id>/histogram", view_func=compare_histogram)
    bp.add_url_rule("/api/runs", view_func=runs)
    bp.add_url_rule("/api/runs/heatmap", view_func=runs_heatmap)
