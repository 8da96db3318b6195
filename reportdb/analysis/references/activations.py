"""Elementwise activation functions in float32 (float64 inside where float32 would lose the result), shared by the
unary references and the activations fused into matmul, linear and the binary operations."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .args import UnsupportedArguments

_ERF = np.frompyfunc(math.erf, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    """The error function elementwise, to float64 precision (numpy has none; ``math.erf`` per element)."""
    return np.asarray(_ERF(np.asarray(x, dtype=np.float64)), dtype=np.float64)


def gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    """GELU as torch defines it: exact (``x * Phi(x)`` with erf) or the tanh approximation, in float32."""
    x32 = np.asarray(x, dtype=np.float32)
    if approximate == "tanh":
        inner = np.float32(math.sqrt(2.0 / math.pi)) * (x32 + np.float32(0.044715) * x32 * x32 * x32)
        return np.float32(0.5) * x32 * (np.float32(1.0) + np.tanh(inner))
    x64 = x32.astype(np.float64)
    return (0.5 * x64 * (1.0 + erf(x64 / math.sqrt(2.0)))).astype(np.float32)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """The logistic function, without overflow warnings for large negative inputs (computed in float64)."""
    x64 = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):
        return (1.0 / (1.0 + np.exp(-x64))).astype(np.float32)


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.float32(0)).astype(np.float32)


def _silu(x: np.ndarray) -> np.ndarray:
    return (np.asarray(x, dtype=np.float64) * sigmoid(x).astype(np.float64)).astype(np.float32)


ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "relu": _relu, "silu": _silu, "sigmoid": sigmoid, "tanh": lambda x: np.tanh(np.asarray(x, np.float32)),
    "gelu": gelu, "gelu_tanh": lambda x: gelu(x, "tanh"),
}


def apply_activation(x: np.ndarray, activation: str | None) -> np.ndarray:
    """``x`` through a fused activation named as ttnn prints it (None: unchanged); an unknown one is refused."""
    if activation is None:
        return x
    function = ACTIVATIONS.get(activation)
    if function is None:
        raise UnsupportedArguments(["activation"], f"no reference for the fused activation {activation!r}")
    return function(x)
