"""Read one tensor from a PyTorch ``.pt`` file (``torch.save``) with numpy alone, never running its pickle.

Both serializers are understood: the zip archive (``<folder>/data.pkl`` plus ``<folder>/data/<key>``
records, torch >= 1.6) and the legacy stream (magic, protocol and sys-info pickles, the object pickle,
the storage-key pickle, then raw storages). Pickles go through :class:`_SafeUnpickler`, which resolves
only torch's tensor rebuild functions, storage types and dtypes to inert local stand-ins, so a file can
describe a tensor but never make anything run. Every failure surfaces as a ``ReportDBError``.

What a file can make the reader allocate is bounded by the file's own size:

- a pickle is at most ``MAX_PICKLE_BYTES`` (64 KiB; torch writes a few hundred bytes for one tensor),
  unpickled from memory by the pure-Python unpickler, whose memo is a dict: a ``LONG_BINPUT`` index of
  2**28 stores one entry instead of sizing a 2 GiB table, no opcode's declared length reads past the
  bytes present, and the pickle's size bounds the nesting depth (hashing a deeper tuple would overflow
  the C stack);
- a storage is the file's own bytes, memory-mapped in place: its declared size is checked against the
  file (legacy stream, stored zip member), and a compressed zip member may decompress to at most
  ``budget(file size)`` bytes, the declared size being checked before anything is decompressed
  (zipfile never inflates past it);
- the tensor, a strided view of its storage that stride 0 or overlapping strides can make larger than
  the storage, is materialized only if it needs at most ``budget(file size)`` =
  ``MAX_EXPANSION`` (16) x the file's size + ``EXPANSION_SLACK`` (16 MiB) bytes. Real torch files are
  contiguous tensors or slices (at most the storage); the slack keeps small broadcast views readable.
"""

from __future__ import annotations

import collections
import io
import math
import os
import pickle
import struct
import zipfile
from dataclasses import dataclass
from typing import IO, Any, Callable

import numpy as np

from ..dtypes import DTYPES, numpy_dtype
from ..errors import FormatError, ReportDBError, UnsafePickleError, UnsupportedDTypeError, excerpt
from ..spec import LoadedTensor, TensorSpec
from .source import open_tensor_file

#: A decompressed storage or a materialized view may take this many times the file's size (plus the slack).
MAX_EXPANSION = 16
#: Bytes any ``.pt`` may produce beyond ``MAX_EXPANSION`` times its size: small broadcast views of tiny files.
EXPANSION_SLACK = 1 << 24
#: Largest pickle accepted (a zip ``data.pkl``, or all the pickles of a legacy stream); one tensor's is ~200 bytes.
MAX_PICKLE_BYTES = 1 << 16
#: Largest ``byteorder`` record: the word ``little`` or ``big``.
_MAX_BYTEORDER_BYTES = 16

_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_PROTOCOL = 1001
_ZIP_LOCAL_HEADER = struct.Struct("<4s22xHH")

#: torch's legacy storage classes and the dtype their elements have.
_STORAGE_DTYPES: dict[str, str] = {
    "FloatStorage": "float32",
    "DoubleStorage": "float64",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
}
#: torch names that are harmless but whose values reportdb cannot hold: refused as unsupported dtypes.
_UNSUPPORTED_TORCH_NAMES = frozenset(
    {
        "ComplexFloatStorage", "ComplexDoubleStorage", "QUInt8Storage", "QInt8Storage", "QInt32Storage",
        "QUInt4x2Storage", "QUInt2x4Storage", "complex32", "complex64", "complex128", "qint8", "quint8",
        "qint32", "quint4x2", "quint2x4", "float8_e4m3fnuz", "float8_e5m2fnuz",
    }
)


class _BadContent(ValueError):
    """Raised where the file name is unknown (inside the pickle's calls); ``read_pt`` adds it."""


class _Inert:
    """Base of the stand-ins: refuses the pickle BUILD opcode, so no field can change after it was checked."""

    __slots__ = ()

    def __setstate__(self, state: Any) -> None:
        raise _BadContent(f"the pickle tries to set the state of a {type(self).__name__.lstrip('_')}")


@dataclass(frozen=True)
class _StorageType(_Inert):
    """Stand-in for a torch storage class: the dtype of its elements (``uint8`` for ``UntypedStorage``)."""

    dtype: str


@dataclass(frozen=True)
class _TorchDType(_Inert):
    """Stand-in for a ``torch.<dtype>`` object, as ``_rebuild_tensor_v3`` receives it."""

    name: str


@dataclass(frozen=True)
class _Storage(_Inert):
    """A storage named by a persistent id: record ``key``, element ``dtype``, length and view offset."""

    key: str
    dtype: str
    numel: int
    element_offset: int = 0


@dataclass(frozen=True)
class _TensorRef(_Inert):
    """A tensor the pickle described: a strided view of ``storage`` in elements of ``dtype``."""

    storage: _Storage
    dtype: str
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]


def budget(file_size: int) -> int:
    """Most bytes a ``.pt`` file of ``file_size`` bytes may make the reader decompress or materialize."""
    return MAX_EXPANSION * file_size + EXPANSION_SLACK


def read_pt(path: str | os.PathLike[str]) -> LoadedTensor:
    """Read the tensor saved in ``path`` by ``torch.save`` (zip or legacy serializer).

    The top-level object must be a tensor, or a dict/list/tuple holding exactly one tensor.
    Raises ``ReportNotFoundError`` for a missing path, a folder or a symlink loop,
    ``UnsafePickleError`` for any pickle global other than torch's tensor machinery,
    ``UnsupportedDTypeError`` for complex/quantized dtypes, and ``FormatError`` for anything malformed.
    """
    name = os.fspath(path)
    handle, size = open_tensor_file(name)
    with handle:
        return read_pt_file(handle, size, name)


def read_pt_file(fh: IO[bytes], size: int, name: str) -> LoadedTensor:
    """Read the ``.pt`` file open as ``fh`` (``size`` bytes long, ``name`` for messages); see ``read_pt``."""
    try:
        fh.seek(0)
        head = fh.read(4)
        if head.startswith(b"PK"):
            version = "zip"
            ref, raw, big_endian = _read_zip(fh, size, name)
        else:
            version = "legacy"
            ref, raw, big_endian = _read_legacy(fh, size, name)
        array = _materialize(ref, raw, big_endian, budget(size), name)
    except ReportDBError:
        raise
    except _BadContent as exc:
        raise FormatError(f"{name}: {exc}") from exc
    except OSError as exc:  # before generic errors: zipfile and mmap report truncation as OSError too
        raise FormatError(f"{name}: cannot read the .pt file: {exc}") from exc
    except (
        zipfile.BadZipFile, zipfile.LargeZipFile, pickle.UnpicklingError, EOFError, struct.error,
        ValueError, KeyError, IndexError, TypeError, AttributeError, MemoryError, RecursionError,
        OverflowError, UnicodeDecodeError, NotImplementedError,
    ) as exc:
        raise FormatError(f"{name}: not a readable torch .pt file ({type(exc).__name__}: {excerpt(str(exc))})") from exc
    return LoadedTensor(
        shards=[((), array)],
        spec=TensorSpec(logical_shape=tuple(array.shape)),
        source={"format": "pt", "version": version, "torch_dtype": ref.dtype, "path": name},
    )


class _SafeUnpickler(pickle._Unpickler):
    """An unpickler whose globals are only inert stand-ins for torch's tensor rebuild machinery.

    ``find_class`` is the only way a pickle reaches a callable (GLOBAL, STACK_GLOBAL, INST and EXT
    all go through it), so refusing every other name there means nothing in the file can execute.
    It is the pure-Python unpickler, whose memo is a dict: the C one sizes its memo table from the
    largest index a PUT names, so a 173-byte pickle could make it allocate gigabytes.
    """

    def __init__(self, data: IO[bytes], name: str, persistent_load: Callable[[Any], Any] | None = None) -> None:
        super().__init__(data, encoding="utf-8")
        self._name = name
        self._load_storage = persistent_load

    def load(self) -> Any:
        """Unpickle one object; an unknown opcode (a KeyError in the pure-Python unpickler) is a bad pickle."""
        try:
            return super().load()
        except KeyError as exc:
            raise pickle.UnpicklingError(f"invalid pickle opcode or reference {excerpt(exc.args[0] if exc.args else exc)}") from exc

    def find_class(self, module: str, name: str) -> Any:
        """Return the stand-in for an allowed torch global, or raise ``UnsafePickleError``."""
        if module == "torch._utils" and name in _REBUILDERS:
            return _REBUILDERS[name]
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(_STORAGE_DTYPES[name])
        if (module, name) in (("torch", "UntypedStorage"), ("torch.storage", "UntypedStorage")):
            return _StorageType("uint8")
        if module == "torch" and name in DTYPES:
            return _TorchDType(name)
        if module == "torch" and name in _UNSUPPORTED_TORCH_NAMES:
            raise UnsupportedDTypeError(f"{self._name}: torch.{name} tensors are not supported")
        raise UnsafePickleError(
            f"{self._name}: refused pickle global {excerpt(f'{module}.{name}')}; a .pt file may only reference "
            "torch's tensor rebuild functions, storage types and dtypes (nothing was executed)"
        )

    def persistent_load(self, pid: Any) -> Any:
        """Resolve a storage reference through the reader that owns this pickle."""
        if self._load_storage is None:
            raise FormatError(f"{self._name}: unexpected persistent id {excerpt(pid)} outside the object pickle")
        return self._load_storage(pid)


def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any) -> _TensorRef:
    """Stand-in for ``torch._utils._rebuild_tensor``: a view in the storage's own dtype."""
    if not isinstance(storage, _Storage):
        raise _BadContent(f"tensor rebuilt from {type(storage).__name__}, not from a storage")
    return _tensor_ref(storage, storage.dtype, offset, size, stride)


def _rebuild_tensor_v2(storage: Any, offset: Any, size: Any, stride: Any, *_ignored: Any) -> _TensorRef:
    """Stand-in for ``_rebuild_tensor_v2``; requires_grad, hooks and metadata do not affect values."""
    return _rebuild_tensor(storage, offset, size, stride)


def _rebuild_tensor_v3(
    storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any, hooks: Any, dtype: Any, *_ignored: Any
) -> _TensorRef:
    """Stand-in for ``_rebuild_tensor_v3`` (dtypes without a legacy storage class): bytes read as ``dtype``."""
    if not isinstance(storage, _Storage) or not isinstance(dtype, _TorchDType):
        raise _BadContent("_rebuild_tensor_v3 needs a storage and a torch dtype")
    return _tensor_ref(storage, dtype.name, offset, size, stride)


def _rebuild_parameter(data: Any, *_ignored: Any) -> _TensorRef:
    """Stand-in for ``_rebuild_parameter`` and ``_rebuild_parameter_with_state``: the parameter's tensor."""
    if not isinstance(data, _TensorRef):
        raise _BadContent(f"parameter rebuilt from {type(data).__name__}, not from a tensor")
    return data


_REBUILDERS: dict[str, Callable[..., _TensorRef]] = {
    "_rebuild_tensor": _rebuild_tensor,
    "_rebuild_tensor_v2": _rebuild_tensor_v2,
    "_rebuild_tensor_v3": _rebuild_tensor_v3,
    "_rebuild_parameter": _rebuild_parameter,
    "_rebuild_parameter_with_state": _rebuild_parameter,
}


def _tensor_ref(storage: _Storage, dtype: str, offset: Any, size: Any, stride: Any) -> _TensorRef:
    """Check the view geometry types (non-negative ints, equal ranks) and bundle it."""
    if not isinstance(size, (tuple, list)) or not isinstance(stride, (tuple, list)) or len(size) != len(stride):
        raise _BadContent(f"tensor size {excerpt(size)} and stride {excerpt(stride)} are not sequences of one rank")
    for value in (offset, *size, *stride):
        if not _is_count(value):
            raise _BadContent(f"tensor offset/size/stride {excerpt(value)} is not a non-negative integer")
    return _TensorRef(storage, dtype, offset, tuple(size), tuple(stride))


def _is_count(value: Any) -> bool:
    """True for a non-negative int (bools excluded), the only thing a size, stride or offset may be."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _storage_pid(pid: Any, legacy: bool) -> tuple[_StorageType, str, int, Any]:
    """Unpack ``('storage', type, key, location, numel[, view_metadata])``; return type, key, numel, view."""
    length = 6 if legacy else 5
    if not isinstance(pid, tuple) or len(pid) != length or pid[0] != "storage":
        raise _BadContent(f"unexpected persistent id {excerpt(pid)}")
    storage_type, key, _location, numel = pid[1:5]
    if not isinstance(storage_type, _StorageType) or not isinstance(key, str) or not _is_count(numel):
        raise _BadContent(f"malformed storage reference {excerpt(pid)}")
    return storage_type, key, numel, pid[5] if legacy else None


def _single_tensor(obj: Any, name: str) -> _TensorRef:
    """The tensor at the top of the pickle, or the only tensor directly inside a dict/list/tuple."""
    if isinstance(obj, _TensorRef):
        return obj
    values = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
    tensors = [value for value in values if isinstance(value, _TensorRef)]
    if len(tensors) == 1:
        return tensors[0]
    raise FormatError(
        f"{name}: expected one tensor, or a dict/list holding exactly one tensor; found "
        f"{type(obj).__name__} with {len(tensors)} tensors"
    )


def _registered(storages: dict[str, _Storage], pid: Any, name: str, *, legacy: bool) -> tuple[_Storage, Any]:
    """The storage a persistent id names, recorded in ``storages`` (a key must keep one type and size), and the
    view the id carries (legacy streams only; else None)."""
    storage_type, key, numel, view = _storage_pid(pid, legacy=legacy)
    storage = _Storage(key, storage_type.dtype, numel)
    if storages.setdefault(key, storage) != storage:
        raise FormatError(f"{name}: storage {excerpt(key)} is referenced with two different types or sizes")
    return storage, view


def _read_zip(fh: IO[bytes], size: int, name: str) -> tuple[_TensorRef, np.ndarray, bool]:
    """Parse a zip-format ``.pt``; return the tensor, its storage's bytes and whether they are big-endian."""
    with zipfile.ZipFile(fh) as zf:
        pickles = [n for n in zf.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pickles) != 1:
            raise FormatError(f"{name}: zip archive has {len(pickles)} top-level <folder>/data.pkl records, not 1")
        prefix = pickles[0][: -len("data.pkl")]
        if _plain(zf.getinfo(pickles[0]), name).file_size > MAX_PICKLE_BYTES:
            raise FormatError(f"{name}: {excerpt(pickles[0])} is larger than {MAX_PICKLE_BYTES} bytes")
        big_endian = _zip_byteorder(zf, prefix, name)
        storages: dict[str, _Storage] = {}

        def load_storage(pid: Any) -> _Storage:
            return _registered(storages, pid, name, legacy=False)[0]

        ref = _single_tensor(_SafeUnpickler(io.BytesIO(zf.read(pickles[0])), name, load_storage).load(), name)
        record = f"{prefix}data/{ref.storage.key}"
        try:
            info = zf.getinfo(record)
        except KeyError:
            raise FormatError(f"{name}: storage record {excerpt(record)} is missing") from None
        expected = ref.storage.numel * DTYPES[ref.storage.dtype].itemsize
        if info.file_size != expected:
            raise FormatError(
                f"{name}: record {excerpt(record)} holds {info.file_size} bytes; the pickle says {excerpt(expected)}"
            )
        return ref, _zip_member_bytes(zf, info, fh, size, name), big_endian


def _plain(info: zipfile.ZipInfo, name: str) -> zipfile.ZipInfo:
    """``info``, after checking its record is not encrypted (torch never encrypts; zipfile would ask for a password)."""
    if info.flag_bits & 0x1:
        raise FormatError(f"{name}: record {excerpt(info.filename)} is encrypted")
    return info


def _zip_byteorder(zf: zipfile.ZipFile, prefix: str, name: str) -> bool:
    """True when the ``byteorder`` record says ``big``; archives without the record are little-endian."""
    if f"{prefix}byteorder" not in zf.namelist():
        return False
    if _plain(zf.getinfo(f"{prefix}byteorder"), name).file_size > _MAX_BYTEORDER_BYTES:
        raise FormatError(f"{name}: the byteorder record is larger than {_MAX_BYTEORDER_BYTES} bytes")
    order = zf.read(f"{prefix}byteorder")
    if order not in (b"little", b"big"):
        raise FormatError(f"{name}: unknown byteorder record {order[:16]!r}")
    return order == b"big"


def _zip_member_bytes(zf: zipfile.ZipFile, info: zipfile.ZipInfo, fh: IO[bytes], size: int, name: str) -> np.ndarray:
    """The bytes of one zip member: memory-mapped in place when stored, else decompressed once.

    A compressed member's declared size is bounded by ``budget(size)`` before it is inflated (zipfile
    stops at the declared size), so a zip bomb is refused instead of filling memory.
    """
    if _plain(info, name).file_size == 0:
        return np.empty(0, np.uint8)
    if info.compress_type != zipfile.ZIP_STORED:
        if info.file_size > budget(size):
            raise FormatError(
                f"{name}: compressed storage record {excerpt(info.filename)} declares {info.file_size} bytes, more than "
                f"the {budget(size)} a {size}-byte .pt may expand to ({MAX_EXPANSION}x its size + "
                f"{EXPANSION_SLACK}); a zip bomb?"
            )
        return np.frombuffer(zf.read(info), dtype=np.uint8)
    fh.seek(info.header_offset)
    signature, name_len, extra_len = _ZIP_LOCAL_HEADER.unpack(fh.read(_ZIP_LOCAL_HEADER.size))
    if signature != b"PK\x03\x04":
        raise FormatError(f"{name}: bad local header for record {excerpt(info.filename)}")
    start = info.header_offset + _ZIP_LOCAL_HEADER.size + name_len + extra_len
    return _map_bytes(fh, start, info.file_size, name)


def _map_bytes(fh: IO[bytes], start: int, count: int, name: str) -> np.ndarray:
    """Memory-map ``count`` bytes at ``start`` of the open file, after checking the file holds them."""
    available = os.fstat(fh.fileno()).st_size
    if start + count > available:
        raise FormatError(f"{name}: truncated: needs bytes up to {excerpt(start + count)}, the file has {available}")
    if count == 0:
        return np.empty(0, np.uint8)
    return np.memmap(fh, dtype=np.uint8, mode="r", offset=start, shape=(count,)).view(np.ndarray)


def _read_legacy(fh: IO[bytes], size: int, name: str) -> tuple[_TensorRef, np.ndarray, bool]:
    """Parse a legacy-stream ``.pt``; return the tensor, its storage's bytes and whether they are big-endian.

    The five pickles are read from a copy of at most the first ``MAX_PICKLE_BYTES`` of the file, the
    storages after them from the file itself.
    """
    fh.seek(0)
    head = fh.read(MAX_PICKLE_BYTES)
    pickles = io.BytesIO(head)
    try:
        ref, keys, roots = _legacy_pickles(pickles, name)
    except (EOFError, pickle.UnpicklingError) as exc:
        if len(head) < size:
            raise FormatError(
                f"{name}: the legacy pickles do not end within the first {MAX_PICKLE_BYTES} bytes"
            ) from exc
        raise
    fh.seek(pickles.tell())
    for key in keys:
        if key not in roots:
            raise FormatError(f"{name}: storage {excerpt(key)} is listed but never referenced")
        # torch writes storages little-endian; writers on big-endian hosts before torch 1.x wrote them
        # (count included) natively, so the count, which must match the pickle's, tells the byte order.
        root = roots[key]
        header = fh.read(8)
        if header not in (struct.pack("<q", root.numel), struct.pack(">q", root.numel)):
            raise FormatError(
                f"{name}: storage {excerpt(key)} does not start with its count {excerpt(root.numel)} ({header.hex()})"
            )
        big_endian = header != struct.pack("<q", root.numel)
        nbytes = root.numel * DTYPES[root.dtype].itemsize
        if key == ref.storage.key:
            return ref, _map_bytes(fh, fh.tell(), nbytes, name), big_endian
        if fh.tell() + nbytes > size:
            raise FormatError(f"{name}: storage {excerpt(key)} of {excerpt(nbytes)} bytes runs past the end of the file")
        fh.seek(nbytes, os.SEEK_CUR)
    raise FormatError(f"{name}: the tensor's storage {excerpt(ref.storage.key)} is not in the file")


def _legacy_pickles(fh: IO[bytes], name: str) -> tuple[_TensorRef, list[str], dict[str, _Storage]]:
    """The legacy stream's pickles (magic, protocol, sys_info, object, storage keys), read from ``fh``:
    the tensor, the storage keys in file order, and the root storages the object referenced."""
    if _SafeUnpickler(fh, name).load() != _LEGACY_MAGIC:
        raise FormatError(f"{name}: neither a zip archive nor a legacy torch stream (bad magic number)")
    protocol = _SafeUnpickler(fh, name).load()
    if protocol != _LEGACY_PROTOCOL:
        raise FormatError(f"{name}: unsupported legacy protocol version {excerpt(protocol)}")
    sys_info = _SafeUnpickler(fh, name).load()
    if not isinstance(sys_info, dict):
        raise FormatError(f"{name}: legacy sys_info is {type(sys_info).__name__}, not a dict")
    roots: dict[str, _Storage] = {}

    def load_storage(pid: Any) -> _Storage:
        root, view = _registered(roots, pid, name, legacy=True)
        key, numel = root.key, root.numel
        if view is None:
            return root
        if not (isinstance(view, tuple) and len(view) == 3 and _is_count(view[1]) and _is_count(view[2])):
            raise FormatError(f"{name}: malformed storage view {excerpt(view)}")
        if view[1] + view[2] > numel:
            raise FormatError(f"{name}: storage view {excerpt(view)} overruns its {numel}-element storage")
        return _Storage(key, root.dtype, view[2], view[1])

    ref = _single_tensor(_SafeUnpickler(fh, name, load_storage).load(), name)
    keys = _SafeUnpickler(fh, name).load()
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise FormatError(f"{name}: the legacy storage-key list is malformed")
    return ref, keys, roots


def _materialize(ref: _TensorRef, raw: np.ndarray, big_endian: bool, limit: int, name: str) -> np.ndarray:
    """Copy the strided view out of the storage bytes as a C-contiguous little-endian array.

    Elements are gathered as unsigned integers of the dtype's width, so one vectorized ``astype``
    both makes the copy contiguous and swaps big-endian bytes, whatever the dtype. A view needing
    more than ``limit`` bytes (stride 0 or overlapping strides over a small storage) is refused first.
    """
    target = numpy_dtype(ref.dtype)
    width = target.itemsize
    storage_width = DTYPES[ref.storage.dtype].itemsize
    start = ref.storage.element_offset * storage_width
    count = ref.storage.numel * storage_width // width
    numel = math.prod(ref.size)
    if numel * width > limit:
        raise FormatError(
            f"{name}: tensor of shape {excerpt(list(ref.size))} (stride {excerpt(list(ref.stride))}) would need "
            f"{excerpt(numel * width)} bytes, more than the {limit} this file may produce ({MAX_EXPANSION}x its size + "
            f"{EXPANSION_SLACK})"
        )
    if numel == 0:
        return np.zeros(ref.size, dtype=target)
    last = ref.offset + sum((n - 1) * s for n, s in zip(ref.size, ref.stride))
    if last >= count:
        raise FormatError(
            f"{name}: tensor view (offset {excerpt(ref.offset)}, size {excerpt(list(ref.size))}, stride "
            f"{excerpt(list(ref.stride))}) reaches element {excerpt(last)} of a storage of {excerpt(count)} "
            f"{ref.dtype} elements"
        )
    order = ">" if big_endian else "<"
    elements = raw[start : start + count * width].view(f"{order}u{width}")[ref.offset :]
    view = np.lib.stride_tricks.as_strided(
        elements, shape=ref.size, strides=tuple(s * width for s in ref.stride), writeable=False
    )
    words = view.astype(f"<u{width}", order="C")
    return words.astype(np.bool_) if ref.dtype == "bool" else words.view(target)
