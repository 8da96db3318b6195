"""Hand-checked cases of every reference (reportdb.analysis.references), and the reading of recorded arguments.

Each expected value below is worked out by hand (or is a plain identity such as a permutation), not computed by the
code under test; tests/test_references_golden.py checks every reference against ttnn's own golden functions.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import test_references_nn
from reportdb.analysis import references as refs
from reportdb.analysis.references import Argument as A
from reportdb.analysis.references import UnsupportedArguments
from test_references_more import HAND as MORE

F = np.float32
X = np.array([[-2.0, -0.5, 0.0], [0.5, 1.0, 4.0]], dtype=F)
POS = np.array([[0.25, 1.0, 4.0]], dtype=F)
# ttnn 0.81's graph report summarises a tensor argument like this (tests/data/report-schemas holds real ones)
SUMMARY = "ttnn.Tensor(shape=Shape([2, 3]), dtype=DataType.BFLOAT16, layout=Layout.TILE, tensor_id={})"


def run(op: str, *inputs: np.ndarray, args: list[A] | None = None) -> np.ndarray:
    """The reference output of ``op`` for inputs numbered 1, 2, ... and the recorded arguments."""
    return refs.compute(op, list(enumerate(inputs, start=1)), args or [])


def phi(v: float) -> float:
    """The standard normal CDF, for hand-checked GELU values."""
    return 0.5 * (1 + math.erf(v / math.sqrt(2)))


HAND = [  # (op, inputs, arguments, expected)
    ("ttnn.matmul", [np.array([[1, 2], [3, 4]], F), np.array([[5, 6], [7, 8]], F)], [], [[19, 22], [43, 50]]),
    ("ttnn.matmul", [np.array([[1, 2], [3, 4]], F), np.array([[5, 6], [7, 8]], F)], [A("transpose_b", "True")],
     [[17, 23], [39, 53]]),
    ("ttnn.matmul", [np.array([[1, 2], [3, 4]], F), np.array([[5, 6], [7, 8]], F)], [A("transpose_a", "True")],
     [[26, 30], [38, 44]]),
    ("ttnn.matmul", [np.array([[1, -2]], F), np.array([[1, 0], [0, 1]], F)], [A("activation", "relu")], [[1, 0]]),
    ("ttnn.linear", [np.array([[1, 2]], F), np.array([[1, 0], [0, 1]], F), np.array([[10, 20]], F)],
     [A("0", SUMMARY.format(1)), A("1", SUMMARY.format(2)), A("bias", SUMMARY.format(3))], [[11, 22]]),
    ("ttnn.add", [X, np.array([1, 2, 3], F)], [], [[-1, 1.5, 3], [1.5, 3, 7]]),
    ("ttnn.add", [X], [A("0", SUMMARY.format(1)), A("1", "1.5")], X + 1.5),
    ("ttnn.subtract", [X, X], [], np.zeros((2, 3))),
    ("ttnn.multiply", [X, np.array([[2], [-1]], F)], [], [[-4, -1, 0], [-0.5, -1, -4]]),
    ("ttnn.divide", [np.array([1, -7, 9], F), np.array([4, 2, -2], F)], [], [0.25, -3.5, -4.5]),
    ("ttnn.divide", [np.array([1, -7, 9], F), np.array([4, 2, -2], F)], [A("rounding_mode", "floor")], [0, -4, -5]),
    ("ttnn.relu", [X], [], [[0, 0, 0], [0.5, 1, 4]]),
    ("ttnn.gelu", [np.array([-1, 0, 1], F)], [], [-phi(-1), 0, phi(1)]),
    ("ttnn.gelu", [np.array([1], F)], [A("variant", "GeluVariant.Tanh")],
     [0.5 * (1 + math.tanh(math.sqrt(2 / math.pi) * (1 + 0.044715)))]),
    ("ttnn.gelu", [np.array([1], F)], [A("fast_and_approximate_mode", "True")], [phi(1)]),
    ("ttnn.silu", [np.array([0, 2], F)], [], [0, 2 / (1 + math.exp(-2))]),
    ("ttnn.sigmoid", [np.array([0, -1000], F)], [], [0.5, 0]),
    ("ttnn.tanh", [np.array([0, 1], F)], [], [0, math.tanh(1)]),
    ("ttnn.exp", [np.array([0, 1], F)], [], [1, math.e]),
    ("ttnn.log", [np.array([1, math.e], F)], [], [0, 1]),
    ("ttnn.sqrt", [POS], [], [[0.5, 1, 2]]),
    ("ttnn.rsqrt", [POS], [], [[2, 1, 0.5]]),
    ("ttnn.reciprocal", [POS], [], [[4, 1, 0.25]]),
    ("ttnn.neg", [X], [], -X),
    ("ttnn.abs", [X], [], [[2, 0.5, 0], [0.5, 1, 4]]),
    ("ttnn.clamp", [X], [A("min", "-1.0"), A("max", "1.0")], [[-1, -0.5, 0], [0.5, 1, 1]]),
    ("ttnn.clamp", [X], [A("1", "0"), A("2", "None")], [[0, 0, 0], [0.5, 1, 4]]),
    ("ttnn.pow", [POS], [A("1", "2.0")], [[0.0625, 1, 16]]),
    ("ttnn.softmax", [np.array([[0, math.log(3)]], F)], [A("dim", "-1")], [[0.25, 0.75]]),
    ("ttnn.softmax", [np.array([[0], [math.log(3)]], F)], [A("1", "0")], [[0.25], [0.75]]),
    ("ttnn.layer_norm", [np.array([[1, 3]], F)], [A("epsilon", "0.0")], [[-1, 1]]),
    ("ttnn.layer_norm", [np.array([[1, 3]], F), np.array([2, 3], F), np.array([1, 1], F)],
     [A("0", SUMMARY.format(1)), A("epsilon", "0.0"), A("weight", SUMMARY.format(2)), A("bias", SUMMARY.format(3))],
     [[-1, 4]]),
    ("ttnn.rms_norm", [np.array([[3, 4]], F)], [A("epsilon", "0.0")],
     [[3 / math.sqrt(12.5), 4 / math.sqrt(12.5)]]),
    ("ttnn.rms_norm", [np.array([[3, 4]], F), np.array([[[2, 0]]], F)],
     [A("0", SUMMARY.format(1)), A("weight", SUMMARY.format(2)), A("epsilon", "0.0")], [[6 / math.sqrt(12.5), 0]]),
    ("ttnn.mean", [X], [A("dim", "-1")], [-2.5 / 3, 5.5 / 3]),
    ("ttnn.mean", [X], [], 3.0 / 6),
    ("ttnn.sum", [X], [A("dim", "[0, 1]"), A("keepdim", "True")], [[3.0]]),
    ("ttnn.sum", [X], [A("dim", "0"), A("scalar", "2.0")], [-3, 1, 8]),
    ("ttnn.max", [X], [A("dim", "1")], [0, 4]),
    ("ttnn.min", [X], [A("dim", "0"), A("keepdim", "True")], [[-2, -0.5, 0]]),
    ("ttnn.argmax", [X], [A("dim", "-1")], [2, 2]),
    ("ttnn.argmax", [X], [], 5),
    ("ttnn.transpose", [X], [A("1", "0"), A("2", "1")], X.T),
    ("ttnn.permute", [X[None]], [A("1", "[2, 0, 1]")], [[[-2, 0.5]], [[-0.5, 1]], [[0, 4]]]),
    ("ttnn.reshape", [X], [A("1", "Shape([3, 2])")], [[-2, -0.5], [0, 0.5], [1, 4]]),
    ("ttnn.reshape", [X], [A("shape", "(1, -1)")], [[-2, -0.5, 0, 0.5, 1, 4]]),
    ("ttnn.reshape", [X], [A("1", "6, 1")], [[-2], [-0.5], [0], [0.5], [1], [4]]),  # ttnn 0.6x's text of a list
    ("ttnn.concat", [X, X[:1]], [A("dim", "0")], [[-2, -0.5, 0], [0.5, 1, 4], [-2, -0.5, 0]]),
    ("ttnn.slice", [X], [A("1", "[0, 1]"), A("2", "[2, 3]"), A("3", "[1, 2]")], [[-0.5], [1]]),
    ("ttnn.typecast", [np.array([1.00390625, 1.01171875], F)], [A("1", "DataType.BFLOAT16")], [1.0, 1.015625]),
    # integer targets as ttnn's golden converts a device tensor: truncate and wrap (uint8, int8), round half up and
    # saturate (uint16), sign-extend an int8 into uint32
    ("ttnn.typecast", [np.array([-1.5, 2.7, 300.9, -257.2], F)], [A("1", "DataType.UINT8")], [255, 2, 44, 255]),
    ("ttnn.typecast", [np.array([-1.5, 2.7, 200.0, -129.9], F)], [A("1", "DataType.INT8")], [-1, 2, -56, 127]),
    ("ttnn.typecast", [np.array([0.5, 1.5, 2.4, -3.0, 70000.0], F)], [A("1", "DataType.UINT16")], [1, 2, 2, 0, 65535]),
    ("ttnn.typecast", [np.array([-1, 5], np.int8)], [A("1", "DataType.UINT32")], [4294967295, 5]),
    ("ttnn.typecast", [np.array([-2.9, 7.9], F)], [A("1", "DataType.INT32")], [-2, 7]),
    # block floats: 16 values of a row share the largest exponent (3.0: scale 2^-5 for BFLOAT8_B's 7 bits), the 17th
    # starts a group of its own
    ("ttnn.typecast", [np.array([[1.0, 2**-8, 3.0, 0.05] + [0.0] * 12 + [0.05]], F)], [A("1", "DataType.BFLOAT8_B")],
     [[1.0, 0.0, 3.0, 0.0625] + [0.0] * 12 + [0.0498046875]]),
    ("ttnn.typecast", [np.array([[1.0, 3.0, 0.3]], F)], [A("1", "DataType.BFLOAT4_B")], [[1.0, 3.0, 0.5]]),
    ("ttnn.to_layout", [X], [A("1", "Layout.TILE")], X),
    ("ttnn.untilize", [X], [], X),
    ("ttnn.embedding", [np.array([[2, 0]], np.uint32), np.array([[1, 2], [3, 4], [5, 6]], F)], [], [[[5, 6], [1, 2]]]),
    ("ttnn.where", [np.array([1, 0, 2], np.uint32), np.array([1, 2, 3], F), np.array([-1, -2, -3], F)], [], [1, -2, 3]),
    ("ttnn.where", [np.array([0.0, 1.0], F), np.array([5, 6], F)], [A("2", "0.0"), A("0", SUMMARY.format(1)),
                                                                   A("1", SUMMARY.format(2))], [0, 6]),
    # one query at the last of two keys, causal: it sees both; scores 0 and 1*1*0.5 -> weights 1/(1+e^.5), e^.5/(1+e^.5)
    ("ttnn.transformer.scaled_dot_product_attention", [np.ones((1, 1, 1, 4), F), np.array([[[[0, 0, 0, 0], [1, 0, 0, 0]]]], F),
     np.array([[[[2, 0, 0, 0], [0, 4, 0, 0]]]], F)], [],
     [[[[2 / (1 + math.exp(0.5)), 4 * math.exp(0.5) / (1 + math.exp(0.5)), 0, 0]]]]),
    ("ttnn.transformer.scaled_dot_product_attention", [np.ones((1, 1, 2, 4), F), np.array([[[[0, 0, 0, 0], [1, 0, 0, 0]]]], F),
     np.array([[[[2, 0, 0, 0], [0, 4, 0, 0]]]], F)], [],  # causal: the first query sees the first key only
     [[[[2, 0, 0, 0], [2 / (1 + math.exp(0.5)), 4 * math.exp(0.5) / (1 + math.exp(0.5)), 0, 0]]]]),
    ("ttnn.experimental.rotary_embedding", [np.array([[[[1, 2, 3, 4]]]], F), np.full((1, 1, 1, 4), 0.5, F),
     np.full((1, 1, 1, 4), 2.0, F)], [], [[[[0.5 - 6, 1 - 8, 1.5 + 2, 2 + 4]]]]),
]


@pytest.mark.parametrize("op, inputs, args, expected", HAND, ids=[f"{c[0]}-{i}" for i, c in enumerate(HAND)])
def test_hand_checked(op: str, inputs: list[np.ndarray], args: list[A], expected: object) -> None:
    out = run(op, *inputs, args=args)
    want = np.asarray(expected, dtype=np.float64)
    assert out.shape == want.shape
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=2e-7, atol=1e-7)


def test_every_reference_has_a_hand_checked_case() -> None:
    several = {"ttnn.split", "ttnn.chunk", "ttnn.transformer.split_query_key_value_and_split_heads"}  # checked below
    covered = {refs.canonical_name(c[0]) for c in HAND + MORE} | several | test_references_nn.COVERED
    covered |= {n for n in refs.names() if refs.lookup(n).per_device}  # collectives: tests/test_replay_collectives.py
    aliases = {"ttnn.sub", "ttnn.mul", "ttnn.div", "ttnn.clip", "ttnn.view", "ttnn.tilize", "ttnn.tilize_with_zero_padding",
               "ttnn.to_memory_config", "ttnn.experimental.split_query_key_value_and_split_heads",
               *test_references_nn.ALIASES}  # a covered function
    assert set(refs.names()) - aliases <= covered, set(refs.names()) - aliases - covered


def test_bfloat16_inputs_are_computed_in_float32() -> None:
    a = np.array([[1.0, 256.0]], dtype=ml_dtypes.bfloat16)
    out = run("ttnn.add", a, np.array([[1.0, 1.0]], dtype=ml_dtypes.bfloat16))
    assert out.dtype == np.float32 and out.tolist() == [[2.0, 257.0]]  # 257 is no bfloat16: no rounding to it


def test_bfloat16_inputs_widen_exactly_whatever_their_layout() -> None:
    """floats() widens bfloat16 by its bits: every pattern (NaNs with payloads, infinities, -0.0, subnormals) as
    ml_dtypes' own cast gives it, on strided and transposed views too, into a writable array of its own."""
    patterns = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(ml_dtypes.bfloat16).reshape(256, 256)
    before = patterns.copy()
    for array in (patterns, patterns[::3, 1::2], patterns.T, patterns[5:6, 7].reshape(())):
        out = refs.floats("x", array)
        assert out.dtype == np.float32 and out.shape == array.shape and out.flags.writeable
        assert np.array_equal(out.view(np.uint32), array.astype(np.float32).view(np.uint32))
        out[...] = 1.0  # its own copy: the stored values are untouched
    assert np.array_equal(patterns.view(np.uint16), before.view(np.uint16))


def test_data_movement_keeps_the_dtype() -> None:
    ids = np.array([[7, 9]], dtype=np.uint32)
    assert run("ttnn.transpose", ids, args=[A("1", "0"), A("2", "1")]).dtype == np.uint32


def test_tensor_ids_of_0_81_summaries_pick_the_inputs() -> None:
    """ttnn 0.81 records keywords before positions; the summaries' tensor ids say which input is which."""
    a, b = np.array([[1, 2]], F), np.array([[10], [1]], F)
    args = [A("transpose_b", "False"), A("0", SUMMARY.format(7)), A("1", SUMMARY.format(3))]
    out = refs.compute("ttnn.matmul", [(3, b), (7, a)], args)
    assert out.tolist() == [[12.0]]


def test_0_6x_value_texts_bind_in_call_order() -> None:
    """ttnn 0.6x stores a tensor's printed values; inputs then follow the call order: positions, then keywords."""
    printed = "ttnn.Tensor([[ 1.00000,  2.00000]], shape=Shape([1, 2]), dtype=DataType.FLOAT32, layout=Layout.ROW_MAJOR)"
    args = [A("0", printed), A("1", printed), A("bias", printed), A("memory_config", "MemoryConfig(...)")]
    x, w, bias = np.array([[1, 2]], F), np.array([[1], [1]], F), np.array([[5]], F)
    assert run("ttnn.linear", x, w, bias, args=args).tolist() == [[8.0]]


def test_concat_list_of_tensors() -> None:
    listed = f"[{SUMMARY.format(2)}, {SUMMARY.format(1)}]"
    out = refs.compute("ttnn.concat", [(1, np.array([1], F)), (2, np.array([2], F))], [A("0", listed), A("dim", "0")])
    assert out.tolist() == [2.0, 1.0]


@pytest.mark.parametrize("op, inputs, args, names", [
    ("ttnn.softmax", [X], [A("1", "arg0")], ("1",)),  # the fixture reports' stand-in texts: not a dim
    ("ttnn.add", [X, X], [A("activations", "[UnaryWithParam(op_type=UnaryOpType::RELU)]")], ("activations",)),
    ("ttnn.matmul", [X, X.T], [A("frobnicate", "True")], ("frobnicate",)),
    ("ttnn.matmul", [X, X.T], [A("program_config", "MatmulMultiCoreReuseProgramConfig(fused_activation=UnaryWithParam(op_type=UnaryOpType::GELU))")], ("program_config",)),
    ("ttnn.matmul", [X, X.T], [A("arg_0", SUMMARY.format(1)), A("arg_1", SUMMARY.format(2))], ("arg_0", "arg_1")),
    ("ttnn.linear", [X, X.T, X], [], ("input 2",)),  # a third input that nothing recorded names
    ("ttnn.transpose", [X], [A("1", "0")], ("dim2",)),  # required and not recorded
    ("ttnn.typecast", [X.astype(ml_dtypes.bfloat16)], [A("1", "DataType.UINT16")], ("input_tensor",)),  # which dtype?
    ("ttnn.typecast", [np.array([1.0, np.nan], F)], [A("1", "DataType.INT32")], ("input_tensor",)),
    ("ttnn.relu", [np.array([1, 2], np.int32)], [], ("input_tensor",)),
    ("ttnn.concat", [X, X], [A("groups", "2")], ("groups",)),
    ("ttnn.matmul", [X], [], ("input_tensor_b",)),
])
def test_unsupported_arguments_are_named(op: str, inputs: list[np.ndarray], args: list[A], names: tuple[str, ...]) -> None:
    with pytest.raises(UnsupportedArguments) as info:
        run(op, *inputs, args=args)
    assert info.value.names == names


def test_typecast_to_uint16_truncates_a_block_float_input() -> None:
    values = np.array([0.5, 1.5, 2.5], dtype=ml_dtypes.bfloat16)
    out = refs.compute("ttnn.typecast", [(7, values)], [A("1", "DataType.UINT16")], input_dtypes={7: "DataType.BFLOAT8_B"})
    assert out.tolist() == [0, 1, 2] and out.dtype == np.uint16
    plain = refs.compute("ttnn.typecast", [(7, values)], [A("1", "DataType.UINT16")], input_dtypes={7: "BFLOAT16"})
    assert plain.tolist() == [1, 2, 3]


def test_block_float_typecast_equals_reportdbs_packer_and_decoder() -> None:
    from reportdb.analysis.references.typecast import block_float
    from reportdb.formats import blockfloat, tiles

    rng = np.random.default_rng(3)
    x = (rng.standard_normal((64, 64)) * np.exp(rng.standard_normal((64, 64)) * 4)).astype(F)
    for dtype, bits in (("BFLOAT8_B", 7), ("BFLOAT4_B", 3)):
        packed = blockfloat.encode(tiles.tilize(x, (32, 32)), dtype, (32, 32))
        decoded = blockfloat.decode(packed, dtype, (32, 32)).view(ml_dtypes.bfloat16)
        expected = tiles.untilize(decoded, 64, 64, (32, 32), False).astype(F)
        np.testing.assert_array_equal(block_float(x, bits), expected)


def test_operations_with_several_outputs_give_each() -> None:
    row = np.arange(5, dtype=F)[None]
    pieces = refs.compute_outputs("ttnn.split", [(1, row)], [A("1", "2"), A("dim", "-1")])
    assert [p.tolist() for p in pieces] == [[[0, 1]], [[2, 3]], [[4]]]  # pieces of 2, the last shorter
    listed = refs.compute_outputs("ttnn.split", [(1, row)], [A("1", "[1, 4]"), A("dim", "1")])
    assert [p.tolist() for p in listed] == [[[0]], [[1, 2, 3, 4]]]
    chunks = refs.compute_outputs("ttnn.chunk", [(1, row)], [A("1", "2"), A("2", "1")])
    assert [p.tolist() for p in chunks] == [[[0, 1, 2]], [[3, 4]]]  # ceil(5 / 2) = 3 per chunk
    # a fused [1, 1, 4] QKV, 1 head of size 1 and 1 kv head...: q = x[0], k = x[1], v = x[2]; 2 query heads: q = x[0:2]
    fused = np.array([[[1, 2, 3]]], F)
    q, k, v = refs.compute_outputs("ttnn.transformer.split_query_key_value_and_split_heads", [(1, fused)],
                                   [A("num_heads", "1")])
    assert (q.tolist(), k.tolist(), v.tolist()) == ([[[[1]]]], [[[[2]]]], [[[[3]]]])
    fused = np.array([[[1, 2, 3, 4], [5, 6, 7, 8]]], F)  # batch 1, sequence 2, 2 query heads + 1 kv head of size 1
    q, k, v = refs.compute_outputs("ttnn.transformer.split_query_key_value_and_split_heads", [(1, fused)],
                                   [A("num_heads", "2"), A("num_kv_heads", "1"), A("transpose_key", "False")])
    assert q.tolist() == [[[[1], [5]], [[2], [6]]]] and k.tolist() == [[[[3], [7]]]] and v.tolist() == [[[[4], [8]]]]
    with pytest.raises(ValueError, match="compute_outputs"):
        refs.compute("ttnn.split", [(1, row)], [A("1", "2"), A("dim", "-1")])


def test_placement_arguments_are_accepted_and_unknown_ops_have_none() -> None:
    args = [A("memory_config", "MemoryConfig(memory_layout=TensorMemoryLayout::INTERLEAVED)"), A("queue_id", "0"),
            A("compute_kernel_config", "<ttnn._ttnn.operations.core.WormholeComputeKernelConfig object at 0x7f>")]
    assert run("ttnn.relu", X, args=args).shape == X.shape
    assert refs.lookup("ttnn.frobnicate") is None
    assert refs.lookup("ttnn::add") is refs.lookup("add") is refs.lookup("ttnn.add") is not None
