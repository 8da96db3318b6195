"""The answers of the web API: JSON bodies (strict JSON: NaN and ±Inf as None, values as strings) and the JSON error
answer every failure becomes, ``{"error", "hint"}`` with a 4xx status, never a traceback page."""

from __future__ import annotations

import json
from typing import Any, Mapping

import numpy as np
from flask import Response, current_app
from werkzeug.exceptions import HTTPException

from ..errors import (
    AssemblyError,
    InvalidArgumentError,
    QueryTimeoutError,
    ReportDBError,
    ReportNotFoundError,
    TensorNotFoundError,
    UnsafeReportError,
)
from ..results import jsonable
from .params import ApiError


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
        response = answer({"error": exc.error, "hint": exc.hint}, exc.status)
        response.headers.update(exc.extra_headers)
        return response
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
