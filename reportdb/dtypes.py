"""Storage dtypes by name, and the canonical little-endian form of arrays.

Stored tensors record their dtype by *name* (``"bfloat16"``, ``"float8_e4m3fn"``...), never by numpy's
``dtype.str`` (``"<V2"`` for bfloat16), so any numpy with ml_dtypes reads them back identically.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .errors import UnsupportedDTypeError

#: Storage dtype names and their numpy dtypes, all little-endian.
DTYPES: dict[str, np.dtype] = {
    "bool": np.dtype(np.bool_),
    "int8": np.dtype("<i1"),
    "int16": np.dtype("<i2"),
    "int32": np.dtype("<i4"),
    "int64": np.dtype("<i8"),
    "uint8": np.dtype("<u1"),
    "uint16": np.dtype("<u2"),
    "uint32": np.dtype("<u4"),
    "uint64": np.dtype("<u8"),
    "float16": np.dtype("<f2"),
    "float32": np.dtype("<f4"),
    "float64": np.dtype("<f8"),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
}

#: ttnn DataType names and the storage dtype their values are kept in (block floats: bfloat16,
#: which holds every BFLOAT8_B / BFLOAT4_B value exactly).
TTNN_STORAGE_DTYPE: dict[str, str] = {
    "BFLOAT16": "bfloat16",
    "FLOAT32": "float32",
    "UINT32": "uint32",
    "BFLOAT8_B": "bfloat16",
    "BFLOAT4_B": "bfloat16",
    "UINT8": "uint8",
    "UINT16": "uint16",
    "INT32": "int32",
}


#: Names of the numpy dtypes met so far (either byte order): every stored tensor asks, several times.
_NAMES: dict[np.dtype, str] = {}


def dtype_name(dtype: np.dtype | type | str) -> str:
    """Return the storage name of a numpy dtype (either byte order), or raise UnsupportedDTypeError."""
    if isinstance(dtype, str) and dtype in DTYPES:
        return dtype
    if isinstance(dtype, np.dtype):
        name = _NAMES.get(dtype)
        if name is not None:
            return name
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise UnsupportedDTypeError(f"unknown dtype {dtype!r}; supported: {', '.join(DTYPES)}") from exc
    native = dt.newbyteorder("<") if dt.byteorder not in ("=", "|", "<") else dt
    for name, candidate in DTYPES.items():
        if native == candidate:
            _NAMES[dt] = name
            return name
    raise UnsupportedDTypeError(
        f"dtype {dt} cannot be stored; supported: {', '.join(DTYPES)} (cast the array first)"
    )


def numpy_dtype(name: str) -> np.dtype:
    """Return the little-endian numpy dtype stored under ``name``."""
    try:
        return DTYPES[name]
    except KeyError:
        raise UnsupportedDTypeError(
            f"unknown stored dtype name {name!r}; this reportdb knows {', '.join(DTYPES)}"
        ) from None


def canonical(array: np.ndarray) -> np.ndarray:
    """Return ``array`` as little-endian and C-contiguous, copying only when it has to."""
    arr = np.asarray(array)
    target = DTYPES[dtype_name(arr.dtype)]
    if arr.dtype != target:  # the other byte order: astype swaps in one vectorized pass
        arr = arr.astype(target)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")  # ascontiguousarray would make 0-d 1-d
