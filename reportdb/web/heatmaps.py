"""Heatmap requests: the region a request asks for (checked against the pooling and output bounds before any read),
its rows as read from a source, and the pooled grid as a JSON answer or a PNG with its scale in headers."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
from flask import Response

from . import limits, params, views
from .answers import answer, values_json
from .params import ApiError
from .sources import Source


def region(args: Mapping[str, str], shape: tuple[int, ...], fmt: str) -> views.Region:
    """The heatmap region a request asks for, checked: 400 for a bad one, 413 beyond the pooling and output bounds."""
    width = params.integer(args, "width", 512, low=1, high=1 << 30)
    height = params.integer(args, "height", 512, low=1, high=1 << 30)
    if max(width, height) > limits.MAX_SIDE:
        raise ApiError(413, f"a {width} x {height} grid is larger than {limits.MAX_SIDE} cells per side",
                       f"ask for width and height of at most {limits.MAX_SIDE}")
    if fmt == "json" and width * height > limits.MAX_JSON_CELLS:
        raise ApiError(413, f"a {width} x {height} grid is more than {limits.MAX_JSON_CELLS:,} cells as JSON",
                       "ask for format=png, or a smaller width and height")
    try:
        area = views.region(shape, params.index(args, "index"), _range(args, "y"), _range(args, "x"), width, height)
    except ValueError as exc:
        raise ApiError(400, str(exc), "choose index, y and x inside the tensor's shape") from None
    if area.elements > limits.MAX_POOL_ELEMENTS:
        raise ApiError(413, f"the region holds {area.elements:,} elements, more than {limits.MAX_POOL_ELEMENTS:,} per request",
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


def grid_cells(area: views.Region) -> int:
    """The cells of the grid pooled over ``area``."""
    return -(-(area.y1 - area.y0) // area.cy) * -(-(area.x1 - area.x0) // area.cx)


def rows(source: Source, area: views.Region, y0: int, y1: int) -> np.ndarray:
    """Rows ``y0..y1`` of ``area`` as a 2-D array of the source's own dtype."""
    return source.read(area.window(y0, y1)).reshape(y1 - y0 if area.ndim >= 2 else 1, area.x1 - area.x0)


def heatmap_answer(area: views.Region, grid: np.ndarray, error: str | None, fmt: str, extra: dict[str, Any]) -> Response:
    """A pooled grid as JSON (with its scale) or as a PNG (the scale in ``X-Reportdb-*`` headers)."""
    scale = views.scale_for(grid, error)
    if fmt == "png":
        response = Response(views.png(views.colour(grid, scale)), mimetype="image/png")
        response.headers.update({
            "X-Reportdb-Scale": scale.name, "X-Reportdb-Min": repr(scale.low), "X-Reportdb-Max": repr(scale.high),
            "X-Reportdb-Region": f"{area.y0}:{area.y1},{area.x0}:{area.x1}", "X-Reportdb-Cell": f"{area.cy},{area.cx}",
            "Cache-Control": "no-store",
        })
        return response
    finite = grid[np.isfinite(grid)]
    return answer({
        **extra, "y": [area.y0, area.y1], "x": [area.x0, area.x1], "cell": [area.cy, area.cx], "index": list(area.lead),
        "shape2d": list(area.shape2d), "grid": values_json(grid),
        "min": float(finite.min()) if finite.size else None, "max": float(finite.max()) if finite.size else None,
        "scale": scale.to_json(),
    })
