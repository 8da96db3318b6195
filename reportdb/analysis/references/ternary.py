"""ttnn.where: the true value where the predicate is non-zero, else the false value (tensors or scalars, broadcast);
ttnn.lerp and ttnn.addcmul, as ttnn 0.81.1's golden functions (tt-metal ``ttnn/ttnn/operations/ternary.py``) define
them, in float32."""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from . import Param, broadcast, floats, reference, shape


def _value(name: str, value: Any) -> np.ndarray:
    """A branch as float32: a tensor widened, a scalar as a 0-d array."""
    return floats(name, value) if isinstance(value, np.ndarray) else np.asarray(value, dtype=np.float32)


def _size(values: Mapping[str, Any]) -> int:
    """The result's elements: the predicate and both branches broadcast."""
    return broadcast(*(shape(values[name]) for name in ("condition", "true_value", "false_value")))


@reference("ttnn.where", params=(
    Param("condition", "tensor", 0, required=True), Param("true_value", "number", 1, required=True),
    Param("false_value", "number", 2, required=True), Param("output_tensor", "output"),
), size=_size)
def where(condition: Any, true_value: Any, false_value: Any, **_: Any) -> np.ndarray:
    """ttnn.where: any non-zero predicate (of any dtype) selects the true branch."""
    predicate = np.asarray(condition)
    if predicate.dtype.kind not in "biu":
        predicate = predicate.astype(np.float32)
    return np.where(predicate != 0, _value("true_value", true_value), _value("false_value", false_value)).astype(np.float32)


def _sizes(*names: str) -> Callable[[Mapping[str, Any]], int]:
    """The result's elements: the arguments ``names`` broadcast."""
    return lambda values: broadcast(*(shape(values.get(name)) for name in names))


@reference("ttnn.lerp", params=(
    Param("input_tensor", "tensor", 0, required=True), Param("end", "tensor", 1, required=True),
    Param("weight", "number", 2, required=True), Param("output_tensor", "output"),
), size=_sizes("input_tensor", "end", "weight"))
def lerp(input_tensor: Any, end: Any, weight: Any, **_: Any) -> np.ndarray:
    """ttnn.lerp as torch.lerp: ``input + weight * (end - input)`` (golden ``_golden_function_lerp``)."""
    start, stop, w = _value("input_tensor", input_tensor), _value("end", end), _value("weight", weight)
    return (start + w * (stop - start)).astype(np.float32)


@reference("ttnn.addcmul", params=(
    Param("input_tensor_a", "tensor", 0, required=True), Param("input_tensor_b", "tensor", 1, required=True),
    Param("input_tensor_c", "tensor", 2, required=True), Param("value", "float", 3, default=1.0),
    Param("output_tensor", "output"),
), size=_sizes("input_tensor_a", "input_tensor_b", "input_tensor_c"))
def addcmul(input_tensor_a: Any, input_tensor_b: Any, input_tensor_c: Any, value: float, **_: Any) -> np.ndarray:
    """ttnn.addcmul as torch.addcmul: ``a + value * b * c`` (golden ``_golden_function_addcmul``)."""
    a, b, c = (_value(n, t) for n, t in (("input_tensor_a", input_tensor_a), ("input_tensor_b", input_tensor_b),
                                         ("input_tensor_c", input_tensor_c)))
    return (a + np.float32(value) * b * c).astype(np.float32)
