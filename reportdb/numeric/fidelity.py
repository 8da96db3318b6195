"""What a Tenstorrent device computes, in numpy: math fidelity phases, tile-ordered matmul, bfloat16 and block-float
rounding, so a user can ask "what would a LoFi device give" and a verdict can be calibrated against it.

Math fidelity, as documented in tt-buda ``docs/public/dataformats.rst`` ("Data Formats and Math Fidelity") and
modelled by tt-llk's own golden generators (``tests/python_tests/helpers/golden_generators.py``,
``FidelityMasking._apply_fidelity_masking``, ``MatmulGolden``): the FPU multiplies operands held in srcA/srcB as a
sign, an exponent and an 11-bit mantissa with its leading one (bfloat16's 1 + 7 bits sit in the top 8). One fidelity
phase multiplies only some mantissa bits of each operand:

======  =====================  =====================
phase   srcA mantissa bits     srcB mantissa bits
======  =====================  =====================
0       ``0b11111000000``      ``0b11111110000``
1       ``0b00000111110``      ``0b11111110000``
2       ``0b11111000000``      ``0b00000001111``
3       ``0b00000111110``      ``0b00000001111``
======  =====================  =====================

LoFi runs phase 0, HiFi2 phases 0-1, HiFi3 0-2, HiFi4 0-3, each phase's products accumulated into dest; on bfloat16
operands HiFi4 is the exact product and every lower fidelity drops bits, so it only ever shrinks ``|x * y|``. As in
tt-llk's model, the left matmul operand (and the first of an element-wise product) takes srcA's masks, and a zero or
denormal operand (exponent 0) is flushed to zero (hardware runs with flush-to-zero).

Matmul in the device's order: K is cut into 32-wide tiles; each K tile's phases are added into dest one by one,
dest held in float32 or bfloat16 (rounded to nearest even after every addition); the result is then packed to the
output dtype. BFLOAT8_B / BFLOAT4_B packing is the round trip through :mod:`reportdb.formats.blockfloat` (16 values
of a 32x32 tile's face row share one exponent), over the last two dims padded with zeros to whole tiles.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ..errors import InvalidArgumentError
from ..formats import blockfloat

#: Fidelity name -> the number of phases it runs.
FIDELITY_PHASES = {"LoFi": 1, "HiFi2": 2, "HiFi3": 3, "HiFi4": 4}
#: (srcA mask, srcB mask) over the 11-bit mantissa (leading one included) of each fidelity phase.
PHASE_MASKS = (
    (0b11111000000, 0b11111110000),
    (0b00000111110, 0b11111110000),
    (0b11111000000, 0b00000001111),
    (0b00000111110, 0b00000001111),
)
#: The dtypes values can be rounded to here (float32 leaves them as they are).
DTYPES = ("FLOAT32", "BFLOAT16", "BFLOAT8_B", "BFLOAT4_B")
_TILE = 32


def _check(name: str, value: str, allowed: tuple[str, ...]) -> None:
    """Raise InvalidArgumentError unless ``value`` is one of ``allowed``."""
    if value not in allowed:
        raise InvalidArgumentError(f"{name} {value!r} is not one of {', '.join(allowed)}: pass one of those")


def to_bfloat16(x: np.ndarray) -> np.ndarray:
    """``x`` rounded to bfloat16 (nearest, ties to even), as float32."""
    return np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def _tiled(x: np.ndarray) -> tuple[np.ndarray, tuple[int, int]]:
    """``x`` (at least 2-D) padded with zeros to whole 32x32 tiles, as (matrices, H, W) and the original (H, W)."""
    height, width = x.shape[-2], x.shape[-1]
    mats = x.reshape(-1, height, width)
    pad_h, pad_w = -height % _TILE, -width % _TILE
    if pad_h or pad_w:
        mats = np.pad(mats, ((0, 0), (0, pad_h), (0, pad_w)))
    return mats, (height, width)


def _face_order(mats: np.ndarray) -> np.ndarray:
    """The axes (matrix, tile row, tile col, face row, face col, row, col) of padded matrices: read flat, that is the
    device's tile and face order."""
    n, h, w = mats.shape
    return mats.reshape(n, h // _TILE, 2, 16, w // _TILE, 2, 16).transpose(0, 1, 4, 2, 5, 3, 6)


def to_block_float(x: np.ndarray, dtype: str) -> np.ndarray:
    """``x`` packed to BFLOAT8_B or BFLOAT4_B and unpacked again (float32, same shape): the values a device holds."""
    _check("block-float dtype", dtype, tuple(blockfloat.MANTISSA_BITS))
    arr = np.asarray(x, dtype=np.float32)
    shaped = arr.reshape(1, -1) if arr.ndim < 2 else arr
    mats, (height, width) = _tiled(shaped)
    flat = np.ascontiguousarray(_face_order(mats)).reshape(-1)
    bits = blockfloat.decode(blockfloat.encode(flat, dtype, (_TILE, _TILE)), dtype, (_TILE, _TILE))
    values = (bits.astype(np.uint32) << 16).view(np.float32)
    n, ht, wt = mats.shape[0], mats.shape[1] // _TILE, mats.shape[2] // _TILE
    back = values.reshape(n, ht, wt, 2, 2, 16, 16).transpose(0, 1, 3, 5, 2, 4, 6).reshape(mats.shape)
    return np.ascontiguousarray(back[:, :height, :width]).reshape(arr.shape)


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """``x`` as a device stores it in ``dtype`` (one of :data:`DTYPES`), as float32."""
    _check("dtype", dtype, DTYPES)
    if dtype == "FLOAT32":
        return np.asarray(x, dtype=np.float32)
    if dtype == "BFLOAT16":
        return to_bfloat16(x)
    return to_block_float(x, dtype)


def phase_operand(x: np.ndarray, mask: int) -> np.ndarray:
    """The part of bfloat16-rounded ``x`` one phase multiplies: its mantissa bits under ``mask`` (11-bit mantissa with
    the leading one), sign and exponent kept; zero and denormal operands are zero, Inf and NaN pass unchanged."""
    rounded = to_bfloat16(x)
    bits = (rounded.view(np.uint32) >> 16).astype(np.int32)
    exponent = (bits >> 7) & 0xFF
    mantissa = ((0x80 | (bits & 0x7F)) << 3) & mask
    finite_exponent = np.where(exponent == 255, 137, exponent)  # Inf/NaN are taken from ``rounded`` below
    value = np.ldexp(mantissa.astype(np.float32), finite_exponent - 137)  # mantissa / 2**10 * 2**(exponent - 127)
    value = np.where(bits >> 15 != 0, -value, value)
    value = np.where(exponent == 0, np.float32(0), value)
    return np.where(exponent == 255, rounded, value).astype(np.float32)


def _phases(a: np.ndarray, b: np.ndarray, fidelity: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (srcA part, srcB part) pairs of each phase ``fidelity`` runs."""
    _check("math fidelity", fidelity, tuple(FIDELITY_PHASES))
    return [(phase_operand(a, ma), phase_operand(b, mb)) for ma, mb in PHASE_MASKS[: FIDELITY_PHASES[fidelity]]]


def multiply(a: np.ndarray, b: np.ndarray, fidelity: str = "HiFi4", out_dtype: str = "BFLOAT16") -> np.ndarray:
    """The element-wise product a device's FPU gives at ``fidelity``: each phase's exact product added in a float32
    dest, then packed to ``out_dtype``."""
    _check("output dtype", out_dtype, DTYPES)
    dest: np.ndarray = np.zeros(np.broadcast_shapes(np.shape(a), np.shape(b)), dtype=np.float32)
    for pa, pb in _phases(a, b, fidelity):
        dest += pa * pb
    return round_to(dest, out_dtype)


def matmul(
    a: np.ndarray,
    b: np.ndarray,
    fidelity: str = "HiFi4",
    *,
    dest: str = "FLOAT32",
    out_dtype: str = "BFLOAT16",
) -> np.ndarray:
    """``a @ b`` as a device computes it: operands at bfloat16 precision (round them with :func:`round_to` first to
    model block-float inputs), K in 32-wide tiles, each tile's ``fidelity`` phases added into a ``dest`` (FLOAT32 or
    BFLOAT16) accumulator in turn, the result packed to ``out_dtype``. ``a`` is (..., M, K), ``b`` (..., K, N)."""
    _check("dest", dest, ("FLOAT32", "BFLOAT16"))
    _check("output dtype", out_dtype, DTYPES)
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        raise InvalidArgumentError(f"cannot multiply {a.shape} by {b.shape}: pass (..., M, K) and (..., K, N)")
    phases = _phases(a, b, fidelity)
    k = a.shape[-1]
    acc = np.zeros(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]), dtype=np.float32)
    for k0 in range(0, k, _TILE):
        for pa, pb in phases:
            acc += np.matmul(pa[..., k0 : k0 + _TILE], pb[..., k0 : k0 + _TILE, :])
            if dest == "BFLOAT16":
                acc = to_bfloat16(acc)
    return round_to(acc, out_dtype)
