"""The elementwise binary operations add, subtract, multiply and divide in float32, with numpy's (= torch's)
broadcasting; either operand may be a scalar. The in-place forms (``add_``, ``sub_``, ``mul_``...) give the same values:
ttnn 0.81.1's golden of each (tt-metal ``ttnn/ttnn/operations/binary.py``, ``inplace_golden_function``) is its
out-of-place golden, written back into the first operand, which is the output a report records."""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from . import Param, UnsupportedArguments, broadcast, floats, reference, shape

_PARAMS = (
    Param("input_tensor_a", "number", 0, required=True), Param("input_tensor_b", "number", 1, required=True),
    Param("dtype", "dtype"), Param("activations", "empty"), Param("input_tensor_a_activations", "empty"),
    Param("input_tensor_b_activations", "empty"), Param("output_tensor", "output"), Param("use_legacy", "ignored"),
    Param("fast_and_approximate_mode", "bool", default=False),
)  # fmt: skip


def _size(values: Mapping[str, Any]) -> int:
    """The result's elements: the operands broadcast (``[N, 1] + [1, N]`` builds N^2)."""
    return broadcast(shape(values["input_tensor_a"]), shape(values["input_tensor_b"]))


def _operand(name: str, value: Any) -> np.ndarray:
    """A tensor operand as float32, or a scalar as a float32 0-d array."""
    return floats(name, value) if isinstance(value, np.ndarray) else np.asarray(value, dtype=np.float32)


def _binary(op: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    """A reference applying ``op`` to both operands in float32."""

    def run(input_tensor_a: Any, input_tensor_b: Any, **_: Any) -> np.ndarray:
        a, b = _operand("input_tensor_a", input_tensor_a), _operand("input_tensor_b", input_tensor_b)
        if not isinstance(input_tensor_a, np.ndarray) and not isinstance(input_tensor_b, np.ndarray):
            raise UnsupportedArguments(["input_tensor_a"], "neither operand is a tensor")
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return np.asarray(op(a, b), dtype=np.float32)

    return run


reference("ttnn.add", "ttnn.add_", params=_PARAMS, size=_size)(_binary(np.add))
reference("ttnn.subtract", "ttnn.sub", "ttnn.subtract_", "ttnn.sub_", params=_PARAMS, size=_size)(_binary(np.subtract))
reference("ttnn.multiply", "ttnn.mul", "ttnn.multiply_", "ttnn.mul_", params=_PARAMS, size=_size)(_binary(np.multiply))


@reference("ttnn.divide", "ttnn.div", "ttnn.divide_", "ttnn.div_", params=_PARAMS + (Param("rounding_mode", "word", 2),), size=_size)
def divide(input_tensor_a: Any, input_tensor_b: Any, rounding_mode: str | None = None, **_: Any) -> np.ndarray:
    """ttnn.divide: true division, or rounded toward zero (``trunc``) or down (``floor``)."""
    out = _binary(np.divide)(input_tensor_a, input_tensor_b)
    if rounding_mode is None:
        return out
    if rounding_mode not in ("trunc", "floor"):
        raise UnsupportedArguments(["rounding_mode"], f"unknown rounding mode {rounding_mode!r}")
    return (np.trunc if rounding_mode == "trunc" else np.floor)(out)
