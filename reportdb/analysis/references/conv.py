"""Convolutions as ttnn lays them out: conv2d, conv1d and conv_transpose2d over a channels-last input (``[N, H, W, C]``
or flattened ``[1, 1, N*H*W, C]``), torch-format weights, a zero padding of 2 or 4 sides, stride, dilation and groups,
and the output flattened to ``[1, 1, N*Ho*Wo, out]``; accumulated in float64, rounded once to float32, then the fused
activation of ``conv_config``. Also the layout changes around them: fold (space to depth) and the HWC/CHW channel
orders."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from . import Param, UnsupportedArguments, elements, float64s, reference, shape
from .activations import apply_activation


def pair(name: str, values: tuple[int, ...] | None, default: int) -> tuple[int, int]:
    """A (height, width) pair from one or two integers as ttnn takes them (a single int applies to both)."""
    if values is None:
        return default, default
    if len(values) == 1:
        return values[0], values[0]
    if len(values) != 2:
        raise UnsupportedArguments([name], f"{len(values)} values where (height, width) was expected")
    return values[0], values[1]


def sides(padding: tuple[int, ...] | None) -> tuple[int, int, int, int]:
    """Zero padding as (top, bottom, left, right) from ttnn's (pad_h, pad_w), (top, bottom, left, right) or one
    int, as ttnn's conv2d golden reads it."""
    if padding is None:
        return 0, 0, 0, 0
    if len(padding) == 1:
        return (padding[0],) * 4
    if len(padding) == 2:
        return padding[0], padding[0], padding[1], padding[1]
    if len(padding) == 4:
        return padding[0], padding[1], padding[2], padding[3]
    raise UnsupportedArguments(["padding"], f"{len(padding)} padding values (2 or 4 expected)")


def nhwc(name: str, tensor: Any, batch: int, height: int, width: int, channels: int | None) -> np.ndarray:
    """A channels-last input (any shape holding ``batch * height * width`` rows of channels, ttnn's flattened
    ``[1, 1, NHW, C]`` included) as float64 ``[N, H, W, C]``, channels beyond ``channels`` (tile padding) cut."""
    x = float64s(name, tensor)
    rows = batch * height * width
    if min(batch, height, width) < 1 or x.ndim < 1 or x.shape[-1] < 1 or x.size != rows * x.shape[-1]:
        raise UnsupportedArguments([name], f"an input of shape {x.shape} for batch {batch}, height {height}, "
                                           f"width {width}")
    x = x.reshape(batch, height, width, x.shape[-1])
    if channels is not None:
        if channels < 1 or channels > x.shape[-1]:
            raise UnsupportedArguments(["in_channels"], f"{channels} channels in an input of {x.shape[-1]}")
        x = x[..., :channels]
    return x


def out_length(name: str, length: int, before: int, after: int, kernel: int, stride: int, dilation: int) -> int:
    """The output length of a window sliding over ``length`` padded by ``before`` and ``after`` (floor mode)."""
    if kernel < 1 or stride < 1 or dilation < 1 or before < 0 or after < 0:
        raise UnsupportedArguments([name], "a kernel, stride or dilation below 1, or a negative padding")
    span = length + before + after - dilation * (kernel - 1) - 1
    if span < 0:
        raise UnsupportedArguments([name], f"a kernel of {kernel} (dilation {dilation}) longer than the padded input")
    return span // stride + 1


def convolve(x: np.ndarray, weight: np.ndarray, pads: tuple[int, int, int, int], stride: tuple[int, int],
             dilation: tuple[int, int], groups: int) -> np.ndarray:
    """Cross-correlation of float64 ``x`` [N, H, W, C] with ``weight`` [O, C / groups, kh, kw]: [N, Ho, Wo, O].
    One product per kernel position over every group at once, so a depthwise convolution is as fast as a dense one."""
    out_channels, per_group, kh, kw = weight.shape
    channels = x.shape[-1]
    if groups < 1 or channels % groups or out_channels % groups or per_group != channels // groups:
        raise UnsupportedArguments(["groups"], f"weight {weight.shape} for {channels} channels in {groups} groups")
    top, bottom, left, right = pads
    ho = out_length("kernel_size", x.shape[1], top, bottom, kh, stride[0], dilation[0])
    wo = out_length("kernel_size", x.shape[2], left, right, kw, stride[1], dilation[1])
    padded = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    w = weight.reshape(groups, out_channels // groups, per_group, kh, kw)
    out = np.zeros((x.shape[0], ho, wo, groups, out_channels // groups))
    for i in range(kh):
        for j in range(kw):
            rows = slice(i * dilation[0], i * dilation[0] + stride[0] * (ho - 1) + 1, stride[0])
            cols = slice(j * dilation[1], j * dilation[1] + stride[1] * (wo - 1) + 1, stride[1])
            window = padded[:, rows, cols, :].reshape(x.shape[0], ho, wo, groups, per_group)
            out += np.einsum("nhwgc,goc->nhwgo", window, w[..., i, j])
    return out.reshape(x.shape[0], ho, wo, out_channels)


def _conv_size(values: Mapping[str, Any]) -> int:
    """The padded input in float64 and the output (float64 accumulator, one product per kernel position): bounded by
    the batch, the spatial sizes and the channel counts the arguments name, not by the stored arrays."""
    batch, out_channels = values.get("batch_size") or 1, values.get("out_channels") or 1
    height = values.get("input_height") or 1
    width = values.get("input_width") or values.get("input_length") or 1
    try:
        top, bottom, left, right = sides(values.get("padding"))
    except UnsupportedArguments:
        return elements(shape(values["input_tensor"]))
    channels = shape(values["input_tensor"])[-1:] or (1,)
    padded = batch * (height + top + bottom) * (width + left + right) * channels[0]
    return max(padded, batch * (height + top + bottom) * (width + left + right) * out_channels,
               elements(shape(values["input_tensor"])))


_CONV = (
    Param("input_tensor", "tensor", required=True), Param("weight_tensor", "tensor", required=True),
    Param("device", "ignored"), Param("in_channels", "int", required=True), Param("out_channels", "int", required=True),
    Param("batch_size", "int", required=True),
)
_CONV_END = (
    Param("groups", "int", default=1), Param("dtype", "dtype"), Param("bias_tensor", "tensor"),
    Param("conv_config", "conv_config"), Param("compute_config", "ignored"), Param("slice_config", "ignored"),
    Param("dram_slice_config", "ignored"), Param("return_output_dim", "ignored"),
    Param("return_weights_and_bias", "ignored"),
)


def _finish(out: np.ndarray, bias_tensor: Any, out_channels: int, conv_config: str | None) -> np.ndarray:
    """The convolution's result plus the bias, flattened to ttnn's ``[1, 1, N*Ho*Wo, out]``, through the fused
    activation, in float32."""
    if bias_tensor is not None:
        bias = float64s("bias_tensor", bias_tensor).reshape(-1)
        if bias.size != out_channels:
            raise UnsupportedArguments(["bias_tensor"], f"{bias.size} bias values for {out_channels} channels")
        out = out + bias
    flat = out.reshape(1, 1, -1, out.shape[-1]).astype(np.float32)
    return apply_activation(flat, conv_config)


def _weight(weight_tensor: Any, out_channels: int, rank: int) -> np.ndarray:
    """Torch-format weights ``[out, in / groups, kh, kw]`` (or ``[out, in / groups, k]`` for conv1d); weights already
    prepared for the device (tiled, flattened) are refused: their layout depends on the sharding chosen."""
    w = float64s("weight_tensor", weight_tensor)
    if w.ndim == 3 and rank == 3:
        w = w[:, :, None, :]
    if w.ndim != 4 or w.shape[0] != out_channels:
        raise UnsupportedArguments(["weight_tensor"], f"weights of shape {w.shape} are not torch's [out, in / groups, "
                                                      "kh, kw] (weights prepared for the device are not read)")
    return w


@reference("ttnn.conv2d", params=_CONV + (
    Param("input_height", "int", required=True), Param("input_width", "int", required=True),
    Param("kernel_size", "ints", required=True), Param("stride", "ints"), Param("padding", "ints"),
    Param("dilation", "ints"),
) + _CONV_END, size=_conv_size)
def conv2d(input_tensor: Any, weight_tensor: Any, in_channels: int, out_channels: int, batch_size: int,
           input_height: int, input_width: int, kernel_size: tuple[int, ...], stride: tuple[int, ...] | None,
           padding: tuple[int, ...] | None, dilation: tuple[int, ...] | None, groups: int, bias_tensor: Any,
           conv_config: str | None, **_: Any) -> np.ndarray:
    """ttnn.conv2d as its golden function (tt-metal ``ttnn/ttnn/operations/conv2d.py``): the NHWC input cut to
    ``in_channels``, zero padded on (top, bottom, left, right), torch's conv2d with the bias, the conv_config's
    activation, flattened to ``[1, 1, N*Ho*Wo, out_channels]``."""
    x = nhwc("input_tensor", input_tensor, batch_size, input_height, input_width, in_channels)
    w = _weight(weight_tensor, out_channels, 4)
    if w.shape[2:] != pair("kernel_size", kernel_size, 1):
        raise UnsupportedArguments(["kernel_size"], f"{kernel_size} for weights of shape {w.shape}")
    out = convolve(x, w, sides(padding), pair("stride", stride, 1), pair("dilation", dilation, 1), groups)
    return _finish(out, bias_tensor, out_channels, conv_config)


@reference("ttnn.conv1d", params=_CONV + (
    Param("input_length", "int", required=True), Param("kernel_size", "int", required=True),
    Param("stride", "int", default=1), Param("padding", "ints"), Param("dilation", "int", default=1),
) + _CONV_END, size=_conv_size)
def conv1d(input_tensor: Any, weight_tensor: Any, in_channels: int, out_channels: int, batch_size: int,
           input_length: int, kernel_size: int, stride: int, padding: tuple[int, ...] | None, dilation: int,
           groups: int, bias_tensor: Any, conv_config: str | None, **_: Any) -> np.ndarray:
    """ttnn.conv1d, which its documentation (tt-metal ``ttnn/cpp/ttnn/operations/conv/conv1d/conv1d_nanobind.cpp``)
    defines as conv2d over an input of height 1 and width ``input_length``: padding ``pad`` or ``[left, right]``,
    weights ``[out, in / groups, k]`` (or ``[out, in / groups, 1, k]``), output ``[1, 1, N*Lo, out_channels]``."""
    x = nhwc("input_tensor", input_tensor, batch_size, 1, input_length, in_channels)
    w = _weight(weight_tensor, out_channels, 3)
    if w.shape[2:] != (1, kernel_size):
        raise UnsupportedArguments(["kernel_size"], f"{kernel_size} for weights of shape {w.shape}")
    if padding is None or len(padding) in (1, 2):
        left, right = (0, 0) if padding is None else (padding[0], padding[-1])
    else:
        raise UnsupportedArguments(["padding"], f"{len(padding)} padding values for a 1-D convolution")
    out = convolve(x, w, (0, 0, left, right), (1, stride), (1, dilation), groups)
    return _finish(out, bias_tensor, out_channels, conv_config)


def _fold_size(values: Mapping[str, Any]) -> int:
    """The padded input (the folded output holds the same elements)."""
    dims, padding = shape(values["input"]), tuple(values.get("padding") or ())
    if len(dims) != 4 or len(padding) not in (2, 4, 6) or min(padding) < 0:
        return elements(dims)
    pads = sides(padding) + (0, 0) if len(padding) in (2, 4) else padding
    return 2 * dims[0] * (dims[1] + pads[0] + pads[1]) * (dims[2] + pads[2] + pads[3]) * (dims[3] + pads[4] + pads[5])


@reference("ttnn.fold", size=_fold_size, params=(
    Param("input", "tensor", 0, required=True), Param("stride_h", "int", 1, required=True),
    Param("stride_w", "int", 2, required=True), Param("use_transpose_as_fold", "bool", 3, False),
    Param("output_shape", "ignored", 4), Param("padding", "ints", 5), Param("grid_size", "ignored", 6),
    Param("override_memory_config", "ignored", 7), Param("collapse_output", "bool", 8, False),
))
def fold(input: Any, stride_h: int, stride_w: int, use_transpose_as_fold: bool, padding: tuple[int, ...] | None,
         collapse_output: bool, **_: Any) -> np.ndarray:
    """ttnn.fold as its golden (tt-metal ``ttnn/ttnn/operations/data_movement.py``): NHWC space-to-depth after a
    zero padding of (top, bottom, left, right[, channel front, channel back]); each ``stride_h x stride_w``
    neighbourhood packed into the channels, ``[1, 1, N*Ho*Wo, C*sh*sw]`` when collapsed. The transpose-based path
    (whose padding depends on the input's sharding) is refused."""
    if use_transpose_as_fold:
        raise UnsupportedArguments(["use_transpose_as_fold"], "the transposed fold pads by the input's sharding")
    x = np.asarray(input)
    pads = (0,) * 6 if padding is None else sides(padding) + (0, 0) if len(padding) in (2, 4) else padding
    if x.ndim != 4 or len(pads) != 6 or min(pads) < 0 or stride_h < 1 or stride_w < 1:
        raise UnsupportedArguments(["padding"], f"padding {padding} and strides for an input {x.shape}")
    x = np.pad(x, ((0, 0), (pads[0], pads[1]), (pads[2], pads[3]), (pads[4], pads[5])))
    n, h, w, c = x.shape
    if h % stride_h or w % stride_w:
        raise UnsupportedArguments(["stride_h"], f"strides ({stride_h}, {stride_w}) for a padded input {x.shape}")
    out = x.reshape(n, h // stride_h, stride_h, w // stride_w, stride_w, c).transpose(0, 1, 3, 2, 4, 5)
    out = out.reshape(n, h // stride_h, w // stride_w, c * stride_h * stride_w)
    return out.reshape(1, 1, -1, out.shape[-1]) if collapse_output else out


@reference("ttnn.experimental.convert_to_chw", params=(Param("input", "tensor", 0, required=True), Param("dtype", "dtype")))
def convert_to_chw(input: Any, **_: Any) -> np.ndarray:
    """ttnn.experimental.convert_to_chw as its documentation and unit test (tt-metal ``test_convert_to_chw.py``:
    ``input.transpose(2, 3)``) define it: [1, B, HW, C] to [1, B, C, HW]."""
    x = np.asarray(input)
    if x.ndim != 4:
        raise UnsupportedArguments(["input"], f"an input of shape {x.shape} ([1, B, HW, C] expected)")
    return np.ascontiguousarray(np.swapaxes(x, 2, 3))


@reference("ttnn.experimental.convert_to_hwc", params=(Param("input", "tensor", 0, required=True), Param("dtype", "dtype")))
def convert_to_hwc(input: Any, **_: Any) -> np.ndarray:
    """ttnn.experimental.convert_to_hwc as its documentation (tt-metal ``convert_to_hwc_nanobind.cpp``) defines it:
    [1, B, C, HW] to [1, 1, B*HW, C], the batches flattened into the rows."""
    x = np.asarray(input)
    if x.ndim != 4 or x.shape[0] != 1:
        raise UnsupportedArguments(["input"], f"an input of shape {x.shape} ([1, B, C, HW] expected)")
    return np.ascontiguousarray(np.swapaxes(x, 2, 3)).reshape(1, 1, -1, x.shape[2])


def _transposed_size(values: Mapping[str, Any]) -> int:
    """The stride-dilated input padded by ``dilation * (k - 1)`` on each side (and the output, no larger per
    channel), over the larger of the input and output channels."""
    try:
        (sh, sw), (dh, dw) = pair("stride", values.get("stride"), 1), pair("dilation", values.get("dilation"), 1)
        (kh, kw), (oh, ow) = pair("kernel_size", values.get("kernel_size"), 1), pair("output_padding",
                                                                                       values.get("output_padding"), 0)
    except UnsupportedArguments:
        return elements(shape(values["input_tensor"]))
    height, width = values.get("input_height") or 1, values.get("input_width") or 1
    rows = max(1, height - 1) * max(1, sh) + 2 * max(1, dh) * max(1, kh) + max(0, oh)
    cols = max(1, width - 1) * max(1, sw) + 2 * max(1, dw) * max(1, kw) + max(0, ow)
    channels = max(values.get("out_channels") or 1, (shape(values["input_tensor"]) or (1,))[-1])
    return max(2 * (values.get("batch_size") or 1) * rows * cols * channels, elements(shape(values["input_tensor"])))


def _dilated(x: np.ndarray, stride: tuple[int, int]) -> np.ndarray:
    """``x`` [N, H, W, C] with ``stride - 1`` zero rows and columns between its pixels (a transposed convolution's
    input, as the gradient of a strided one)."""
    n, h, w, c = x.shape
    out = np.zeros((n, (h - 1) * stride[0] + 1, (w - 1) * stride[1] + 1, c))
    out[:, :: stride[0], :: stride[1]] = x
    return out


@reference("ttnn.conv_transpose2d", params=_CONV + (
    Param("input_height", "int", required=True), Param("input_width", "int", required=True),
    Param("kernel_size", "ints", required=True), Param("stride", "ints"), Param("padding", "ints"),
    Param("output_padding", "ints"), Param("dilation", "ints"), Param("mirror_kernel", "bool", default=True),
) + _CONV_END, size=_transposed_size)
def conv_transpose2d(input_tensor: Any, weight_tensor: Any, in_channels: int, out_channels: int, batch_size: int,
                     input_height: int, input_width: int, kernel_size: tuple[int, ...], stride: tuple[int, ...] | None,
                     padding: tuple[int, ...] | None, output_padding: tuple[int, ...] | None,
                     dilation: tuple[int, ...] | None, groups: int, mirror_kernel: bool, bias_tensor: Any,
                     conv_config: str | None, **_: Any) -> np.ndarray:
    """ttnn.conv_transpose2d as its documentation (tt-metal ``conv_transpose2d_nanobind.cpp``) defines it: torch's
    conv_transpose2d of the NHWC input with weights [in, out / groups, kh, kw] and output size
    ``(H - 1) * stride - pad_top - pad_bottom + dilation * (k - 1) + output_padding + 1``, computed as the
    convolution of the stride-dilated input with the flipped kernel, flattened to ``[1, 1, N*Ho*Wo, out]`` as
    conv2d's output. Only ``mirror_kernel`` True (its binding's default: the op flips torch-format weights) is
    read."""
    if not mirror_kernel:
        raise UnsupportedArguments(["mirror_kernel"], "weights flipped by the caller are not modelled")
    x = nhwc("input_tensor", input_tensor, batch_size, input_height, input_width, in_channels)
    w = float64s("weight_tensor", weight_tensor)
    kh, kw = pair("kernel_size", kernel_size, 1)
    if groups < 1 or w.shape != (in_channels, out_channels // groups, kh, kw) or out_channels % groups or \
            in_channels % groups:
        raise UnsupportedArguments(["weight_tensor"], f"weights of shape {w.shape} are not torch's [in, out / groups, "
                                                      "kh, kw] (weights prepared for the device are not read)")
    strides, dilations = pair("stride", stride, 1), pair("dilation", dilation, 1)
    extra = pair("output_padding", output_padding, 0)
    top, bottom, left, right = sides(padding)
    grow = (dilations[0] * (kh - 1), dilations[1] * (kw - 1))
    pads = (grow[0] - top, grow[0] - bottom + extra[0], grow[1] - left, grow[1] - right + extra[1])
    kernel = w.reshape(groups, in_channels // groups, out_channels // groups, kh, kw).transpose(0, 2, 1, 3, 4)
    kernel = kernel.reshape(out_channels, in_channels // groups, kh, kw)[..., ::-1, ::-1]
    spread = _dilated(x, strides)
    spread = np.pad(spread, ((0, 0), (max(0, pads[0]), max(0, pads[1])), (max(0, pads[2]), max(0, pads[3])), (0, 0)))
    crop_h, crop_w = slice(max(0, -pads[0]), spread.shape[1] - max(0, -pads[1])), \
        slice(max(0, -pads[2]), spread.shape[2] - max(0, -pads[3]))
    out = convolve(spread[:, crop_h, crop_w], np.ascontiguousarray(kernel), (0, 0, 0, 0), (1, 1), dilations, groups)
    return _finish(out, bias_tensor, out_channels, conv_config)
