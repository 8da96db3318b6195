"""softmax (also in place, fused with a scale and mask, and attention's), layer_norm and rms_norm over the last axis
(softmax: any axis), their pre-all-gather statistics (a masked output: only their sums' columns are defined) and
post-all-gather forms from gathered per-device statistics, group_norm and batch_norm,
computed in float64 and rounded once to float32; weight and bias are taken as ttnn's golden takes them (flattened,
cut to the normalized width)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from . import Param, UnsupportedArguments, broadcast, float64s, reference, shape
from .typecast import stored_as

_NORM = (
    Param("input_tensor", "tensor", 0, required=True), Param("epsilon", "float", default=1e-12),
    Param("weight", "tensor"), Param("bias", "tensor"), Param("residual_input_tensor", "tensor"),
    Param("program_config", "ignored"), Param("dtype", "dtype"),
)


@reference("ttnn.softmax", "ttnn.softmax_in_place", params=(
    Param("input_tensor", "tensor", 0, required=True), Param("dim", "int", 1, -1), Param("numeric_stable", "ignored"),
    Param("program_config", "ignored"),
))
def softmax(input_tensor: Any, dim: int, **_: Any) -> np.ndarray:
    """ttnn.softmax and ttnn.softmax_in_place (one golden, tt-metal ``ttnn/ttnn/operations/normalization.py``) along
    ``dim`` (the last axis by default)."""
    x = float64s("input_tensor", input_tensor)
    if not -x.ndim <= dim < max(x.ndim, 1):
        raise UnsupportedArguments(["dim"], f"{dim} is outside a tensor of rank {x.ndim}")
    with np.errstate(invalid="ignore", over="ignore"):
        shifted = np.exp(x - np.max(x, axis=dim, keepdims=True))
        return (shifted / np.sum(shifted, axis=dim, keepdims=True)).astype(np.float32)


def _affine(x: np.ndarray, weight: Any, bias: Any) -> np.ndarray:
    """``x * weight + bias`` per element of the last axis, each parameter flattened and cut to that width."""
    width = x.shape[-1]
    for name, value in (("weight", weight), ("bias", bias)):
        if value is None:
            continue
        flat = float64s(name, value).reshape(-1)
        if flat.size < width:
            raise UnsupportedArguments([name], f"{flat.size} values for a width of {width}")
        x = x * flat[:width] if name == "weight" else x + flat[:width]
    return x


def _input(input_tensor: Any, residual_input_tensor: Any) -> np.ndarray:
    """The normalized input: the tensor plus its residual when one was given."""
    x = float64s("input_tensor", input_tensor)
    return x if residual_input_tensor is None else x + float64s("residual_input_tensor", residual_input_tensor)


def _norm_size(values: Mapping[str, Any]) -> int:
    """The input broadcast against its residual (``[1, N] + [N, 1]`` builds N^2); weight and bias are cut to its
    width."""
    return broadcast(shape(values["input_tensor"]), shape(values.get("residual_input_tensor")))


@reference("ttnn.layer_norm", params=_NORM, size=_norm_size)
def layer_norm(input_tensor: Any, epsilon: float, weight: Any, bias: Any, residual_input_tensor: Any, **_: Any) -> np.ndarray:
    """ttnn.layer_norm: ``(x - mean) / sqrt(var + epsilon) * weight + bias`` over the last axis (biased variance)."""
    x = _input(input_tensor, residual_input_tensor)
    centred = x - x.mean(axis=-1, keepdims=True)
    normalized = centred / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + epsilon)
    return _affine(normalized, weight, bias).astype(np.float32)


@reference("ttnn.rms_norm", params=_NORM, size=_norm_size)
def rms_norm(input_tensor: Any, epsilon: float, weight: Any, bias: Any, residual_input_tensor: Any, **_: Any) -> np.ndarray:
    """ttnn.rms_norm: ``x / sqrt(mean(x^2) + epsilon) * weight + bias`` over the last axis."""
    x = _input(input_tensor, residual_input_tensor)
    normalized = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + epsilon)
    return _affine(normalized, weight, bias).astype(np.float32)


def _softmax_last(x: np.ndarray) -> np.ndarray:
    """softmax over the last axis of float64 ``x``, rounded to float32."""
    with np.errstate(invalid="ignore", over="ignore"):
        shifted = np.exp(x - np.max(x, axis=-1, keepdims=True))
        return (shifted / np.sum(shifted, axis=-1, keepdims=True)).astype(np.float32)


def _plus_mask(x: np.ndarray, mask: Any, name: str) -> np.ndarray:
    """``x`` plus a mask broadcast over it (a mask that does not broadcast to ``x``'s shape is refused)."""
    if mask is None:
        return x
    m = float64s(name, mask)
    try:
        if np.broadcast_shapes(x.shape, m.shape) != x.shape:
            raise ValueError
    except ValueError:
        raise UnsupportedArguments([name], f"a mask of shape {m.shape} for an input {x.shape}") from None
    return x + m


@reference("ttnn.scale_mask_softmax_in_place", "ttnn.scale_mask_softmax", "ttnn.scale_causal_mask_hw_dims_softmax_in_place",
           params=(
    Param("input_tensor", "tensor", 0, required=True), Param("scale", "float", 1), Param("mask", "tensor", 2),
    Param("program_config", "ignored"), Param("is_causal_mask", "ignored"), Param("numeric_stable", "ignored"),
))
def scale_mask_softmax(input_tensor: Any, scale: float | None, mask: Any, **_: Any) -> np.ndarray:
    """The fused scale-mask-softmax operations as their golden (tt-metal ``ttnn/ttnn/operations/normalization.py``):
    ``softmax(x * scale + mask)`` over the last axis, scale and mask optional (``is_causal_mask`` only says which
    kernel reads the mask)."""
    x = float64s("input_tensor", input_tensor)
    return _softmax_last(_plus_mask(x if scale is None else x * scale, mask, "mask"))


@reference("ttnn.transformer.attention_softmax_", "ttnn.transformer.attention_softmax", params=(
    Param("tensor", "tensor", 0, required=True), Param("head_size", "int"), Param("attention_mask", "tensor"),
    Param("program_config", "ignored"), Param("causal_mask", "ignored"),
))
def attention_softmax(tensor: Any, head_size: int | None, attention_mask: Any, **_: Any) -> np.ndarray:
    """ttnn.transformer.attention_softmax(_) as its golden (tt-metal ``ttnn/ttnn/operations/transformer.py``):
    ``softmax(x / sqrt(head_size) + attention_mask)`` over the last axis (no scaling without a head size)."""
    x = float64s("tensor", tensor)
    if head_size is not None and head_size < 1:
        raise UnsupportedArguments(["head_size"], f"a head size of {head_size}")
    return _softmax_last(_plus_mask(x if head_size is None else x / np.sqrt(head_size), attention_mask, "attention_mask"))


#: The width of one device's block of statistics in the output of a ``*_pre_all_gather``: one tile.
STATS_TILE = 32

_PRE = (
    Param("input_tensor", "tensor", 0, required=True), Param("dtype", "dtype"),
    Param("residual_input_tensor", "tensor"), Param("recip_tensor", "tensor"), Param("program_config", "ignored"),
    Param("use_2d_core_grid", "ignored"), Param("fast_and_approximate_mode", "ignored"),
)


def _pre_all_gather(input_tensor: Any, residual_input_tensor: Any, recip_tensor: Any, dtype: str | None,
                    centred: bool) -> np.ndarray:
    """One device's statistics of the norm over the last axis, as the ``*_pre_all_gather`` operations write them
    (tt-metal ``ttnn/cpp/ttnn/operations/normalization/layernorm_distributed/device/``: the pre-all-gather program
    factory reduces with a scaler of 1.0, ``out0_cb: [sum(x^2), sum(x)]``; the kernel
    ``kernels/compute/layernorm_pre_allgather.cpp`` and ``rmsnorm_distributed/.../rmsnorm_pre_allgather.cpp`` write
    each sum in the leftmost column of its tile): per row, ``sum(x^2)`` in column 0 and, for layer norm, ``sum(x)``
    in column 32 of a two-tile block, in ``dtype`` (BFLOAT16 by default). The other columns are not defined (zeros
    here, as in ttnn 0.81.1's golden, which compares under a mask): the references declare ``defined``. The padding
    of a partial tile is zeroed before the sums (``fill_implicit_tile_padding``), so the sums run over the logical
    width. A ``recip_tensor`` selects the Welford kernel, which writes the mean and variance instead: refused."""
    if recip_tensor is not None:
        raise UnsupportedArguments(["recip_tensor"], "the Welford kernel writes mean and variance, not the sums")
    x = _input(input_tensor, residual_input_tensor)
    if x.ndim < 1:
        raise UnsupportedArguments(["input_tensor"], "a scalar has no last axis to normalize")
    sums = [(x * x).sum(axis=-1)] + ([x.sum(axis=-1)] if centred else [])
    stats = np.zeros(x.shape[:-1] + (STATS_TILE * len(sums),), dtype=np.float32)
    for block, total in enumerate(sums):
        stats[..., block * STATS_TILE] = total
    return stored_as(stats, dtype or "bfloat16")


@reference("ttnn.rms_norm_pre_all_gather", params=_PRE, defined=np.s_[..., ::STATS_TILE])
def rms_norm_pre_all_gather(input_tensor: Any, residual_input_tensor: Any, recip_tensor: Any, dtype: str | None,
                            **_: Any) -> np.ndarray:
    """ttnn.rms_norm_pre_all_gather as its golden (ttnn 0.81.1 ``ttnn/operations/normalization.py``,
    ``_golden_pre_all_gather_stats``): ``sum(x^2)`` per row in column 0 of a 32-wide block (see
    :func:`_pre_all_gather`); only column 0 is defined."""
    return _pre_all_gather(input_tensor, residual_input_tensor, recip_tensor, dtype, centred=False)


@reference("ttnn.layer_norm_pre_all_gather", params=_PRE, defined=np.s_[..., ::STATS_TILE])
def layer_norm_pre_all_gather(input_tensor: Any, residual_input_tensor: Any, recip_tensor: Any, dtype: str | None,
                              **_: Any) -> np.ndarray:
    """ttnn.layer_norm_pre_all_gather as its golden (as :func:`rms_norm_pre_all_gather`): ``sum(x^2)`` per row in
    column 0 and ``sum(x)`` in column 32 of a 64-wide block; only those two columns are defined."""
    return _pre_all_gather(input_tensor, residual_input_tensor, recip_tensor, dtype, centred=True)


def _post_all_gather(input_tensor: Any, stats: Any, epsilon: float, weight: Any, bias: Any, centred: bool) -> np.ndarray:
    """The norm over the global width from the gathered per-device statistics: each device's block holds sum(x^2) in
    its column 0 (and, for layer norm, sum(x) in column 32 of a two-tile block)."""
    x, s = float64s("input_tensor", input_tensor), float64s("stats", stats)
    block = STATS_TILE * (2 if centred else 1)
    if s.shape[:-1] != x.shape[:-1] or s.shape[-1] % block or not s.shape[-1]:
        raise UnsupportedArguments(["stats"], f"statistics of shape {s.shape} for an input {x.shape}")
    devices = s.shape[-1] // block
    width = x.shape[-1] * devices
    ex2 = s[..., 0::block].sum(axis=-1, keepdims=True) / width
    if not centred:
        return _affine(x / np.sqrt(ex2 + epsilon), weight, bias).astype(np.float32)
    ex = s[..., STATS_TILE::block].sum(axis=-1, keepdims=True) / width
    return _affine((x - ex) / np.sqrt(ex2 - ex * ex + epsilon), weight, bias).astype(np.float32)


_POST = (
    Param("input_tensor", "tensor", 0, required=True), Param("stats", "tensor", 1, required=True),
    Param("epsilon", "float", default=1e-12), Param("weight", "tensor"), Param("bias", "tensor"),
    Param("program_config", "ignored"), Param("dtype", "dtype"), Param("use_2d_core_grid", "ignored"),
)


@reference("ttnn.rms_norm_post_all_gather", params=_POST)
def rms_norm_post_all_gather(input_tensor: Any, stats: Any, epsilon: float, weight: Any, bias: Any, **_: Any) -> np.ndarray:
    """ttnn.rms_norm_post_all_gather as its golden (tt-metal ``ttnn/ttnn/operations/normalization.py``):
    ``x * rsqrt(sum over devices of sum(x^2) / global width + epsilon) * weight + bias``."""
    return _post_all_gather(input_tensor, stats, epsilon, weight, bias, centred=False)


@reference("ttnn.layer_norm_post_all_gather", params=_POST)
def layer_norm_post_all_gather(input_tensor: Any, stats: Any, epsilon: float, weight: Any, bias: Any, **_: Any) -> np.ndarray:
    """ttnn.layer_norm_post_all_gather as its golden (tt-metal ``ttnn/ttnn/operations/normalization.py``): the
    global mean and variance ``E[x^2] - E[x]^2`` from the gathered sums, then ``(x - mean) * rsqrt(var + eps)``
    with weight and bias."""
    return _post_all_gather(input_tensor, stats, epsilon, weight, bias, centred=True)


@reference("ttnn.group_norm", params=(
    Param("input_tensor", "tensor", 0, required=True), Param("num_groups", "int", required=True),
    Param("epsilon", "float", default=1e-12), Param("input_mask", "ignored"), Param("weight", "tensor"),
    Param("bias", "tensor"), Param("dtype", "dtype"), Param("inplace", "ignored"), Param("output_layout", "ignored"),
    Param("num_out_blocks", "ignored"), Param("negative_mask", "ignored"), Param("use_welford", "ignored"),
))
def group_norm(input_tensor: Any, num_groups: int, epsilon: float, weight: Any, bias: Any, **_: Any) -> np.ndarray:
    """ttnn.group_norm as its golden (tt-metal ``ttnn/ttnn/operations/normalization.py``): torch's group_norm of the
    channels-last input ([N, 1, H*W, C] or [N, H, W, C]) with ``num_groups`` groups of channels, biased variance,
    epsilon 1e-12 when not recorded (the operation's default). The masks only steer the kernel, as the golden
    ignores them; weight and bias must hold one value per channel (packed per core, they depend on the sharding)."""
    x = float64s("input_tensor", input_tensor)
    if x.ndim != 4 or num_groups < 1 or x.shape[-1] % num_groups:
        raise UnsupportedArguments(["num_groups"], f"{num_groups} groups for an input of shape {x.shape}")
    channels = x.shape[-1]
    for name, value in (("weight", weight), ("bias", bias)):
        if value is not None and np.size(value) != channels:
            raise UnsupportedArguments([name], f"{np.size(value)} values for {channels} channels (packed per core?)")
    grouped = x.reshape(x.shape[0], -1, num_groups, channels // num_groups)
    mean = grouped.mean(axis=(1, 3), keepdims=True)
    var = ((grouped - mean) ** 2).mean(axis=(1, 3), keepdims=True)
    normalized = ((grouped - mean) / np.sqrt(var + epsilon)).reshape(x.shape)
    return _affine(normalized, weight, bias).astype(np.float32)


@reference("ttnn.batch_norm", params=(
    Param("input", "tensor", 0, required=True), Param("running_mean", "tensor"), Param("running_var", "tensor"),
    Param("training", "bool", default=False), Param("eps", "float", default=1e-05), Param("momentum", "ignored"),
    Param("weight", "tensor"), Param("bias", "tensor"), Param("output", "output"),
))
def batch_norm(input: Any, running_mean: Any, running_var: Any, training: bool, eps: float, weight: Any, bias: Any,
               **_: Any) -> np.ndarray:
    """ttnn.batch_norm as its golden (tt-metal ``ttnn/ttnn/operations/normalization.py``): torch's batch_norm of
    NCHW ``input`` with per-channel parameters stored as [1, C, 1, 1]; training normalizes by the batch's own mean
    and biased variance (the running statistics' update is a side effect on other tensors), inference by the
    running ones (a missing one of the pair is 0 for the mean, 1 for the variance)."""
    x = float64s("input", input)
    if x.ndim < 2:
        raise UnsupportedArguments(["input"], f"an input of rank {x.ndim} ([N, C, ...] expected)")
    channels, axes = x.shape[1], tuple(a for a in range(x.ndim) if a != 1)
    view = (1, channels) + (1,) * (x.ndim - 2)

    def vector(name: str, value: Any, fill: float) -> np.ndarray:
        """A per-channel parameter as [1, C, 1, ...] (``fill`` where it is absent)."""
        if value is None:
            return np.full(view, fill)
        flat = float64s(name, value).reshape(-1)
        if flat.size != channels:
            raise UnsupportedArguments([name], f"{flat.size} values for {channels} channels")
        return flat.reshape(view)

    if training:
        mean, var = x.mean(axis=axes, keepdims=True), x.var(axis=axes, keepdims=True)
    elif running_mean is None and running_var is None:
        raise UnsupportedArguments(["running_mean"], "inference without running statistics")
    else:
        mean, var = vector("running_mean", running_mean, 0.0), vector("running_var", running_var, 1.0)
    out = (x - mean) / np.sqrt(var + eps) * vector("weight", weight, 1.0) + vector("bias", bias, 0.0)
    return out.astype(np.float32)
