"""softmax, layer_norm and rms_norm over the last axis (softmax: any axis), computed in float64 and rounded once to
float32; weight and bias are taken as ttnn's golden takes them (flattened, cut to the normalized width)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from . import Param, UnsupportedArguments, broadcast, float64s, reference, shape

_NORM = (
    Param("input_tensor", "tensor", 0, required=True), Param("epsilon", "float", default=1e-12),
    Param("weight", "tensor"), Param("bias", "tensor"), Param("residual_input_tensor", "tensor"),
    Param("program_config", "ignored"), Param("dtype", "dtype"),
)  # fmt: skip


@reference("ttnn.softmax", params=(
    Param("input_tensor", "tensor", 0, required=True), Param("dim", "int", 1, -1), Param("numeric_stable", "ignored"),
    Param("program_config", "ignored"),
))  # fmt: skip
def softmax(input_tensor: Any, dim: int, **_: Any) -> np.ndarray:
    """ttnn.softmax along ``dim`` (the last axis by default)."""
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
