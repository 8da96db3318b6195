"""Elementwise comparisons and logic (lt, gt, le, ge, eq, ne, logical_and, logical_or, logical_xor, logical_not, isnan)
as 1.0 / 0.0, bitwise_and and bitwise_or of integers, and the elementwise binary functions maximum, minimum, atan2 and
remainder in float32, with numpy's (= torch's) broadcasting; the second operand may be a scalar. Integer tensors compare
as integers (token ids beyond 2^24 stay exact). ttnn 0.81.1's golden functions (tt-metal
``ttnn/ttnn/operations/binary.py``, ``unary.py``) are torch's functions of the same names; a comparison's true is stored
as 1 in the output's dtype, which the golden's bool is too."""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from . import Param, UnsupportedArguments, broadcast, floats, reference, shape
from .binary import PARAMS, operands_size


def _size_of_value(values: Mapping[str, Any]) -> int:
    """The result's elements: the tensor and ``value`` broadcast."""
    return broadcast(shape(values["input_tensor_a"]), shape(values["value"]))

_COMPARISONS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "lt": np.less, "gt": np.greater, "le": np.less_equal, "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal,
    "logical_and": lambda a, b: np.logical_and(a != 0, b != 0), "logical_or": lambda a, b: np.logical_or(a != 0, b != 0),
    "logical_xor": lambda a, b: np.logical_xor(a != 0, b != 0), "maximum": np.maximum, "minimum": np.minimum,
    "atan2": np.arctan2, "remainder": np.remainder,
}



def _operand(name: str, value: Any) -> np.ndarray:
    """A tensor operand as int64 (integer or bool) or float32, or a scalar as a float32 0-d array."""
    if not isinstance(value, np.ndarray):
        return np.asarray(value, dtype=np.float32)
    return value.astype(np.int64) if value.dtype.kind in "iub" else floats(name, value)


def _elementwise(op: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    """A reference applying ``op`` to both operands: a truth as 1.0 / 0.0, an integer result as int64, else
    float32."""

    def run(input_tensor_a: Any, input_tensor_b: Any, **_: Any) -> np.ndarray:
        if not isinstance(input_tensor_a, np.ndarray):
            raise UnsupportedArguments(["input_tensor_a"], "the first operand is no tensor")
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            out = np.asarray(op(_operand("input_tensor_a", input_tensor_a), _operand("input_tensor_b", input_tensor_b)))
        return out if out.dtype.kind in "iu" else out.astype(np.float32)

    return run


for _name, _function in _COMPARISONS.items():
    reference(f"ttnn.{_name}", params=PARAMS, size=operands_size)(_elementwise(_function))


_UNARY = (Param("input_tensor", "tensor", 0, required=True), Param("output_tensor", "output"), Param("dtype", "dtype"))


@reference("ttnn.logical_not", params=_UNARY)
def logical_not(input_tensor: Any, **_: Any) -> np.ndarray:
    """ttnn.logical_not: 1 where the input is 0, else 0 (torch.logical_not)."""
    return (floats("input_tensor", input_tensor) == 0).astype(np.float32)


@reference("ttnn.isnan", params=_UNARY)
def isnan(input_tensor: Any, **_: Any) -> np.ndarray:
    """ttnn.isnan: 1 where the input is NaN, else 0 (torch.isnan)."""
    return np.isnan(floats("input_tensor", input_tensor)).astype(np.float32)


_BITWISE = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or}


def _bitwise(op: Callable[[np.ndarray, Any], np.ndarray]) -> Callable[..., np.ndarray]:
    """A reference applying ``op`` to an integer tensor and an integer (or integer tensor) in the tensor's width."""

    def run(input_tensor_a: Any, value: Any, **_: Any) -> np.ndarray:
        x = np.asarray(input_tensor_a)
        other = np.asarray(value)
        if x.dtype.kind not in "iu" or not (other.dtype.kind in "iu" or float(np.max(np.mod(other, 1), initial=0)) == 0):
            raise UnsupportedArguments(["input_tensor_a"], f"operands of dtypes {x.dtype.name}, {other.dtype.name}")
        return op(x, other.astype(np.int64)).astype(x.dtype)

    return run


for _name, _op in _BITWISE.items():
    reference(f"ttnn.{_name}", params=(
        Param("input_tensor_a", "tensor", 0, required=True), Param("value", "number", 1, required=True),
        Param("output_tensor", "output"),
    ), size=_size_of_value)(_bitwise(_op))
