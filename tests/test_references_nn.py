"""Hand-checked cases of the conv, pooling, attention, KV-cache and distributed-norm references, and the same
references against torch on the CPU where torch has the function (tests/test_references_golden.py checks them
against ttnn's own golden functions in the slow tier)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import reportdb
from reportdb.analysis import references as refs
from reportdb.analysis.references import Argument as A
from reportdb.analysis.references import Oversized, UnsupportedArguments

F = np.float32
RNG = np.random.default_rng(20261206)
TENSOR = "ttnn.Tensor(shape=Shape([1]), dtype=DataType.BFLOAT16, layout=Layout.TILE, tensor_id={})"
RELU = "Conv2dConfig(weights_dtype=std::nullopt,activation=UnaryWithParam(op_type=UnaryOpType::RELU),padding_mode=PaddingMode::Zeros)"


#: The operations this module checks (tests/test_references.py counts them as hand-checked), and the names that are
#: one function with a checked name.
COVERED = frozenset({
    "ttnn.conv2d", "ttnn.conv1d", "ttnn.max_pool2d", "ttnn.avg_pool2d", "ttnn.adaptive_avg_pool2d",
    "ttnn.global_avg_pool2d", "ttnn.upsample", "ttnn.experimental.nlp_create_qkv_heads",
    "ttnn.experimental.nlp_create_qkv_heads_decode", "ttnn.experimental.nlp_concat_heads",
    "ttnn.experimental.nlp_concat_heads_decode", "ttnn.transformer.concatenate_heads",
    "ttnn.experimental.rotary_embedding_llama", "ttnn.transformer.scaled_dot_product_attention_decode",
    "ttnn.transformer.paged_scaled_dot_product_attention_decode", "ttnn.fill_cache", "ttnn.update_cache",
    "ttnn.experimental.paged_update_cache", "ttnn.experimental.paged_fill_cache", "ttnn.softmax_in_place",
    "ttnn.scale_mask_softmax_in_place", "ttnn.transformer.attention_softmax_", "ttnn.rms_norm_post_all_gather",
    "ttnn.layer_norm_post_all_gather", "ttnn.group_norm", "ttnn.fold", "ttnn.experimental.convert_to_chw",
    "ttnn.experimental.convert_to_hwc", "ttnn.experimental.fast_reduce_nc", "ttnn.experimental.minimal_matmul",
    "ttnn.transformer.chunked_scaled_dot_product_attention", "ttnn.grid_sample", "ttnn.batch_norm",
    "ttnn.experimental.group_attn_matmul", "ttnn.conv_transpose2d", "ttnn.adaptive_max_pool2d",
    "ttnn.experimental.attn_matmul", "ttnn.experimental.paged_fused_update_cache", "ttnn.rms_norm_pre_all_gather",
    "ttnn.layer_norm_pre_all_gather",
})
ALIASES = frozenset({
    "ttnn.experimental.concatenate_heads", "ttnn.scale_mask_softmax", "ttnn.scale_causal_mask_hw_dims_softmax_in_place",
    "ttnn.transformer.attention_softmax",
})


#: Covered operations ttnn 0.81.1 has no usable golden function for (tests/test_references_golden.py skips them):
#: none attached, or one that imports tt-metal's tests/ tree, which the wheel does not ship.
_UNATTACHED = "ttnn 0.81.1 attaches no golden function"
_TESTS_TREE = "its golden imports tests.sweep_framework, absent from the ttnn wheel"
NO_GOLDEN = {
    **dict.fromkeys(("ttnn.max_pool2d", "ttnn.avg_pool2d", "ttnn.adaptive_avg_pool2d", "ttnn.adaptive_max_pool2d",
                     "ttnn.grid_sample"), _TESTS_TREE),
    **dict.fromkeys((
        "ttnn.conv1d", "ttnn.conv_transpose2d", "ttnn.experimental.convert_to_chw", "ttnn.experimental.convert_to_hwc",
        "ttnn.experimental.fast_reduce_nc", "ttnn.experimental.group_attn_matmul", "ttnn.experimental.minimal_matmul",
        "ttnn.experimental.nlp_concat_heads", "ttnn.experimental.nlp_concat_heads_decode",
        "ttnn.experimental.nlp_create_qkv_heads", "ttnn.experimental.nlp_create_qkv_heads_decode",
        "ttnn.experimental.paged_fill_cache", "ttnn.experimental.paged_update_cache",
        "ttnn.experimental.rotary_embedding_llama", "ttnn.experimental.attn_matmul",
        "ttnn.experimental.paged_fused_update_cache",
    ), _UNATTACHED),
}


def test_every_operation_without_a_golden_is_checked_here() -> None:
    assert set(NO_GOLDEN) <= COVERED


def test_every_covered_operation_is_run_here() -> None:
    source = open(__file__, encoding="utf-8").read()
    assert all(source.count(f'"{name}"') >= 2 for name in COVERED)  # listed above, and run by a test below
    assert all(refs.lookup(name) is not None for name in COVERED | ALIASES)


def run(op: str, *inputs: np.ndarray, args: list[A] | None = None) -> tuple[np.ndarray, ...]:
    """Every reference output of ``op`` for inputs numbered 1, 2, ... and the recorded arguments."""
    return refs.compute_outputs(op, list(enumerate(inputs, start=1)), args or [])


def tensors(*names: str) -> list[A]:
    """Keyword tensor arguments naming inputs 1, 2, ... by id, as ttnn 0.81 records them."""
    return [A(name, TENSOR.format(i)) for i, name in enumerate(names, start=1)]


def normal(*shape: int) -> np.ndarray:
    """Seeded float32 values."""
    return RNG.standard_normal(shape).astype(F)


def conv_args(batch: int, height: int, width: int, cin: int, cout: int, kernel: str, **extra: str) -> list[A]:
    """conv2d's keyword arguments as a model passes them (ttnn's conv2d is keyword-only)."""
    fixed = {"in_channels": str(cin), "out_channels": str(cout), "batch_size": str(batch), "input_height": str(height),
             "input_width": str(width), "kernel_size": kernel, "device": "MeshDevice(1x1)"}
    return [A(k, v) for k, v in {**fixed, **extra}.items()]


# --- conv -------------------------------------------------------------------------------------------------------


def test_conv2d_by_hand() -> None:
    # one channel 3x3 image 1..9, a 2x2 kernel [[1, 0], [0, -1]]: each output is x[i, j] - x[i + 1, j + 1] = -4
    x = np.arange(1, 10, dtype=F).reshape(1, 1, 9, 1)
    w = np.array([[[[1, 0], [0, -1]]]], dtype=F)
    (out,) = run("ttnn.conv2d", x, w, np.array([0.5], F),
                 args=tensors("input_tensor", "weight_tensor", "bias_tensor") + conv_args(1, 3, 3, 1, 1, "[2, 2]"))
    assert out.shape == (1, 1, 4, 1) and np.array_equal(out.reshape(-1), [-3.5] * 4)
    # padding (0, 1) on the width: the right column sees x[i, 2] and zeros
    (padded,) = run("ttnn.conv2d", x, w, args=tensors("input_tensor", "weight_tensor")
                    + conv_args(1, 3, 3, 1, 1, "[2, 2]", padding="[0, 0, 0, 1]"))
    assert np.array_equal(padded.reshape(2, 3), [[-4, -4, 3], [-4, -4, 6]])


@pytest.mark.parametrize("stride, padding, dilation, groups, relu", [
    ("[1, 1]", "[1, 1]", "[1, 1]", 1, False), ("[2, 1]", "[1, 2, 0, 1]", "[1, 2]", 2, True),
    ("[2, 2]", "[0, 0]", "[1, 1]", 6, True),
])
def test_conv2d_against_torch(stride: str, padding: str, dilation: str, groups: int, relu: bool) -> None:
    torch = pytest.importorskip("torch")
    n, h, w, c, o = 2, 9, 7, 6, 12
    x, weight, bias = normal(n, h, w, c + 2), normal(o, c // groups, 3, 3), normal(1, 1, 1, o)  # 2 channels of padding
    extra = {"stride": stride, "padding": padding, "dilation": dilation, "groups": str(groups)}
    if relu:
        extra["conv_config"] = RELU
    (out,) = run("ttnn.conv2d", x.reshape(1, 1, -1, c + 2), weight, bias,
                 args=tensors("input_tensor", "weight_tensor", "bias_tensor") + conv_args(n, h, w, c, o, "[3, 3]", **extra))
    pads = [int(p) for p in padding.strip("[]").split(",")]
    top, bottom, left, right = (pads[0], pads[0], pads[1], pads[1]) if len(pads) == 2 else pads
    xt = torch.nn.functional.pad(torch.tensor(x[..., :c]).permute(0, 3, 1, 2), (left, right, top, bottom))
    expected = torch.nn.functional.conv2d(xt, torch.tensor(weight), torch.tensor(bias.reshape(-1)),
                                          stride=eval(stride), dilation=eval(dilation), groups=groups)
    expected = (expected.relu() if relu else expected).permute(0, 2, 3, 1).reshape(1, 1, -1, o).numpy()
    assert out.shape == expected.shape and np.allclose(out, expected, atol=1e-5)


def test_conv1d_against_torch() -> None:
    torch = pytest.importorskip("torch")
    x, weight = normal(2, 1, 20, 4), normal(8, 2, 3)
    args = tensors("input_tensor", "weight_tensor") + [A(k, v) for k, v in {
        "in_channels": "4", "out_channels": "8", "batch_size": "2", "input_length": "20", "kernel_size": "3",
        "stride": "2", "padding": "[1, 2]", "dilation": "1", "groups": "2"}.items()]
    (out,) = run("ttnn.conv1d", x.reshape(1, 1, 40, 4), weight, args=args)
    xt = torch.nn.functional.pad(torch.tensor(x[:, 0]).permute(0, 2, 1), (1, 2))
    expected = torch.nn.functional.conv1d(xt, torch.tensor(weight), stride=2, groups=2).permute(0, 2, 1).reshape(1, 1, -1, 8)
    assert np.allclose(out, expected.numpy(), atol=1e-5)


@pytest.mark.parametrize("stride, padding, output_padding, dilation, groups", [
    ("[2, 2]", "[1, 1]", "[1, 1]", "[1, 1]", 1), ("[3, 2]", "[0, 2]", "[0, 1]", "[2, 1]", 2),
    ("[2, 2]", "[1, 0, 2, 1]", "[0, 0]", "[1, 1]", 4),
])
def test_conv_transpose2d_against_torch(stride: str, padding: str, output_padding: str, dilation: str, groups: int) -> None:
    torch = pytest.importorskip("torch")
    n, h, w, c, o = 2, 5, 6, 4, 8
    x, weight, bias = normal(n, h, w, c), normal(c, o // groups, 3, 3), normal(o)
    extra = {"stride": stride, "padding": padding, "output_padding": output_padding, "dilation": dilation,
             "groups": str(groups)}
    (out,) = run("ttnn.conv_transpose2d", x.reshape(1, 1, -1, c), weight, bias,
                 args=tensors("input_tensor", "weight_tensor", "bias_tensor") + conv_args(n, h, w, c, o, "[3, 3]", **extra))
    pads = eval(padding)
    xt = torch.tensor(x).permute(0, 3, 1, 2)
    if len(pads) == 4:  # torch pads symmetrically: the larger transposed padding, then the surplus rows cropped
        expected = torch.nn.functional.conv_transpose2d(xt, torch.tensor(weight), torch.tensor(bias), stride=eval(stride),
                                                        output_padding=eval(output_padding), groups=groups)
        expected = expected[:, :, pads[0] : expected.shape[2] - pads[1], pads[2] : expected.shape[3] - pads[3]]
    else:
        expected = torch.nn.functional.conv_transpose2d(xt, torch.tensor(weight), torch.tensor(bias), stride=eval(stride),
                                                        padding=pads, output_padding=eval(output_padding),
                                                        dilation=eval(dilation), groups=groups)
    assert np.allclose(out, expected.permute(0, 2, 3, 1).reshape(1, 1, -1, o).numpy(), atol=1e-5)
    with pytest.raises(UnsupportedArguments, match="mirror_kernel"):
        run("ttnn.conv_transpose2d", x.reshape(1, 1, -1, c), weight, args=tensors("input_tensor", "weight_tensor")
            + conv_args(n, h, w, c, o, "[3, 3]", groups=str(groups), mirror_kernel="False"))


def test_conv2d_refuses_what_it_cannot_read() -> None:
    x, w = normal(1, 1, 16, 4), normal(4, 4, 3, 3)
    base = tensors("input_tensor", "weight_tensor") + conv_args(1, 4, 4, 4, 4, "[3, 3]", padding="[1, 1]")
    with pytest.raises(UnsupportedArguments, match="weight_tensor"):  # weights already prepared for the device
        run("ttnn.conv2d", x, normal(1, 1, 36, 4), args=base)
    with pytest.raises(UnsupportedArguments, match="conv_config"):  # a padding mode other than zeros
        run("ttnn.conv2d", x, w, args=base + [A("conv_config", RELU.replace("Zeros", "Reflect"))])
    with pytest.raises(UnsupportedArguments, match="input_tensor"):  # the input does not hold batch * H * W rows
        run("ttnn.conv2d", normal(1, 1, 15, 4), w, args=base)
    with pytest.raises(Oversized):  # arguments naming a far larger image than the stored input: refused unbuilt
        big = tensors("input_tensor", "weight_tensor") + conv_args(4096, 4096, 4096, 4, 4, "[3, 3]")
        refs.compute_outputs("ttnn.conv2d", [(1, x), (2, w)], big, max_elements=refs.justified_elements([16 * 4]))


# --- pooling ----------------------------------------------------------------------------------------------------


def pool_args(batch: int, height: int, width: int, channels: int, *rest: str) -> list[A]:
    """max/avg pooling's positional arguments as ttnn records them, the input tensor first."""
    values = [TENSOR.format(1), str(batch), str(height), str(width), str(channels), *rest]
    return [A(str(i), v) for i, v in enumerate(values)]


def test_max_and_avg_pool_by_hand() -> None:
    # a 4x4 image 0..15, 2x2 windows, stride 2: maxima 5, 7, 13, 15; averages 2.5, 4.5, 10.5, 12.5
    x = np.arange(16, dtype=F).reshape(1, 1, 16, 1)
    (mx,) = run("ttnn.max_pool2d", x, args=pool_args(1, 4, 4, 1, "[2, 2]", "[2, 2]", "[0, 0]", "[1, 1]"))
    (av,) = run("ttnn.avg_pool2d", x, args=pool_args(1, 4, 4, 1, "[2, 2]", "[2, 2]", "[0, 0]"))
    assert np.array_equal(mx.reshape(-1), [5, 7, 13, 15]) and np.array_equal(av.reshape(-1), [2.5, 4.5, 10.5, 12.5])
    # padding 1 with count_include_pad False: the corner window holds only x[0, 0] = 0 and x[0, 1], x[1, 0], x[1, 1]
    (corner,) = run("ttnn.avg_pool2d", x, args=pool_args(1, 4, 4, 1, "[3, 3]", "[3, 3]", "[1, 1]", "False", "False"))
    assert corner.reshape(-1)[0] == (0 + 1 + 4 + 5) / 4


@pytest.mark.parametrize("ceil", ["False", "True"])
def test_pooling_against_torch(ceil: str) -> None:
    torch = pytest.importorskip("torch")
    x = normal(2, 8, 11, 3)
    xt = torch.tensor(x).permute(0, 3, 1, 2)
    flat = x.reshape(1, 1, -1, 3)

    def nhwc(t: object) -> np.ndarray:
        return t.permute(0, 2, 3, 1).reshape(1, 1, -1, 3).numpy()  # type: ignore[attr-defined]

    (mx,) = run("ttnn.max_pool2d", flat, args=pool_args(2, 8, 11, 3, "[3, 3]", "[2, 2]", "[1, 1]", "[1, 2]", ceil))
    assert np.array_equal(mx, nhwc(torch.nn.functional.max_pool2d(xt, 3, 2, 1, (1, 2), ceil_mode=ceil == "True")))
    for include in ("True", "False"):
        (av,) = run("ttnn.avg_pool2d", flat, args=pool_args(2, 8, 11, 3, "[3, 2]", "[2, 2]", "[1, 1]", ceil, include))
        expected = torch.nn.functional.avg_pool2d(xt, (3, 2), 2, 1, ceil_mode=ceil == "True",
                                                  count_include_pad=include == "True")
        assert np.allclose(av, nhwc(expected), atol=1e-6)
    (ov,) = run("ttnn.avg_pool2d", flat, args=pool_args(2, 8, 11, 3, "[2, 2]", "[2, 2]", "[0, 0]", ceil, "True", "3"))
    # float32 sums in another order: values near zero differ by ~1e-8, past allclose's default atol
    assert np.allclose(ov, nhwc(torch.nn.functional.avg_pool2d(xt, 2, 2, ceil_mode=ceil == "True", divisor_override=3)),
                       atol=1e-6)
    (ad,) = run("ttnn.adaptive_avg_pool2d", flat, args=pool_args(2, 8, 11, 3, "[3, 4]"))
    assert np.allclose(ad, nhwc(torch.nn.functional.adaptive_avg_pool2d(xt, (3, 4))), atol=1e-6)


def test_global_avg_pool_and_upsample_by_hand() -> None:
    x = np.array([[[[1, 10], [2, 20]], [[3, 30], [4, 40]]]], dtype=F)  # [1, 2, 2, 2] NHWC
    (g,) = run("ttnn.global_avg_pool2d", x)
    assert np.array_equal(g, [[[[2.5, 25]]]])
    (up,) = run("ttnn.upsample", x, args=[A("0", TENSOR.format(1)), A("1", "[1, 2]")])
    assert up.shape == (1, 2, 4, 2) and np.array_equal(up[0, 1, :, 0], [3, 3, 4, 4])


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
@pytest.mark.parametrize("scale", ["2", "[2, 3]", "1.5", "(3, 1)"])
def test_upsample_against_torch(mode: str, scale: str) -> None:
    torch = pytest.importorskip("torch")
    x = normal(2, 5, 7, 3)
    (out,) = run("ttnn.upsample", x, args=[A("0", TENSOR.format(1)), A("1", scale), A("mode", f"'{mode}'")])
    factor = eval(scale)
    expected = torch.nn.functional.interpolate(torch.tensor(x).permute(0, 3, 1, 2), scale_factor=factor, mode=mode)
    assert np.allclose(out, expected.permute(0, 2, 3, 1).numpy(), atol=1e-6)


# --- attention --------------------------------------------------------------------------------------------------


def test_nlp_create_qkv_heads_by_hand() -> None:
    # columns 0..(4 + 2*2)*2: head h of Q holds columns 2h, 2h+1; K heads start at column 8, V heads at 12
    x = np.tile(np.arange(16, dtype=F), (1, 1, 3, 1))  # [1, 1, S=3, 16]
    q, k, v = run("ttnn.experimental.nlp_create_qkv_heads", x, args=[A("0", TENSOR.format(1)), A("num_heads", "4"),
                                                                       A("num_kv_heads", "2")])
    assert q.shape == (1, 4, 3, 2) and k.shape == (1, 2, 2, 3) and v.shape == (1, 2, 3, 2)
    assert np.array_equal(q[0, 3, 0], [6, 7]) and np.array_equal(k[0, 1, :, 2], [10, 11])
    assert np.array_equal(v[0, 0, 1], [12, 13])
    # a separate KV input, K/V tied, K not transposed
    q2, k2, v2 = run("ttnn.experimental.nlp_create_qkv_heads", x[..., :8], x[..., 8:10],
                     args=tensors("input", "input_kv") + [A("num_heads", "4"), A("num_kv_heads", "1"),
                                                          A("kv_tied", "True"), A("transpose_k_heads", "False")])
    assert np.array_equal(q2, q) and np.array_equal(k2, v2) and np.array_equal(k2[0, 0, 2], [8, 9])


def test_create_and_concat_heads_decode_by_hand() -> None:
    x = np.tile(np.arange(12, dtype=F), (1, 1, 2, 1))  # [1, S=1, B=2, (2 + 2*1) * 3]
    q, k, v = run("ttnn.experimental.nlp_create_qkv_heads_decode", x,
                  args=[A("0", TENSOR.format(1)), A("num_heads", "2"), A("num_kv_heads", "1")])
    assert q.shape == (1, 2, 2, 3) and np.array_equal(q[0, 1, 1], [3, 4, 5])
    assert np.array_equal(k[0, 0, 0], [6, 7, 8]) and np.array_equal(v[0, 1, 0], [9, 10, 11])
    padded = np.zeros((1, 2, 32, 3), F)
    padded[:, :, :2] = q
    (cat,) = run("ttnn.experimental.nlp_concat_heads_decode", padded, args=[A("0", TENSOR.format(1)), A("num_heads", "2")])
    assert np.array_equal(cat, x[..., :6])


def test_concat_heads_by_hand() -> None:
    x = np.arange(2 * 3 * 4 * 5, dtype=F).reshape(2, 3, 4, 5)  # [B, heads, S, d]
    (nlp,) = run("ttnn.experimental.nlp_concat_heads", x)
    (plain,) = run("ttnn.transformer.concatenate_heads", x)
    assert nlp.shape == (2, 1, 4, 15) and plain.shape == (2, 4, 15)
    assert np.array_equal(nlp[1, 0, 2, 5:10], x[1, 1, 2]) and np.array_equal(plain, nlp[:, 0])


def rotation() -> np.ndarray:
    """tt-metal's transformation matrix of rotary_embedding_llama: pairs (2i, 2i+1) rotated by 90 degrees."""
    m = np.zeros((1, 1, 32, 32), F)
    m[..., np.arange(0, 32, 2), np.arange(1, 32, 2)] = 1
    m[..., np.arange(1, 32, 2), np.arange(0, 32, 2)] = -1
    return m


def test_rotary_embedding_llama_by_hand() -> None:
    # cos 0 and sin 1 rotate each pair (a, b) to (-b, a); cos 1 and sin 0 leave it
    x = normal(1, 2, 4, 64)
    ones, zeros = np.ones((1, 1, 4, 64), F), np.zeros((1, 1, 4, 64), F)
    (turned,) = run("ttnn.experimental.rotary_embedding_llama", x, zeros, ones, rotation())
    assert np.array_equal(turned[..., 0::2], -x[..., 1::2]) and np.array_equal(turned[..., 1::2], x[..., 0::2])
    (same,) = run("ttnn.experimental.rotary_embedding_llama", x, ones, zeros, rotation())
    assert np.array_equal(same, x)
    # decode: [1, B, heads, d] with one cos/sin row per user, broadcast over heads; the matrix repeated per user
    xd, cos, sin = normal(1, 3, 8, 32), normal(1, 3, 1, 32), normal(1, 3, 1, 32)
    (dec,) = run("ttnn.experimental.rotary_embedding_llama", xd, cos, sin, np.tile(rotation(), (1, 1, 3, 1)),
                 args=tensors("input_tensor", "cos_cache", "sin_cache", "trans_mat") + [A("is_decode_mode", "True")])
    rotated = np.stack([-xd[..., 1::2], xd[..., 0::2]], axis=-1).reshape(xd.shape)
    assert np.allclose(dec, xd * cos + rotated * sin, atol=1e-6)
    odd = np.tile(rotation(), (1, 1, 2, 1))
    odd[..., 40, 3] = 5
    with pytest.raises(UnsupportedArguments, match="trans_mat"):
        run("ttnn.experimental.rotary_embedding_llama", xd, cos, sin, odd)


def decode_expected(q: np.ndarray, k: np.ndarray, v: np.ndarray, positions: list[int]) -> np.ndarray:
    """torch's SDPA of each user's query over its cache rows up to its position (zeros for a negative one)."""
    torch = pytest.importorskip("torch")
    rows = []
    for b, p in enumerate(positions):
        if p < 0:
            rows.append(np.zeros((1, 1, q.shape[2], v.shape[3]), F))
            continue
        kk = torch.tensor(k[b : b + 1, :, : p + 1]).repeat_interleave(q.shape[2] // k.shape[1], 1)
        vv = torch.tensor(v[b : b + 1, :, : p + 1]).repeat_interleave(q.shape[2] // k.shape[1], 1)
        rows.append(torch.nn.functional.scaled_dot_product_attention(
            torch.tensor(q[:, b : b + 1]).permute(1, 2, 0, 3), kk, vv).permute(2, 0, 1, 3).numpy())
    return np.concatenate(rows, axis=1)


def test_sdpa_decode_against_torch_contiguous_and_paged() -> None:
    q, k, v = normal(1, 3, 8, 16), normal(3, 2, 64, 16), normal(3, 2, 64, 16)
    positions = [5, 63, -1]
    (out,) = run("ttnn.transformer.scaled_dot_product_attention_decode", q, k, v,
                 args=tensors("input_tensor_q", "input_tensor_k", "input_tensor_v") + [A("cur_pos", "[5, 63, -1]")])
    assert np.allclose(out, decode_expected(q, k, v, positions), atol=1e-6)
    block, table = 16, np.array([[7, 0, 3, 9], [2, 11, 5, 1], [4, 6, 8, 10]])
    kc, vc = np.zeros((12, 2, block, 16), F), np.zeros((12, 2, block, 16), F)
    for b in range(3):
        for j, page in enumerate(table[b]):
            kc[page], vc[page] = k[b, :, j * block : (j + 1) * block], v[b, :, j * block : (j + 1) * block]
    (paged,) = run("ttnn.transformer.paged_scaled_dot_product_attention_decode", q, kc, vc, table.astype(np.int32),
                   np.array(positions, np.int32), args=tensors("input_tensor_q", "input_tensor_k", "input_tensor_v",
                                                               "page_table_tensor", "cur_pos_tensor"))
    assert np.array_equal(paged, out)
    with pytest.raises(UnsupportedArguments, match="sliding_window_size"):
        run("ttnn.transformer.scaled_dot_product_attention_decode", q, k, v,
            args=tensors("input_tensor_q", "input_tensor_k", "input_tensor_v") + [A("sliding_window_size", "8")])


def test_sdpa_decode_with_a_mask_attends_to_the_unmasked_keys() -> None:
    # non-causal with a mask of -inf except key 2: every head's output is V's row 2
    q, k, v = normal(1, 1, 4, 8), normal(1, 1, 5, 8), normal(1, 1, 5, 8)
    mask = np.full((1, 1, 4, 5), -np.inf, F)
    mask[..., 2] = 0
    (out,) = run("ttnn.transformer.scaled_dot_product_attention_decode", q, k, v, mask,
                 args=tensors("input_tensor_q", "input_tensor_k", "input_tensor_v", "attn_mask") + [A("is_causal", "False")])
    assert np.allclose(out[0, 0], np.broadcast_to(v[0, 0, 2], (4, 8)))


# --- caches -----------------------------------------------------------------------------------------------------


def test_fill_and_update_cache_by_hand_whether_stored_before_or_after() -> None:
    cache, x = np.zeros((3, 2, 8, 4), F), normal(1, 2, 4, 4)
    args = [A("0", TENSOR.format(1)), A("1", TENSOR.format(2)), A("2", "1"), A("update_idx", "4")]
    (after,) = run("ttnn.fill_cache", cache, x, args=args)
    assert np.array_equal(after[1, :, 4:8], x[0]) and not after[0].any() and not after[1, :, :4].any()
    (again,) = run("ttnn.fill_cache", after, x, args=args)  # the report stored the cache after the call
    assert np.array_equal(again, after)
    tokens = normal(1, 2, 8, 4)  # [1, heads, users padded to 8, d]
    (upd,) = run("ttnn.update_cache", cache, tokens, args=[A("0", TENSOR.format(1)), A("1", TENSOR.format(2)),
                                                              A("2", "6"), A("batch_offset", "2")])
    assert np.array_equal(upd[2, 1, 6], tokens[0, 1, 4]) and np.count_nonzero(upd[:, :, :6]) == 0


def test_paged_update_and_fill_cache_by_hand() -> None:
    cache, tokens = np.zeros((2, 2, 8, 4), F), normal(1, 2, 32, 4)  # input [1, users, heads padded to 32, d]
    (flat,) = run("ttnn.experimental.paged_update_cache", cache, tokens,
                  args=tensors("cache_tensor", "input_tensor") + [A("update_idxs", "[3, 7]")])
    assert np.array_equal(flat[0, :, 3], tokens[0, 0, :2]) and np.array_equal(flat[1, :, 7], tokens[0, 1, :2])
    pages, table = np.zeros((6, 2, 4, 4), F), np.array([[5, 1, 0], [2, 3, 4]], np.int32)
    (paged,) = run("ttnn.experimental.paged_update_cache", pages, tokens, table,
                   args=tensors("cache_tensor", "input_tensor", "page_table") + [A("update_idxs", "[6, 1]")])
    expected = np.zeros_like(pages)  # user 0's position 6 is row 2 of its second page (1); user 1's 1 of page 2
    expected[1, :, 2], expected[2, :, 1] = tokens[0, 0, :2], tokens[0, 1, :2]
    assert np.array_equal(paged, expected)
    with pytest.raises(UnsupportedArguments, match="update_idxs"):
        run("ttnn.experimental.paged_update_cache", cache, tokens,
            args=tensors("cache_tensor", "input_tensor") + [A("update_idxs", "[-1, 7]")])
    seq = normal(1, 2, 6, 4)  # one user's 6 tokens over pages of 4: page table row 1 is [2, 3, 4]
    (filled,) = run("ttnn.experimental.paged_fill_cache", pages, seq, table,
                    args=tensors("cache_tensor", "input_tensor", "page_table") + [A("batch_idx", "1")])
    assert np.array_equal(filled[2], seq[0, :, :4]) and np.array_equal(filled[3, :, :2], seq[0, :, 4:])
    assert not filled[3, :, 2:].any() and not filled[[0, 1, 4, 5]].any()


# --- softmax and norms ------------------------------------------------------------------------------------------


def test_softmax_variants_against_torch() -> None:
    torch = pytest.importorskip("torch")
    x, mask = normal(1, 4, 32, 32) * 3, normal(1, 1, 32, 32)
    (inplace,) = run("ttnn.softmax_in_place", x)
    assert np.allclose(inplace, torch.softmax(torch.tensor(x), -1).numpy(), atol=1e-6)
    (fused,) = run("ttnn.scale_mask_softmax_in_place", x, mask, args=[A("0", TENSOR.format(1)), A("1", "0.125"),
                                                                      A("2", TENSOR.format(2))])
    assert np.allclose(fused, torch.softmax(torch.tensor(x) * 0.125 + torch.tensor(mask), -1).numpy(), atol=1e-6)
    (attn,) = run("ttnn.transformer.attention_softmax_", x, mask,
                  args=tensors("tensor", "attention_mask") + [A("head_size", "16")])
    assert np.allclose(attn, torch.softmax(torch.tensor(x) / 4 + torch.tensor(mask), -1).numpy(), atol=1e-6)
    with pytest.raises(UnsupportedArguments, match="mask"):
        run("ttnn.scale_mask_softmax_in_place", x, normal(1, 1, 32, 16), args=[A("0", TENSOR.format(1)),
                                                                               A("2", TENSOR.format(2))])


def test_post_all_gather_norms_equal_the_norm_over_the_whole_width() -> None:
    # two devices each hold half of [32, 128]; their stats blocks gathered side by side, as the model's all_gather does
    x, weight, bias = normal(1, 1, 32, 128) * 2 + 0.5, normal(128), normal(128)
    halves = np.split(x, 2, axis=-1)
    rms_stats = np.concatenate([np.pad((h * h).sum(-1, keepdims=True), ((0, 0), (0, 0), (0, 0), (0, 31)))
                                for h in halves], axis=-1)
    ln_stats = np.concatenate([np.concatenate([np.repeat((h * h).sum(-1, keepdims=True), 32, -1),
                                               np.repeat(h.sum(-1, keepdims=True), 32, -1)], -1) for h in halves], -1)
    for device, half in enumerate(halves):
        part = slice(64 * device, 64 * (device + 1))
        (rms,) = run("ttnn.rms_norm_post_all_gather", half, rms_stats, weight[part],
                     args=tensors("input_tensor", "stats", "weight") + [A("epsilon", "1e-05")])
        (whole,) = run("ttnn.rms_norm", x, weight, args=tensors("input_tensor", "weight") + [A("epsilon", "1e-05")])
        assert np.allclose(rms, whole[..., part], atol=1e-5)
        (ln,) = run("ttnn.layer_norm_post_all_gather", half, ln_stats, weight[part], bias[part],
                    args=tensors("input_tensor", "stats", "weight", "bias") + [A("epsilon", "1e-05")])
        (lwhole,) = run("ttnn.layer_norm", x, weight, bias, args=tensors("input_tensor", "weight", "bias")
                        + [A("epsilon", "1e-05")])
        assert np.allclose(ln, lwhole[..., part], atol=1e-4)


def test_pre_all_gather_statistics_by_hand_and_only_their_columns_defined() -> None:
    # rows [1, 2, 3] and [-1, 0, 0.5]: sum(x^2) 14 and 1.25, sum(x) 6 and -0.5, all exact in bfloat16
    x = np.array([[[[1, 2, 3], [-1, 0, 0.5]]]], F)
    (rms,) = run("ttnn.rms_norm_pre_all_gather", x, args=tensors("input_tensor"))
    (ln,) = run("ttnn.layer_norm_pre_all_gather", x, args=tensors("input_tensor") + [A("dtype", "DataType.FLOAT32")])
    assert rms.shape == (1, 1, 2, 32) and rms.dtype.name == "bfloat16" and ln.shape == (1, 1, 2, 64) and ln.dtype == F
    assert refs.defined_part("ttnn.rms_norm_pre_all_gather", rms).reshape(-1).tolist() == [14, 1.25]
    assert refs.defined_part("ttnn.layer_norm_pre_all_gather", ln).reshape(2, 2).tolist() == [[14, 6], [1.25, -0.5]]
    assert refs.defined_part("ttnn.rms_norm", x) is x  # an operation that defines its whole output
    (residual,) = run("ttnn.rms_norm_pre_all_gather", x, x, args=tensors("input_tensor", "residual_input_tensor"))
    assert residual[..., 0].reshape(-1).tolist() == [56, 5]  # (2x)^2 summed
    with pytest.raises(UnsupportedArguments, match="Welford"):
        run("ttnn.layer_norm_pre_all_gather", x, x, args=tensors("input_tensor", "recip_tensor"))


def test_pre_all_gather_statistics_feed_post_all_gather_as_the_whole_norm() -> None:
    # four devices each hold a quarter of [32, 128]: each one's statistics, gathered side by side along the last axis
    # as the models' all_gather(dim=3) does, give post_all_gather the norm over the whole width
    x, weight, bias = normal(1, 1, 32, 128) * 2 + 0.5, normal(128), normal(128)
    quarters = np.split(x, 4, axis=-1)
    for kind, extra in (("rms", []), ("layer", [A("dtype", "DataType.FLOAT32")])):
        stats = np.concatenate([run(f"ttnn.{kind}_norm_pre_all_gather", q, args=tensors("input_tensor") + extra)[0]
                                for q in quarters], axis=-1)
        (whole,) = run(f"ttnn.{kind}_norm", x, weight, bias, args=tensors("input_tensor", "weight", "bias")
                       + [A("epsilon", "1e-05")])
        for device, quarter in enumerate(quarters):
            part = slice(32 * device, 32 * (device + 1))
            (out,) = run(f"ttnn.{kind}_norm_post_all_gather", quarter, stats, weight[part], bias[part],
                         args=tensors("input_tensor", "stats", "weight", "bias") + [A("epsilon", "1e-05")])
            # rms's statistics are rounded to bfloat16 (its default dtype: 2^-9 relative), layer norm's kept in float32
            assert np.allclose(out, whole[..., part], atol=1e-2 if kind == "rms" else 1e-4), kind


def test_group_norm_against_torch_and_refuses_packed_weights() -> None:
    torch = pytest.importorskip("torch")
    x, weight, bias = normal(2, 1, 48, 32) * 3 + 1, normal(32), normal(32)
    args = tensors("input_tensor", "weight", "bias") + [A("num_groups", "4"), A("epsilon", "1e-05")]
    (out,) = run("ttnn.group_norm", x, weight, bias, args=args)
    expected = torch.nn.functional.group_norm(torch.tensor(x).permute(0, 3, 1, 2), 4, torch.tensor(weight),
                                              torch.tensor(bias), eps=1e-5).permute(0, 2, 3, 1).numpy()
    assert np.allclose(out, expected, atol=1e-5)
    with pytest.raises(UnsupportedArguments, match="weight"):
        run("ttnn.group_norm", x, normal(1, 1, 2, 32), bias, args=args)


# --- layouts around convolutions, reductions, matmul, chunked attention -----------------------------------------


def test_fold_and_channel_order_by_hand() -> None:
    x = np.arange(2 * 4 * 4 * 3, dtype=F).reshape(2, 4, 4, 3)
    (out,) = run("ttnn.fold", x, args=[A("0", TENSOR.format(1)), A("1", "2"), A("2", "2")])
    # output pixel (1, 0) of image 1 packs input pixels (2, 0), (2, 1), (3, 0), (3, 1), channels in order
    assert out.shape == (2, 2, 2, 12) and np.array_equal(out[1, 1, 0], np.concatenate([x[1, 2, 0], x[1, 2, 1],
                                                                                       x[1, 3, 0], x[1, 3, 1]]))
    (collapsed,) = run("ttnn.fold", x, args=[A("0", TENSOR.format(1)), A("1", "2"), A("2", "2"),
                                             A("padding", "[0, 0, 1, 1]"), A("collapse_output", "True")])
    assert collapsed.shape == (1, 1, 2 * 2 * 3, 12) and np.array_equal(collapsed[0, 0, 0, :3], [0, 0, 0])
    with pytest.raises(UnsupportedArguments, match="use_transpose_as_fold"):
        run("ttnn.fold", x, args=[A("0", TENSOR.format(1)), A("1", "2"), A("2", "2"), A("3", "True")])
    hwc = np.arange(2 * 6 * 3, dtype=F).reshape(1, 2, 6, 3)  # [1, B, HW, C]
    (chw,) = run("ttnn.experimental.convert_to_chw", hwc)
    assert chw.shape == (1, 2, 3, 6) and chw[0, 1, 2, 4] == hwc[0, 1, 4, 2]
    (back,) = run("ttnn.experimental.convert_to_hwc", chw)
    assert np.array_equal(back, hwc.reshape(1, 1, 12, 3))


def test_fast_reduce_nc_by_hand() -> None:
    x = np.arange(2 * 3 * 2 * 2, dtype=F).reshape(2, 3, 2, 2)
    (one,) = run("ttnn.experimental.fast_reduce_nc", x, args=[A("0", TENSOR.format(1)), A("dims", "[1]")])
    assert one.shape == (2, 1, 2, 2) and one[1, 0, 1, 0] == x[1, :, 1, 0].sum() == 14 + 18 + 22
    (both,) = run("ttnn.experimental.fast_reduce_nc", x, args=[A("0", TENSOR.format(1)), A("dims", "[0, 1]")])
    assert both.shape == (1, 1, 2, 2) and both[0, 0, 0, 0] == sum(range(0, 24, 4))
    with pytest.raises(UnsupportedArguments, match="dims"):
        run("ttnn.experimental.fast_reduce_nc", x, args=[A("0", TENSOR.format(1)), A("dims", "[2]")])


def test_minimal_matmul_by_hand() -> None:
    a = np.array([[[[1, 2], [3, 4]]], [[[-1, 0], [0, -1]]]], F)  # [2, 1, 2, 2]
    b = np.array([[[[5, 6], [7, 8]]]], F)  # [1, 1, 2, 2]
    (out,) = run("ttnn.experimental.minimal_matmul", a, b, np.array([[1, -100]], F),
                 args=tensors("input_tensor", "weight_tensor", "bias_tensor")
                 + [A("fused_activation", "UnaryWithParam(op_type=UnaryOpType::RELU)")])
    assert out.shape == (2, 1, 2, 2) and np.array_equal(out[0, 0], [[20, 0], [44, 0]]) and not out[1].any()
    with pytest.raises(UnsupportedArguments, match="fuse_swiglu"):
        run("ttnn.experimental.minimal_matmul", a, b, args=tensors("input_tensor", "weight_tensor")
            + [A("fuse_swiglu", "True")])


def test_chunked_sdpa_against_torch() -> None:
    torch = pytest.importorskip("torch")
    b, heads, kv_heads, chunk, d, block = 2, 4, 2, 16, 8, 16
    q, k, v = normal(b, heads, chunk, d), normal(b, kv_heads, 64, d), normal(b, kv_heads, 64, d)
    table = np.array([[3, 0, 5, 1], [7, 2, 6, 4]])
    kc, vc = np.zeros((8, kv_heads, block, d), F), np.zeros((8, kv_heads, block, d), F)
    for user in range(b):
        for j, page in enumerate(table[user]):
            kc[page], vc[page] = k[user, :, j * block : (j + 1) * block], v[user, :, j * block : (j + 1) * block]
    (out,) = run("ttnn.transformer.chunked_scaled_dot_product_attention", q, kc, vc, table.astype(np.int32),
                 args=[A(str(i), TENSOR.format(i + 1)) for i in range(4)] + [A("4", "32")])
    allowed = np.arange(48)[None, :] <= np.arange(32, 48)[:, None]  # queries at 32..47 over keys 0..47
    kk, vv = (torch.tensor(t[:, :, :48]).repeat_interleave(2, 1) for t in (k, v))
    expected = torch.nn.functional.scaled_dot_product_attention(torch.tensor(q), kk, vv, attn_mask=torch.tensor(allowed))
    assert np.allclose(out, expected.numpy(), atol=1e-6)


def test_grid_sample_against_torch() -> None:
    torch = pytest.importorskip("torch")
    x, grid = normal(2, 5, 7, 3), RNG.uniform(-1.2, 1.2, (2, 4, 6, 4)).astype(F)  # two point sets per grid cell
    for mode in ("bilinear", "nearest"):
        for corners in ("False", "True"):
            (out,) = run("ttnn.grid_sample", x, grid, args=tensors("input_tensor", "grid")
                         + [A("mode", mode), A("align_corners", corners)])
            expected = torch.nn.functional.grid_sample(torch.tensor(x).permute(0, 3, 1, 2),
                                                       torch.tensor(grid).reshape(2, 4, 12, 2), mode=mode,
                                                       align_corners=corners == "True")
            assert np.allclose(out, expected.permute(0, 2, 3, 1).numpy(), atol=1e-6)
    (packed,) = run("ttnn.grid_sample", x, grid, args=tensors("input_tensor", "grid") + [A("batch_output_channels", "True")])
    (plain,) = run("ttnn.grid_sample", x, grid, args=tensors("input_tensor", "grid"))
    assert packed.shape == (2, 4, 6, 6) and np.array_equal(packed.reshape(2, 4, 12, 3), plain)
    with pytest.raises(UnsupportedArguments, match="padding_mode"):
        run("ttnn.grid_sample", x, grid, args=tensors("input_tensor", "grid") + [A("padding_mode", "border")])


def test_batch_norm_and_group_attn_matmul_by_hand() -> None:
    torch = pytest.importorskip("torch")
    x, mean, var, weight, bias = normal(2, 3, 4, 5), normal(1, 3, 1, 1), np.abs(normal(1, 3, 1, 1)) + 0.5, \
        normal(1, 3, 1, 1), normal(1, 3, 1, 1)
    names = ("input", "running_mean", "running_var", "weight", "bias")
    (infer,) = run("ttnn.batch_norm", x, mean, var, weight, bias, args=tensors(*names))
    assert np.allclose(infer, (x - mean) / np.sqrt(var + 1e-5) * weight + bias, atol=1e-5)
    (train,) = run("ttnn.batch_norm", x, mean, var, weight, bias, args=tensors(*names) + [A("training", "True")])
    expected = torch.nn.functional.batch_norm(torch.tensor(x), None, None, torch.tensor(weight.reshape(-1)),
                                              torch.tensor(bias.reshape(-1)), True, eps=1e-5)
    assert np.allclose(train, expected.numpy(), atol=1e-5)
    a, b = normal(1, 8, 3, 16), normal(3, 1, 16, 5)  # [1, heads, users, d] against each user's [1, d, keys]
    (scores,) = run("ttnn.experimental.group_attn_matmul", a, b)
    assert scores.shape == (1, 8, 3, 5) and np.allclose(scores[0, 6, 2], a[0, 6, 2] @ b[2, 0], atol=1e-5)


@pytest.mark.parametrize("op, inputs, args", [
    ("ttnn.conv2d", [normal(1, 1, 16, 4), normal(4, 4, 3, 3)],
     tensors("input_tensor", "weight_tensor") + conv_args(1, 4, 4, 4, 4, "[3, 3]", padding=f"[{1 << 40}, 1]")),
    ("ttnn.conv_transpose2d", [normal(1, 1, 16, 4), normal(4, 4, 3, 3)],
     tensors("input_tensor", "weight_tensor") + conv_args(1, 4, 4, 4, 4, "[3, 3]", stride=f"[{1 << 30}, 1]")),
    ("ttnn.max_pool2d", [normal(1, 1, 16, 4)], pool_args(1, 4, 4, 4, f"[{1 << 20}, {1 << 20}]", "[1, 1]",
                                                         f"[{1 << 20}, {1 << 20}]", "[1, 1]")),
    ("ttnn.adaptive_avg_pool2d", [normal(1, 1, 16, 4)], pool_args(1, 4, 4, 4, f"[{1 << 20}, {1 << 20}]")),
    ("ttnn.upsample", [normal(1, 4, 4, 4)], [A("0", TENSOR.format(1)), A("1", "1e6")]),
    ("ttnn.fold", [normal(1, 4, 4, 4)], [A("0", TENSOR.format(1)), A("1", "2"), A("2", "2"),
                                         A("padding", f"[{1 << 30}, {1 << 30}]")]),
])
def test_hostile_arguments_are_refused_before_building(op: str, inputs: list[np.ndarray], args: list[A]) -> None:
    limit = refs.justified_elements(int(np.size(a)) for a in inputs)
    with pytest.raises(Oversized):
        refs.compute_outputs(op, list(enumerate(inputs, start=1)), args, max_elements=limit)


def test_an_infinite_scale_is_refused() -> None:
    with pytest.raises(UnsupportedArguments, match="scale_factor"):
        run("ttnn.upsample", normal(1, 2, 2, 1), args=[A("0", TENSOR.format(1)), A("1", "inf")])


def test_replay_of_a_conv_net_names_the_planted_fault_and_reads_an_in_place_cache(tmp_path: Path) -> None:
    x, w = normal(1, 1, 2 * 6 * 6, 4), normal(8, 4, 3, 3)
    conv = {"input_tensor": TENSOR.format(1), "weight_tensor": TENSOR.format(2), "in_channels": "4", "out_channels": "8",
            "batch_size": "2", "input_height": "6", "input_width": "6", "kernel_size": "[3, 3]", "padding": "[1, 1]"}
    (y,) = refs.compute_outputs("ttnn.conv2d", [(1, x), (2, w)], [A(k, v) for k, v in conv.items()])
    pool = {str(i): v for i, v in enumerate([TENSOR.format(3), "2", "6", "6", "8", "[2, 2]", "[2, 2]", "[0, 0]", "[1, 1]"])}
    (pooled,) = refs.compute_outputs("ttnn.max_pool2d", [(3, y)], [A(k, v) for k, v in pool.items()])
    wrong = pooled.copy()
    wrong[0, 0, 5:7] += 3  # two output pixels off: a planted fault
    seq, after = normal(1, 1, 32, 8), np.zeros((2, 1, 32, 8), F)
    after[1] = seq[0]  # the cache as stored after the in-place fill (one tensor id before and after)
    with reportdb.Writer(tmp_path / "r") as writer:
        for tensor_id, array in ((1, x), (2, w), (3, y), (4, wrong), (5, after), (6, seq)):
            writer.put_tensor(tensor_id, array)
        writer.add_operation(1, "ttnn.conv2d", arguments=conv, inputs=[1, 2], outputs=[3])
        writer.add_operation(2, "ttnn.max_pool2d", arguments=pool, inputs=[3], outputs=[4])
        writer.add_operation(3, "ttnn.fill_cache", arguments={"0": TENSOR.format(5), "1": TENSOR.format(6), "2": "1"},
                             inputs=[5, 6], outputs=[5])
    result = reportdb.replay(tmp_path / "r")
    assert [(r.name, r.status, r.passed) for r in result.rows] == [
        ("ttnn.conv2d", "compared", True), ("ttnn.max_pool2d", "compared", False), ("ttnn.fill_cache", "compared", True)]
    assert result.first_failure is not None and result.first_failure.operation_id == 2


def test_adaptive_max_pool_attn_matmul_and_fused_cache_update() -> None:
    torch = pytest.importorskip("torch")
    x = normal(2, 7, 9, 3)
    (mx,) = run("ttnn.adaptive_max_pool2d", x.reshape(1, 1, -1, 3), args=pool_args(2, 7, 9, 3, "[3, 4]"))
    expected = torch.nn.functional.adaptive_max_pool2d(torch.tensor(x).permute(0, 3, 1, 2), (3, 4))
    assert np.array_equal(mx, expected.permute(0, 2, 3, 1).reshape(1, 1, -1, 3).numpy())
    a, b = normal(1, 4, 2, 8), normal(2, 1, 8, 3)
    (group,) = run("ttnn.experimental.group_attn_matmul", a, b)
    (plain,) = run("ttnn.experimental.attn_matmul", a, b)
    assert np.array_equal(group, plain) and np.allclose(plain[0, 1, 1], a[0, 1, 1] @ b[1, 0], atol=1e-6)
    k_cache, v_cache, k, v = np.zeros((2, 1, 8, 4), F), np.ones((2, 1, 8, 4), F), normal(1, 2, 32, 4), normal(1, 2, 32, 4)
    new_k, new_v = run("ttnn.experimental.paged_fused_update_cache", k_cache, k, v_cache, v,
                       args=tensors("cache_tensor1", "input_tensor1", "cache_tensor2", "input_tensor2")
                       + [A("update_idxs", "[2, 5]")])
    assert np.array_equal(new_k[1, 0, 5], k[0, 1, 0]) and np.count_nonzero(new_k) == np.count_nonzero(k[0, :, 0])
    assert np.array_equal(new_v[0, 0, 2], v[0, 0, 0]) and np.array_equal(new_v[0, 0, 3], np.ones(4, F))
