"""ttnn.where: the true value where the predicate is non-zero, else the false value (tensors or scalars, broadcast)."""

from __future__ import annotations

from typing import Any, Mapping

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
), size=_size)  # fmt: skip
def where(condition: Any, true_value: Any, false_value: Any, **_: Any) -> np.ndarray:
    """ttnn.where: any non-zero predicate (of any dtype) selects the true branch."""
    predicate = np.asarray(condition)
    if predicate.dtype.kind not in "biu":
        predicate = predicate.astype(np.float32)
    return np.where(predicate != 0, _value("true_value", true_value), _value("false_value", false_value)).astype(np.float32)
