"""Pooling and resampling over channels-last inputs as ttnn lays them out: max_pool2d, avg_pool2d and
adaptive_avg_pool2d over ``[1, 1, N*H*W, C]`` (output flattened the same way), global_avg_pool2d and upsample over
``[N, H, W, C]``; averages in float64 rounded once to float32, maxima exact."""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from . import Param, UnsupportedArguments, elements, float64s, reference, shape
from .conv import nhwc, pair, sides

_POOL = (
    Param("input_tensor", "tensor", 0, required=True), Param("batch_size", "int", 1, required=True),
    Param("input_h", "int", 2, required=True), Param("input_w", "int", 3, required=True),
    Param("channels", "int", 4, required=True),
)
_POOL_KEYWORDS = (
    Param("dram_slice_config", "ignored"), Param("applied_shard_scheme", "ignored"), Param("deallocate_input", "ignored"),
    Param("reallocate_halo_output", "ignored"), Param("reallocate_output", "ignored"), Param("dtype", "dtype"),
    Param("output_layout", "ignored"), Param("config_tensor_in_dram", "ignored"),
)


def _out_length(length: int, before: int, after: int, kernel: int, stride: int, dilation: int, ceil: bool) -> int:
    """torch's pooled length: floor or ceil of the span over the stride, in ceil mode without a last window that
    starts in the right padding."""
    if kernel < 1 or stride < 1 or dilation < 1 or min(before, after) < 0:
        raise UnsupportedArguments(["kernel_size"], "a kernel, stride or dilation below 1, or a negative padding")
    span = length + before + after - dilation * (kernel - 1) - 1
    if span < 0:
        raise UnsupportedArguments(["kernel_size"], f"a window of {kernel} longer than the padded input")
    out = (-(-span // stride) if ceil else span // stride) + 1
    if ceil and (out - 1) * stride >= length + before:
        out -= 1
    return out


def _windows(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, ...] | None,
             dilation: tuple[int, int], ceil: bool, fill: float) -> tuple[np.ndarray, np.ndarray]:
    """Every pooling window of ``x`` [N, H, W, C] as [N, Ho, Wo, C, kh*kw] (padded with ``fill``; a ceil-mode window
    running past the padding is filled with it too) and, per window position, whether it lies in the input
    [Ho, Wo, kh*kw] (for averages that exclude padding)."""
    top, bottom, left, right = sides(padding)
    ho = _out_length(x.shape[1], top, bottom, kernel[0], stride[0], dilation[0], ceil)
    wo = _out_length(x.shape[2], left, right, kernel[1], stride[1], dilation[1], ceil)
    extra_h = max(0, (ho - 1) * stride[0] + dilation[0] * (kernel[0] - 1) + 1 - (x.shape[1] + top + bottom))
    extra_w = max(0, (wo - 1) * stride[1] + dilation[1] * (kernel[1] - 1) + 1 - (x.shape[2] + left + right))
    padded = np.pad(x, ((0, 0), (top, bottom + extra_h), (left, right + extra_w), (0, 0)), constant_values=fill)
    rows = np.arange(ho)[:, None] * stride[0] + np.arange(kernel[0])[None, :] * dilation[0]  # [Ho, kh]
    cols = np.arange(wo)[:, None] * stride[1] + np.arange(kernel[1])[None, :] * dilation[1]  # [Wo, kw]
    window = padded[:, rows[:, None, :, None], cols[None, :, None, :], :]  # [N, Ho, Wo, kh, kw, C]
    window = np.moveaxis(window, -1, 3).reshape(x.shape[0], ho, wo, x.shape[3], -1)
    inside_h = (rows >= top) & (rows < top + x.shape[1])
    inside_w = (cols >= left) & (cols < left + x.shape[2])
    inside = (inside_h[:, None, :, None] & inside_w[None, :, None, :]).reshape(ho, wo, -1)
    return window, inside


def _pool_size(values: Mapping[str, Any]) -> int:
    """The windows gathered: every output position times the window's elements, over the batch and channels."""
    batch, height, width = (values.get(n) or 1 for n in ("batch_size", "input_h", "input_w"))
    channels = values.get("channels") or 1
    try:
        kh, kw = pair("kernel_size", values.get("kernel_size"), 1)
        top, bottom, left, right = sides(values.get("padding"))
    except UnsupportedArguments:
        return elements(shape(values["input_tensor"]))
    stride_h, stride_w = (max(1, s) for s in pair("stride", values.get("stride"), 1))
    positions = (-(-(height + top + bottom) // stride_h) + 1) * (-(-(width + left + right) // stride_w) + 1)
    return max(batch * positions * channels * max(1, kh * kw), elements(shape(values["input_tensor"])))


def _flat(out: np.ndarray) -> np.ndarray:
    """[N, Ho, Wo, C] as ttnn's pooled output ``[1, 1, N*Ho*Wo, C]``."""
    return out.reshape(1, 1, -1, out.shape[-1])


@reference("ttnn.max_pool2d", params=_POOL + (
    Param("kernel_size", "ints", 5, required=True), Param("stride", "ints", 6, required=True),
    Param("padding", "ints", 7, required=True), Param("dilation", "ints", 8, required=True),
    Param("ceil_mode", "bool", 9, False), Param("return_indices", "bool", default=False),
) + _POOL_KEYWORDS, size=_pool_size)
def max_pool2d(input_tensor: Any, batch_size: int, input_h: int, input_w: int, channels: int,
               kernel_size: tuple[int, ...], stride: tuple[int, ...], padding: tuple[int, ...],
               dilation: tuple[int, ...], ceil_mode: bool, return_indices: bool, **_: Any) -> np.ndarray:
    """ttnn.max_pool2d as its golden (tt-metal ``ttnn/ttnn/operations/pool.py``, ``golden_maxpool2d``, with
    ``tests/sweep_framework/sweep_utils/pool2d_common.py``): the ``[1, 1, NHW, C]`` input as NCHW, padded with -inf,
    torch's max_pool2d, flattened back. The indices output (``return_indices``) is not modelled."""
    if return_indices:
        raise UnsupportedArguments(["return_indices"], "the indices output is not modelled")
    x = nhwc("input_tensor", input_tensor, batch_size, input_h, input_w, None)
    if x.shape[-1] != channels:
        raise UnsupportedArguments(["channels"], f"{channels} channels in an input of {x.shape[-1]}")
    window = _windows(x, pair("kernel_size", kernel_size, 1), pair("stride", stride, 1), padding,
                      pair("dilation", dilation, 1), ceil_mode, -np.inf)[0]
    return _flat(window.max(axis=-1)).astype(np.float32)


@reference("ttnn.avg_pool2d", params=_POOL + (
    Param("kernel_size", "ints", 5, required=True), Param("stride", "ints", 6, required=True),
    Param("padding", "ints", 7, required=True), Param("ceil_mode", "bool", 8, False),
    Param("count_include_pad", "bool", 9, True), Param("divisor_override", "int", 10),
) + _POOL_KEYWORDS, size=_pool_size)
def avg_pool2d(input_tensor: Any, batch_size: int, input_h: int, input_w: int, channels: int,
               kernel_size: tuple[int, ...], stride: tuple[int, ...], padding: tuple[int, ...], ceil_mode: bool,
               count_include_pad: bool, divisor_override: int | None, **_: Any) -> np.ndarray:
    """ttnn.avg_pool2d as its golden (tt-metal ``ttnn/ttnn/operations/pool.py``, ``golden_avg_pool2d``): torch's
    avg_pool2d over the NCHW view, padded with zeros. As torch, the divisor is ``divisor_override``, else the window
    clipped to the padded input (``count_include_pad``) or to the input itself; 4-value padding is applied before the
    pooling (so it always counts)."""
    x = nhwc("input_tensor", input_tensor, batch_size, input_h, input_w, None)
    if x.shape[-1] != channels:
        raise UnsupportedArguments(["channels"], f"{channels} channels in an input of {x.shape[-1]}")
    kernel, strides = pair("kernel_size", kernel_size, 1), pair("stride", stride, 1)
    four = padding is not None and len(padding) == 4
    if four:  # the golden pads first, then pools with no padding: padded cells are input to torch
        top, bottom, left, right = sides(padding)
        x = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    window, inside = _windows(x, kernel, strides, None if four else padding, (1, 1), ceil_mode, 0.0)
    total = window.sum(axis=-1)
    if divisor_override is not None:
        if divisor_override == 0:
            raise UnsupportedArguments(["divisor_override"], "a divisor of 0")
        return _flat(total / divisor_override).astype(np.float32)
    if count_include_pad:  # the window clipped to the padded input (a ceil-mode overhang does not count)
        top, bottom, left, right = (0, 0, 0, 0) if four else sides(padding)
        h_end = np.minimum(np.arange(window.shape[1]) * strides[0] + kernel[0], x.shape[1] + top + bottom)
        w_end = np.minimum(np.arange(window.shape[2]) * strides[1] + kernel[1], x.shape[2] + left + right)
        count = (h_end - np.arange(window.shape[1]) * strides[0])[:, None] * \
            (w_end - np.arange(window.shape[2]) * strides[1])[None, :]
    else:
        count = inside.sum(axis=-1)
    return _flat(total / count[None, :, :, None]).astype(np.float32)


def _bins(length: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """torch's adaptive pooling bins: start ``floor(i * L / n)``, end ``ceil((i + 1) * L / n)``."""
    i = np.arange(size)
    return (i * length) // size, -((-(i + 1) * length) // size)


def _adaptive_size(values: Mapping[str, Any]) -> int:
    """The output and its bin sums: the batch, channels and the output size the arguments name."""
    try:
        oh, ow = pair("output_size", values.get("output_size"), 1)
    except UnsupportedArguments:
        return elements(shape(values["input_tensor"]))
    batch, channels = values.get("batch_size") or 1, values.get("channels") or 1
    return max(4 * batch * max(oh, 1) * max(ow, 1) * channels, 2 * elements(shape(values["input_tensor"])))


def _adaptive_input(input_tensor: Any, batch_size: int, input_h: int, input_w: int, channels: int,
                    output_size: tuple[int, ...]) -> tuple[np.ndarray, int, int]:
    """An adaptive pool's input as NHWC and its output height and width; UnsupportedArguments when they disagree."""
    x = nhwc("input_tensor", input_tensor, batch_size, input_h, input_w, None)
    if x.shape[-1] != channels:
        raise UnsupportedArguments(["channels"], f"{channels} channels in an input of {x.shape[-1]}")
    oh, ow = pair("output_size", output_size, 1)
    if oh < 1 or ow < 1:
        raise UnsupportedArguments(["output_size"], f"an output of {output_size}")
    return x, oh, ow


@reference("ttnn.adaptive_avg_pool2d", params=_POOL + (Param("output_size", "ints", 5, required=True),)
           + _POOL_KEYWORDS, size=_adaptive_size)
def adaptive_avg_pool2d(input_tensor: Any, batch_size: int, input_h: int, input_w: int, channels: int,
                        output_size: tuple[int, ...], **_: Any) -> np.ndarray:
    """ttnn.adaptive_avg_pool2d as its golden (tt-metal ``ttnn/ttnn/operations/pool.py``,
    ``golden_adaptive_avg_pool2d``): torch's adaptive_avg_pool2d over the NCHW view, flattened to
    ``[1, 1, N*oh*ow, C]``. Computed as a difference of 2-D prefix sums, so its cost is the input's."""
    x, oh, ow = _adaptive_input(input_tensor, batch_size, input_h, input_w, channels, output_size)
    prefix = np.zeros((x.shape[0], x.shape[1] + 1, x.shape[2] + 1, x.shape[3]))
    prefix[:, 1:, 1:] = x.cumsum(axis=1).cumsum(axis=2)
    (h0, h1), (w0, w1) = _bins(x.shape[1], oh), _bins(x.shape[2], ow)
    total = (prefix[:, h1][:, :, w1] - prefix[:, h0][:, :, w1] - prefix[:, h1][:, :, w0] + prefix[:, h0][:, :, w0])
    count = ((h1 - h0)[:, None] * (w1 - w0)[None, :])[None, :, :, None]
    return _flat(total / count).astype(np.float32)


@reference("ttnn.adaptive_max_pool2d", params=_POOL + (Param("output_size", "ints", 5, required=True),)
           + _POOL_KEYWORDS, size=_adaptive_size)
def adaptive_max_pool2d(input_tensor: Any, batch_size: int, input_h: int, input_w: int, channels: int,
                        output_size: tuple[int, ...], **_: Any) -> np.ndarray:
    """ttnn.adaptive_max_pool2d as its golden (tt-metal ``ttnn/ttnn/operations/pool.py``,
    ``golden_adaptive_max_pool2d``): torch's adaptive_max_pool2d over the NCHW view (bins as adaptive_avg_pool2d's),
    flattened to ``[1, 1, N*oh*ow, C]``; one maximum per output row, then per output column."""
    x, oh, ow = _adaptive_input(input_tensor, batch_size, input_h, input_w, channels, output_size)
    (h0, h1), (w0, w1) = _bins(x.shape[1], oh), _bins(x.shape[2], ow)
    rows = np.stack([x[:, a:b].max(axis=1) for a, b in zip(h0, h1)], axis=1)  # [N, oh, W, C]
    out = np.stack([rows[:, :, a:b].max(axis=2) for a, b in zip(w0, w1)], axis=2)  # [N, oh, ow, C]
    return _flat(out).astype(np.float32)


@reference("ttnn.global_avg_pool2d", params=(Param("input_tensor", "tensor", 0, required=True), Param("dtype", "dtype")))
def global_avg_pool2d(input_tensor: Any, **_: Any) -> np.ndarray:
    """ttnn.global_avg_pool2d as its golden (tt-metal ``ttnn/ttnn/operations/pool.py``, ``golden_global_avg_pool2d``):
    the mean over H and W of ``[N, H, W, C]`` as ``[N, 1, 1, C]`` (``[H, W, C]``: ``[1, 1, C]``; ``[H, W]``: a
    scalar)."""
    x = float64s("input_tensor", input_tensor)
    if x.ndim == 4:
        return x.mean(axis=(1, 2), keepdims=True).astype(np.float32)
    if x.ndim == 3:
        return x.mean(axis=(0, 1), keepdims=True).astype(np.float32)
    if x.ndim == 2:
        return np.asarray(x.mean(), dtype=np.float32)
    raise UnsupportedArguments(["input_tensor"], f"an input of rank {x.ndim} (2, 3 or 4 expected)")


def _scales(scale_factor: tuple[float, ...]) -> tuple[float, float]:
    """(height, width) scale factors from one number or two."""
    if len(scale_factor) == 1:
        return scale_factor[0], scale_factor[0]
    if len(scale_factor) == 2:
        return scale_factor[0], scale_factor[1]
    raise UnsupportedArguments(["scale_factor"], f"{len(scale_factor)} scale factors")


def _upsample_size(values: Mapping[str, Any]) -> int:
    """The output: the input's elements times both scale factors (bilinear builds a few arrays of it)."""
    dims = shape(values["input_tensor"])
    try:
        sh, sw = _scales(values["scale_factor"])
    except (UnsupportedArguments, TypeError):
        return elements(dims)
    if len(dims) != 4 or not (math.isfinite(sh) and math.isfinite(sw)):
        return elements(dims)
    return 4 * dims[0] * max(1, math.floor(dims[1] * sh)) * max(1, math.floor(dims[2] * sw)) * dims[3]


def _source(length: int, out: int, scale: float, bilinear: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each output index along one axis, torch's pair of source indices and the weight of the second, in
    float32 as torch's CPU kernel computes them with ``1 / scale``: nearest takes ``floor(i / scale)``; bilinear
    (align_corners=False) ``(i + 0.5) / scale - 0.5`` clamped at 0."""
    i = np.arange(out, dtype=np.float32)
    inverse = np.float32(1.0 / scale)
    if not bilinear:
        src = np.minimum(np.floor(i * inverse).astype(np.int64), length - 1)
        return src, src, np.zeros(out)
    real = np.maximum(inverse * (i + np.float32(0.5)) - np.float32(0.5), np.float32(0))
    low = np.minimum(np.floor(real).astype(np.int64), length - 1)
    high = np.minimum(low + 1, length - 1)
    return low, high, (real - low).astype(np.float64)


@reference("ttnn.upsample", params=(
    Param("input_tensor", "tensor", 0, required=True), Param("scale_factor", "floats", 1, required=True),
    Param("mode", "word", default="nearest"),
), size=_upsample_size)
def upsample(input_tensor: Any, scale_factor: tuple[float, ...], mode: str, **_: Any) -> np.ndarray:
    """ttnn.upsample as its golden (tt-metal ``ttnn/ttnn/operations/pool.py``, ``golden_upsample``): torch's
    ``interpolate`` of the NCHW view of ``[N, H, W, C]`` by ``scale_factor``, ``nearest`` or ``bilinear``
    (align_corners=False), back to NHWC; output sizes ``floor(H * scale)``."""
    x = float64s("input_tensor", input_tensor)
    if x.ndim != 4:
        raise UnsupportedArguments(["input_tensor"], f"an input of rank {x.ndim} ([N, H, W, C] expected)")
    if mode not in ("nearest", "bilinear"):
        raise UnsupportedArguments(["mode"], f"the mode {mode!r} (nearest or bilinear)")
    sh, sw = _scales(scale_factor)
    if not (0 < sh < math.inf and 0 < sw < math.inf):
        raise UnsupportedArguments(["scale_factor"], f"a scale of {scale_factor}")
    oh, ow = math.floor(x.shape[1] * sh), math.floor(x.shape[2] * sw)
    (h0, h1, fh), (w0, w1, fw) = (_source(x.shape[1], oh, sh, mode == "bilinear"),
                                  _source(x.shape[2], ow, sw, mode == "bilinear"))
    rows = x[:, h0] * (1 - fh)[None, :, None, None] + x[:, h1] * fh[None, :, None, None]
    out = rows[:, :, w0] * (1 - fw)[None, None, :, None] + rows[:, :, w1] * fw[None, None, :, None]
    return out.astype(np.float32)


def _grid_size(values: Mapping[str, Any]) -> int:
    """The output (one row of channels per sample point), four corners of it for bilinear sampling."""
    dims, grid = shape(values["input_tensor"]), shape(values["grid"])
    return 4 * (elements(grid) // 2) * (dims[-1] if dims else 1) + elements(dims)


def _corner(x: np.ndarray, h: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``x[n, h, w, :]`` [N, Hg, Wg, C] for integer corners, zero where a corner lies outside the image."""
    n, height, width = x.shape[0], x.shape[1], x.shape[2]
    inside = (h >= 0) & (h < height) & (w >= 0) & (w < width)
    batch = np.arange(n).reshape(n, 1, 1)
    picked = x[batch, np.clip(h, 0, height - 1), np.clip(w, 0, width - 1)]
    return np.where(inside[..., None], picked, 0.0)


@reference("ttnn.grid_sample", params=(
    Param("input_tensor", "tensor", 0, required=True), Param("grid", "tensor", 1, required=True),
    Param("mode", "word", default="bilinear"), Param("padding_mode", "word", default="zeros"),
    Param("align_corners", "bool", default=False), Param("use_precomputed_grid", "bool", default=False),
    Param("batch_output_channels", "bool", default=False),
), size=_grid_size)
def grid_sample(input_tensor: Any, grid: Any, mode: str, padding_mode: str, align_corners: bool,
                use_precomputed_grid: bool, batch_output_channels: bool, **_: Any) -> np.ndarray:
    """ttnn.grid_sample as its golden (tt-metal ``ttnn/ttnn/operations/pool.py``, ``golden_grid_sample``): torch's
    grid_sample of the NHWC input at the grid's normalized (x, y) points, K point sets packed in the grid's last
    axis laid side by side along the width (or, with ``batch_output_channels``, into the channels). Zero padding
    only; a precomputed grid is refused."""
    if use_precomputed_grid or padding_mode != "zeros" or mode not in ("bilinear", "nearest"):
        raise UnsupportedArguments(["use_precomputed_grid" if use_precomputed_grid else "padding_mode"],
                                   f"mode {mode!r}, padding {padding_mode!r}, precomputed {use_precomputed_grid}")
    x, g = float64s("input_tensor", input_tensor), float64s("grid", grid)
    if x.ndim != 4 or g.ndim != 4 or g.shape[0] != x.shape[0] or g.shape[-1] % 2 or not g.shape[-1]:
        raise UnsupportedArguments(["grid"], f"a grid of shape {g.shape} for an input {x.shape}")
    n, hg, wg, k2 = g.shape
    points = g.reshape(n, hg, wg * (k2 // 2), 2)
    sizes = (x.shape[2], x.shape[1])  # the grid's x is the width, y the height
    ix, iy = ((((points[..., i] + 1) / 2) * (s - 1)) if align_corners else (((points[..., i] + 1) * s - 1) / 2)
              for i, s in enumerate(sizes))
    if mode == "nearest":
        out = _corner(x, np.rint(iy).astype(np.int64), np.rint(ix).astype(np.int64))
    else:
        x0, y0 = np.floor(ix), np.floor(iy)
        fx, fy = (ix - x0)[..., None], (iy - y0)[..., None]
        w0, h0 = x0.astype(np.int64), y0.astype(np.int64)
        out = ((1 - fx) * (1 - fy) * _corner(x, h0, w0) + fx * (1 - fy) * _corner(x, h0, w0 + 1)
               + (1 - fx) * fy * _corner(x, h0 + 1, w0) + fx * fy * _corner(x, h0 + 1, w0 + 1))
    if batch_output_channels:
        out = out.reshape(n, hg, wg, -1)
    return out.astype(np.float32)
