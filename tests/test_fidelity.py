"""reportdb.numeric.fidelity against hand-worked bit patterns and the documented behaviour of math fidelity, dest
accumulation and block-float packing."""

from __future__ import annotations

import re
from typing import Callable

import numpy as np
import pytest

from reportdb.errors import InvalidArgumentError
from reportdb.numeric import fidelity

# 1.8671875 is bfloat16 0x3FEF: mantissa 1.1101111b, the 11-bit srcA/srcB mantissa 111_0111_1000b.
X = np.array([1.8671875], dtype=np.float32)


def test_phase_operands_of_a_hand_worked_value() -> None:
    """Each phase keeps the mask's bits of 11101111000b: srcA 11101000000b = 1.8125 then 00000111000b = 7/128;
    srcB 11101110000b = 1.859375 then 00000001000b = 1/128; each pair sums back to the value."""
    (a0, b0), (a1, _), (_, b2), _ = fidelity.PHASE_MASKS
    assert fidelity.phase_operand(X, a0)[0] == 1.8125
    assert fidelity.phase_operand(X, a1)[0] == 7 / 128
    assert fidelity.phase_operand(X, b0)[0] == 1.859375
    assert fidelity.phase_operand(X, b2)[0] == 1 / 128
    assert fidelity.phase_operand(-4 * X, a0)[0] == -7.25  # sign and exponent kept: -(1.8125 * 4)


def test_zero_and_denormal_operands_flush_and_non_finite_pass() -> None:
    x = np.array([0.0, -0.0, 1e-39, np.inf, -np.inf], dtype=np.float32)
    part = fidelity.phase_operand(x, fidelity.PHASE_MASKS[0][0])
    assert list(part[:3]) == [0, 0, 0] and part[3] == np.inf and part[4] == -np.inf
    assert np.isnan(fidelity.phase_operand(np.array([np.nan], dtype=np.float32), 0b11111000000)[0])


def test_lofi_product_of_the_hand_worked_value() -> None:
    """LoFi: srcA 1.8125 x srcB 1.859375 = 3.3701171875, bfloat16 3.375 (3.3701 is nearer 3.375 than 3.359)."""
    assert fidelity.multiply(X, X, "LoFi", out_dtype="FLOAT32")[0] == 1.8125 * 1.859375
    assert fidelity.multiply(X, X, "LoFi")[0] == 3.375


def _bf16_pairs(n: int = 50_000) -> tuple[np.ndarray, np.ndarray]:
    """Random bfloat16 operands over a wide range of magnitudes and both signs."""
    rng = np.random.default_rng(3)
    scale = np.exp2(rng.integers(-20, 20, n)).astype(np.float32)
    return (fidelity.to_bfloat16(rng.standard_normal(n).astype(np.float32) * scale),
            fidelity.to_bfloat16(rng.standard_normal(n).astype(np.float32)))


def test_hifi4_is_the_full_bfloat16_product() -> None:
    a, b = _bf16_pairs()
    exact = a * b  # 8 x 8 significant bits: exact in float32
    assert np.array_equal(fidelity.multiply(a, b, "HiFi4", out_dtype="FLOAT32"), exact)
    assert np.array_equal(fidelity.multiply(a, b, "HiFi4"), fidelity.to_bfloat16(exact))


def test_each_lower_fidelity_keeps_or_shrinks_the_magnitude() -> None:
    """Dropping mantissa bits of either operand never grows |x*y|; LoFi shrinks most products, by at most 1/16 of
    srcA's and 1/64 of srcB's value (the bits it drops)."""
    a, b = _bf16_pairs()
    products = [np.abs(fidelity.multiply(a, b, f, out_dtype="FLOAT32")) for f in ("LoFi", "HiFi2", "HiFi3", "HiFi4")]
    for lower, higher in zip(products, products[1:]):
        assert np.all(lower <= higher)
    lofi, full = products[0], products[-1]
    assert np.mean(lofi < full) > 0.9
    assert np.all(lofi >= full * (1 - 1 / 16) * (1 - 1 / 64) * (1 - 1e-6))


def test_matmul_hifi4_float32_dest_matches_float64() -> None:
    rng = np.random.default_rng(5)
    a = fidelity.to_bfloat16(rng.standard_normal((2, 64, 96)).astype(np.float32))
    b = fidelity.to_bfloat16(rng.standard_normal((96, 40)).astype(np.float32))
    exact = np.matmul(a.astype(np.float64), b.astype(np.float64))
    got = fidelity.matmul(a, b, "HiFi4", out_dtype="FLOAT32")
    assert got.shape == (2, 64, 40) and got.dtype == np.float32
    assert np.max(np.abs(got - exact)) < 1e-5 * np.max(np.abs(exact))
    assert np.array_equal(fidelity.matmul(a, b), fidelity.to_bfloat16(got))


def test_matmul_accumulates_k_tile_by_tile_in_dest() -> None:
    """K = 96 in three tiles summing to 256, 0.75 and 0.75: a float32 dest holds 257.5 (bfloat16 258 out); a
    bfloat16 dest rounds 256.75 back to 256 after each later tile and gives 256."""
    a = np.ones((1, 96), dtype=np.float32)
    b = np.concatenate([np.full(32, 8.0), np.full(64, 0.75 / 32)]).astype(np.float32)[:, None]
    assert fidelity.matmul(a, b, "LoFi", dest="FLOAT32", out_dtype="FLOAT32")[0, 0] == 257.5
    assert fidelity.matmul(a, b, "LoFi", dest="FLOAT32")[0, 0] == 258.0
    assert fidelity.matmul(a, b, "LoFi", dest="BFLOAT16")[0, 0] == 256.0


def test_block_float_shares_an_exponent_per_face_row() -> None:
    """BFLOAT8_B keeps 7 bits relative to the largest of 16 values of a face row: 2**-10 beside a 1.0 in the same
    face row is lost, alone in the next face (columns 16-31) it is kept exactly, as is 0.5 beside 1.0."""
    x = np.zeros((32, 32), dtype=np.float32)
    x[0, 0], x[0, 1], x[0, 2], x[0, 16] = 1.0, 2.0**-10, 0.5, 2.0**-10
    y = fidelity.to_block_float(x, "BFLOAT8_B")
    assert (y[0, 0], y[0, 1], y[0, 2], y[0, 16]) == (1.0, 0.0, 0.5, 2.0**-10)
    assert np.count_nonzero(y) == 3


def test_block_float_round_trip_of_a_ragged_shape() -> None:
    """Shapes not a multiple of the tile pad with zeros; BFLOAT4_B keeps 3 bits: 1.0, 0.75 and 0.25 survive
    beside 1.0, 0.3 becomes 0.25, 0.1 (under half the step of 0.25) becomes 0."""
    x = np.zeros((3, 5, 40), dtype=np.float32)
    x[2, 4, 33:38] = [1.0, 0.75, 0.25, 0.3, 0.1]
    y = fidelity.round_to(x, "BFLOAT4_B")
    assert y.shape == x.shape and list(y[2, 4, 33:38]) == [1.0, 0.75, 0.25, 0.25, 0.0]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: fidelity.matmul(X.reshape(1, 1), X.reshape(1, 1), "MedFi"), "math fidelity 'MedFi'"),
        (lambda: fidelity.matmul(X.reshape(1, 1), X.reshape(1, 1), dest="FLOAT16"), "dest 'FLOAT16'"),
        (lambda: fidelity.round_to(X, "BFLOAT2_B"), "dtype 'BFLOAT2_B'"),
        (lambda: fidelity.matmul(X.reshape(1, 1), np.ones((2, 2), np.float32)), "cannot multiply (1, 1) by (2, 2)"),
    ],
)
def test_bad_arguments_say_what_to_pass(call: Callable[[], object], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        call()
