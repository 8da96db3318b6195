"""Pictures of a stored tensor: a heatmap of its 2-D view (or of the absolute error against another
tensor) beside a histogram of its values, for people who would rather look than read.

matplotlib is an optional extra (``pip install 'reportdb[plot]'``); it is imported only here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import InvalidArgumentError, PlotFormatError, PlotUnavailableError
from ..formats.export import check_output_folder, write_whole
from ..numeric.stats import compute_stats

if TYPE_CHECKING:
    from ..report import Report

MAX_PIXELS = 512  # per side of the heatmap; larger views are max-pooled so no error disappears

#: Picture formats matplotlib's Agg canvas writes with no outside tool (pgf needs LaTeX), when this matplotlib has them.
_FORMATS = ("png", "svg", "svgz", "pdf", "eps", "ps", "jpg", "jpeg", "tif", "tiff", "webp", "gif")


def supported_formats() -> tuple[str, ...]:
    """The output suffixes (without the dot) ``plot_tensor`` writes; raises PlotUnavailableError without matplotlib."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
    except ImportError:
        raise PlotUnavailableError("plotting needs matplotlib: pip install 'reportdb[plot]'") from None
    known = FigureCanvasAgg.get_supported_filetypes()
    return tuple(f for f in _FORMATS if f in known)


def check_output(out: str | Path) -> str:
    """The picture format of ``out`` (its suffix); raises before any work when matplotlib is missing, the suffix
    names no supported format or the folder does not exist, so a typo in ``-o`` costs no tensor read."""
    out = Path(out)
    formats = supported_formats()
    fmt = out.suffix[1:].lower()
    if fmt not in formats:
        named = f"unknown suffix {out.suffix!r}" if out.suffix else "no suffix"
        raise PlotFormatError(f"cannot write {out}: {named}; supported: {', '.join('.' + f for f in formats)}")
    check_output_folder(out)
    return fmt


def plot_tensor(
    report: "Report",
    tensor_id: int,
    out: str | Path,
    *,
    rank: int = 0,
    against: tuple["Report", int] | None = None,
) -> Path:
    """Draw tensor ``tensor_id`` (or its absolute error against ``against = (report, tensor_id)``) to ``out``.

    The format is ``out``'s suffix (:func:`supported_formats`); the picture appears whole or not at all.
    """
    fmt = check_output(out)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    values = _as_float(report.tensor(tensor_id, rank))
    other = None if against is None else _as_float(against[0].tensor(against[1], rank))
    if other is not None and other.shape != values.shape:
        raise InvalidArgumentError(f"cannot plot the error of shapes {list(values.shape)} and {list(other.shape)}")
    fig = Figure(figsize=(11, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    heat_ax, hist_ax = fig.subplots(1, 2, width_ratios=[3, 2])
    h, w = _view2d(values).shape
    extent = (-0.5, w - 0.5, h - 0.5, -0.5)  # axes in the tensor's own indices, even when pooled
    if other is None:
        view, title = _pool(_view2d(values), np.nanmean), f"tensor {tensor_id} {list(values.shape)}"
        image = heat_ax.imshow(view, aspect="auto", interpolation="nearest", cmap="viridis", extent=extent)
        fig.colorbar(image, ax=heat_ax, label="value")
        _histogram(hist_ax, values, f"tensor {tensor_id}")
    else:
        error = np.abs(values - other)
        view, title = _pool(_view2d(error), np.nanmax), f"|tensor {tensor_id} - tensor {against[1]}|"  # type: ignore[index]
        image = heat_ax.imshow(view, aspect="auto", interpolation="nearest", cmap="magma", extent=extent)
        fig.colorbar(image, ax=heat_ax, label="absolute error (max per pixel)")
        _histogram(hist_ax, values, f"tensor {tensor_id}")
        _histogram(hist_ax, other, f"tensor {against[1]}")  # type: ignore[index]
    heat_ax.set_title(title)
    heat_ax.set_xlabel("last dim")
    heat_ax.set_ylabel("other dims, flattened")
    out = Path(out)
    write_whole(out, lambda fp: fig.savefig(fp, format=fmt, dpi=100))  # no partial picture stays
    return out


def _as_float(array: np.ndarray) -> np.ndarray:
    """The values as float64, which matplotlib and the error arithmetic take whatever the storage dtype."""
    return np.asarray(array, dtype=np.float64)


def _view2d(array: np.ndarray) -> np.ndarray:
    """Rows are every dim but the last, flattened; a 0-d or 1-d tensor is one row."""
    if array.ndim == 0:
        return array.reshape(1, 1)
    return array.reshape(-1, array.shape[-1]) if array.ndim > 1 else array.reshape(1, -1)


def _pool(view: np.ndarray, reduce) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Shrink a large 2-D view to at most MAX_PIXELS per side with ``reduce`` over each block."""
    h, w = view.shape
    fy, fx = max(1, -(-h // MAX_PIXELS)), max(1, -(-w // MAX_PIXELS))
    if fy == fx == 1 or view.size == 0:
        return view
    padded = np.full((-(-h // fy) * fy, -(-w // fx) * fx), np.nan)
    padded[:h, :w] = view
    blocks = padded.reshape(padded.shape[0] // fy, fy, padded.shape[1] // fx, fx)
    with np.errstate(all="ignore"):
        return reduce(reduce(blocks, axis=3), axis=1)


def _histogram(ax, values: np.ndarray, label: str) -> None:  # type: ignore[no-untyped-def]
    """Draw the histogram of the finite values that a stored tensor's statistics hold (64 bins over their range,
    as ``np.histogram``), binned by compute_stats in bounded blocks rather than by matplotlib on a filtered copy."""
    stats = compute_stats(values)
    if stats["hist_counts"] is not None:
        edges = np.asarray(stats["hist_edges"])
        ax.hist(edges[:-1], bins=edges, weights=stats["hist_counts"], alpha=0.6, label=label)
    ax.set_title("values")
    ax.set_yscale("log")
    ax.legend()
