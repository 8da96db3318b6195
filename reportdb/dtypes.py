"""Storage dtypes by name, and the canonical little-endian form of arrays.

Stored tensors record their dtype by *name* (``"bfloat16"``, ``"float8_e4m3fn"``...), never by numpy's
``dtype.str`` (``"<V2"`` for bfloat16), so any numpy with ml_dtypes reads them back identically.

ml_dtypes is imported only when one of its dtypes is asked for (:data:`DTYPES` looks it up on first use): some of its
releases take a second to import, which every command that needs no bfloat16 (``reportdb info``, ``ls``) would pay.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Iterator, Mapping

from ._lazy import lazy_module

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
else:  # numpy is imported on first use: opening a report and reading its metadata need none
    np = lazy_module("numpy", globals(), "np")

from .errors import UnsupportedDTypeError

#: The ml_dtypes types stored by name, in storage order (after the numpy ones).
_ML_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e5m2")


class _DTypes(Mapping[str, "np.dtype"]):
    """Storage dtype names and their numpy dtypes, all little-endian; made on first use (numpy's when a value is
    first handled, ml_dtypes' when one of its types is), so naming and sizing dtypes imports neither."""

    def __init__(self, numpy_codes: dict[str, str]) -> None:
        self._codes = numpy_codes
        self._types: dict[str, np.dtype] = {}
        self._names = (*numpy_codes, *_ML_DTYPES)
        self._ml_loaded = False

    def load_ml_dtypes(self) -> None:
        """Import ml_dtypes and add its types (once)."""
        if not self._ml_loaded:
            import ml_dtypes

            self._types.update((name, np.dtype(getattr(ml_dtypes, name))) for name in _ML_DTYPES)
            self._ml_loaded = True

    def __getitem__(self, name: str) -> np.dtype:
        found = self._types.get(name)
        if found is None:
            if name in _ML_DTYPES:
                self.load_ml_dtypes()
            elif name in self._codes:
                self._types.update((key, np.dtype(code)) for key, code in self._codes.items())
            else:
                raise KeyError(name)
            found = self._types[name]
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._names


#: Storage dtype names and their numpy dtypes, all little-endian.
DTYPES: Mapping[str, np.dtype] = _DTypes({
    "bool": "?",
    "int8": "<i1",
    "int16": "<i2",
    "int32": "<i4",
    "int64": "<i8",
    "uint8": "<u1",
    "uint16": "<u2",
    "uint32": "<u4",
    "uint64": "<u8",
    "float16": "<f2",
    "float32": "<f4",
    "float64": "<f8",
})

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
    if "ml_dtypes" in sys.modules:  # an array of an ml_dtypes type exists only once ml_dtypes is imported
        assert isinstance(DTYPES, _DTypes)
        DTYPES.load_ml_dtypes()
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


#: Bytes per element of each storage dtype, known without importing numpy or ml_dtypes.
_ITEMSIZES = {
    "bool": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8,
    "float16": 2, "float32": 4, "float64": 8, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
}


def itemsize(name: str) -> int:
    """Bytes per element of the storage dtype ``name``, without importing numpy or ml_dtypes (sizes of stored
    tensors are checked on every read of their metadata, ``reportdb ls`` included)."""
    size = _ITEMSIZES.get(name)
    return size if size is not None else numpy_dtype(name).itemsize


def canonical(array: np.ndarray) -> np.ndarray:
    """Return ``array`` as little-endian and C-contiguous, copying only when it has to."""
    arr = np.asarray(array)
    target = DTYPES[dtype_name(arr.dtype)]
    if arr.dtype != target:  # the other byte order: astype swaps in one vectorized pass
        arr = arr.astype(target)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")  # ascontiguousarray would make 0-d 1-d
