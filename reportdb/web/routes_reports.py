"""The report endpoints of the web API: the page, the served reports, the operation list with each tensor's golden
records, a tensor's metadata and statistics, its values and its heatmap."""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
from flask import Blueprint, Response, request, send_from_directory

from ..analysis.culprits import GoldenComparison
from ..errors import CorruptionError, PolicyError, SchemaError, TensorNotFoundError
from . import limits, params, tolerances, views
from .answers import answer, values_json
from .context import lookup, policy, settings
from .heatmaps import grid_cells, heatmap_answer, region, rows
from .params import ApiError
from .reports import RECORD_TABLES, Operation, Record, Served
from .routes_debug import Golden, error_rank, golden_analysis, roles_of
from .sources import Source, normalised, shard_index, tensor_id_of, verdict_key

STATIC = Path(__file__).resolve().parent / "static"


def page() -> Response:
    """The page (static/index.html), under whatever prefix the blueprint is mounted."""
    if not (STATIC / "index.html").is_file():
        raise ApiError(404, "the page is not installed (reportdb/web/static/index.html is missing)",
                       "reinstall reportdb with its web extra; the API under api/ works without it")
    return send_from_directory(STATIC, "index.html", max_age=0)


def reports() -> Response:
    """Every report this request may name, with its counts."""
    items = []
    for name, one in lookup().by_name.items():
        items.append({
            "name": name, "file": one.path.name, "operations": one.count("operations"),
            "tensors": one.tensor_totals()[0], "bytes": one.path.stat().st_size,
            "ttnn_version": one.metadata("version"),
            "comparisons": sum(one.count(t) for t in RECORD_TABLES.values()),
            "current": one is lookup().current,
        })
    return answer({"reports": items})


def status() -> Response:
    """The server's memory budget as it stands (what is reserved, the peak, requests waiting or refused)."""
    return answer({"memory": settings().budget.to_json()})


def policies() -> Response:
    """The tolerance policies a request may choose with ``policy=NAME`` (``default`` first), each with its rules."""
    config = settings()
    items = [{"name": "default", "source": config.policy.source, **config.policy.to_dict()}]
    items += [{"name": name, "source": p.source, **p.to_dict()} for name, p in config.policies.items()]
    items += [{"name": name, "source": p.source, **p.to_dict()} for name, p in config.pasted_policies()]
    return answer({"policies": items, "chosen": lookup().policy})


def paste_policy() -> Response:
    """Check a policy pasted into the page (TOML ``[[rules]]`` as the request body) and keep it under the name this
    answers; a policy that cannot be used is a 400 whose ``error`` says why (and which rule) in one line."""
    limit = 4 * settings().MAX_PASTED_CHARS  # bytes of UTF-8 text
    body = b"" if (request.content_length or 0) > limit else request.stream.read(limit + 1)
    if (request.content_length or 0) > limit or len(body) > limit:
        raise ApiError(413, "the pasted policy is too long", f"a policy holds at most {settings().MAX_PASTED_CHARS:,} characters")
    try:
        name, found = settings().paste(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise ApiError(400, "the pasted policy is not UTF-8 text", "paste TOML [[rules]] tables") from None
    except PolicyError as exc:
        raise ApiError(400, " ".join(str(exc).split()), "a policy holds [[rules]] tables with op, optional dtype and "
                       "criteria (pcc, rtol, atol, max_abs_error, max_ulp, max_mismatch_fraction, sqnr_db)") from None
    return answer({"name": name, "source": found.source, **found.to_dict()})


def colormaps() -> Response:
    """The colour tables of the PNG heatmaps and the colours of non-finite cells."""
    return answer({**{name: lut.tolist() for name, lut in views.LUTS.items()},
                   "nonfinite": {k: list(v) for k, v in views.NONFINITE.items()}})


class _Verdicts:
    """The PCC, verdict and role of each record of one report and rank: recomputed by the engine
    (``compare_golden`` under the blueprint's policy) where the report is small enough for a request, else by this
    server where it has, else kept by ``compare --golden --store``, else as ttnn recorded it. Without ``wait`` the
    analysis runs in the background and the recorded ones answer meanwhile (``golden.pending``)."""

    def __init__(self, one: Served, rank: int, golden: Golden) -> None:
        self.one = one
        self.rank = rank
        self.records = {kind: one.records(kind, rank) for kind in RECORD_TABLES}
        self.kept = one.stored_results()
        self.golden = golden
        self.analysis = golden.analysis
        self.judged, self.ranks = self._judged(one, rank)

    def _judged(self, one: Served, rank: int) -> tuple[dict[tuple[str, int], dict[str, Any]], dict[int, int]]:
        """The analysis' verdicts and roles by record, and its worst-first places by tensor, for this rank (kept:
        every page of the list asks, and over 10,000 records they cost more than the page)."""
        if self.analysis is None:
            return {}, {}
        key = ("roles", str(one.path), rank)  # the analysis is kept under the same policy and path
        found = lookup().cached(key)
        if found is None:
            found = (roles_of(self.analysis, rank), error_rank(self.analysis, rank))
            lookup().keep(key, found)
        return found  # type: ignore[no-any-return]

    def result(self, kind: str, tensor_id: int) -> tuple[float | None, bool | None]:
        """The PCC and verdict of a record: the engine's under the blueprint's policy, else as kept or recorded."""
        judged = self.judged.get((kind, tensor_id))
        if judged is not None and judged["verdict"] is not None:
            return judged["pcc"], judged["verdict"] == "pass"
        cached = lookup().cached(verdict_key(self.one, kind, tensor_id, self.rank))
        return cached if cached is not None else self.kept.get((kind, tensor_id, self.rank), (None, None))

    def summary(self, op: Operation) -> tuple[float | None, bool | None]:
        """The worst PCC of an operation's outputs and whether all of them pass."""
        pccs, verdicts = [], []
        for tensor_id in op.outputs:
            for kind in RECORD_TABLES:
                record = self.records[kind].get(tensor_id)
                if record is not None:
                    pcc, passed = self.result(kind, tensor_id)
                    pccs.append(record.recorded_pcc if pcc is None else pcc)
                    verdicts.append(record.recorded_matches if passed is None else passed)
        known = [p for p in pccs if p is not None]
        found = [v for v in verdicts if v is not None]
        return (min(known) if known else None), (all(found) if found else None)

    def comparison(self, kind: str, tensor_id: int) -> dict[str, Any] | None:
        """A tensor's record of ``kind`` under ttnn-visualizer's names (``matches``, ``actual_pcc`` as recorded) and
        reportdb's (``pcc``, ``passed`` as recomputed)."""
        record: Record | None = self.records[kind].get(tensor_id)
        if record is None:
            return None
        pcc, passed = self.result(kind, tensor_id)
        judged = self.judged.get((kind, tensor_id), {})
        return {
            "tensor_id": tensor_id, "golden_tensor_id": record.golden_tensor_id, "matches": record.recorded_matches,
            "desired_pcc": record.desired_pcc, "actual_pcc": record.recorded_pcc,
            "recorded_pcc": record.recorded_pcc, "recorded_matches": record.recorded_matches, "pcc": pcc, "passed": passed,
            "role": judged.get("role"), "failed": judged.get("failed", []),
        }

    def local_error_db(self, op: Operation) -> float | str | None:
        """The SQNR (dB) of an operation's worst local comparison as the worst-first order ranks it ("inf" without
        error, "-inf" where SQNR cannot see it), or None without a local record."""
        found = [db for t in op.outputs if (db := self.judged.get(("local", t), {}).get("error_db")) is not None]
        if not found:
            return None
        worst = min(found)
        return worst if math.isfinite(worst) else ("inf" if worst > 0 else "-inf")

    def role(self, op: Operation) -> str | None:
        """The operation's role: ``culprit`` when an output is one, else ``victim`` when one is, else ``pass`` when
        its outputs were judged, else None."""
        roles = {self.judged.get((kind, t), {}).get("role") for t in op.outputs for kind in RECORD_TABLES}
        return next((r for r in ("culprit", "victim", "pass") if r in roles), None)


def _ordered(ops: list[Operation], summaries: dict[int, tuple[float | None, bool | None]], sort: str,
             descending: bool, ranks: dict[int, int]) -> list[Operation]:
    """The operations by id (execution order), name, worst PCC (worst first ascending), or error: the engine's
    worst-first order (``ranks``: by local error, culprits before victims); those without one last either way."""
    if sort == "error":
        place = {op.id: min((ranks[t] for t in op.outputs if t in ranks), default=None) for op in ops}
        known = sorted((op for op in ops if place[op.id] is not None), key=lambda op: place[op.id] or 0, reverse=descending)
        return known + [op for op in ops if place[op.id] is None]
    if sort == "pcc":
        worst = {op_id: pcc for op_id, (pcc, _) in summaries.items() if pcc is not None}
        with_pcc = sorted((op for op in ops if op.id in worst), key=lambda op: worst[op.id], reverse=descending)
        return with_pcc + [op for op in ops if op.id not in worst]
    if sort == "name":
        return sorted(ops, key=lambda op: (op.name, op.id), reverse=descending)
    return sorted(ops, key=lambda op: op.id, reverse=descending)


def operations(report: str) -> Response:
    """A page of a report's operations, filtered and sorted, each tensor with its golden records; ``wait=0`` answers
    at once with the recorded verdicts while the golden analysis runs (``pending``; the page polls)."""
    one = lookup().get(report)
    args = request.args
    rank = params.integer(args, "rank", 0)
    text = (args.get("filter") or "").lower()[:200]
    sort = params.choice(args, "sort", ("id", "name", "pcc", "error"))
    order = params.choice(args, "order", ("asc", "desc"))
    offset = params.integer(args, "offset", 0)
    limit = params.integer(args, "limit", 100, low=1, high=limits.MAX_PAGE)
    waits = _waits()
    golden = _golden(one, waits)
    pending = ("operations-pending", str(one.path), rank, text, sort, order, offset, limit)
    kept = lookup().cached(pending) if golden.pending else None
    if kept is not None:  # the same page of recorded verdicts while the analysis runs (the page polls)
        return answer({**kept, **golden.fields(waits)})
    verdicts = _Verdicts(one, rank, golden)
    ops = [op for op in one.operations(rank) if text in op.name.lower()]
    summaries = {op.id: verdicts.summary(op) for op in ops}
    page_ops = _ordered(ops, summaries, sort, order == "desc", verdicts.ranks)[offset : offset + limit]
    stored = one.stored_keys()
    described = _described(one, {t for op in page_ops for t in (*op.inputs, *op.outputs)}, stored, rank)

    def ref(tensor_id: int) -> dict[str, Any]:
        return {"tensor_id": tensor_id, "rank": rank, "stored": (tensor_id, rank) in stored,
                **described.get(tensor_id, {"shape": None, "dtype": None, "ttnn_dtype": None}),
                "comparisons": {kind: verdicts.comparison(kind, tensor_id) for kind in RECORD_TABLES}}

    anomalous = _anomalies(verdicts.analysis, rank)
    items = [
        {"id": op.id, "name": op.name, "inputs": [ref(t) for t in op.inputs], "outputs": [ref(t) for t in op.outputs],
         "worst_pcc": summaries[op.id][0], "passed": summaries[op.id][1], "role": verdicts.role(op),
         "local_sqnr_db": verdicts.local_error_db(op), "anomaly": anomalous.get(op.id)}
        for op in page_ops
    ]
    analysis = verdicts.analysis
    first = None if analysis is None else analysis.first_culprit
    victims = 0 if analysis is None else sum(verdicts.role(op) == "victim" for op in one.operations(rank))
    found = {"total": len(ops), "offset": offset, "limit": limit, "items": items, "judged": analysis is not None,
             "global_only": bool(analysis is not None and analysis.global_only), "victims": victims,
             **golden.fields(waits), "first_culprit": None if first is None or first.rank != rank else first.to_dict()}
    if golden.pending:
        lookup().keep(pending, found)
    return answer(found)


def _anomalies(analysis: GoldenComparison | None, rank: int) -> dict[int, str]:
    """Each operation of ``rank`` with an output far out of line with its peers (``Anomaly``), by id: the outputs'
    sentences (``Anomaly.describe()``), one a line."""
    found: dict[int, list[str]] = {}
    for a in () if analysis is None else analysis.anomalies:
        if a.rank == rank and a.operation_id is not None:
            found.setdefault(a.operation_id, []).append(a.describe())
    return {op: "\n".join(texts) for op, texts in found.items()}


def _golden(one: Served, waits: bool) -> Golden:
    """The golden analysis of a report with golden records (waited for or not), else none."""
    has_records = any(one.count(table) for table in RECORD_TABLES.values())
    return golden_analysis(one, required=False, wait=waits) if has_records else Golden(None)


#: One letter per operation in the overview: its role (culprit, victim, pass), or its recorded verdict where roles are
#: unknown (fail, ok), or no comparison record.
_ROLE_CODES = {"culprit": "c", "victim": "v", "pass": "p"}


def _rounded(value: float | None, digits: int) -> float | None:
    """A number for the overview (short JSON); non-finite ones as None."""
    return None if value is None or not math.isfinite(value) else round(value, digits)


def _waits() -> bool:
    """Whether the request waits for the golden analysis (``wait=1``, the default) or is answered at once while it
    runs (``wait=0``, the page's first requests)."""
    return params.choice(request.args, "wait", ("1", "0")) == "1"


def overview(report: str) -> Response:
    """Every operation of a report in execution order, compactly (columns, one letter per role), for the page's
    overview: ``ids``, ``names`` (each distinct name once) and ``name_index``, ``roles`` (``c`` culprit, ``v`` victim,
    ``p`` pass, ``f``/``o`` a recorded fail/pass where the report is too large to recompute or while the analysis
    runs, ``-`` no record), ``pcc`` and ``sqnr_db`` of each operation's worst local comparison (global where only
    global records exist), the first culprit, ``anomalies`` (operations with an output far below its peers' SQNR, each
    with its sentence), and ``pending`` (``wait=0``: the analysis still runs); all under the
    request's policy (kept per policy)."""
    one = lookup().get(report)
    rank = params.integer(request.args, "rank", 0)
    waits = _waits()
    key = ("overview", str(one.path), rank, waits)  # the two forms differ in their pending fields
    found = lookup().cached(key)
    if found is None:
        golden = _golden(one, waits)
        if golden.pending:  # the recorded roles, made once while the analysis runs (the page polls)
            recorded = ("overview-pending", str(one.path), rank)
            text = lookup().cached(recorded)
            if text is None:
                text = _overview(one, rank, golden, waits)
                lookup().keep(recorded, text)
            fields = json.dumps(golden.fields(waits), separators=(",", ":"), allow_nan=False)
            return Response(text[:-1] + "," + fields[1:], mimetype="application/json")  # its progress now
        found = _overview(one, rank, golden, waits)
        if not golden.pending and (golden.error is None or golden.error["status"] != 503):
            lookup().keep(key, found)  # kept once final (a busy server's answer is tried again)
    return Response(found, mimetype="application/json")


def _overview(one: Served, rank: int, golden: Golden, waited: bool) -> str:
    """The overview's JSON text (made once per report, rank and policy once final): roles from the engine's golden
    analysis (its records carry the recorded verdicts too), the records' own verdicts only where there is none."""
    ops = one.operations(rank)
    analysis = golden.analysis
    records = {kind: one.records(kind, rank) if analysis is None else {} for kind in RECORD_TABLES}
    role: dict[int, str] = {}
    worst: dict[int, tuple[float | None, float | None]] = {}
    if analysis is not None:
        measured = "global" if analysis.global_only else "local"
        order = {"c": 5, "f": 4, "v": 3, "p": 2, "o": 1}
        for r in analysis.records:
            if r.rank != rank or r.operation_id is None:
                continue
            code = _ROLE_CODES.get(r.role or "") or (None if r.recorded_matches is None else "o" if r.recorded_matches else "f")
            if code is not None and order[code] > order.get(role.get(r.operation_id, ""), 0):
                role[r.operation_id] = code
            if r.kind == measured and r.metrics is not None:
                pcc, sqnr = worst.get(r.operation_id, (None, None))
                m = r.metrics
                pcc = m.pcc if pcc is None or (m.pcc is not None and m.pcc < pcc) else pcc
                sqnr = m.sqnr_db if sqnr is None or (m.sqnr_db is not None and m.sqnr_db < sqnr) else sqnr
                worst[r.operation_id] = (pcc, sqnr)
    names: dict[str, int] = {}
    ids, name_index, roles, pccs, sqnrs = [], [], [], [], []
    for op in ops:
        ids.append(op.id)
        name_index.append(names.setdefault(op.name, len(names)))
        code = role.get(op.id)
        if code is None:  # no recomputed role: the records' own verdicts
            found = [rec.recorded_matches for kind in RECORD_TABLES for t in op.outputs
                     if (rec := records[kind].get(t)) is not None]
            code = "-" if not found else "f" if False in found else "o"
        roles.append(code)
        pcc, sqnr = worst.get(op.id, (None, None))
        if pcc is None and analysis is None:
            pcc = min((rec.recorded_pcc for t in op.outputs if (rec := records["local"].get(t)) is not None
                       and rec.recorded_pcc is not None), default=None)
        pccs.append(_rounded(pcc, 6))
        sqnrs.append(_rounded(sqnr, 2))
    first = None if analysis is None else analysis.first_culprit
    return json.dumps({
        "report": one.name, "rank": rank, "policy": lookup().policy, "total": len(ops), "judged": analysis is not None,
        "global_only": bool(analysis is not None and analysis.global_only),
        "first_culprit": None if first is None or first.rank != rank else first.to_dict(),
        "ids": ids, "names": list(names), "name_index": name_index, "roles": "".join(roles), "pcc": pccs,
        "sqnr_db": sqnrs, "anomalies": [{"operation_id": op, "text": text} for op, text in _anomalies(analysis, rank).items()],
        **({} if golden.pending else golden.fields(waited)),
    }, separators=(",", ":"), allow_nan=False)


def tensor(report: str, tensor_id: str) -> Response:
    """A tensor's stored spec, shards and statistics (no value bytes read)."""
    one = lookup().get(report)
    rank = params.integer(request.args, "rank", 0)
    device = params.device(request.args)
    info = one.report.tensor_info(tensor_id_of(tensor_id), rank)
    spec = info.spec
    dist = spec.distribution
    per_shard: tuple[dict[str, Any], ...] | None
    try:
        per_shard = tuple(s.to_dict() for s in one.report.tensor_stats(info.tensor_id, rank).shards)
    except (TensorNotFoundError, SchemaError):  # stored without statistics, or a schema without their table
        per_shard = None
    shards = []
    for i, s in enumerate(info.shards):
        shards.append({
            "index": i, "device": list(s.mesh_coordinate) if s.mesh_coordinate else None, "shape": list(s.shape),
            "dtype": s.dtype, "nbytes": s.nbytes,
            "placement": None if dist is None or dist.placements is None else [p.to_json() for p in dist.placements],
            "stats": None if per_shard is None or len(info.shards) == 1 else _stats_only(per_shard[i]),
        })
    chosen = shard_index(info, device) if device is not None else (0 if len(info.shards) == 1 else None)
    stats = None if per_shard is None or chosen is None else per_shard[chosen]
    dtype = tolerances.policy_dtype(spec.ttnn_dtype, info.dtype)
    judge = policy()
    op = one.producer(info.tensor_id, rank)
    rule = judge.rule_for(op, dtype)  # its PCC, where it sets one, is the threshold rather than the record's
    rtol, atol = judge.tolerances(op, dtype)
    criteria = {k: v for k, v in judge.criteria_for(op, dtype).to_dict().items() if v is not None}
    histogram = None
    if stats is not None and stats.get("hist_counts") is not None:
        histogram = {"edges": stats["hist_edges"], "counts": stats["hist_counts"]}
    return answer({
        "tensor_id": info.tensor_id, "rank": info.rank, "shape": None if info.shape is None else list(info.shape),
        "dtype": info.dtype, "ttnn_dtype": spec.ttnn_dtype, "layout": spec.layout,
        "tile": None if spec.tile_shape is None else list(spec.tile_shape), "padded_shape":
        None if spec.padded_shape is None else list(spec.padded_shape), "memory_config": spec.memory_config,
        "storage_type": spec.storage_type, "nbytes": info.nbytes,
        "mesh_shape": None if dist is None else list(dist.mesh_shape),
        "distribution": None if dist is None else dist.to_json(), "shards": shards,
        "stats": None if stats is None else _stats_only(stats), "histogram": histogram,
        "policy": {"name": lookup().policy, "operation": op, "dtype": dtype, "rtol": rtol, "atol": atol,
                   "pcc": judge.pcc_threshold(op, dtype), "rule_pcc": rule is not None and rule.criteria.pcc is not None,
                   "criteria": criteria},
    })


def values(report: str, tensor_id: str) -> Response:
    """The values of a window of a tensor, as JSON or ``.npy``."""
    args = request.args
    fmt = params.choice(args, "format", ("json", "npy"))
    source = Source(lookup().get(report), tensor_id_of(tensor_id), params.integer(args, "rank", 0), params.device(args))
    window = params.window(args, "slice")
    shape = source.plan(window)
    count, limit = math.prod(shape), (limits.MAX_NPY_ELEMENTS if fmt == "npy" else limits.MAX_JSON_ELEMENTS)
    if count > limit:
        raise ApiError(413, f"the window {list(shape)} holds {count:,} elements, more than {limit:,} as {fmt}",
                       "narrow the slice" + (", or ask for format=npy (up to 1,048,576)" if fmt == "json" else ""))
    per_element = 3 * max(source.dtype.itemsize, 4) if fmt == "npy" else 160  # JSON: Python floats and their text
    with settings().budget.hold(source.cost(count, per_element), f"a window of tensor {source.tensor_id}"):
        array = source.read(window)
        if fmt == "npy":
            return _npy(source, array)
        return answer({"shape": list(shape), "dtype": source.info.dtype, "slice": normalised(window, source.shape),
                       "values": values_json(array)})


def _npy(source: Source, array: np.ndarray) -> Response:
    """Values as a ``.npy`` download (block floats as float32), named after the report and tensor."""
    out = io.BytesIO()
    np.save(out, array.astype(np.float32) if array.dtype.kind == "V" else array, allow_pickle=False)
    filename = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{source.served.name}-{source.tensor_id}.npy")
    response = Response(out.getvalue(), mimetype="application/octet-stream")
    response.headers["Content-Disposition"] = f'attachment; filename="{filename}"'
    response.headers["X-Reportdb-Dtype"] = source.info.dtype
    return response


def heatmap(report: str, tensor_id: str) -> Response:
    """A tensor's values pooled (max |value| per cell) over a region, as JSON or PNG."""
    args = request.args
    fmt = params.choice(args, "format", ("png", "json"))
    source = Source(lookup().get(report), tensor_id_of(tensor_id), params.integer(args, "rank", 0), params.device(args))
    area = region(args, source.shape, fmt)
    cost = source.cost(2 * views.BAND_ELEMENTS, max(source.dtype.itemsize, 4) + 16) + 64 * grid_cells(area)
    with settings().budget.hold(cost, f"a heatmap of tensor {source.tensor_id}"):
        grid = views.pool_region(area, lambda y0, y1: views.as_float(rows(source, area, y0, y1)))
        return heatmap_answer(area, grid, None, fmt, {"tensor_id": source.tensor_id, "dtype": source.info.dtype})


def _stats_only(stats: dict[str, Any]) -> dict[str, Any]:
    """A stored statistics row without its histogram (given apart)."""
    return {k: v for k, v in stats.items() if k not in ("hist_counts", "hist_edges")}


def _described(one: Served, tensor_ids: set[int], stored: set[tuple[int, int]], rank: int) -> dict[int, dict[str, Any]]:
    """Shape and dtypes of the tensors a page lists: from the store where stored, else from the report's
    ``tensors`` table (ttnn's own text: ``Shape([1, 32])``, ``DataType.BFLOAT16``)."""
    found: dict[int, dict[str, Any]] = {}
    for tensor_id in sorted(tensor_ids):
        if (tensor_id, rank) in stored:
            try:
                info = one.report.tensor_info(tensor_id, rank)
            except CorruptionError as exc:  # one damaged tensor's row is shown as such; the rest of the list stands
                found[tensor_id] = {"shape": None, "dtype": None, "ttnn_dtype": None, "damaged": str(exc)}
                continue
            found[tensor_id] = {"shape": None if info.shape is None else list(info.shape), "dtype": info.dtype,
                                "ttnn_dtype": info.spec.ttnn_dtype}
    rest = sorted(tensor_ids - found.keys())
    if rest and one.readable("tensors", "tensor_id"):
        cols = one.columns["tensors"]
        picked = ", ".join(c if c in cols else "NULL" for c in ("shape", "dtype"))
        with one.sql("table tensors") as conn:
            for start in range(0, len(rest), 500):
                part = rest[start : start + 500]
                found_rows = conn.execute(f"SELECT tensor_id, {picked} FROM tensors WHERE tensor_id IN "
                                          f"({','.join('?' * len(part))})", part).fetchall()
                for tensor_id, shape, dtype in found_rows:
                    dims = re.findall(r"-?\d+", shape) if isinstance(shape, str) and len(shape) < 400 else None
                    found[tensor_id] = {"shape": None if dims is None else [int(d) for d in dims], "dtype": None,
                                        "ttnn_dtype": dtype.rsplit(".", 1)[-1] if isinstance(dtype, str) else None}
    return found


def register(bp: Blueprint) -> None:
    """Add the report endpoints to ``bp``."""
    bp.add_url_rule("/", view_func=page)
    bp.add_url_rule("/api/reports", view_func=reports)
    bp.add_url_rule("/api/status", view_func=status)
    bp.add_url_rule("/api/colormaps", view_func=colormaps)
    bp.add_url_rule("/api/policies", view_func=policies)
    bp.add_url_rule("/api/policies", view_func=paste_policy, methods=["POST"])
    bp.add_url_rule("/api/reports/<report>/operations", view_func=operations)
    bp.add_url_rule("/api/reports/<report>/overview", view_func=overview)
    bp.add_url_rule("/api/reports/<report>/tensors/<tensor_id>", view_func=tensor)
    bp.add_url_rule("/api/reports/<report>/tensors/<tensor_id>/values", view_func=values)
    bp.add_url_rule("/api/reports/<report>/tensors/<tensor_id>/heatmap", view_func=heatmap)
