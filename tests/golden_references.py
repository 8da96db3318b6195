"""Run ttnn's own golden functions on seeded inputs and record each call's arguments with ttnn's own code.

Run with the python of a venv holding ttnn 0.81.1 and torch (tests/test_references_golden.py builds it):

    python golden_references.py OUT [--database-py FILE]

For every case below (an operation called as a model calls it: positional arguments, keywords), writes
``OUT/<n>.npz`` (``input<i>``: the inputs as float32/int64 numpy arrays, ``golden<i>``: the golden function's
outputs, one for most operations)
and ``OUT/cases.json``: per case the operation, the input tensor ids, and the argument rows ttnn itself records for
the call: ``graph`` by ttnn 0.81's ``ttnn.graph.record_python_operation`` (the graph report's text forms) and, with
``--database-py`` (ttnn 0.64.5's ``database.py``), ``database`` by its ``convert_arguments_to_strings`` (ttnn
0.6x's forms). This file needs no reportdb; the test compares reportdb's references with the goldens.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import pathlib
import sys

import numpy as np
import torch
import ttnn

RNG = np.random.default_rng(20261201)


def normal(*shape: int, positive: bool = False, away: bool = False) -> np.ndarray:
    """Seeded float32 values (bfloat16-representable, as device tensors hold): normal, positive, or away from 0."""
    x = RNG.standard_normal(shape).astype(np.float32)
    if positive:
        x = np.abs(x) + 0.05
    if away:
        x = np.where(x >= 0, x + 0.25, x - 0.25)
    return torch.tensor(x).to(torch.bfloat16).to(torch.float32).numpy()


def cases() -> list[tuple[str, list, dict]]:
    """(operation, positional arguments, keywords): numpy arrays stand for tensors."""
    x4 = normal(1, 1, 32, 64)
    return [
        ("ttnn.matmul", [normal(1, 1, 64, 96), normal(1, 1, 96, 32)], {}),
        ("ttnn.matmul", [normal(2, 8, 32, 64), normal(2, 8, 32, 64)], {"transpose_b": True}),  # attention scores
        ("ttnn.matmul", [normal(1, 1, 32, 64), normal(64, 32)], {"activation": "relu"}),
        ("ttnn.linear", [normal(1, 32, 128), normal(128, 256)], {"bias": normal(1, 256)}),
        ("ttnn.linear", [normal(1, 32, 128), normal(256, 128)], {"transpose_b": True, "bias": normal(256), "activation": "gelu"}),
        ("ttnn.add", [x4, normal(1, 1, 32, 64)], {}),
        ("ttnn.add", [x4, normal(1, 1, 1, 64)], {}),  # a bias row broadcast
        ("ttnn.add", [x4, 1.5], {}),
        ("ttnn.subtract", [x4, normal(1, 1, 32, 1)], {}),
        ("ttnn.multiply", [x4, normal(1, 1, 32, 64)], {}),
        ("ttnn.multiply", [x4, 0.125], {}),  # attention scaling
        ("ttnn.divide", [x4, normal(1, 1, 32, 64, away=True)], {}),
        ("ttnn.relu", [x4], {}),
        ("ttnn.silu", [x4], {}),
        ("ttnn.sigmoid", [x4], {}),
        ("ttnn.tanh", [x4], {}),
        ("ttnn.exp", [x4], {}),
        ("ttnn.log", [normal(1, 1, 32, 64, positive=True)], {}),
        ("ttnn.sqrt", [normal(1, 1, 32, 64, positive=True)], {}),
        ("ttnn.rsqrt", [normal(1, 1, 32, 64, positive=True)], {}),
        ("ttnn.reciprocal", [normal(1, 1, 32, 64, away=True)], {}),
        ("ttnn.neg", [x4], {}),
        ("ttnn.abs", [x4], {}),
        ("ttnn.gelu", [x4 * 3], {}),
        ("ttnn.gelu", [x4 * 3], {"variant": ttnn.GeluVariant.Tanh}),
        ("ttnn.clamp", [x4], {"min": -0.5, "max": 0.75}),
        ("ttnn.pow", [normal(1, 1, 32, 64, positive=True), 2.0], {}),
        ("ttnn.pow", [normal(1, 1, 32, 64, positive=True), 0.5], {}),
        ("ttnn.softmax", [normal(1, 8, 32, 32) * 4], {"dim": -1}),
        ("ttnn.softmax", [normal(1, 8, 32, 32)], {"dim": 1}),
        ("ttnn.layer_norm", [normal(1, 32, 256) * 2 + 1], {"weight": normal(256), "bias": normal(256), "epsilon": 1e-5}),
        ("ttnn.layer_norm", [normal(1, 32, 256)], {"residual_input_tensor": normal(1, 32, 256), "epsilon": 1e-12}),
        ("ttnn.rms_norm", [normal(1, 32, 256) * 3], {"weight": normal(256), "epsilon": 1e-6}),
        ("ttnn.rms_norm", [normal(1, 32, 256)], {"epsilon": 1e-5}),
        ("ttnn.mean", [x4], {"dim": -1, "keepdim": True}),
        ("ttnn.mean", [x4], {}),
        ("ttnn.sum", [x4], {"dim": [2, 3]}),
        ("ttnn.max", [x4], {"dim": -1}),
        ("ttnn.min", [x4], {"dim": 2, "keepdim": True}),
        ("ttnn.argmax", [x4], {"dim": -1}),
        ("ttnn.transpose", [normal(1, 8, 32, 64), 1, 2], {}),
        ("ttnn.permute", [normal(1, 32, 8, 64), (0, 2, 1, 3)], {}),
        ("ttnn.reshape", [normal(1, 1, 32, 128), (1, 32, 4, 32)], {}),
        ("ttnn.concat", [[normal(1, 1, 32, 64), normal(1, 1, 32, 32)]], {"dim": -1}),
        ("ttnn.slice", [normal(1, 1, 32, 64), [0, 0, 0, 0], [1, 1, 16, 64], [1, 1, 1, 2]], {}),
        ("ttnn.typecast", [normal(1, 1, 32, 64) * 1.001, ttnn.bfloat16], {}),
        ("ttnn.typecast", [normal(1, 1, 32, 64) * 300, ttnn.uint8], {}),  # negatives and > 255 wrap
        ("ttnn.typecast", [normal(1, 1, 32, 64) * 300, ttnn.int8], {}),
        ("ttnn.typecast", [normal(1, 1, 32, 64) * 30000 + 100, ttnn.uint16], {}),  # rounds half up, saturates
        ("ttnn.typecast", [normal(1, 1, 32, 64) * 1e6, ttnn.uint32], {}),
        ("ttnn.typecast", [normal(1, 1, 32, 64) * 1000, ttnn.int32], {}),
        ("ttnn.typecast", [RNG.integers(0, 70000, (1, 1, 32, 64)).astype(np.int64), ttnn.uint16], {}),
        ("ttnn.typecast", [normal(1, 1, 32, 64) * np.exp(normal(1, 1, 32, 64) * 4), ttnn.bfloat8_b], {}),
        ("ttnn.typecast", [normal(2, 3, 40) * np.exp(normal(2, 3, 40) * 4), ttnn.bfloat4_b], {}),  # padded tiles
        ("ttnn.typecast", [normal(1, 64, 32), ttnn.bfloat8_b], {}),
        ("ttnn.to_layout", [x4, ttnn.TILE_LAYOUT], {}),
        ("ttnn.split", [normal(1, 1, 32, 64), 16], {"dim": -1}),  # several outputs from here on
        ("ttnn.split", [normal(1, 1, 40, 64), 16, 2], {}),  # the last piece shorter
        ("ttnn.chunk", [normal(1, 1, 32, 64), 3, 3], {}),
        ("ttnn.transformer.split_query_key_value_and_split_heads", [normal(1, 32, 3 * 4 * 16)], {"num_heads": 4}),
        ("ttnn.transformer.split_query_key_value_and_split_heads", [normal(2, 32, (4 + 2 * 2) * 16)],
         {"num_heads": 4, "num_kv_heads": 2, "transpose_key": False}),
        ("ttnn.transformer.split_query_key_value_and_split_heads", [normal(1, 32, 4 * 16), normal(1, 32, 2 * 2 * 16)],
         {"num_heads": 4, "num_kv_heads": 2}),
        ("ttnn.embedding", [RNG.integers(0, 1000, (1, 32)).astype(np.int64), normal(1000, 64)], {}),
        ("ttnn.where", [(normal(1, 1, 32, 64) > 0).astype(np.float32), x4, normal(1, 1, 32, 64)], {}),
        ("ttnn.where", [(normal(1, 1, 32, 64) > 0).astype(np.float32), x4, 0.0], {}),
        ("ttnn.transformer.scaled_dot_product_attention", [normal(1, 8, 64, 32), normal(1, 2, 64, 32), normal(1, 2, 64, 32)], {}),
        ("ttnn.transformer.scaled_dot_product_attention", [normal(1, 4, 32, 32), normal(1, 4, 32, 32), normal(1, 4, 32, 32)],
         {"attn_mask": np.triu(np.full((1, 1, 32, 32), -1e9, np.float32), 1), "is_causal": False, "scale": 0.25}),
        # ttnn's rotary golden requires token_idx (it cannot express the prefill call without one): decode calls only
        ("ttnn.experimental.rotary_embedding", [normal(1, 8, 1, 64), normal(1, 1, 128, 64), normal(1, 1, 128, 64), 5], {}),
        # conv, pooling, attention, caches and distributed norms (h-refsB); max/avg/adaptive pooling's goldens import
        # tt-metal's tests/ tree, which the wheel does not ship: tests/test_references_nn.py checks them against torch
        ("ttnn.conv2d", [], {"input_tensor": normal(1, 1, 2 * 8 * 8, 16), "weight_tensor": normal(32, 16, 3, 3),
                             "bias_tensor": normal(1, 1, 1, 32), "in_channels": 16, "out_channels": 32, "batch_size": 2,
                             "input_height": 8, "input_width": 8, "kernel_size": (3, 3), "stride": (1, 1),
                             "padding": (1, 1), "dilation": (1, 1), "groups": 1}),
        ("ttnn.conv2d", [], {"input_tensor": normal(1, 1, 9 * 7, 8), "weight_tensor": normal(8, 1, 3, 3),
                             "in_channels": 8, "out_channels": 8, "batch_size": 1, "input_height": 9, "input_width": 7,
                             "kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 0, 2, 1), "dilation": (1, 2),
                             "groups": 8, "conv_config": ttnn.Conv2dConfig(activation=ttnn.UnaryWithParam(ttnn.UnaryOpType.RELU))}),
        ("ttnn.upsample", [normal(2, 5, 6, 8), 2], {}),
        ("ttnn.upsample", [normal(1, 5, 6, 8), [2, 3]], {"mode": "bilinear"}),
        ("ttnn.global_avg_pool2d", [normal(2, 7, 5, 16)], {}),
        ("ttnn.transformer.concatenate_heads", [normal(2, 4, 32, 16)], {}),
        ("ttnn.softmax_in_place", [normal(1, 8, 32, 32) * 4], {}),
        ("ttnn.scale_mask_softmax_in_place", [normal(1, 8, 32, 32), 0.125, normal(1, 1, 32, 32)], {}),
        ("ttnn.transformer.attention_softmax_", [normal(1, 8, 32, 32) * 4], {"head_size": 64, "attention_mask": normal(1, 1, 32, 32)}),
        ("ttnn.transformer.attention_softmax", [normal(2, 4, 32, 64)], {"head_size": 16}),
        ("ttnn.scale_mask_softmax", [normal(1, 8, 32, 32)], {"scale": 0.5}),
        ("ttnn.scale_causal_mask_hw_dims_softmax_in_place", [normal(1, 8, 32, 32), 0.25,
                                                              np.triu(np.full((1, 1, 32, 32), -1e9, np.float32), 1)], {}),
        ("ttnn.experimental.concatenate_heads", [normal(1, 8, 32, 16)], {}),
        ("ttnn.transformer.scaled_dot_product_attention_decode", [normal(1, 4, 8, 32), normal(4, 2, 64, 32), normal(4, 2, 64, 32)],
         {"cur_pos": [3, 63, 0, 17]}),
        ("ttnn.transformer.scaled_dot_product_attention_decode", [normal(1, 2, 4, 32), normal(2, 4, 32, 32), normal(2, 4, 32, 32)],
         {"is_causal": False, "attn_mask": normal(2, 1, 4, 32), "scale": 0.3}),
        ("ttnn.transformer.paged_scaled_dot_product_attention_decode",
         [normal(1, 2, 4, 32), normal(8, 1, 16, 32), normal(8, 1, 16, 32),
          np.array([[3, 0, 5, 1], [7, 2, 6, 4]], dtype=np.int64)],
         {"cur_pos_tensor": np.array([40, 9], dtype=np.int64)}),
        ("ttnn.fill_cache", [normal(4, 2, 128, 32), normal(1, 2, 64, 32), 2], {"update_idx": 32}),
        ("ttnn.update_cache", [normal(4, 2, 64, 32), normal(1, 2, 32, 32), 17], {"batch_offset": 8}),
        ("ttnn.rms_norm_post_all_gather", [normal(1, 1, 32, 128), normal(1, 1, 32, 4 * 32, positive=True) * 64],
         {"epsilon": 1e-5, "weight": normal(128)}),
        ("ttnn.layer_norm_post_all_gather", [normal(1, 1, 32, 128), np.concatenate(
            [np.stack([normal(1, 1, 32, positive=True) * 200, normal(1, 1, 32)], axis=-1).repeat(32, -1)] * 2, axis=-1)],
         {"epsilon": 1e-5, "weight": normal(128), "bias": normal(128)}),
        ("ttnn.rms_norm_pre_all_gather", [normal(1, 1, 32, 128) * 3], {}),  # bfloat16 statistics by default
        ("ttnn.rms_norm_pre_all_gather", [normal(1, 1, 64, 96)], {"residual_input_tensor": normal(1, 1, 64, 96),
                                                                  "dtype": ttnn.float32}),
        ("ttnn.layer_norm_pre_all_gather", [normal(1, 1, 32, 128) + 0.5], {"dtype": ttnn.float32}),
        ("ttnn.layer_norm_pre_all_gather", [normal(2, 32, 64)], {"residual_input_tensor": normal(2, 32, 64)}),
        ("ttnn.transformer.chunked_scaled_dot_product_attention",
         [normal(2, 4, 32, 32), normal(8, 2, 32, 32), normal(8, 2, 32, 32),
          np.array([[3, 0, 5, 1], [7, 2, 6, 4]], dtype=np.int64), 64], {"scale": 0.2}),
        ("ttnn.fold", [normal(2, 8, 6, 4), 2, 3], {}),
        ("ttnn.fold", [normal(1, 6, 4, 8), 4, 2], {"padding": [1, 1, 0, 2], "collapse_output": True}),
        ("ttnn.batch_norm", [normal(2, 4, 8, 8)], {"running_mean": normal(1, 4, 1, 1), "running_var": normal(1, 4, 1, 1, positive=True),
                                                   "weight": normal(1, 4, 1, 1), "bias": normal(1, 4, 1, 1)}),
        ("ttnn.batch_norm", [normal(2, 4, 8, 8) * 2 + 1], {"training": True, "eps": 1e-3}),
        ("ttnn.group_norm", [normal(2, 1, 64, 64) * 2 + 1], {"num_groups": 8, "epsilon": 1e-5, "weight": normal(64),
                                                           "bias": normal(64)}),
    ] + placement_shapes_creation_comparison_sampling_cases(x4)


def placement_shapes_creation_comparison_sampling_cases(x4: np.ndarray) -> list[tuple[str, list, dict]]:
    """The cases of the placement, shapes, creation, comparison, indexing and sampling references."""
    whole = np.round(normal(1, 1, 32, 64) * 2)  # small whole numbers: equal pairs occur
    other = np.round(normal(1, 1, 32, 64) * 2)
    with_nan = normal(1, 1, 32, 64)
    with_nan[0, 0, ::3, ::5] = np.nan
    distinct = RNG.permutation(32 * 64).reshape(1, 1, 32, 64).astype(np.float32)  # no ties for topk's indices
    targets = np.argsort(RNG.random((1, 1, 32, 64)), axis=-1)[..., :16].astype(np.int64)  # no two on one position
    return [
        # placement
        ("ttnn.sharded_to_interleaved", [x4, ttnn.DRAM_MEMORY_CONFIG], {}),
        ("ttnn.sharded_to_interleaved", [x4, ttnn.DRAM_MEMORY_CONFIG], {"output_dtype": ttnn.bfloat16}),
        ("ttnn.interleaved_to_sharded", [x4, ttnn.L1_MEMORY_CONFIG], {}),
        ("ttnn.reshard", [x4, ttnn.L1_MEMORY_CONFIG], {}),
        ("ttnn.reallocate", [x4], {}),
        ("ttnn.move", [x4], {}),
        ("ttnn.clone", [x4], {"dtype": ttnn.bfloat16}),
        ("ttnn.copy", [x4, normal(1, 1, 32, 64)], {}),
        ("ttnn.tilize_with_val_padding", [normal(1, 1, 30, 60), [1, 1, 32, 64], 0.0], {}),
        ("ttnn.interleaved_to_sharded_partial", [normal(1, 1, 64, 32), ttnn.CoreGrid(y=1, x=1), [32, 32], 2, 1,
                                                 ttnn.TensorMemoryLayout.HEIGHT_SHARDED, ttnn.ShardOrientation.ROW_MAJOR], {}),
        ("ttnn.sharded_to_interleaved_partial", [normal(1, 1, 32, 32), normal(1, 1, 64, 32), 2, 1], {}),
        # shapes
        ("ttnn.pad", [normal(1, 1, 30, 60), [(0, 0), (0, 0), (0, 2), (0, 4)], 0.5], {}),
        ("ttnn.pad", [normal(1, 1, 30, 60), [1, 1, 32, 64], [0, 0, 1, 2], -1.0], {}),
        ("ttnn.untilize_with_unpadding", [x4, [0, 0, 15, 31]], {}),
        ("ttnn.squeeze", [normal(1, 1, 32, 64), 0], {}),
        ("ttnn.squeeze", [normal(1, 1, 32, 64)], {}),
        ("ttnn.unsqueeze", [normal(32, 64), 0], {}),
        ("ttnn.unsqueeze_to_4D", [normal(32, 64)], {}),
        ("ttnn.repeat", [normal(1, 1, 32, 64), ttnn.Shape([1, 2, 1, 1])], {}),
        ("ttnn.repeat", [normal(1, 1, 32, 64), [2, 1]], {}),  # fewer repetitions than axes
        ("ttnn.expand", [normal(1, 1, 1, 64), [1, 4, 32, -1]], {}),
        ("ttnn.stack", [[normal(2, 32), normal(2, 32)], 1], {}),
        ("ttnn.repeat_interleave", [normal(1, 4, 32, 32), 2], {"dim": 1}),
        ("ttnn.narrow", [x4, 3, 8, 16], {}),
        ("ttnn.reshape_on_device", [normal(1, 1, 32, 64), 1, 2, 16, 64], {}),
        ("ttnn.tril", [normal(1, 1, 32, 32)], {"diagonal": 1}),
        # creation
        ("ttnn.zeros", [[1, 1, 32, 64]], {}),
        ("ttnn.ones", [[2, 32]], {"dtype": ttnn.float32}),
        ("ttnn.full", [[1, 32, 32], 0.1], {}),  # 0.1 as bfloat16 stores it
        ("ttnn.zeros_like", [x4], {}),
        ("ttnn.ones_like", [x4], {}),
        ("ttnn.full_like", [x4, -2.5], {}),
        ("ttnn.arange", [0, 600, 3], {}),  # bfloat16 by default: above 256 the odd values round
        ("ttnn.arange", [50], {"dtype": ttnn.int32}),
        # comparison and logic
        ("ttnn.lt", [whole, other], {}),
        ("ttnn.gt", [x4, 0.0], {}),
        ("ttnn.le", [whole, other], {}),
        ("ttnn.ge", [whole, 1.0], {}),
        ("ttnn.eq", [whole, other], {}),
        ("ttnn.ne", [whole, other], {}),
        ("ttnn.logical_and", [whole, other], {}),
        ("ttnn.logical_or", [whole, other], {}),
        ("ttnn.logical_xor", [whole, other], {}),
        ("ttnn.logical_not", [whole], {}),
        ("ttnn.isnan", [with_nan], {}),
        ("ttnn.maximum", [x4, normal(1, 1, 32, 64)], {}),
        ("ttnn.minimum", [x4, 0.5], {}),
        ("ttnn.atan2", [x4, normal(1, 1, 32, 64)], {}),
        ("ttnn.remainder", [x4 * 4, normal(1, 1, 32, 64, away=True)], {}),
        # unary
        ("ttnn.sin", [x4 * 3], {}),
        ("ttnn.cos", [x4 * 3], {}),
        ("ttnn.floor", [x4 * 3], {}),
        ("ttnn.relu6", [x4 * 5], {}),
        ("ttnn.swish", [x4], {}),
        ("ttnn.sigmoid_accurate", [x4], {}),
        ("ttnn.softplus", [x4 * 10], {"beta": 2.0, "threshold": 10.0}),
        # in place: the values of the out-of-place operation
        ("ttnn.add_", [x4, normal(1, 1, 32, 64)], {}),
        ("ttnn.sub_", [x4, normal(1, 1, 1, 64)], {}),
        ("ttnn.subtract_", [x4, 0.5], {}),
        ("ttnn.mul_", [x4, normal(1, 1, 32, 64)], {}),
        ("ttnn.multiply_", [x4, 2.0], {}),
        ("ttnn.div_", [x4, normal(1, 1, 32, 64, away=True)], {}),
        ("ttnn.divide_", [x4, 4.0], {}),
        # indexing, reduction, sampling
        ("ttnn.gather", [x4, 3, RNG.integers(0, 64, (1, 1, 32, 16)).astype(np.int64)], {}),
        ("ttnn.scatter", [x4, 3, targets, normal(1, 1, 32, 16)], {}),
        ("ttnn.cumsum", [x4, 3], {}),
        ("ttnn.var", [x4], {"dim": -1}),
        ("ttnn.std", [x4], {"dim": 2, "keepdim": True}),
        ("ttnn.prod", [normal(1, 1, 4, 8, away=True)], {"dim": -1}),
        ("ttnn.plus_one", [RNG.integers(0, 1000, (1, 32)).astype(np.int64)], {}),
        ("ttnn.topk", [distinct, 8], {}),  # two outputs: values and indices
        ("ttnn.topk", [distinct, 4, 2], {"largest": False}),
        ("ttnn.sort", [distinct, -1], {}),
        ("ttnn.sort", [distinct], {"dim": 2, "descending": True}),
        # the operations one or two models call
        ("ttnn.bcast", [x4, normal(1, 1, 32, 64), ttnn.BcastOpMath.ADD, ttnn.BcastOpDim.H], {}),
        ("ttnn.bcast", [x4, normal(1, 1, 32, 32), ttnn.BcastOpMath.MUL, ttnn.BcastOpDim.HW], {}),
        ("ttnn.bcast", [x4, normal(1, 1, 32, 32), ttnn.BcastOpMath.SUB, ttnn.BcastOpDim.W], {}),
        ("ttnn.elu", [x4 * 3], {"alpha": 0.5}),
        ("ttnn.erf", [x4 * 2], {}),
        ("ttnn.eqz", [whole], {}),
        ("ttnn.alt_complex_rotate90", [x4], {}),
        ("ttnn.bitwise_and", [RNG.integers(0, 1 << 20, (1, 32)).astype(np.int64), 0xF0F], {}),
        ("ttnn.bitwise_or", [RNG.integers(0, 1 << 20, (1, 32)).astype(np.int64), 0x101], {}),
        ("ttnn.bitwise_not", [RNG.integers(-1000, 1000, (1, 32)).astype(np.int64)], {}),
        ("ttnn.lerp", [x4, normal(1, 1, 32, 64), 0.25], {}),
        ("ttnn.lerp", [x4, normal(1, 1, 32, 64), normal(1, 1, 32, 64)], {}),
        ("ttnn.addcmul", [x4, normal(1, 1, 32, 64), normal(1, 1, 32, 64)], {"value": 0.5}),
        ("ttnn.experimental.broadcast_to", [normal(1, 1, 1, 64), [2, 3, 32, 64]], {}),
        ("ttnn.fill", [x4, 1.75], {}),
        ("ttnn.moreh_full", [[1, 32, 32], 0.3], {}),
        ("ttnn.fill_rm", [1, 2, 32, 32, 5, 7, normal(1, 2, 32, 32), 2.0, -1.0], {}),
        ("ttnn.fill_ones_rm", [1, 1, 32, 32, 3, 40, normal(1, 1, 32, 32)], {}),
        ("ttnn.moreh_cumsum", [x4, 2], {}),
        ("ttnn.experimental.slice_write", [normal(1, 8, 8, 16), normal(1, 16, 16, 16), [0, 4, 0, 0], [1, 12, 16, 16],
                                           [1, 1, 2, 1]], {}),
    ]


def walk(value, convert):
    """``value`` with every numpy array (also inside lists) replaced by ``convert(array)``."""
    if isinstance(value, np.ndarray):
        return convert(value)
    if isinstance(value, list):
        return [walk(v, convert) for v in value]
    return value


def as_numpy(output: torch.Tensor) -> np.ndarray:
    """A golden output as numpy: bfloat16 widened to float32, torch's unsigned 16/32-bit integers as int64."""
    if output.dtype == torch.bfloat16:
        return output.float().numpy()
    if not output.is_floating_point() and output.dtype not in (torch.uint8, torch.int8, torch.int32, torch.int64):
        return output.to(torch.int64).numpy()  # torch's uint16/uint32 have no numpy form everywhere
    return output.detach().contiguous().numpy()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--database-py", type=pathlib.Path)
    options = parser.parse_args()
    database = None
    if options.database_py:
        sys.dont_write_bytecode = True  # no __pycache__ beside the cached download
        spec = importlib.util.spec_from_file_location("ttnn_064_database", options.database_py)
        database = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(database)
    options.out.mkdir(parents=True, exist_ok=True)
    records = []
    for n, (op, args, kwargs) in enumerate(cases()):
        inputs: list[tuple[int, np.ndarray]] = []

        def to_ttnn(array: np.ndarray):
            tensor = ttnn.from_torch(torch.from_numpy(array), dtype=ttnn.uint32 if array.dtype.kind == "i" else ttnn.float32)
            tensor.tensor_id = 100 + len(inputs)
            inputs.append((tensor.tensor_id, array))
            return tensor

        tt_args, tt_kwargs = walk(args, to_ttnn), {k: walk(v, to_ttnn) for k, v in kwargs.items()}
        record = ttnn.graph.record_python_operation(op, tt_args, tt_kwargs)
        rows = {"graph": [[k, v] for k, v in record["arguments"].items()]}
        if database is not None:
            db_args, db_kwargs = database.convert_arguments_to_strings(tt_args, tt_kwargs)
            rows["database"] = [[str(i), a] for i, a in enumerate(db_args)] + [[k, v] for k, v in db_kwargs.items()]
        golden = ttnn.get_golden_function(functools.reduce(getattr, op.split(".")[1:], ttnn))
        def to_torch(array: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(array.copy())  # a golden may update its input in place (layer_norm's residual)

        output = golden(*walk(args, to_torch), **{k: walk(v, to_torch) for k, v in kwargs.items()})
        outputs = list(output) if isinstance(output, (list, tuple)) else [output]  # one per output of the operation
        np.savez(options.out / f"{n}.npz", golden_dtype=np.array(str(outputs[0].dtype)),
                 **{f"golden{i}": as_numpy(o) for i, o in enumerate(outputs)},
                 **{f"input{i}": array for i, (_, array) in enumerate(inputs)})
        records.append({"case": n, "op": op, "input_ids": [i for i, _ in inputs], "rows": rows})
    (options.out / "cases.json").write_text(json.dumps(records, indent=1))
    print(f"{len(records)} cases written to {options.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
