"""Hand-checked cases of the placement, shape, creation, comparison, indexing and sampling references (and the unary,
binary and reduction ones added beside them), the same operations against torch on the CPU where torch has them, and
the arguments they refuse. tests/golden_references.py runs every one of them against ttnn 0.81.1's golden functions.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

import ml_dtypes
import numpy as np
import pytest

import reportdb
from reportdb.analysis import references as refs
from reportdb.analysis.references import Argument as A
from reportdb.analysis.references import UnsupportedArguments
from reportdb.analysis.references.args import PARSERS

F = np.float32
X = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=F)
T = "ttnn.Tensor(shape=Shape([2, 3]), dtype=DataType.BFLOAT16, layout=Layout.TILE, tensor_id={})"


def run(op: str, *inputs: np.ndarray, args: list[A] | None = None) -> tuple[np.ndarray, ...]:
    """Every reference output of ``op`` for inputs numbered 1, 2, ... and the recorded arguments."""
    return refs.compute_outputs(op, list(enumerate(inputs, start=1)), args or [])


HAND = [  # (op, inputs, arguments, expected outputs)
    ("ttnn.sharded_to_interleaved", [X], [A("1", "MemoryConfig(memory_layout=INTERLEAVED)")], [X]),
    ("ttnn.interleaved_to_sharded", [X], [A("1", "CoreGrid(x=2, y=1)"), A("2", "[1, 3]"),
                                          A("3", "TensorMemoryLayout.HEIGHT_SHARDED"), A("4", "ShardOrientation.ROW_MAJOR")],
     [X]),
    ("ttnn.interleaved_to_sharded", [X], [A("grid", "CoreGrid(x=2, y=1)"), A("shard_shape", "[1, 3]"),
                                          A("shard_scheme", "TensorMemoryLayout.HEIGHT_SHARDED"),
                                          A("shard_orientation", "ShardOrientation.ROW_MAJOR")], [X]),
    ("ttnn.reshard", [X], [A("1", "MemoryConfig(...)")], [X]),
    ("ttnn.reallocate", [X], [], [X]),
    ("ttnn.move", [X], [A("memory_config", "MemoryConfig(...)")], [X]),
    ("ttnn.clone", [X], [A("dtype", "DataType.UINT32")], [[[1, 2, 3], [4, 5, 6]]]),
    ("ttnn.copy", [X, np.zeros((2, 3), np.int32)], [], [[[1, 2, 3], [4, 5, 6]]]),
    ("ttnn.tilize_with_val_padding", [X], [A("1", "[32, 32]"), A("2", "0.0")], [X]),
    ("ttnn.interleaved_to_sharded_partial", [np.arange(8, dtype=F).reshape(4, 2)],
     [A("1", "grid"), A("2", "[1, 2]"), A("3", "2"), A("4", "1")], [[[[[4, 5], [6, 7]]]]]),
    ("ttnn.sharded_to_interleaved_partial", [np.full((1, 2), 9, F), np.zeros((4, 2), F)],
     [A("2", "4"), A("3", "2")], [[[0, 0], [0, 0], [9, 9], [0, 0]]]),
    ("ttnn.pad", [X], [A("1", "[(1, 0), (0, 2)]"), A("2", "7.0")],
     [[[7, 7, 7, 7, 7], [1, 2, 3, 7, 7], [4, 5, 6, 7, 7]]]),
    ("ttnn.pad", [X], [A("1", "[(0, 1)]"), A("value", "-1")], [[[1, 2, 3, -1], [4, 5, 6, -1]]]),  # last axis only
    ("ttnn.pad", [X], [A("1", "[3, 4]"), A("2", "[1, 1]"), A("3", "0")],
     [[[0, 0, 0, 0], [0, 1, 2, 3], [0, 4, 5, 6]]]),
    ("ttnn.pad", [X], [A("1", "1, 0, 0, 0"), A("2", "5")], [[[5, 5, 5], [1, 2, 3], [4, 5, 6]]]),  # ttnn 0.6x's text
    ("ttnn.pad", [X], [A("output_padded_shape", "[2, 4]"), A("input_tensor_start", "[0, 1]"), A("value", "2")],
     [[[2, 1, 2, 3], [2, 4, 5, 6]]]),
    ("ttnn.untilize_with_unpadding", [X], [A("1", "[0, 1]")], [[[1, 2]]]),
    ("ttnn.squeeze", [X.reshape(1, 2, 1, 3)], [], [X]),
    ("ttnn.squeeze", [X.reshape(1, 2, 1, 3)], [A("1", "2")], [X.reshape(1, 2, 3)]),
    ("ttnn.squeeze", [X.reshape(1, 2, 1, 3)], [A("dim", "[0, 1]")], [X.reshape(2, 1, 3)]),  # axis 1 is 2 long: kept
    ("ttnn.unsqueeze", [X], [A("1", "-1")], [X.reshape(2, 3, 1)]),
    ("ttnn.unsqueeze_to_4D", [X], [], [X.reshape(1, 1, 2, 3)]),
    ("ttnn.expand", [np.array([[1.0], [2.0]], F)], [A("1", "[2, -1, 3]")], [[[[1, 1, 1], [2, 2, 2]]] * 2]),
    ("ttnn.repeat", [np.array([[1.0, 2.0]], F)], [A("1", "Shape([2, 2])")], [[[1, 2, 1, 2], [1, 2, 1, 2]]]),
    ("ttnn.repeat", [np.array([[1.0, 2.0]], F)], [A("shape", "[2]")], [[[1, 2, 1, 2]]]),  # leading 1s assumed
    ("ttnn.repeat_interleave", [X], [A("1", "2"), A("2", "1")], [[[1, 1, 2, 2, 3, 3], [4, 4, 5, 5, 6, 6]]]),
    ("ttnn.stack", [X[0], X[1]], [A("0", f"[{T.format(1)}, {T.format(2)}]"), A("1", "1")], [[[1, 4], [2, 5], [3, 6]]]),
    ("ttnn.narrow", [X], [A("1", "1"), A("2", "-2"), A("3", "2")], [[[2, 3], [5, 6]]]),
    ("ttnn.reshape_on_device", [X], [A("1", "1"), A("2", "3"), A("3", "1"), A("4", "2")],
     [[[[[1, 2]], [[3, 4]], [[5, 6]]]]]),
    ("ttnn.tril", [np.ones((3, 3), F)], [A("1", "-1")], [[[0, 0, 0], [1, 0, 0], [1, 1, 0]]]),
    ("ttnn.zeros", [], [A("0", "Shape([2, 2])")], [[[0, 0], [0, 0]]]),
    ("ttnn.ones", [], [A("0", "[3]"), A("1", "DataType.INT32")], [[1, 1, 1]]),
    ("ttnn.full", [], [A("0", "[2]"), A("1", "0.1")], [[0.10009765625] * 2]),  # 0.1 in bfloat16: 0x3DCD
    ("ttnn.full", [], [A("0", "[1]"), A("1", "0.1"), A("2", "DataType.FLOAT32")], [[np.float32(0.1)]]),
    ("ttnn.zeros_like", [X], [], [np.zeros((2, 3))]),
    ("ttnn.ones_like", [X], [], [np.ones((2, 3))]),
    ("ttnn.full_like", [X], [A("1", "2.5")], [np.full((2, 3), 2.5)]),
    ("ttnn.arange", [], [A("0", "4")], [[0, 1, 2, 3]]),
    ("ttnn.arange", [], [A("0", "255"), A("1", "262"), A("2", "2")], [[255, 256, 260, 260]]),  # bfloat16: 8 bits
    ("ttnn.arange", [], [A("start", "1"), A("end", "2"), A("step", "0.25"), A("dtype", "DataType.FLOAT32")],
     [[1, 1.25, 1.5, 1.75]]),
    ("ttnn.lt", [X, np.array([[2.0]], F)], [], [[[1, 0, 0], [0, 0, 0]]]),
    ("ttnn.gt", [X], [A("1", "3.0")], [[[0, 0, 0], [1, 1, 1]]]),
    ("ttnn.le", [X], [A("1", "3")], [[[1, 1, 1], [0, 0, 0]]]),
    ("ttnn.ge", [X], [A("1", "5")], [[[0, 0, 0], [0, 1, 1]]]),
    ("ttnn.eq", [X, np.array([[1.0, 0.0, 3.0]], F)], [], [[[1, 0, 1], [0, 0, 0]]]),
    ("ttnn.ne", [np.array([16777217, 5], np.int32)], [A("1", "16777216")], [[1, 1]]),  # exact above 2^24
    ("ttnn.logical_and", [np.array([0.0, 1.0, 2.0], F), np.array([1.0, 0.0, -3.0], F)], [], [[0, 0, 1]]),
    ("ttnn.logical_or", [np.array([0.0, 0.0, 2.0], F), np.array([0.0, 1.0, 0.0], F)], [], [[0, 1, 1]]),
    ("ttnn.logical_xor", [np.array([0.0, 1.0, 2.0], F), np.array([1.0, 1.0, 0.0], F)], [], [[1, 0, 1]]),
    ("ttnn.logical_not", [np.array([0.0, 1.0, -2.0], F)], [], [[1, 0, 0]]),
    ("ttnn.isnan", [np.array([np.nan, np.inf, 0.0], F)], [], [[1, 0, 0]]),
    ("ttnn.maximum", [X], [A("1", "2.5")], [[[2.5, 2.5, 3], [4, 5, 6]]]),
    ("ttnn.minimum", [X, np.array([[0.0], [9.0]], F)], [], [[[0, 0, 0], [4, 5, 6]]]),
    ("ttnn.atan2", [np.array([1.0, 1.0, -1.0], F), np.array([1.0, -1.0, 0.0], F)], [],
     [[math.pi / 4, 3 * math.pi / 4, -math.pi / 2]]),
    ("ttnn.remainder", [np.array([5.0, -5.0, 5.0], F)], [A("1", "3")], [[2, 1, 2]]),  # the divisor's sign
    ("ttnn.sin", [np.array([0.0, math.pi / 2], F)], [], [[0, 1]]),
    ("ttnn.cos", [np.array([0.0, math.pi], F)], [], [[1, -1]]),
    ("ttnn.floor", [np.array([-1.5, 1.5], F)], [], [[-2, 1]]),
    ("ttnn.relu6", [np.array([-1.0, 3.0, 9.0], F)], [], [[0, 3, 6]]),
    ("ttnn.swish", [np.array([0.0, 2.0], F)], [], [[0, 2 / (1 + math.exp(-2))]]),
    ("ttnn.sigmoid_accurate", [np.array([0.0], F)], [], [[0.5]]),
    ("ttnn.softplus", [np.array([0.0, 30.0], F)], [], [[math.log(2), 30]]),  # above the threshold: x itself
    ("ttnn.softplus", [np.array([1.0], F)], [A("beta", "2.0"), A("threshold", "1.0")], [[1.0]]),
    ("ttnn.add_", [X, X], [], [2 * X]),
    ("ttnn.sub_", [X], [A("1", "1.0")], [X - 1]),
    ("ttnn.mul_", [X], [A("1", "3")], [3 * X]),
    ("ttnn.subtract_", [X, X], [], [np.zeros((2, 3))]),
    ("ttnn.multiply_", [X, X], [], [X * X]),
    ("ttnn.div_", [X], [A("1", "2")], [X / 2]),
    ("ttnn.divide_", [X], [A("1", "4"), A("rounding_mode", "floor")], [[[0, 0, 0], [1, 1, 1]]]),
    ("ttnn.gather", [X, np.array([[2, 0], [1, 1]], np.uint32)], [A("1", "1")], [[[3, 1], [5, 5]]]),
    ("ttnn.scatter", [np.zeros((2, 3), F), np.array([[2, 0]], np.int32), np.array([[7.0, 8.0]], F)],
     [A("1", "1")], [[[8, 0, 7], [0, 0, 0]]]),
    ("ttnn.cumsum", [X], [A("1", "1")], [[[1, 3, 6], [4, 9, 15]]]),
    ("ttnn.cumsum", [X], [A("1", "0"), A("reverse_order", "True")], [[[5, 7, 9], [4, 5, 6]]]),
    ("ttnn.cumsum", [np.array([2**31 - 1, 1], np.int32)], [A("1", "0")], [[2**31 - 1, -(2**31)]]),  # wraps
    ("ttnn.var", [X], [A("1", "1")], [[1, 1]]),  # Bessel: ((1-2)^2 + 0 + (3-2)^2) / 2
    ("ttnn.var", [X], [A("1", "1"), A("correction", "0"), A("scalar", "2")], [[8 / 3, 8 / 3]]),
    ("ttnn.std", [X], [A("dim", "0"), A("keepdim", "True")], [[[math.sqrt(4.5)] * 3]]),
    ("ttnn.prod", [X], [], [720]),
    ("ttnn.prod", [X], [A("1", "1"), A("2", "True")], [[[6], [120]]]),
    ("ttnn.plus_one", [np.array([0, -1, 2**31 - 1], np.int32)], [], [[1, 0, -(2**31)]]),
    ("ttnn.plus_one", [np.array([0, -1, 2**31 - 1], np.int32)], [A("skip_negative_entries", "True")],
     [[1, -1, 2**31 - 1]]),
    ("ttnn.topk", [np.array([[3.0, 1.0, 4.0, 1.0, 5.0]], F)], [A("1", "3")], [[[5, 4, 3]], [[4, 2, 0]]]),
    ("ttnn.topk", [np.array([[3.0, 1.0, 4.0, 1.0, 5.0]], F)], [A("1", "2"), A("largest", "False")],
     [[[1, 1]], [[1, 3]]]),  # a tie: the lower index first
    ("ttnn.sort", [np.array([[3.0, 1.0, 4.0, 1.0]], F)], [], [[[1, 1, 3, 4]], [[1, 3, 0, 2]]]),
    ("ttnn.sort", [np.array([[3.0, np.nan, 4.0]], F)], [A("descending", "True")], [[[np.nan, 4, 3]], [[1, 2, 0]]]),
    ("ttnn.bcast", [X, np.array([[10.0, 20.0, 30.0], [7.0, 7.0, 7.0]], F)], [A("2", "BcastOpMath.ADD"),
                                                                             A("3", "BcastOpDim.H")],
     [[[11, 22, 33], [14, 25, 36]]]),  # only b's first row
    ("ttnn.bcast", [X, np.array([[2.0, 5.0], [3.0, 5.0]], F)], [A("2", "ttnn.BcastOpMath.MUL"), A("3", "BcastOpDim::W")],
     [[[2, 4, 6], [12, 15, 18]]]),  # only b's first column
    ("ttnn.bcast", [X, np.array([[1.0, 5.0], [5.0, 5.0]], F)], [A("2", "BcastOpMath.SUB"), A("3", "BcastOpDim.HW")],
     [X - 1]),
    ("ttnn.elu", [np.array([-1.0, 2.0], F)], [A("alpha", "0.5")], [[0.5 * (math.exp(-1) - 1), 2]]),
    ("ttnn.erf", [np.array([0.0, 1.0], F)], [], [[0, math.erf(1)]]),
    ("ttnn.eqz", [np.array([0.0, -0.0, 1.0], F)], [], [[1, 1, 0]]),
    ("ttnn.alt_complex_rotate90", [np.array([1.0, 2.0, 3.0, 4.0], F)], [], [[-2, 1, -4, 3]]),
    ("ttnn.bitwise_and", [np.array([0b1100, 0b1010], np.int32)], [A("1", "6")], [[0b0100, 0b0010]]),
    ("ttnn.bitwise_or", [np.array([0b1100, 0b1010], np.int32)], [A("1", "1")], [[0b1101, 0b1011]]),
    ("ttnn.bitwise_not", [np.array([0, 5], np.int32)], [], [[-1, -6]]),
    ("ttnn.lerp", [np.array([0.0, 10.0], F), np.array([4.0, 20.0], F)], [A("2", "0.25")], [[1, 12.5]]),
    ("ttnn.addcmul", [np.array([1.0], F), np.array([2.0], F), np.array([3.0], F)], [A("value", "0.5")], [[4]]),
    ("ttnn.experimental.broadcast_to", [np.array([[1.0, 2.0]], F)], [A("1", "[2, 2]")], [[[1, 2], [1, 2]]]),
    ("ttnn.fill", [X], [A("1", "-3")], [np.full((2, 3), -3.0)]),
    ("ttnn.moreh_full", [], [A("0", "[2]"), A("1", "0.1"), A("2", "MeshDevice(1x1)")], [[0.10009765625] * 2]),
    ("ttnn.fill_rm", [np.zeros((1, 1, 2, 3), F)], [*(A(str(i), v) for i, v in enumerate("1 1 2 3 1 2".split())),
                                                   A("6", T.format(1)), A("7", "5"), A("8", "-1")],
     [[[[[5, 5, -1], [-1, -1, -1]]]]]),
    ("ttnn.fill_ones_rm", [np.zeros((1, 1, 2, 2), F)], [*(A(str(i), v) for i, v in enumerate("1 1 2 2 2 1".split())),
                                                        A("6", T.format(1))], [[[[[1, 0], [1, 0]]]]]),
    ("ttnn.moreh_cumsum", [X], [A("1", "0")], [[[1, 2, 3], [5, 7, 9]]]),
    ("ttnn.experimental.view", [X], [A("1", "[3, 1, 2]")], [[[[1, 2]], [[3, 4]], [[5, 6]]]]),
    ("ttnn.experimental.repeat_and_interleave_eltwise_mul", [np.full((1, 1, 32, 32), 2, F), np.full((1, 1, 32, 32), 3, F)],
     [], [np.full((1, 1, 32, 32 * 32), 6)]),
    ("ttnn.experimental.typecast", [np.array([1.0 + 2.0**-8 + 2.0**-9, 7.0], F)], [A("1", "DataType.BFLOAT16")],
     [[1.0 + 2.0**-7, 7.0]]),  # 3/4 of a bfloat16 step above 1 rounds up
    ("ttnn.experimental.typecast", [np.array([3.0, 250.0], F)], [A("1", "DataType.UINT32")], [[3, 250]]),
    ("ttnn.experimental.slice_write", [np.array([[7.0, 8.0]], F), np.zeros((3, 4), F)],
     [A("2", "[1, 0]"), A("3", "[2, 4]"), A("4", "[1, 2]")], [[[0, 0, 0, 0], [7, 0, 8, 0], [0, 0, 0, 0]]]),
]


@pytest.mark.parametrize("op, inputs, args, expected", HAND, ids=[f"{c[0]}-{i}" for i, c in enumerate(HAND)])
def test_hand_checked(op: str, inputs: list[np.ndarray], args: list[A], expected: list[object]) -> None:
    outputs = run(op, *inputs, args=args)
    assert len(outputs) == len(expected)
    for out, want in zip(outputs, expected):
        wanted = np.asarray(want, dtype=np.float64)
        assert out.shape == wanted.shape
        np.testing.assert_allclose(out.astype(np.float64), wanted, rtol=2e-7, atol=1e-7, equal_nan=True)


def test_placements_keep_the_values_and_the_dtype() -> None:
    x = np.array([[1.5, -2.0]], dtype=ml_dtypes.bfloat16)
    for op in ("ttnn.sharded_to_interleaved", "ttnn.reshard", "ttnn.reallocate", "ttnn.move", "ttnn.clone"):
        (out,) = run(op, x)
        assert out.dtype == x.dtype and out.tolist() == x.tolist()


def test_an_output_dtype_rounds_the_values_as_ttnn_stores_them() -> None:
    x = np.array([[1.0 + 2.0**-9, 3.0]], F)  # 1 + 2^-9 is no bfloat16: it rounds to 1 (ties to even)
    (out,) = run("ttnn.sharded_to_interleaved", x, args=[A("1", "MemoryConfig(...)"), A("2", "DataType.BFLOAT16")])
    assert out.dtype == np.dtype(ml_dtypes.bfloat16) and out.astype(F).tolist() == [[1.0, 3.0]]
    (out,) = run("ttnn.interleaved_to_sharded", x, args=[A("1", "MemoryConfig(...)"), A("output_dtype", "DataType.BFLOAT16")])
    assert out.astype(F).tolist() == [[1.0, 3.0]]
    (out,) = run("ttnn.clone", np.array([0.3], F), args=[A("dtype", "DataType.BFLOAT4_B")])
    assert out.tolist() == [0.3125]  # 0.3 = 1.2 * 2^-2 with 3 mantissa bits: 1.25 * 2^-2


def test_copy_into_a_bfloat16_destination_needs_its_recorded_dtype() -> None:
    a, b = np.array([0.3], F), np.zeros(1, ml_dtypes.bfloat16)
    with pytest.raises(UnsupportedArguments, match="output"):
        run("ttnn.copy", a, b)
    out = refs.compute_outputs("ttnn.copy", [(1, a), (2, b)], [], input_dtypes={2: "DataType.BFLOAT16"})[0]
    assert out.astype(F).tolist() == [np.float32(0.30078125)]


def test_like_creation_takes_the_templates_recorded_dtype() -> None:
    template = np.zeros((1, 16), ml_dtypes.bfloat16)
    template_args = [A("1", "0.3")]
    as_bf4 = refs.compute_outputs("ttnn.full_like", [(1, template)], template_args, input_dtypes={1: "BFLOAT4_B"})[0]
    assert set(as_bf4.ravel().tolist()) == {0.3125}  # 3 mantissa bits: 5/16
    (stored,) = run("ttnn.full_like", template, args=template_args)
    assert stored.dtype == template.dtype and set(stored.astype(F).ravel().tolist()) == {np.float32(0.30078125)}


def test_topk_gives_the_labels_of_indices_tensor_and_puts_nan_first() -> None:
    x = np.array([[1.0, np.nan, 7.0, np.inf]], F)
    values, indices = run("ttnn.topk", x, np.array([[10, 11, 12, 13]], np.int32),
                          args=[A("0", T.format(1)), A("1", "2"), A("indices_tensor", T.format(2))])
    assert np.isnan(values[0, 0]) and values[0, 1] == np.inf and indices.tolist() == [[11, 13]]


def test_a_partial_cache_update_writes_only_its_slice() -> None:
    cache = np.arange(12, dtype=F).reshape(1, 6, 2)
    (out,) = run("ttnn.sharded_to_interleaved_partial", np.full((2, 2), -1, F), cache, args=[A("2", "3"), A("3", "0")])
    assert out.shape == cache.shape and out.ravel().tolist() == [-1, -1, -1, -1] + list(range(4, 12))


REFUSED = [  # (op, inputs, arguments, names in the error)
    ("ttnn.pad", [X], [A("1", "[(0, -1)]"), A("2", "0")], ("padding",)),
    ("ttnn.pad", [X], [A("1", "[(0, 1)]")], ("value",)),
    ("ttnn.pad", [X], [A("1", "[(0, 0), (0, 0), (0, 1)]"), A("2", "0")], ("padding",)),  # more axes than the input
    ("ttnn.squeeze", [X], [A("1", "5")], ("dim",)),
    ("ttnn.expand", [X], [A("1", "[4, 3]")], ("output_shape",)),
    ("ttnn.repeat", [X], [A("1", "[-1, 1]")], ("repetition_vector",)),
    ("ttnn.narrow", [X], [A("1", "1"), A("2", "2"), A("3", "2")], ("start",)),
    ("ttnn.untilize_with_unpadding", [X], [A("1", "[0, 3]")], ("output_tensor_end",)),
    ("ttnn.reshape_on_device", [X], [A("1", "1"), A("2", "1"), A("3", "1"), A("4", "5")], ("W",)),
    ("ttnn.gather", [X, np.array([[3]], np.int32)], [A("1", "1")], ("index",)),
    ("ttnn.gather", [X, np.array([[0.5]], F)], [A("1", "1")], ("index",)),
    ("ttnn.scatter", [X, np.array([[1, 1]], np.int32), np.ones((1, 2), F)], [A("1", "1")], ("index",)),  # one target
    ("ttnn.topk", [X], [A("1", "2"), A("sorted", "False")], ("sorted",)),
    ("ttnn.topk", [X], [A("1", "4")], ("k",)),
    ("ttnn.plus_one", [X], [], ("input_tensor",)),
    ("ttnn.clone", [X + 0.5], [A("dtype", "DataType.INT32")], ("dtype",)),  # a fraction to an integer
    ("ttnn.arange", [], [A("0", "0"), A("1", "4"), A("2", "0")], ("step",)),
    ("ttnn.interleaved_to_sharded_partial", [X], [A("3", "2"), A("4", "2")], ("slice_index",)),
    ("ttnn.sharded_to_interleaved", [X], [A("2", "DataType.BFLOAT16"), A("output_dtype", "DataType.FLOAT32")],
     ("output_dtype",)),
    ("ttnn.pad", [X], [A("value", "0")], ("padding",)),
]


@pytest.mark.parametrize("op, inputs, args, names", REFUSED, ids=[f"{c[0]}-{i}" for i, c in enumerate(REFUSED)])
def test_arguments_it_cannot_follow_are_refused(op: str, inputs: list[np.ndarray], args: list[A],
                                                 names: tuple[str, ...]) -> None:
    with pytest.raises(UnsupportedArguments) as caught:
        run(op, *inputs, args=args)
    assert caught.value.names == names


GROWING = [  # (op, inputs, arguments): each would build 10^10 elements from 6
    ("ttnn.pad", [X], [A("1", "[(0, 100000), (0, 100000)]"), A("2", "0")]),
    ("ttnn.repeat", [X], [A("1", "[100000, 100000]")]),
    ("ttnn.repeat_interleave", [X], [A("1", "10000000000"), A("2", "0")]),
    ("ttnn.expand", [X[:1, :1]], [A("1", "[100000, 100000]")]),
    ("ttnn.zeros", [], [A("0", "[100000, 100000]")]),
    ("ttnn.full", [], [A("0", "[100000, 100000]"), A("1", "1.0")]),
    ("ttnn.arange", [], [A("0", "10000000000")]),
]


@pytest.mark.parametrize("op, inputs, args", GROWING, ids=[c[0] for c in GROWING])
def test_growing_references_are_refused_before_they_allocate(op: str, inputs: list[np.ndarray], args: list[A]) -> None:
    with pytest.raises(refs.Oversized):
        refs.compute_outputs(op, list(enumerate(inputs, start=1)), args, max_elements=refs.justified_elements([6]))


def test_the_new_parsers_read_both_text_forms() -> None:
    pairs = PARSERS["pairs_or_ints"]
    assert pairs("[(0, 0), (1, 2)]") == ((0, 0), (1, 2)) == pairs("((0, 0), [1, 2])")
    assert pairs("[1, 1, 32, 64]") == (1, 1, 32, 64) == pairs("1, 1, 32, 64")
    with pytest.raises(ValueError):
        pairs("[(0, 0), x]")
    placement = PARSERS["dtype_or_placement"]
    assert placement("DataType.BFLOAT8_B") == "bfloat8_b" and placement("ttnn.uint32") == "uint32"
    assert placement("TensorMemoryLayout.HEIGHT_SHARDED") is None and placement("[32, 64]") is None
    assert PARSERS["bool_or_int"]("True") == 1 and PARSERS["bool_or_int"]("2") == 2


AGAINST_TORCH = [  # (op, arguments, torch function of the inputs)
    ("ttnn.pad", [A("1", "[(1, 2), (0, 3)]"), A("2", "0.5")],
     lambda t, x: t.nn.functional.pad(x, (0, 3, 1, 2), value=0.5)),
    ("ttnn.squeeze", [A("1", "0")], lambda t, x: t.squeeze(x, 0)),
    ("ttnn.unsqueeze", [A("1", "1")], lambda t, x: t.unsqueeze(x, 1)),
    ("ttnn.repeat", [A("1", "[2, 1, 3]")], lambda t, x: x.repeat(1, 2, 1, 3)),  # leading 1s, as the golden pads
    ("ttnn.repeat_interleave", [A("1", "3"), A("2", "-1")], lambda t, x: t.repeat_interleave(x, 3, dim=-1)),
    ("ttnn.expand", [A("1", "[2, -1, 4, 5, -1]")], lambda t, x: x.expand(2, 3, 4, 5, 6)),
    ("ttnn.narrow", [A("1", "2"), A("2", "1"), A("3", "3")], lambda t, x: t.narrow(x, 2, 1, 3)),
    ("ttnn.tril", [A("1", "2")], lambda t, x: t.tril(x, 2)),
    ("ttnn.sin", [], lambda t, x: t.sin(x)),
    ("ttnn.cos", [], lambda t, x: t.cos(x)),
    ("ttnn.floor", [], lambda t, x: t.floor(x)),
    ("ttnn.relu6", [], lambda t, x: t.nn.functional.relu6(x * 1)),
    ("ttnn.swish", [], lambda t, x: t.nn.functional.silu(x)),
    ("ttnn.softplus", [A("beta", "0.5"), A("threshold", "1.0")],
     lambda t, x: t.nn.functional.softplus(x, beta=0.5, threshold=1.0)),
    ("ttnn.isnan", [], lambda t, x: t.isnan(x)),
    ("ttnn.logical_not", [], lambda t, x: t.logical_not(x)),
    ("ttnn.gt", [A("1", "0.25")], lambda t, x: t.gt(x, 0.25)),
    ("ttnn.maximum", [A("1", "-0.5")], lambda t, x: t.clamp(x, min=-0.5)),
    ("ttnn.remainder", [A("1", "0.7")], lambda t, x: t.remainder(x, 0.7)),
    ("ttnn.cumsum", [A("1", "-1")], lambda t, x: t.cumsum(x.double(), -1)),
    ("ttnn.var", [A("1", "[1, 3]"), A("2", "True")], lambda t, x: t.var(x.double(), dim=(1, 3), keepdim=True)),
    ("ttnn.std", [A("1", "2")], lambda t, x: t.std(x.double(), dim=2)),
    ("ttnn.prod", [A("1", "1")], lambda t, x: t.prod(x.double(), 1)),
    ("ttnn.topk", [A("1", "4"), A("2", "2")], lambda t, x: t.topk(x, 4, dim=2)),
    ("ttnn.topk", [A("1", "3"), A("3", "False")], lambda t, x: t.topk(x, 3, largest=False)),
]


@pytest.mark.parametrize("op, args, function", AGAINST_TORCH, ids=[f"{c[0]}-{i}" for i, c in enumerate(AGAINST_TORCH)])
def test_against_torch(op: str, args: list[A], function: Callable[[Any, Any], Any]) -> None:
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(7).standard_normal((3, 4, 5, 6)).astype(F)
    x.flat[::17] = np.nan if op == "ttnn.isnan" else x.flat[::17]
    ours = run(op, x, args=args)
    theirs = function(torch, torch.from_numpy(x.copy()))
    theirs = tuple(theirs) if isinstance(theirs, tuple) else (theirs,)
    assert len(ours) == len(theirs)
    for mine, golden in zip(ours, theirs):
        expected = golden.double().numpy()
        assert mine.shape == expected.shape
        np.testing.assert_allclose(mine.astype(np.float64), expected, rtol=3e-6, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("op", ["ttnn.gather", "ttnn.scatter"])
def test_indexing_against_torch(op: str) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 6, 5)).astype(F)
    index = np.argsort(rng.random((3, 6, 4)), axis=1)[:, :4, :].astype(np.int64)  # distinct along axis 1
    src = rng.standard_normal((3, 5, 4)).astype(F)
    if op == "ttnn.gather":
        (ours,) = run(op, x, index, args=[A("1", "1")])
        theirs = torch.gather(torch.from_numpy(x), 1, torch.from_numpy(index))
    else:
        (ours,) = run(op, x, index, src, args=[A("1", "1")])
        theirs = torch.scatter(torch.from_numpy(x), 1, torch.from_numpy(index), torch.from_numpy(src))
    np.testing.assert_array_equal(ours, theirs.numpy())


def test_creation_against_torch() -> None:
    torch = pytest.importorskip("torch")
    (ours,) = run("ttnn.arange", args=[A("0", "-300"), A("1", "700"), A("2", "7")])
    theirs = torch.arange(-300, 700, 7).to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(ours.astype(F), theirs)
    (ours,) = run("ttnn.full", args=[A("0", "[3, 4]"), A("1", "-1.2345")])
    np.testing.assert_array_equal(ours.astype(F), torch.full((3, 4), -1.2345).to(torch.bfloat16).float().numpy())


def test_replay_judges_the_new_families_and_catches_a_planted_fault(tmp_path: Path) -> None:
    """A Writer report whose operations the new references cover (a creation with no input, a sharding conversion,
    a pad, an in-place add, a top-k's two outputs, a comparison): each correct output passes, the one planted wrong
    fails, by operation and output."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((32, 64)).astype(F)
    scores = rng.permutation(64).astype(F).reshape(1, 64)
    wrong_pad = np.pad(x, ((0, 0), (0, 32)))
    wrong_pad[:, 64:] = 1.0  # the planted fault: padded with 1, not the 0 asked for
    path = tmp_path / "r.sqlite"
    with reportdb.Writer(path) as w:
        for tensor_id, array in ((1, x), (2, np.zeros((2, 32), ml_dtypes.bfloat16)), (3, x.astype(ml_dtypes.bfloat16)),
                                 (4, wrong_pad), (5, 2 * x), (6, np.sort(scores)[:, ::-1][:, :4].copy()),
                                 (7, np.argsort(-scores, kind="stable")[:, :4].astype(np.uint16)),
                                 (8, (x > 0).astype(F)), (9, scores)):
            w.put_tensor(tensor_id, array)
        w.add_operation(1, "ttnn.zeros", arguments={"0": "Shape([2, 32])"}, outputs=[2])
        w.add_operation(2, "ttnn.sharded_to_interleaved", arguments={"1": "MemoryConfig(...)",
                                                                      "output_dtype": "DataType.BFLOAT16"},
                        inputs=[1], outputs=[3])
        w.add_operation(3, "ttnn.pad", arguments={"1": "[(0, 0), (0, 32)]", "2": "0.0"}, inputs=[1], outputs=[4])
        w.add_operation(4, "ttnn.add_", inputs=[1, 1], outputs=[5])
        w.add_operation(5, "ttnn.topk", arguments={"1": "4"}, inputs=[9], outputs=[6, 7])
        w.add_operation(6, "ttnn.gt", arguments={"1": "0.0"}, inputs=[1], outputs=[8])
    rows = reportdb.replay(path).rows
    verdicts = {(r.operation_id, r.output_index): (r.status, r.passed) for r in rows}
    assert verdicts == {(1, 0): ("compared", True), (2, 0): ("compared", True), (3, 0): ("compared", False),
                        (4, 0): ("compared", True), (5, 0): ("compared", True), (5, 1): ("compared", True),
                        (6, 0): ("compared", True)}


def test_repeat_and_interleave_eltwise_mul_follows_its_docstring() -> None:
    a = np.arange(32 * 32, dtype=F).reshape(1, 1, 32, 32)
    b = np.arange(32 * 64, dtype=F).reshape(1, 1, 32, 64) / 7
    (out,) = run("ttnn.experimental.repeat_and_interleave_eltwise_mul", a, b)
    assert out.shape == (1, 1, 32, 64 * 32)
    # element [r, c]: A[r, c % 32] * B[r, c // 32], worked out for two positions by hand
    assert out[0, 0, 3, 5] == a[0, 0, 3, 5] * b[0, 0, 3, 0] and out[0, 0, 31, 2047] == a[0, 0, 31, 31] * b[0, 0, 31, 63]
    torch = pytest.importorskip("torch")
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    np.testing.assert_array_equal(out, (ta.repeat(1, 1, 1, 64) * tb.repeat_interleave(32, dim=-1)).numpy())
