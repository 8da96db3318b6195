"""The routes of the web API (``/work/notes``' contract, issue 13): reports, operations, tensors, values, heatmaps, golden
comparisons and run against run, all as JSON (values also as ``.npy``, heatmaps also as PNG).

Nothing in a request reaches the filesystem or becomes SQL: a report is a name looked up among those served, a
tensor a number, a window numpy basic indexing checked against the stored shape before any byte is read. Sizes are
bounded before work starts (413 with a hint to narrow the request); a bad parameter is 400, an unknown name or id
404, a damaged or unsafe report 422; each error is ``{"error", "hint"}``, never a traceback page.
"""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np
from flask import Blueprint, Response, current_app, request, send_from_directory
from werkzeug.exceptions import HTTPException

from ..analysis.runs import compare_runs
from ..dtypes import numpy_dtype
from ..errors import (
    AssemblyError,
    InvalidArgumentError,
    QueryTimeoutError,
    ReportDBError,
    ReportNotFoundError,
    SchemaError,
    TensorNotFoundError,
    UnsafeReportError,
)
from ..numeric.streamed import compare_streamed, flat_windows
from ..results import jsonable
from ..spec import distribution_coordinate
from ..store.rows import TensorInfo, shard_boxes
from ..store.windows import plan_window
from . import params, views
from .params import ApiError
from .reports import RECORD_TABLES, Operation, Record, Served, ServedReports

STATIC = Path(__file__).resolve().parent / "static"

#: Elements a values window may hold: as .npy, and as JSON (text is ~10x larger and slower to parse).
MAX_NPY_ELEMENTS = 1 << 20
MAX_JSON_ELEMENTS = 1 << 16
#: Cells per side of a heatmap grid, and cells of a grid sent as JSON (text: ~20 bytes a cell).
MAX_SIDE = 2048
MAX_JSON_CELLS = 1 << 20
#: Source elements one heatmap or histogram request may pool (streamed band by band: this bounds time, not memory).
MAX_POOL_ELEMENTS = 1 << 28
#: Elements per side of a full comparison (streamed window by window: this bounds time, not memory).
MAX_COMPARE_ELEMENTS = 1 << 28
#: Stored tensor bytes per report that run against run compares in one request (every matched output is read, window
#: by window: this bounds time, not memory).
MAX_RUN_BYTES = 4 << 30
#: Operations per page of the operation list.
MAX_PAGE = 1000
#: Bins of an error histogram.
MAX_BINS = 1024

DEFAULT_RTOL, DEFAULT_ATOL, DEFAULT_PCC = 1e-5, 1e-8, 0.99

#: The page may load only its own files and talk only to its own server.
_PAGE_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'self'"
)


# --- answers ------------------------------------------------------------------------------------------------------


def answer(data: Any, status: int = 200) -> Response:
    """A JSON response of ``data`` as strict JSON (results by their ``to_dict()``, NaN and ±Inf as None: the metrics
    say "undefined" with None)."""
    return Response(json.dumps(jsonable(data), allow_nan=False), status=status, mimetype="application/json")


def values_json(array: np.ndarray) -> Any:
    """Values as nested lists, NaN and ±Inf as the strings "nan", "inf", "-inf" (JSON has no such numbers)."""
    if array.dtype.kind in "biu":
        return array.tolist()
    floats = array.astype(np.float64)
    finite = np.isfinite(floats)
    if finite.all():
        return floats.tolist()
    out = floats.astype(object)
    out[np.isnan(floats)] = "nan"
    out[np.isposinf(floats)] = "inf"
    out[np.isneginf(floats)] = "-inf"
    return out.tolist()


_HINTS: list[tuple[type[ReportDBError], int, str]] = [
    (TensorNotFoundError, 404, "GET api/reports/<report>/operations lists the report's tensors; a tensor that was "
                               "never stored needs the legacy folder migrated (reportdb migrate)"),
    (ReportNotFoundError, 404, "serve the report again with its current path"),
    (AssemblyError, 422, "this multi-device tensor does not assemble into one array: add device=r,c to read a shard"),
    (QueryTimeoutError, 422, "the report's schema may be hostile or damaged; `reportdb verify` checks it"),
    (UnsafeReportError, 422, "the report holds objects reportdb refuses to read through; get a clean copy of it"),
    (InvalidArgumentError, 400, "correct the parameter named in the error"),
]


def error_answer(exc: Exception, names: Mapping[str, str] | None = None) -> Response:
    """The JSON error answer of any exception a request raised: ApiError and ReportDBError as 4xx with a hint, an
    HTTP error with its own code, anything else (a bug of ours) 500 with no detail beyond its type, logged.
    ``names`` maps the served database paths to their names: a message shows a report's name, not where it lies."""
    if isinstance(exc, ApiError):
        return answer({"error": exc.error, "hint": exc.hint}, exc.status)
    if isinstance(exc, ReportDBError):
        status, hint = 422, "the report is damaged or not laid out as expected; `reportdb verify` says more"
        for kind, code, text in _HINTS:
            if isinstance(exc, kind):
                status, hint = code, text
                break
        message = " ".join(str(exc).split())
        for path, name in (names or {}).items():
            message = message.replace(path, f"report {name}")
        return answer({"error": message, "hint": hint}, status)
    if isinstance(exc, HTTPException):
        code = exc.code or 500
        return answer({"error": exc.name, "hint": "GET api/reports lists what is served"}, code)
    current_app.logger.exception("reportdb.web: internal error")
    return answer({"error": f"internal error ({type(exc).__name__})", "hint": "this is a bug in reportdb.web: please report it"}, 500)


# --- tensors --------------------------------------------------------------------------------------------------------


class Source:
    """One tensor as a request reads it, its shape and dtype known before any value is read (so every size is checked
    first): the assembled tensor, one device shard (``device``), or the box ``part`` of the assembled tensor (the
    golden part a device shard covers), each window reading only the chunks that hold it."""

    def __init__(
        self, served: Served, tensor_id: int, rank: int, device: tuple[int, ...] | None,
        part: tuple[slice, ...] | None = None,
    ) -> None:  # fmt: skip
        self.served = served
        self.tensor_id = tensor_id
        self.rank = rank
        self.device = device
        self.part = part
        info = served.report.tensor_info(tensor_id, rank)
        self.info = info
        self.dtype = numpy_dtype(info.dtype)
        if device is not None:
            self.shape = tuple(info.shards[_shard_index(info, device)].shape)
        elif info.shape is None:
            raise AssemblyError(f"report {served.name}: tensor {tensor_id} (rank {rank}) has {len(info.shards)} shards "
                                "that do not assemble into one array")
        else:
            self.shape = tuple(info.shape) if part is None else tuple(s.stop - s.start for s in part)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def plan(self, window: tuple[int | slice, ...]) -> tuple[int, ...]:
        """The shape ``window`` gives (InvalidArgumentError, a 400, for one numpy would refuse), reading nothing."""
        return plan_window(self.shape, self.dtype.itemsize, window).shape

    def read(self, window: tuple[int | slice, ...]) -> np.ndarray:
        """The values of ``window`` (() = all)."""
        if self.part is not None:
            self.plan(window)
            window = _within(self.part, window)
        return self.served.report.tensor(self.tensor_id, self.rank, window=window or None, device=self.device)


def _shard_index(info: TensorInfo, device: tuple[int, ...]) -> int:
    """The position of the shard on ``device`` among a tensor's shards; 404 naming its devices otherwise."""
    for i, shard in enumerate(info.shards):
        if tuple(shard.mesh_coordinate) == device:
            return i
    devices = " ".join(",".join(map(str, s.mesh_coordinate)) for s in info.shards[:16])
    raise ApiError(404, f"tensor {info.tensor_id} (rank {info.rank}) has no shard on device {','.join(map(str, device))}",
                   f"its devices: {devices or 'none'}")


def _within(part: tuple[slice, ...], window: tuple[int | slice, ...]) -> tuple[int | slice, ...]:
    """``window`` (already checked against the part's shape) as a window of the whole tensor the box ``part`` is in."""
    items = window + (slice(None),) * (len(part) - len(window))
    out: list[int | slice] = []
    for item, box in zip(items, part):
        n = box.stop - box.start
        if isinstance(item, int):
            out.append(box.start + item % n)
        else:
            start, stop, step = item.indices(n)
            out.append(slice(box.start + start, box.start + max(start, stop), step))
    return tuple(out)


def golden_part(actual: TensorInfo, device: tuple[int, ...]) -> tuple[slice, ...]:
    """The box of the assembled tensor that the shard on ``device`` covers (a replica: the box of the shard it
    repeats), where a single golden tensor is compared with one device's shard; 400 when the distribution does not
    say."""
    index = _shard_index(actual, device)
    boxes = {i: (origin, shape) for i, origin, shape in (shard_boxes(actual) or [])}
    dist = actual.spec.distribution
    if index not in boxes and dist is not None and dist.placements is not None:
        coords = [distribution_coordinate(tuple(s.mesh_coordinate), i, dist) for i, s in enumerate(actual.shards)]
        wanted = tuple(0 if p.kind == "replicate" else c for c, p in zip(coords[index], dist.placements))
        index = next((i for i, c in enumerate(coords) if c == wanted and i in boxes), index)
    if index not in boxes:
        raise ApiError(400, f"the distribution of tensor {actual.tensor_id} does not say which part of the tensor the "
                            f"shard on device {','.join(map(str, device))} holds, so its golden part is unknown",
                       "compare the assembled tensor: leave out device")
    origin, shape = boxes[index]
    return tuple(slice(o, o + n) for o, n in zip(origin, shape))


def _tensor_id(text: str) -> int:
    if not re.fullmatch(r"-?[0-9]{1,19}", text):
        raise params.bad("tensor id", text, "a whole number")
    return int(text)


def _normalised(items: tuple[int | slice, ...], shape: tuple[int, ...]) -> str:
    """A window with every axis spelled out, negative indices and open ends resolved against ``shape``."""
    items = items + (slice(None),) * (len(shape) - len(items))
    parts = []
    for item, n in zip(items, shape):
        if isinstance(item, int):
            parts.append(str(item % n))
        else:
            start, stop, step = item.indices(n)
            parts.append(f"{start}:{max(start, stop)}" + (f":{step}" if step != 1 else ""))
    return ",".join(parts)


def _region(args: Mapping[str, str], shape: tuple[int, ...], fmt: str) -> views.Region:
    """The heatmap region a request asks for, checked: 400 for a bad one, 413 beyond the pooling and output bounds."""
    width = params.integer(args, "width", 512, low=1, high=1 << 30)
    height = params.integer(args, "height", 512, low=1, high=1 << 30)
    if max(width, height) > MAX_SIDE:
        raise ApiError(413, f"a {width} x {height} grid is larger than {MAX_SIDE} cells per side",
                       f"ask for width and height of at most {MAX_SIDE}")
    if fmt == "json" and width * height > MAX_JSON_CELLS:
        raise ApiError(413, f"a {width} x {height} grid is more than {MAX_JSON_CELLS:,} cells as JSON",
                       "ask for format=png, or a smaller width and height")
    try:
        area = views.region(shape, params.index(args, "index"), _range(args, "y"), _range(args, "x"), width, height)
    except ValueError as exc:
        raise ApiError(400, str(exc), "choose index, y and x inside the tensor's shape") from None
    if area.elements > MAX_POOL_ELEMENTS:
        raise ApiError(413, f"the region holds {area.elements:,} elements, more than {MAX_POOL_ELEMENTS:,} per request",
                       "zoom in: give a smaller y and x range")
    return area


def _range(args: Mapping[str, str], name: str) -> slice:
    """A range ``a:b`` of the heatmap's rows or columns (absent: all)."""
    if not args.get(name):
        return slice(None)
    item = params.axis_slice(args[name], name)
    if not isinstance(item, slice):
        raise params.bad(name, args[name], "a range a:b")
    return item


def _rows(source: Source, area: views.Region, y0: int, y1: int) -> np.ndarray:
    """Rows ``y0..y1`` of ``area`` as a 2-D array of the source's own dtype."""
    return source.read(area.window(y0, y1)).reshape(y1 - y0 if area.ndim >= 2 else 1, area.x1 - area.x0)


def _heatmap(area: views.Region, grid: np.ndarray, error: str | None, fmt: str, extra: dict[str, Any]) -> Response:
    """A pooled grid as JSON (with its scale) or as a PNG (the scale in ``X-Reportdb-*`` headers)."""
    scale = views.scale_for(grid, error)
    if fmt == "png":
        response = Response(views.png(views.colour(grid, scale)), mimetype="image/png")
        response.headers.update({
            "X-Reportdb-Scale": scale.name, "X-Reportdb-Min": repr(scale.low), "X-Reportdb-Max": repr(scale.high),
            "X-Reportdb-Region": f"{area.y0}:{area.y1},{area.x0}:{area.x1}", "X-Reportdb-Cell": f"{area.cy},{area.cx}",
            "Cache-Control": "no-store",
        })  # fmt: skip
        return response
    finite = grid[np.isfinite(grid)]
    return answer({
        **extra, "y": [area.y0, area.y1], "x": [area.x0, area.x1], "cell": [area.cy, area.cx], "index": list(area.lead),
        "shape2d": list(area.shape2d), "grid": values_json(grid),
        "min": float(finite.min()) if finite.size else None, "max": float(finite.max()) if finite.size else None,
        "scale": scale.to_json(),
    })  # fmt: skip


# --- comparisons ----------------------------------------------------------------------------------------------------


def _threshold(record: Record) -> float:
    return record.desired_pcc if record.desired_pcc is not None and -1 <= record.desired_pcc <= 1 else DEFAULT_PCC


def _verdict_key(served: Served, kind: str, tensor_id: int, rank: int) -> tuple[Any, ...]:
    """The cache key of a comparison at the record's own tolerances (the one the operation list shows)."""
    return ("verdict", served.name, kind, tensor_id, rank)


def _pair(served: Served, kind: str, tensor_id: int, rank: int, device: tuple[int, ...] | None) -> tuple[Record, Source, Source]:
    """A record's actual and golden tensors, both stored (404 saying which is not)."""
    if kind not in RECORD_TABLES:
        raise ApiError(404, f"no comparison kind {kind[:40]!r}", "use compare-tensor/local/<id> or compare-tensor/global/<id>")
    record = served.record(kind, tensor_id, rank)
    if record.golden_tensor_id is None:
        raise ApiError(404, f"the {kind} record of tensor {tensor_id} names no golden tensor", "nothing to compare with")
    missing = [f"{what} tensor {tid}" for what, tid in (("actual", tensor_id), ("golden", record.golden_tensor_id))
               if not served.report.has_tensor(tid, rank)]
    if missing:
        raise ApiError(404, f"report {served.name}: {' and '.join(missing)} (rank {rank}) not stored",
                       "migrate the report folder with its tensors (reportdb migrate) and serve the result")
    actual = Source(served, tensor_id, rank, device)
    golden_info = served.report.tensor_info(record.golden_tensor_id, rank)
    if device is None or len(golden_info.shards) > 1:
        return record, actual, Source(served, record.golden_tensor_id, rank, device)
    # One golden tensor (the usual case) against one device's shard: the golden part that shard covers.
    return record, actual, Source(served, record.golden_tensor_id, rank, None, golden_part(actual.info, device))


def _same_shape(actual: Source, golden: Source) -> tuple[Source, Source]:
    """The pair, when element-wise errors are defined for it (the same shape); else a 422."""
    if actual.shape != golden.shape:
        raise ApiError(422, f"tensor {actual.tensor_id} {list(actual.shape)} and its golden tensor {golden.tensor_id} "
                            f"{list(golden.shape)} differ in shape", "the comparison's metrics report the mismatch")
    return actual, golden


# --- the blueprint ------------------------------------------------------------------------------------------------


def routes(bp: Blueprint, served: ServedReports) -> None:
    """Add every route of the API and the page to ``bp``, over the reports ``served``."""

    paths = [(str(p), name) for name, one in served.by_name.items() for p in (one.path.resolve(), one.path)]
    names = dict(sorted(paths, key=lambda item: -len(item[0])))  # the longest first: an absolute path before its tail

    @bp.errorhandler(Exception)
    def _error(exc: Exception) -> Response:
        return error_answer(exc, names)

    @bp.after_request
    def _headers(response: Response) -> Response:
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        if response.mimetype == "text/html":
            response.headers.setdefault("Content-Security-Policy", _PAGE_POLICY)
        return response

    @bp.get("/")
    def page() -> Response:
        if not (STATIC / "index.html").is_file():
            raise ApiError(404, "the page is not installed (reportdb/web/static/index.html is missing)",
                           "reinstall reportdb with its web extra; the API under api/ works without it")
        return send_from_directory(STATIC, "index.html", max_age=0)

    @bp.get("/api/reports")
    def reports() -> Response:
        items = []
        for name, one in served.by_name.items():
            items.append({
                "name": name, "file": one.path.name, "operations": one.count("operations"),
                "tensors": one.tensor_totals()[0], "bytes": one.path.stat().st_size,
                "ttnn_version": one.metadata("version"),
                "comparisons": sum(one.count(t) for t in RECORD_TABLES.values()),
            })  # fmt: skip
        return answer({"reports": items})

    @bp.get("/api/colormaps")
    def colormaps() -> Response:
        return answer({**{name: lut.tolist() for name, lut in views.LUTS.items()},
                       "nonfinite": {k: list(v) for k, v in views.NONFINITE.items()}})

    @bp.get("/api/reports/<report>/operations")
    def operations(report: str) -> Response:
        one = served.get(report)
        args = request.args
        rank = params.integer(args, "rank", 0)
        text = (args.get("filter") or "").lower()[:200]
        sort = params.choice(args, "sort", ("id", "name", "pcc"))
        order = params.choice(args, "order", ("asc", "desc"))
        offset = params.integer(args, "offset", 0)
        limit = params.integer(args, "limit", 100, low=1, high=MAX_PAGE)
        records = {kind: one.records(kind, rank) for kind in RECORD_TABLES}
        kept = one.stored_results()

        def result(kind: str, tensor_id: int) -> tuple[float | None, bool | None]:
            cached = served.cached(_verdict_key(one, kind, tensor_id, rank))
            return cached if cached is not None else kept.get((kind, tensor_id, rank), (None, None))

        def summary(op: Operation) -> tuple[float | None, bool | None]:
            pccs, verdicts = [], []
            for tensor_id in op.outputs:
                for kind in RECORD_TABLES:
                    record = records[kind].get(tensor_id)
                    if record is not None:
                        pcc, passed = result(kind, tensor_id)
                        pccs.append(record.recorded_pcc if pcc is None else pcc)
                        verdicts.append(record.recorded_matches if passed is None else passed)
            known = [p for p in pccs if p is not None]
            found = [v for v in verdicts if v is not None]
            return (min(known) if known else None), (all(found) if found else None)

        ops = [op for op in one.operations(rank) if text in op.name.lower()]
        summaries = {op.id: summary(op) for op in ops}
        descending = order == "desc"
        if sort == "pcc":  # worst first when ascending; operations without a PCC last either way
            worst = {op_id: pcc for op_id, (pcc, _) in summaries.items() if pcc is not None}
            with_pcc = sorted((op for op in ops if op.id in worst), key=lambda op: worst[op.id], reverse=descending)
            ops = with_pcc + [op for op in ops if op.id not in worst]
        elif sort == "name":
            ops.sort(key=lambda op: (op.name, op.id), reverse=descending)
        else:
            ops.sort(key=lambda op: op.id, reverse=descending)
        page_ops = ops[offset : offset + limit]
        stored = one.stored_keys()
        listed = {t for op in page_ops for t in (*op.inputs, *op.outputs)}
        described = _described(one, listed, stored, rank)

        def ref(tensor_id: int) -> dict[str, Any]:
            comparisons: dict[str, dict[str, Any] | None] = {}
            for kind in RECORD_TABLES:
                record = records[kind].get(tensor_id)
                if record is None:
                    comparisons[kind] = None
                else:
                    pcc, passed = result(kind, tensor_id)
                    comparisons[kind] = {
                        "golden_tensor_id": record.golden_tensor_id, "desired_pcc": record.desired_pcc,
                        "recorded_pcc": record.recorded_pcc, "recorded_matches": record.recorded_matches,
                        "pcc": pcc, "passed": passed,
                    }  # fmt: skip
            return {"tensor_id": tensor_id, "rank": rank, "stored": (tensor_id, rank) in stored,
                    **described.get(tensor_id, {"shape": None, "dtype": None, "ttnn_dtype": None}), "comparisons": comparisons}

        items = [
            {"id": op.id, "name": op.name, "inputs": [ref(t) for t in op.inputs], "outputs": [ref(t) for t in op.outputs],
             "worst_pcc": summaries[op.id][0], "passed": summaries[op.id][1]}
            for op in page_ops
        ]  # fmt: skip
        return answer({"total": len(ops), "offset": offset, "limit": limit, "items": items})

    @bp.get("/api/reports/<report>/tensors/<tensor_id>")
    def tensor(report: str, tensor_id: str) -> Response:
        one = served.get(report)
        rank = params.integer(request.args, "rank", 0)
        device = params.device(request.args)
        info = one.report.tensor_info(_tensor_id(tensor_id), rank)
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
            })  # fmt: skip
        chosen = _shard_index(info, device) if device is not None else (0 if len(info.shards) == 1 else None)
        stats = None if per_shard is None or chosen is None else per_shard[chosen]
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
        })  # fmt: skip

    @bp.get("/api/reports/<report>/tensors/<tensor_id>/values")
    def values(report: str, tensor_id: str) -> Response:
        args = request.args
        fmt = params.choice(args, "format", ("json", "npy"))
        source = Source(served.get(report), _tensor_id(tensor_id), params.integer(args, "rank", 0), params.device(args))
        window = params.window(args, "slice")
        shape = source.plan(window)
        count, limit = math.prod(shape), (MAX_NPY_ELEMENTS if fmt == "npy" else MAX_JSON_ELEMENTS)
        if count > limit:
            raise ApiError(413, f"the window {list(shape)} holds {count:,} elements, more than {limit:,} as {fmt}",
                           "narrow the slice" + (", or ask for format=npy (up to 1,048,576)" if fmt == "json" else ""))
        array = source.read(window)
        if fmt == "npy":
            out = io.BytesIO()
            np.save(out, array.astype(np.float32) if array.dtype.kind == "V" else array, allow_pickle=False)
            filename = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{source.served.name}-{source.tensor_id}.npy")
            response = Response(out.getvalue(), mimetype="application/octet-stream")
            response.headers["Content-Disposition"] = f'attachment; filename="{filename}"'
            response.headers["X-Reportdb-Dtype"] = source.info.dtype
            return response
        return answer({"shape": list(shape), "dtype": source.info.dtype, "slice": _normalised(window, source.shape),
                       "values": values_json(array)})

    @bp.get("/api/reports/<report>/tensors/<tensor_id>/heatmap")
    def heatmap(report: str, tensor_id: str) -> Response:
        args = request.args
        fmt = params.choice(args, "format", ("png", "json"))
        source = Source(served.get(report), _tensor_id(tensor_id), params.integer(args, "rank", 0), params.device(args))
        area = _region(args, source.shape, fmt)
        grid = views.pool_region(area, lambda y0, y1: views.as_float(_rows(source, area, y0, y1)))
        return _heatmap(area, grid, None, fmt, {"tensor_id": source.tensor_id, "dtype": source.info.dtype})

    def pair_from(kind: str, tensor_id: str) -> tuple[Served, Record, Source, Source]:
        args = request.args
        one = served.pick(args.get("report") or None)
        record, actual, golden = _pair(one, kind, _tensor_id(tensor_id), params.integer(args, "rank", 0), params.device(args))
        return one, record, actual, golden

    def same_shape_pair(kind: str, tensor_id: str) -> tuple[Source, Source]:
        """The actual and golden sides of a record, for the element-wise endpoints (heatmap, point, histogram)."""
        return _same_shape(*pair_from(kind, tensor_id)[2:])

    def tolerances() -> tuple[float, float]:
        args = request.args
        rtol = params.number(args, "rtol", DEFAULT_RTOL, low=0.0, high=1e300)
        atol = params.number(args, "atol", DEFAULT_ATOL, low=0.0, high=1e300)
        return rtol, atol

    @bp.get("/api/compare-tensor/<kind>/<tensor_id>")
    def compare_tensor(kind: str, tensor_id: str) -> Response:
        one, record, actual, golden = pair_from(kind, tensor_id)
        rtol, atol = tolerances()
        pcc = params.optional_number(request.args, "pcc", low=-1.0, high=1.0)
        threshold = _threshold(record) if pcc is None else pcc
        for side in (actual, golden):
            if side.size > MAX_COMPARE_ELEMENTS:
                raise ApiError(413, f"tensor {side.tensor_id} holds {side.size:,} elements, more than {MAX_COMPARE_ELEMENTS:,} "
                                    "a comparison reads in one request", "compare a device shard (device=r,c), or run "
                                    "`reportdb compare --golden` on the command line, which has no such bound")
        key = ("compare", one.name, kind, actual.tensor_id, actual.rank, actual.device, rtol, atol, threshold)
        metrics = served.cached(key)
        if metrics is None:
            metrics = compare_streamed(actual.read, golden.read, actual.shape, golden.shape, actual.dtype, golden.dtype,
                                       rtol=rtol, atol=atol, pcc=threshold).to_dict()
            served.keep(key, metrics)
        if actual.device is None and (rtol, atol, pcc) == (DEFAULT_RTOL, DEFAULT_ATOL, None):
            served.keep(_verdict_key(one, kind, actual.tensor_id, actual.rank), (metrics.get("pcc"), metrics.get("passed")))
        return answer({
            "report": one.name, "kind": kind, "tensor_id": actual.tensor_id, "golden_tensor_id": golden.tensor_id,
            "rank": actual.rank, "device": None if actual.device is None else list(actual.device),
            "record": {"golden_tensor_id": record.golden_tensor_id, "desired_pcc": record.desired_pcc,
                       "recorded_pcc": record.recorded_pcc, "recorded_matches": record.recorded_matches,
                       "pcc": metrics.get("pcc"), "passed": metrics.get("passed")},
            "tolerances": {"rtol": rtol, "atol": atol, "pcc": threshold}, "metrics": metrics,
            "passed": bool(metrics.get("passed")),
        })  # fmt: skip

    @bp.get("/api/compare-tensor/<kind>/<tensor_id>/heatmap")
    def compare_heatmap(kind: str, tensor_id: str) -> Response:
        args = request.args
        actual, golden = same_shape_pair(kind, tensor_id)
        error = params.choice(args, "error", views.ERROR_KINDS)
        fmt = params.choice(args, "format", ("png", "json"))
        rtol, atol = tolerances()
        area = _region(args, actual.shape, fmt)

        def band(y0: int, y1: int) -> np.ndarray:
            return views.errors(_rows(actual, area, y0, y1), _rows(golden, area, y0, y1), error, rtol=rtol, atol=atol)

        grid = views.pool_region(area, band, signed=False, elements=views.BAND_ELEMENTS // 4)
        return _heatmap(area, grid, error, fmt, {"tensor_id": actual.tensor_id, "golden_tensor_id": golden.tensor_id,
                                                 "error": error, "rtol": rtol, "atol": atol})

    @bp.get("/api/compare-tensor/<kind>/<tensor_id>/point")
    def compare_point(kind: str, tensor_id: str) -> Response:
        actual, golden = same_shape_pair(kind, tensor_id)
        at = params.index(request.args, "at")
        if at is None or len(at) != len(actual.shape):
            raise ApiError(400, f"at must give one index per axis of the shape {list(actual.shape)}",
                           "e.g. at=" + ",".join("0" for _ in actual.shape))
        rtol, atol = tolerances()
        actual.plan(at)  # out of range: a 400 before any read
        a, g = actual.read(at).reshape(1), golden.read(at).reshape(1)
        errs = {kind: views.errors(a, g, kind, rtol=rtol, atol=atol)[0] for kind in views.ERROR_KINDS}
        allowed = atol + rtol * abs(float(g[0])) if math.isfinite(float(g[0])) else None
        return answer({
            "index": [i % n for i, n in zip(at, actual.shape)], "actual": values_json(a)[0], "golden": values_json(g)[0],
            "abs_error": values_json(np.array([errs["abs"]]))[0], "rel_error": values_json(np.array([errs["rel"]]))[0],
            "ulp": values_json(np.array([errs["ulp"]]))[0], "tolerances": {"rtol": rtol, "atol": atol},
            "allowed": allowed, "mismatch": bool(errs["mask"]),
        })  # fmt: skip

    @bp.get("/api/compare-tensor/<kind>/<tensor_id>/histogram")
    def compare_histogram(kind: str, tensor_id: str) -> Response:
        args = request.args
        actual, golden = same_shape_pair(kind, tensor_id)
        error = params.choice(args, "error", ("abs", "rel", "ulp"))
        bins = params.integer(args, "bins", 64, low=1, high=MAX_BINS)
        if actual.size > MAX_POOL_ELEMENTS:
            raise ApiError(413, f"tensor {actual.tensor_id} holds {actual.size:,} elements, more than {MAX_POOL_ELEMENTS:,} "
                                "per request", "use the heatmap endpoint on a region")

        def bands() -> Iterator[np.ndarray]:
            for window in flat_windows(actual.shape, views.BAND_ELEMENTS // 4):
                yield views.errors(actual.read(window), golden.read(window), error, rtol=DEFAULT_RTOL, atol=DEFAULT_ATOL)

        return answer({"error": error, **views.error_histogram(bands, bins)})

    @bp.get("/api/runs")
    def runs() -> Response:
        args = request.args
        names = {}
        for side in ("a", "b"):
            if not args.get(side):
                raise ApiError(400, f"parameter {side} is missing", "give a=<report>&b=<report> (GET api/reports lists them)")
            names[side] = served.get(args[side])
        rtol, atol = tolerances()
        pcc = params.number(args, "pcc", DEFAULT_PCC, low=-1.0, high=1.0)
        rank = params.integer(args, "rank", 0)
        for one in names.values():
            total = one.tensor_totals()[1]
            if total > MAX_RUN_BYTES:
                raise ApiError(413, f"report {one.name} stores {total:,} bytes of tensors, more than a request compares "
                                    f"({MAX_RUN_BYTES:,})", "run `reportdb compare A B` on the command line; it has no "
                                                            "such bound")
        key = ("runs", names["a"].name, names["b"].name, rank, rtol, atol, pcc)
        result = served.cached(key)
        if result is None:
            result = compare_runs(names["a"].report, names["b"].report, rank=rank, rtol=rtol, atol=atol, pcc=pcc).to_dict()
            served.keep(key, result)
        return answer({"a": names["a"].name, "b": names["b"].name, "matched_by": result.get("matched_by"),
                       "first_divergence": result.get("first_divergence"), "items": result.get("rows", []),
                       "unmatched_a": result.get("unmatched_a", []), "unmatched_b": result.get("unmatched_b", [])})


def _stats_only(stats: Mapping[str, Any]) -> dict[str, Any]:
    """A stored statistics row without its histogram (given apart)."""
    return {k: v for k, v in stats.items() if k not in ("hist_counts", "hist_edges")}


def _described(one: Served, tensor_ids: set[int], stored: set[tuple[int, int]], rank: int) -> dict[int, dict[str, Any]]:
    """Shape and dtypes of the tensors a page lists: from the store where stored, else from the report's
    ``tensors`` table (ttnn's own text: ``Shape([1, 32])``, ``DataType.BFLOAT16``)."""
    found: dict[int, dict[str, Any]] = {}
    for tensor_id in sorted(tensor_ids):
        if (tensor_id, rank) in stored:
            info = one.report.tensor_info(tensor_id, rank)
            found[tensor_id] = {"shape": None if info.shape is None else list(info.shape), "dtype": info.dtype,
                                "ttnn_dtype": info.spec.ttnn_dtype}
    rest = sorted(tensor_ids - found.keys())
    if rest and one.readable("tensors", "tensor_id"):
        cols = one.columns["tensors"]
        picked = ", ".join(c if c in cols else "NULL" for c in ("shape", "dtype"))
        with one.sql("table tensors") as conn:
            for start in range(0, len(rest), 500):
                part = rest[start : start + 500]
                rows = conn.execute(f"SELECT tensor_id, {picked} FROM tensors WHERE tensor_id IN ({','.join('?' * len(part))})",
                                    part).fetchall()
                for tensor_id, shape, dtype in rows:
                    dims = re.findall(r"-?\d+", shape) if isinstance(shape, str) and len(shape) < 400 else None
                    found[tensor_id] = {"shape": None if dims is None else [int(d) for d in dims], "dtype": None,
                                        "ttnn_dtype": dtype.rsplit(".", 1)[-1] if isinstance(dtype, str) else None}
    return found
