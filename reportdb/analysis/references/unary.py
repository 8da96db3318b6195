"""The elementwise unary operations in float32: relu, relu6, gelu (exact or tanh), silu and swish, sigmoid and
sigmoid_accurate, softplus, elu, erf, tanh, exp, log, sqrt, rsqrt, reciprocal, neg, abs, sin, cos, floor, eqz, clamp,
pow and alt_complex_rotate90, and bitwise_not of integers, as ttnn 0.81.1's golden functions (tt-metal
``ttnn/ttnn/operations/unary.py``) map them onto torch's. A fast/approximate device mode leaves the reference exact: it
is the value the approximation aims at, and the tolerance policy judges how far the device may be from it."""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from . import Param, UnsupportedArguments, broadcast, floats, reference, shape
from .activations import ACTIVATIONS, erf as _erf, gelu as _gelu

_BASE = (
    Param("input_tensor", "tensor", 0, required=True), Param("output_tensor", "output"), Param("dtype", "dtype"),
    Param("fast_and_approximate_mode", "bool", default=False), Param("vector_mode", "ignored"),
)


def _unary(function: Callable[[np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    """A reference applying ``function`` to the float32 input (IEEE results for log(0), sqrt(-1)...)."""

    def run(input_tensor: Any, **_: Any) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return np.asarray(function(floats("input_tensor", input_tensor)), dtype=np.float32)

    return run


_SIMPLE: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "relu": ACTIVATIONS["relu"], "silu": ACTIVATIONS["silu"], "sigmoid": ACTIVATIONS["sigmoid"], "tanh": np.tanh,
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "neg": np.negative, "abs": np.abs,
    "rsqrt": lambda x: np.float32(1) / np.sqrt(x), "reciprocal": lambda x: np.float32(1) / x,
    "sin": np.sin, "cos": np.cos, "floor": np.floor, "relu6": lambda x: np.minimum(np.maximum(x, 0), 6),
    "swish": ACTIVATIONS["silu"], "sigmoid_accurate": ACTIVATIONS["sigmoid"], "erf": _erf,
    "eqz": lambda x: (x == 0).astype(np.float32),
}

for _name, _function in _SIMPLE.items():
    reference(f"ttnn.{_name}", params=_BASE)(_unary(_function))


@reference("ttnn.gelu", params=_BASE + (Param("variant", "gelu_variant"), Param("approximate", "bool")))
def gelu(input_tensor: Any, variant: str | None = None, approximate: bool | None = None, **_: Any) -> np.ndarray:
    """ttnn.gelu: the tanh approximation when ttnn 0.81's ``variant`` is ``GeluVariant.Tanh``, else exact GELU
    (``fast_and_approximate_mode`` and the ``FastLut`` variant approximate exact GELU on the device)."""
    if approximate is not None:
        raise UnsupportedArguments(["approximate"], "ttnn.gelu takes no such argument")
    return _gelu(floats("input_tensor", input_tensor), "tanh" if variant == "tanh" else "none")


def _broadcast_size(*names: str) -> Callable[[Mapping[str, Any]], int]:
    """The size of a reference whose tensor-valued arguments ``names`` broadcast against its input."""
    return lambda values: broadcast(*(shape(values.get(name)) for name in ("input_tensor", *names)))


@reference("ttnn.clamp", "ttnn.clip", params=_BASE + (Param("min", "number", 1), Param("max", "number", 2)),
           size=_broadcast_size("min", "max"))
def clamp(input_tensor: Any, min: Any = None, max: Any = None, **_: Any) -> np.ndarray:
    """ttnn.clamp: torch.clamp's order (the lower bound first, then the upper, so min > max gives max)."""
    x = floats("input_tensor", input_tensor)
    if min is None and max is None:
        raise UnsupportedArguments(["min", "max"], "neither bound was recorded")
    if min is not None:
        x = np.maximum(x, floats("min", min) if isinstance(min, np.ndarray) else np.float32(min))
    if max is not None:
        x = np.minimum(x, floats("max", max) if isinstance(max, np.ndarray) else np.float32(max))
    return x.astype(np.float32)


@reference("ttnn.pow", params=_BASE + (Param("exponent", "number", 1, required=True),), size=_broadcast_size("exponent"))
def pow(input_tensor: Any, exponent: Any, **_: Any) -> np.ndarray:
    """ttnn.pow: ``input ** exponent`` in float32 (a tensor exponent broadcasts)."""
    e = floats("exponent", exponent) if isinstance(exponent, np.ndarray) else np.float32(exponent)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.power(floats("input_tensor", input_tensor), e).astype(np.float32)


@reference("ttnn.softplus", params=_BASE + (Param("beta", "float", default=1.0), Param("threshold", "float", default=20.0)))
def softplus(input_tensor: Any, beta: float, threshold: float, **_: Any) -> np.ndarray:
    """ttnn.softplus as torch.nn.functional.softplus: ``log(1 + exp(beta * x)) / beta``, and ``x`` itself where
    ``beta * x`` exceeds ``threshold`` (golden ``_golden_function_softplus``), in float64 rounded once."""
    if beta == 0:
        raise UnsupportedArguments(["beta"], "a beta of 0")
    x = floats("input_tensor", input_tensor).astype(np.float64)
    with np.errstate(over="ignore"):
        smooth = np.logaddexp(0.0, beta * x) / beta
    return np.where(beta * x > threshold, x, smooth).astype(np.float32)


@reference("ttnn.elu", params=_BASE + (Param("alpha", "float", 1, default=1.0),))
def elu(input_tensor: Any, alpha: float, **_: Any) -> np.ndarray:
    """ttnn.elu as torch.nn.functional.elu: ``x`` above 0, ``alpha * (exp(x) - 1)`` below (golden
    ``_golden_function_elu``), in float64 rounded once."""
    x = floats("input_tensor", input_tensor).astype(np.float64)
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0))).astype(np.float32)


@reference("ttnn.bitwise_not", params=_BASE)
def bitwise_not(input_tensor: Any, **_: Any) -> np.ndarray:
    """ttnn.bitwise_not of an integer tensor as torch.bitwise_not (``~x``, in the tensor's own width)."""
    x = np.asarray(input_tensor)
    if x.dtype.kind not in "iu":
        raise UnsupportedArguments(["input_tensor"], f"an input of dtype {x.dtype.name} (bitwise_not takes integers)")
    return np.invert(x)


@reference("ttnn.alt_complex_rotate90", params=_BASE)
def alt_complex_rotate90(input_tensor: Any, **_: Any) -> np.ndarray:
    """ttnn.alt_complex_rotate90: each (real, imaginary) pair of the last axis times i, ``(-imag, real)`` (golden
    ``_golden_function_alt_complex_rotate90``)."""
    x = np.asarray(input_tensor)
    if x.ndim < 1 or x.shape[-1] % 2:
        raise UnsupportedArguments(["input_tensor"], f"a last axis of {x.shape[-1:]} is no sequence of pairs")
    pairs = x.reshape(*x.shape[:-1], -1, 2)
    return np.stack([-pairs[..., 1], pairs[..., 0]], axis=-1).reshape(x.shape)
