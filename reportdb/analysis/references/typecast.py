"""ttnn.typecast: to float dtypes (round to nearest even), to the block floats BFLOAT8_B / BFLOAT4_B (a shared exponent
per 16 values of a row, as ttnn packs a tile's face rows), and to the integer dtypes with the conversions ttnn 0.81.1's
golden applies for a device tensor on Wormhole and Blackhole (truncation and wrap-around for uint8/int8, rounding half
up and saturation for uint16, saturation for uint32). Quasar's conversions and host-side casts differ and are not
what this reference gives."""

from __future__ import annotations

from typing import Any, Mapping

import ml_dtypes
import numpy as np

from . import Param, UnsupportedArguments, elements, reference, shape

_FLOATS = {
    "float32": np.dtype(np.float32), "bfloat16": np.dtype(ml_dtypes.bfloat16), "float16": np.dtype(np.float16),
}
_BLOCK_FLOATS = {"bfloat8_b": 7, "bfloat4_b": 3}  # mantissa bits beside the sign
_INTEGERS = ("uint8", "uint16", "uint32", "int8", "int32")
_GROUP = 16  # values sharing one exponent: a row of a 16x16 face


def _size(values: Mapping[str, Any]) -> int:
    """The input's elements, or to a block float its rows padded to whole groups of :data:`_GROUP` (a [N, 1] input
    builds N * 16)."""
    dims = shape(values["input_tensor"])
    if values.get("dtype") not in _BLOCK_FLOATS or not dims:
        return elements(dims)
    return elements(dims[:-1]) * -(-dims[-1] // _GROUP) * _GROUP


@reference(
    "ttnn.typecast", params=(Param("input_tensor", "tensor", 0, required=True), Param("dtype", "dtype", 1, required=True),
                             Param("output_tensor", "output")),
    input_dtypes=True, size=_size,
)
def typecast(input_tensor: Any, dtype: str, input_dtypes: Mapping[int, str | None] | None = None, **_: Any) -> np.ndarray:
    """ttnn.typecast of the input to ``dtype`` (see the module's docstring for what each target does)."""
    x = np.asarray(input_tensor)
    source = (input_dtypes or {}).get(id(input_tensor))
    if dtype in _FLOATS:
        return (x if x.dtype.kind in "iub" else x.astype(np.float32)).astype(_FLOATS[dtype])
    if dtype in _BLOCK_FLOATS:
        if x.dtype.kind in "iub":
            raise UnsupportedArguments(["dtype"], f"a cast of {x.dtype.name} values to {dtype}")
        return block_float(x.astype(np.float32), _BLOCK_FLOATS[dtype])
    if dtype == "fp8_e4m3":
        return x.astype(np.float32).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    if dtype not in _INTEGERS:
        raise UnsupportedArguments(["dtype"], f"a cast to {dtype}")
    return _to_integer(x, dtype, source)


def _to_integer(x: np.ndarray, dtype: str, source: str | None) -> np.ndarray:
    """The device conversions of ttnn's typecast golden (``ttnn/operations/core.py``) to an integer dtype."""
    is_float = x.dtype.kind not in "iub"
    if is_float and not np.all(np.isfinite(x.astype(np.float64))):
        raise UnsupportedArguments(["input_tensor"], f"NaN or infinite values cast to {dtype}, which the device defines")
    whole = np.trunc(x.astype(np.float64)).astype(np.int64) if is_float else x.astype(np.int64)
    if dtype == "uint8":
        return (whole % 256).astype(np.uint8)
    if dtype == "int8":
        return ((whole + 128) % 256 - 128).astype(np.int8)
    if dtype == "uint16":
        if is_float:
            block = _block_source(x, source)
            if not block:
                whole = np.floor(x.astype(np.float64) + 0.5).astype(np.int64)
        return np.clip(whole, 0, 65535).astype(np.uint16)
    if dtype == "uint32":
        if x.dtype == np.int8:  # int8 widens by sign extension: negatives wrap to the top of the range
            return (whole & 0xFFFFFFFF).astype(np.uint32)
        return np.clip(whole, 0, 2**32 - 1).astype(np.uint32)
    return whole.astype(np.int32)


def _block_source(x: np.ndarray, source: str | None) -> bool:
    """Whether a float input was a block float on the device (its values then truncate to uint16, others round);
    bfloat16 values with no recorded ttnn dtype could be either, and are refused rather than guessed."""
    name = (source or "").rsplit(".", 1)[-1].lower()
    if name in _BLOCK_FLOATS:
        return True
    if name or x.dtype != np.dtype(ml_dtypes.bfloat16):
        return False
    raise UnsupportedArguments(["input_tensor"], "bfloat16 values whose ttnn dtype (BFLOAT16 or a block float, "
                               "which convert to uint16 differently) is not recorded")


def block_float(values: np.ndarray, bits: int) -> np.ndarray:
    """float32 values rounded to a block float with ``bits`` mantissa bits: each 16 consecutive values of a row (the
    row of a 16x16 face; a row is padded with zeros to a multiple of 16) share the largest exponent among them, each
    mantissa aligned to it is rounded half to even and saturated; denormals flush to zero. The result is float32
    (every such value is a bfloat16 value). Equal to reportdb's block-float packer (``formats.blockfloat``) followed by
    its decoder, and to ttnn's conversion (the golden check)."""
    x = np.ascontiguousarray(values, dtype=np.float32)
    shape = x.shape
    cols = shape[-1] if x.ndim else 1
    rows = x.reshape(-1, cols) if x.size else x.reshape(0, max(cols, 1))
    padded = np.zeros((rows.shape[0], -(-cols // _GROUP) * _GROUP), dtype=np.float32)
    padded[:, :cols] = rows
    # the packer's rounding (formats.blockfloat._encode_tiles), written again here: this package travels alone into
    # repro folders (numpy and ml_dtypes only), so it imports nothing of reportdb
    raw = padded.view(np.uint32).reshape(rows.shape[0], -1, _GROUP).astype(np.int64)
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
    scale = np.ldexp(1.0, (shared - 127 - bits + 1).astype(np.int64))
    out = np.where(sign == 1, -1.0, 1.0) * mag * scale
    out = np.where(mag == 0, 0.0, out)
    return out.reshape(rows.shape[0], -1)[:, :cols].astype(np.float32).reshape(shape)


def stored_as(values: Any, dtype: str | None, name: str = "dtype") -> np.ndarray:
    """The values ttnn stores for ``values`` written as ``dtype`` (ttnn 0.81.1's ``golden_to_output_dtype``,
    ``ttnn/operations/golden_common.py``: torch's ``.to`` for the float and integer dtypes, a block float's packing
    for BFLOAT8_B / BFLOAT4_B); None keeps the values. Float values are written to an integer dtype only when they
    are whole numbers in its range (torch's conversion of others is not the device's); other dtypes are refused."""
    x = np.asarray(values)
    if dtype is None:
        return x
    if dtype in _FLOATS:
        return (x.astype(np.float32) if x.dtype.kind == "f" and x.dtype.itemsize > 4 else x).astype(_FLOATS[dtype])
    if dtype in _BLOCK_FLOATS:
        return block_float(x.astype(np.float32), _BLOCK_FLOATS[dtype])
    if dtype in _INTEGERS and x.dtype.kind in "iub":
        return x.astype(dtype)
    if dtype in _INTEGERS:
        whole, info = x.astype(np.float64), np.iinfo(dtype)
        if np.all(np.mod(whole, 1) == 0) and (not x.size or (whole.min() >= info.min and whole.max() <= info.max)):
            return whole.astype(np.int64).astype(dtype)
    raise UnsupportedArguments([name], f"values of dtype {x.dtype.name} written as {dtype}")
