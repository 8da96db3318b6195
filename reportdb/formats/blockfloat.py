"""BFLOAT8_B / BFLOAT4_B block floats (spec §11.3): exact decode to bfloat16, and an encoder for tests.

Each tile is an exponent section (one shared float32 exponent byte per 16 datums, padded to 16
bytes) followed by the sign-magnitude mantissas, in the tile's face order. Every block-float
value is a bfloat16 value, so decoding builds bfloat16 bit patterns through one lookup table
indexed by (exponent byte, mantissa byte): vectorized, exact, and equal to ttnn's own decoder
including its flush-to-zero and denormal corner cases.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..errors import FormatError

#: Mantissa bits (sign excluded) of each format.
MANTISSA_BITS = {"BFLOAT8_B": 7, "BFLOAT4_B": 3}
_GROUP = 16  # datums per shared exponent
_CHUNK_DATUMS = 1 << 16  # decode in slices this large to keep temporaries in cache


def is_block_float(dtype: str) -> bool:
    """Whether a ttnn DataType name is a packed block-float type."""
    return dtype in MANTISSA_BITS


def exponent_bytes(tile: tuple[int, int]) -> int:
    """Size of a tile's exponent section: one byte per face row, rounded up to 16 bytes."""
    th, tw = tile
    rows = th * tw // _GROUP
    return -(-rows // 16) * 16


def tile_nbytes(dtype: str, tile: tuple[int, int]) -> int:
    """Packed size in bytes of one tile (1088 for a 32x32 BFLOAT8_B tile, 576 for BFLOAT4_B)."""
    datums = tile[0] * tile[1]
    return exponent_bytes(tile) + (datums if dtype == "BFLOAT8_B" else datums // 2)


def _datum_table(bits: int) -> np.ndarray:
    """bfloat16 patterns for every (exponent byte, sign-magnitude datum) pair, shape (256, 2**(bits+1))."""
    exp = np.arange(256, dtype=np.int32)[:, None]
    datum = np.arange(1 << (bits + 1), dtype=np.int32)[None, :]
    sign = (datum >> bits) << 15
    mag = datum & ((1 << bits) - 1)
    top = np.zeros_like(mag)  # index of the highest set bit of the magnitude
    for b in range(1, bits):
        top = np.where(mag >> b != 0, b, top)
    shift = (bits - 1) - top  # left shifts that bring the top bit to bit (bits-1)
    biased = exp - shift
    fraction = ((mag << shift) & ((1 << (bits - 1)) - 1)) << (8 - bits)  # into bf16's 7 fraction bits
    pattern = sign | (np.maximum(biased, 0) << 7) | fraction
    pattern = np.where(mag == 0, sign, pattern)  # ±0 keeps its sign, as ttnn's decoder does
    pattern = np.where((mag != 0) & (biased < 0), 0, pattern)  # flush to zero when shift > exponent
    return pattern.astype(np.uint16)


@lru_cache(maxsize=None)
def _lookup(dtype: str) -> np.ndarray:
    """Table indexed by ``exponent << 8 | mantissa byte``: a bfloat16 pattern (BFP8, uint16), or
    the two patterns of the byte's nibbles, low nibble first, as one uint32 (BFP4)."""
    if dtype == "BFLOAT8_B":
        return _datum_table(7).reshape(-1)
    nibbles = _datum_table(3)  # (256, 16)
    byte = np.arange(256)
    pairs = np.stack([nibbles[:, byte & 15], nibbles[:, byte >> 4]], axis=-1)
    return np.ascontiguousarray(pairs.reshape(256 * 256, 2)).view(np.uint32).reshape(-1)


def decode(packed: np.ndarray, dtype: str, tile: tuple[int, int]) -> np.ndarray:
    """Decode packed little-endian tiles (uint8, whole tiles) into bfloat16 bit patterns (uint16).

    The result is flat, in the buffer's tile and face order, ``th*tw`` values per tile. Work goes
    in slices of a few tiles so the uint16 lookup indices stay in cache.
    """
    tile_bytes = tile_nbytes(dtype, tile)
    if packed.size % tile_bytes:
        raise FormatError(f"{dtype} data of {packed.size} bytes is not whole {tile[0]}x{tile[1]} tiles")
    ntiles = packed.size // tile_bytes
    rows = tile[0] * tile[1] // _GROUP
    ebytes = exponent_bytes(tile)
    per_byte = 1 if dtype == "BFLOAT8_B" else 2
    width = _GROUP // per_byte  # mantissa bytes per exponent
    tiles = packed.reshape(ntiles, tile_bytes)
    exps = tiles[:, :rows, None]
    mants = tiles[:, ebytes:].reshape(ntiles, rows, width)
    table = _lookup(dtype)
    out = np.empty((ntiles, rows, width), dtype=table.dtype)
    step = max(1, min(ntiles, _CHUNK_DATUMS // (rows * _GROUP)))
    index = np.empty((step, rows, width), dtype=np.uint16)
    high = np.empty((step, rows, 1), dtype=np.uint16)
    for t0 in range(0, ntiles, step):
        n = min(step, ntiles - t0)
        high[:n] = exps[t0 : t0 + n]
        high[:n] <<= 8
        np.bitwise_or(high[:n], mants[t0 : t0 + n], out=index[:n])
        np.take(table, index[:n], out=out[t0 : t0 + n], mode="clip")  # indices < 65536 by construction
    return out.view(np.uint16).reshape(-1)


def encode(values: np.ndarray, dtype: str, tile: tuple[int, int]) -> np.ndarray:
    """Pack float32 values (flat, in tile and face order, whole tiles) into block-float tiles (uint8).

    Shared exponent = the largest float32 exponent of each 16 datums; mantissas are rounded half
    to even and saturated, as ttnn packs since 2025-01-30. Used to generate test files.
    """
    datums = tile[0] * tile[1]
    flat = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
    if flat.size % datums:
        raise ValueError(f"{flat.size} values are not whole {tile[0]}x{tile[1]} tiles")
    tiles = flat.reshape(-1, datums)
    out = np.empty((tiles.shape[0], tile_nbytes(dtype, tile)), dtype=np.uint8)
    step = max(1, _CHUNK_DATUMS // datums)
    for t0 in range(0, tiles.shape[0], step):
        out[t0 : t0 + step] = _encode_tiles(tiles[t0 : t0 + step], dtype, tile)
    return out.reshape(-1)


def _encode_tiles(tiles: np.ndarray, dtype: str, tile: tuple[int, int]) -> np.ndarray:
    """Packed bytes (ntiles, tile_nbytes) of float32 tiles (ntiles, th*tw)."""
    bits = MANTISSA_BITS[dtype]
    ntiles, datums = tiles.shape
    raw = tiles.view(np.uint32).reshape(ntiles, datums // _GROUP, _GROUP).astype(np.uint64)
    sign = raw >> 31
    exp = (raw >> 23) & 0xFF
    full = np.where(exp > 0, (raw & 0x7FFFFF) | 0x800000, 0)
    shared = exp.max(axis=-1, keepdims=True)
    aligned = full >> np.minimum(shared - exp, 40)
    drop = 24 - bits
    kept = aligned >> drop
    rest = aligned & ((1 << drop) - 1)
    half = 1 << (drop - 1)
    kept = kept + ((rest > half) | ((rest == half) & ((kept & 1) == 1)))
    mag = np.minimum(kept, (1 << bits) - 1)
    datum: np.ndarray = np.where(mag == 0, 0, (sign << bits) | mag).astype(np.uint8).reshape(ntiles, datums)
    if dtype == "BFLOAT4_B":
        datum = datum[:, 0::2] | (datum[:, 1::2] << 4)
    exps = np.zeros((ntiles, exponent_bytes(tile)), dtype=np.uint8)
    exps[:, : datums // _GROUP] = shared.reshape(ntiles, -1)
    return np.concatenate([exps, datum], axis=1)
