"""matmul, linear and the experimental minimal_matmul and group_attn_matmul: ``a @ b`` in float32 (transposes of the
last two axes, a bias row, a fused activation), as ttnn's golden functions and documentation define them."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from . import Param, UnsupportedArguments, broadcast, elements, floats, reference, shape
from .activations import apply_activation

_COMMON = (
    Param("input_tensor_a", "tensor", 0, required=True), Param("input_tensor_b", "tensor", 1, required=True),
    Param("transpose_a", "bool", 2, False), Param("transpose_b", "bool", 3, False),
    Param("activation", "activation"), Param("program_config", "program_config"), Param("dtype", "dtype"),
    Param("output_tile", "ignored"), Param("optional_output_tensor", "output"), Param("global_cb", "ignored"),
)


def _product(a: Any, b: Any, transpose_a: bool, transpose_b: bool) -> np.ndarray:
    """``a @ b`` in float32 after the requested transposes, with leading unit axes of the result beyond ``a``'s rank
    squeezed as the golden does."""
    x, y = floats("input_tensor_a", a), floats("input_tensor_b", b)
    if transpose_a:
        x = np.swapaxes(x, -1, -2)
    if transpose_b:
        y = np.swapaxes(y, -1, -2)
    out = np.matmul(x, y)
    while out.ndim > x.ndim and out.shape[0] == 1:
        out = out[0]
    return out


def _size(values: Mapping[str, Any]) -> int:
    """The product's elements (batch axes broadcast: ``[N, 1] @ [1, N]`` builds N^2 from 2N), or its sum with the
    bias broadcast over it where that is larger; the operands' float32 copies are no larger than the inputs."""
    a, b = shape(values["input_tensor_a"]), shape(values["input_tensor_b"])
    if not a or not b:  # a scalar operand: matmul refuses it
        return max(elements(a), elements(b))
    x, y = (a if len(a) > 1 else (1,) + a), (b if len(b) > 1 else b + (1,))
    if values.get("transpose_a") and len(a) > 1:
        x = x[:-2] + (x[-1], x[-2])
    if values.get("transpose_b") and len(b) > 1:
        y = y[:-2] + (y[-1], y[-2])
    try:
        out = tuple(np.broadcast_shapes(x[:-2], y[:-2])) + (x[-2], y[-1])
    except ValueError:  # batch axes that do not broadcast: matmul refuses them
        return max(elements(a), elements(b))
    bias = shape(values.get("bias"))
    if len(bias) == 2 and bias[0] == 1:
        bias = bias[1:]
    return max(elements(out), broadcast(out, bias))


@reference("ttnn.matmul", params=_COMMON + (Param("bias", "tensor"),), size=_size)
def matmul(input_tensor_a: Any, input_tensor_b: Any, transpose_a: bool, transpose_b: bool, activation: str | None,
           program_config: None, dtype: str | None, bias: Any) -> np.ndarray:
    """ttnn.matmul: its golden ignores ``bias`` (ttnn.linear applies one), so a matmul with a bias is refused."""
    if bias is not None:
        raise UnsupportedArguments(["bias"], "ttnn.matmul's golden function does not add a bias")
    return apply_activation(_product(input_tensor_a, input_tensor_b, transpose_a, transpose_b), activation)


@reference("ttnn.linear", params=_COMMON + (Param("bias", "tensor"),), size=_size)
def linear(input_tensor_a: Any, input_tensor_b: Any, transpose_a: bool, transpose_b: bool, activation: str | None,
           program_config: None, dtype: str | None, bias: Any) -> np.ndarray:
    """ttnn.linear: the product plus ``bias`` (a ``[1, n]`` bias is its row), then the activation."""
    out = _product(input_tensor_a, input_tensor_b, transpose_a, transpose_b)
    if bias is not None:
        b = floats("bias", bias)
        if b.ndim == 2 and b.shape[0] == 1:
            b = b[0]
        out = out + b
    return apply_activation(out, activation)


@reference("ttnn.experimental.minimal_matmul", params=(
    Param("input_tensor", "tensor", 0, required=True), Param("weight_tensor", "tensor", 1, required=True),
    Param("bias_tensor", "tensor", 2), Param("fused_activation", "activation"), Param("config", "ignored"),
    Param("dtype", "dtype"), Param("fuse_swiglu", "bool", default=False),
), size=lambda values: max(elements(shape(values["input_tensor"])[:-1]) * (shape(values["weight_tensor"]) or (1,))[-1],
                           elements(shape(values["input_tensor"]))))
def minimal_matmul(input_tensor: Any, weight_tensor: Any, bias_tensor: Any, fused_activation: str | None,
                   fuse_swiglu: bool, **_: Any) -> np.ndarray:
    """ttnn.experimental.minimal_matmul as its documentation (tt-metal ``minimal_matmul_nanobind.cpp``) defines it:
    ``A @ B + bias`` with A [..., M, K] (leading axes folded into the rows), B [K, N] (leading axes all 1), the
    bias a row of N, then the fused activation. The fused concatenation of two inputs and SwiGLU are refused."""
    if fuse_swiglu:
        raise UnsupportedArguments(["fuse_swiglu"], "the fused SwiGLU is not modelled")
    a, b = floats("input_tensor", input_tensor), floats("weight_tensor", weight_tensor)
    if a.ndim < 2 or b.ndim < 2 or any(d != 1 for d in b.shape[:-2]) or a.shape[-1] != b.shape[-2]:
        raise UnsupportedArguments(["weight_tensor"], f"a weight {b.shape} for an input {a.shape}")
    out = a @ b.reshape(b.shape[-2], b.shape[-1])
    if bias_tensor is not None:
        bias = floats("bias_tensor", bias_tensor).reshape(-1)
        if bias.size != out.shape[-1]:
            raise UnsupportedArguments(["bias_tensor"], f"{bias.size} bias values for {out.shape[-1]} columns")
        out = out + bias
    return apply_activation(out, fused_activation)


@reference("ttnn.experimental.group_attn_matmul", "ttnn.experimental.attn_matmul", params=(
    Param("input_tensor_a", "tensor", 0, required=True), Param("input_tensor_b", "tensor", 1, required=True),
    Param("compute_with_storage_grid_size", "ignored"), Param("dtype", "dtype"), Param("optional_output_tensor", "output"),
    Param("output_tensor", "output"),
))
def group_attn_matmul(input_tensor_a: Any, input_tensor_b: Any, **_: Any) -> np.ndarray:
    """ttnn.experimental.group_attn_matmul and attn_matmul as their documentation (tt-metal
    ``group_attn_matmul_nanobind.cpp``, ``attn_matmul_nanobind.cpp``) defines them,
    ``torch.matmul(A.transpose(0, 2), B).transpose(0, 2)``: A [1, q_heads, batch, k] against each user's
    B [batch, 1, k, n], giving [1, q_heads, batch, n]."""
    a, b = floats("input_tensor_a", input_tensor_a), floats("input_tensor_b", input_tensor_b)
    if a.ndim != 4 or b.ndim != 4 or a.shape[0] != 1 or b.shape[1] != 1 or a.shape[2] != b.shape[0] or \
            a.shape[3] != b.shape[2]:
        raise UnsupportedArguments(["input_tensor_b"], f"operands {a.shape} and {b.shape} ([1, heads, B, k] and "
                                                       "[B, 1, k, n] expected)")
    return np.swapaxes(np.swapaxes(a, 0, 2) @ b, 0, 2)
