"""Write a loaded tensor to ``.npy``, ``.npz`` or ``.safetensors``, and describe it as JSON-ready data.

These are the hand-off formats for people who want a report's tensor values in their own tools. Data
is streamed from the arrays in bounded chunks, and every file appears whole or not at all: it is
written under a temporary name beside the target and renamed into place on success.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import struct
import zipfile
from pathlib import Path
from typing import IO, Any, Callable

import numpy as np

from ..dtypes import DTYPES, canonical, dtype_name
from ..errors import AssemblyError, ExportFormatError, OutputPathError
from ..numeric.stats import compute_stats
from ..spec import LoadedTensor
from . import load_tensor_file

__all__ = [
    "ExportFormatError", "OutputPathError", "SAFETENSORS_DTYPES", "SUPPORTED_SUFFIXES", "check_output_folder", "write_array",
    "write_whole", "describe",
]

#: safetensors dtype codes of reportdb's storage dtype names.
SAFETENSORS_DTYPES: dict[str, str] = {
    "bool": "BOOL",
    "int8": "I8",
    "int16": "I16",
    "int32": "I32",
    "int64": "I64",
    "uint8": "U8",
    "uint16": "U16",
    "uint32": "U32",
    "uint64": "U64",
    "float16": "F16",
    "float32": "F32",
    "float64": "F64",
    "bfloat16": "BF16",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
}

#: ml_dtypes types that numpy's .npy format cannot name (they load back as raw ``|V2`` / ``|V1``
#: bytes); .npy and .npz hold them widened to float32, which represents every value exactly.
_WIDENED_IN_NPY = frozenset({"bfloat16", "float8_e4m3fn", "float8_e5m2"})

_CHUNK_BYTES = 16 << 20


def check_output_folder(out: Path) -> None:
    """Refuse, naming the user's path, an output whose folder is missing or not a folder, before any work is done."""
    folder = out.parent
    if not folder.exists():
        raise OutputPathError(f"cannot write {out}: folder {folder} does not exist")
    if not folder.is_dir():
        raise OutputPathError(f"cannot write {out}: {folder} is not a folder")


def _check_output(out: Path) -> Callable[[LoadedTensor, IO[bytes]], None]:
    """The writer for ``out``'s suffix; raises before any work on an unknown suffix or a missing folder."""
    writer = _WRITERS.get(out.suffix.lower())
    if writer is None:
        raise ExportFormatError(
            f"cannot write {out.name!r}: unknown suffix {out.suffix!r}; supported: {', '.join(SUPPORTED_SUFFIXES)}"
        )
    check_output_folder(out)
    return writer


def write_array(loaded: LoadedTensor, out: Path | str) -> None:
    """Write ``loaded`` to ``out`` in the format its suffix names.

    * ``.npy``: the logical (assembled) array. bfloat16 / float8 values are widened to float32
      (exact), because ``np.load`` cannot read an ml_dtypes .npy back as anything but raw bytes.
      Raises AssemblyError when multi-device shards cannot be assembled (write .npz or .safetensors).
    * ``.npz``: ``shard_<i>_<mesh coordinate joined by _>`` per device shard, ``global`` when the
      shards can be assembled, ``spec`` (the TensorSpec as JSON, a 0-d unicode array) and ``dtype``
      (the storage dtype name, 0-d unicode, e.g. ``"bfloat16"``: ``arr.astype(ml_dtypes.bfloat16)``
      restores widened values exactly). Values are widened as for .npy.
    * ``.safetensors``: one tensor ``tensor`` for a single shard, else one per shard named as in
      .npz; bfloat16 stays ``BF16``. ``__metadata__`` holds ``spec`` and ``source`` as JSON strings.

    The file is written under a temporary name in the same directory and moved into place only when
    complete, so a failure leaves neither a partial file nor a temporary one. An unknown suffix
    raises ExportFormatError; a missing folder, or a failure to create or fill the file, raises OutputPathError
    naming ``out`` (never the temporary name).
    """
    out = Path(out)
    writer = _check_output(out)
    write_whole(out, lambda fp: writer(loaded, fp))


def write_whole(out: Path, fill: Callable[[IO[bytes]], None]) -> None:
    """Create ``out`` whole or not at all: ``fill`` writes into a temporary file beside it, which is renamed into place
    when complete and removed on any failure. An OSError becomes an OutputPathError naming ``out``."""
    tmp = out.with_name(f".{out.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "xb") as fp:
            fill(fp)
        os.replace(tmp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OutputPathError(f"cannot write {out}: {exc.strerror or exc}") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def describe(loaded: LoadedTensor, *, preview: int = 6) -> dict[str, Any]:
    """Everything known about ``loaded`` as JSON-serializable data.

    Keys: ``spec``, ``source``, ``shape`` / ``dtype`` of the logical array (``shape`` None when the
    shards cannot be assembled, with the reason in ``assembly_error``), ``shards`` (index, mesh
    coordinate, shape, dtype of each), ``stats`` (``reportdb.numeric.stats.compute_stats``: counts, NaN / Inf
    counts, float64 moments of the finite values, histogram; over all shards' values together when
    they cannot be assembled) and ``preview``, the first ``preview`` values of the flattened array as
    Python numbers, with NaN and infinities as the strings ``"nan"``, ``"inf"``, ``"-inf"`` so the
    result is strict JSON.
    """
    try:
        logical: np.ndarray | None = loaded.array
        assembly_error = None
    except AssemblyError as exc:
        logical, assembly_error = None, str(exc)
    values = logical if logical is not None else np.concatenate([arr.reshape(-1) for _, arr in loaded.shards])
    return {
        "spec": loaded.spec.to_json(),
        "source": json.loads(_json(loaded.source)),
        "shape": None if logical is None else list(logical.shape),
        "dtype": dtype_name(values.dtype),
        "assembly_error": assembly_error,
        "shards": [
            {"index": i, "mesh_coordinate": list(coord), "shape": list(arr.shape), "dtype": dtype_name(arr.dtype)}
            for i, (coord, arr) in enumerate(loaded.shards)
        ],
        "stats": compute_stats(values),
        "preview": _preview(values, preview),
    }


# --- writers --------------------------------------------------------------------------------------


def _write_npy_file(loaded: LoadedTensor, fp: IO[bytes]) -> None:
    """The assembled array as one .npy; AssemblyError, with the formats that keep every shard, when it does not assemble."""
    try:
        array = loaded.array
    except AssemblyError as exc:
        raise AssemblyError(f"{exc}; .npy holds one array: write .npz or .safetensors to keep every shard") from exc
    _write_npy(fp, array)


def _write_npz_file(loaded: LoadedTensor, fp: IO[bytes]) -> None:
    """Every shard, the assembled array when there is one, the spec and the dtype name as members of one .npz."""
    entries: list[tuple[str, np.ndarray]] = [(_shard_name(i, coord), arr) for i, (coord, arr) in enumerate(loaded.shards)]
    try:
        entries.append(("global", loaded.array))
    except AssemblyError:
        pass  # the shards are all there is; the spec says why they do not assemble
    with zipfile.ZipFile(fp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, array in entries:
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                _write_npy(member, array)
        labels = {"spec": _json(loaded.spec.to_json())}
        if loaded.shards:
            labels["dtype"] = dtype_name(loaded.shards[0][1].dtype)
        for name, text in labels.items():
            with archive.open(f"{name}.npy", "w") as member:
                np.lib.format.write_array(member, np.array(text), allow_pickle=False)


def _write_safetensors_file(loaded: LoadedTensor, fp: IO[bytes]) -> None:
    """The shards as safetensors (a JSON header with 8-byte aligned offsets, then the values), spec and source in
    ``__metadata__``."""
    shards = loaded.shards
    tensors = [("tensor", shards[0][1])] if len(shards) == 1 else [(_shard_name(i, c), a) for i, (c, a) in enumerate(shards)]
    header: dict[str, Any] = {"__metadata__": {"spec": _json(loaded.spec.to_json()), "source": _json(loaded.source)}}
    offset = 0
    for name, array in tensors:
        nbytes = array.size * array.dtype.itemsize
        header[name] = {
            "dtype": SAFETENSORS_DTYPES[dtype_name(array.dtype)],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)
    fp.write(struct.pack("<Q", len(encoded)))
    fp.write(encoded)
    for _, array in tensors:
        _write_values(fp, array, DTYPES[dtype_name(array.dtype)])


_WRITERS: dict[str, Callable[[LoadedTensor, IO[bytes]], None]] = {
    ".npy": _write_npy_file,
    ".npz": _write_npz_file,
    ".safetensors": _write_safetensors_file,
}

#: Output suffixes ``write_array`` understands.
SUPPORTED_SUFFIXES = tuple(_WRITERS)


def _write_npy(fp: IO[bytes], array: np.ndarray) -> None:
    """One array in .npy format (version 1.0 header), ml_dtypes floats widened to float32."""
    name = dtype_name(array.dtype)
    dtype = np.dtype("<f4") if name in _WIDENED_IN_NPY else DTYPES[name]
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": tuple(array.shape)}
    np.lib.format.write_array_header_1_0(fp, header)
    _write_values(fp, array, dtype)


def _write_values(fp: IO[bytes], array: np.ndarray, dtype: np.dtype) -> None:
    """The values of ``array`` as little-endian ``dtype`` in C order, with no full-size copy when no cast is needed."""
    flat = canonical(array).reshape(-1)
    if flat.dtype == dtype:
        fp.write(flat.view(np.uint8).data)
        return
    step = max(1, _CHUNK_BYTES // dtype.itemsize)
    for start in range(0, flat.size, step):
        fp.write(flat[start : start + step].astype(dtype).view(np.uint8).data)


def _shard_name(index: int, coord: tuple[int, ...]) -> str:
    """``shard_<index>_<mesh coordinate joined by _>``, the member name of a shard in .npz and .safetensors."""
    return "_".join(["shard", str(index), *(str(int(c)) for c in coord)])


def _json(value: Any) -> str:
    """JSON text; values JSON has no type for (paths, numpy scalars) are written as their str()."""
    return json.dumps(value, default=str)


# --- description ----------------------------------------------------------------------------------


def _preview(values: np.ndarray, limit: int) -> list[Any]:
    """The first ``limit`` values of ``values`` flattened: ints and bools as they are, floats as floats."""
    head = values.reshape(-1)[: max(limit, 0)]
    if head.dtype.kind in "biu":
        return head.tolist()
    return [_float_json(v) for v in head.astype(np.float64).tolist()]


def _float_json(value: float) -> float | str:
    """A float as strict JSON allows: NaN and infinities as the strings ``"nan"``, ``"inf"``, ``"-inf"``."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def convert_tensor_file(path: str | Path, out: str | Path) -> None:
    """Read a legacy tensor file (.bin, .tensorbin, .pt) and write it as .npy, .npz or .safetensors.

    The output's suffix and folder are checked before the input is read, so a typo costs no decoding.
    """
    _check_output(Path(out))
    write_array(load_tensor_file(path), Path(out))


def describe_tensor_file(path: str | Path, *, preview: int = 6) -> dict[str, Any]:
    """Spec, source, statistics and a value preview of a legacy tensor file."""
    return describe(load_tensor_file(path), preview=preview)
