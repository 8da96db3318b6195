"""The elementwise binary operations add, subtract, multiply and divide in float32, with numpy's (= torch's)
broadcasting; either operand may be a scalar. The in-place forms (``add_``, ``sub_``, ``mul_``...) give the same values:
ttnn 0.81.1's golden of each (tt-metal ``ttnn/ttnn/operations/binary.py``, ``inplace_golden_function``) is its
out-of-place golden, written back into the first operand, which is the output a report records. ttnn.bcast is the
legacy add, subtract or multiply whose second operand broadcasts one column, row or element of itself;
ttnn.experimental.repeat_and_interleave_eltwise_mul is the state-space models' product of repeats."""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from . import Param, UnsupportedArguments, broadcast, elements, floats, reference, shape

PARAMS = (
    Param("input_tensor_a", "number", 0, required=True), Param("input_tensor_b", "number", 1, required=True),
    Param("dtype", "dtype"), Param("activations", "empty"), Param("input_tensor_a_activations", "empty"),
    Param("input_tensor_b_activations", "empty"), Param("output_tensor", "output"), Param("use_legacy", "ignored"),
    Param("fast_and_approximate_mode", "bool", default=False),
)


def operands_size(values: Mapping[str, Any]) -> int:
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


reference("ttnn.add", "ttnn.add_", params=PARAMS, size=operands_size)(_binary(np.add))
reference("ttnn.subtract", "ttnn.sub", "ttnn.subtract_", "ttnn.sub_", params=PARAMS,
          size=operands_size)(_binary(np.subtract))
reference("ttnn.multiply", "ttnn.mul", "ttnn.multiply_", "ttnn.mul_", params=PARAMS,
          size=operands_size)(_binary(np.multiply))


@reference("ttnn.divide", "ttnn.div", "ttnn.divide_", "ttnn.div_", params=PARAMS + (Param("rounding_mode", "word", 2),),
           size=operands_size)
def divide(input_tensor_a: Any, input_tensor_b: Any, rounding_mode: str | None = None, **_: Any) -> np.ndarray:
    """ttnn.divide: true division, or rounded toward zero (``trunc``) or down (``floor``)."""
    out = _binary(np.divide)(input_tensor_a, input_tensor_b)
    if rounding_mode is None:
        return out
    if rounding_mode not in ("trunc", "floor"):
        raise UnsupportedArguments(["rounding_mode"], f"unknown rounding mode {rounding_mode!r}")
    return (np.trunc if rounding_mode == "trunc" else np.floor)(out)


_BCAST_OPS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply,
}


@reference("ttnn.bcast", params=(
    Param("input_tensor_a", "tensor", 0, required=True), Param("input_tensor_b", "tensor", 1, required=True),
    Param("math_op", "enum", 2, required=True), Param("dim", "enum", 3, required=True), Param("output_tensor", "output"),
))
def bcast(input_tensor_a: Any, input_tensor_b: Any, math_op: str, dim: str, **_: Any) -> np.ndarray:
    """ttnn.bcast: ``a op b`` with only b's first column (``dim`` W), first row (H) or first element of both (HW)
    broadcast, the result cut to a's shape (golden in tt-metal ``ttnn/ttnn/experimental_loader/golden_functions.py``:
    the device reads that part of b's tile whatever b's size)."""
    a, b = _operand("input_tensor_a", input_tensor_a), _operand("input_tensor_b", input_tensor_b)
    if math_op not in _BCAST_OPS or dim not in ("w", "h", "hw"):
        raise UnsupportedArguments(["math_op" if math_op not in _BCAST_OPS else "dim"], f"{math_op} over {dim}")
    if a.ndim < 2 or b.ndim < 2 or b.ndim > a.ndim:
        raise UnsupportedArguments(["input_tensor_b"], f"operands of shapes {a.shape} and {b.shape}")
    b = b[..., :1] if "w" in dim else b
    b = b[..., :1, :] if "h" in dim else b
    try:
        out = _BCAST_OPS[math_op](a, b)
    except ValueError as exc:
        raise UnsupportedArguments(["input_tensor_b"], str(exc)) from None
    return np.ascontiguousarray(out[tuple(slice(0, n) for n in a.shape)], dtype=np.float32)


@reference("ttnn.experimental.repeat_and_interleave_eltwise_mul", params=(
    Param("input_tensor_a", "tensor", 0, required=True), Param("input_tensor_b", "tensor", 1, required=True),
    Param("dtype", "dtype"), Param("math_fidelity", "ignored"),
), size=lambda values: 32 * elements(shape(values["input_tensor_b"])))
def repeat_and_interleave_eltwise_mul(input_tensor_a: Any, input_tensor_b: Any, **_: Any) -> np.ndarray:
    """``A.repeat(1, 1, 1, W) * B.repeat_interleave(32, dim=-1)`` for A [1, 1, 32, 32] and B [1, 1, 32, W], as ttnn's
    docstring of the operation defines it (it has no golden function)."""
    a, b = _operand("input_tensor_a", input_tensor_a), _operand("input_tensor_b", input_tensor_b)
    if a.shape != (1, 1, 32, 32) or b.ndim != 4 or b.shape[:3] != (1, 1, 32) or b.shape[-1] % 32:
        raise UnsupportedArguments(["input_tensor_a"], f"operands of shapes {a.shape} and {b.shape}")
    return np.tile(a, (1, 1, 1, b.shape[-1])) * np.repeat(b, 32, axis=-1)
