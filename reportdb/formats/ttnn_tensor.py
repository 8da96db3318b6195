"""ttnn tensors as reportdb values: per-device shards of logical numpy values plus the spec ttnn gave them.

``convert(tensor)`` / ``to_loaded(tensor)`` read a ``ttnn.Tensor`` (host, multi-device host, or device, read back
with ``ttnn.from_device``) as per-device shards of logical values plus its spec: the original dtype (BFLOAT8_B stays
BFLOAT8_B; its values are stored exactly as bfloat16), layout, tile, padded shape, memory config and the distribution
over the mesh. ``import ttnn`` happens only inside these functions, so reportdb never needs ttnn (which installs only
on Linux x86-64 with CPython 3.10/3.12). Nothing here writes: reading a live tensor is a format like the files ttnn
writes, below the Writer (``reportdb.writer``) that takes ttnn tensors and the hooks that feed it (``reportdb.ttnn``,
which exports these names).
"""

from __future__ import annotations

import contextlib
import functools
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TtnnError
from ..spec import Distribution, LoadedTensor, Placement, TensorSpec

#: ttnn dtypes whose values numpy holds natively; every other float type goes through float32.
_NUMPY_NATIVE = {"FLOAT32", "UINT32", "INT32", "UINT16", "UINT8"}
#: Buffer types by name, as the report's ``buffer_type`` column numbers them (C++ ``BufferType``).
_BUFFER_TYPES = {"DRAM": 0, "L1": 1, "SYSTEM_MEMORY": 2, "L1_SMALL": 3, "TRACE": 4}


@dataclass
class Converted:
    """A ttnn tensor as the writer stores it: shards (None when only described), spec and report row."""

    shards: list[tuple[tuple[int, ...], np.ndarray]] | None
    metadata: dict[str, Any]  # TensorSpec fields and ``source``
    row: dict[str, Any]  # the legacy ``tensors`` row: shape, dtype, layout, memory_config, device fields


def _enum_name(value: Any) -> str:
    """``DataType.BFLOAT16`` / ``Layout::TILE`` / ``<DataType.FLOAT32: 1>`` -> the bare member name."""
    text = str(getattr(value, "name", None) or value)
    return text.replace("::", ".").split(".")[-1].split(":")[0].strip("<> ")


def convert(tensor: Any, *, values: bool = True) -> Converted:
    """Describe a ``ttnn.Tensor`` and, when ``values``, read its shards as canonical numpy arrays."""
    import ttnn

    row: dict[str, Any] = {}
    storage = _enum_name(tensor.storage_type())
    memory_text = _memory_config_text(tensor)
    if storage == "DEVICE":
        row.update(_device_fields(tensor, memory_text))
        if values:
            tensor = ttnn.from_device(tensor)
    dtype = _enum_name(tensor.dtype)
    layout = _enum_name(tensor.layout)
    tile = _tile(tensor) if layout == "TILE" else None
    metadata: dict[str, Any] = {
        "ttnn_dtype": dtype,
        "layout": layout,
        "tile_shape": tile,
        "padded_shape": _padded_shape(tensor),
        "storage_type": storage,
        "memory_config": _parsed_memory_config(memory_text),
        "source": {"format": "ttnn", "version": ttnn_version()},
    }
    row.update(shape=str(tensor.shape), dtype=f"DataType.{dtype}", layout=f"Layout.{layout}", memory_config=memory_text)
    shards = None
    if values:
        parts = _device_tensors(tensor)
        distribution = _distribution(tensor, len(parts))
        coords = (
            list(distribution.device_coords)
            if distribution is not None and distribution.device_coords and len(distribution.device_coords) == len(parts)
            else [(i,) for i in range(len(parts))] if len(parts) > 1 else [()]
        )
        shards = [(tuple(c), _values(part, dtype)) for c, part in zip(coords, parts)]
        if distribution is not None:
            metadata["distribution"] = distribution
    return Converted(shards, metadata, row)


def to_loaded(tensor: Any) -> LoadedTensor:
    """A ``ttnn.Tensor`` as a LoadedTensor (the same shape every legacy file reader returns)."""
    converted = convert(tensor)
    meta = dict(converted.metadata)
    source = meta.pop("source")
    assert converted.shards is not None
    return LoadedTensor(shards=converted.shards, spec=TensorSpec(**meta), source=source)


@functools.lru_cache(maxsize=1)
def ttnn_version() -> str | None:
    """The installed ttnn's version, read once: importlib.metadata parses the package metadata on every call."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ttnn")
    except PackageNotFoundError:
        return None


def _memory_config_text(tensor: Any) -> str | None:
    try:
        return str(tensor.memory_config())
    except Exception:  # old host tensors have none
        return None


@functools.lru_cache(maxsize=256)
def _parsed_memory_config(text: str | None) -> dict[str, Any] | None:
    """``parse_memory_config``, once per distinct text (a run has a handful; parsing one costs ~100 µs).
    The result is shared between tensors and must not be changed."""
    from .memconfig import parse_memory_config

    return parse_memory_config(text)


def _device_fields(tensor: Any, memory_text: str | None) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    with contextlib.suppress(Exception):
        fields["address"] = int(tensor.buffer_address())
    with contextlib.suppress(Exception):
        fields["device_id"] = int(tensor.device().id())
    if memory_text:
        parsed = _parsed_memory_config(memory_text) or {}
        if parsed.get("buffer_type") in _BUFFER_TYPES:
            fields["buffer_type"] = _BUFFER_TYPES[parsed["buffer_type"]]
    return fields


def _tile(tensor: Any) -> tuple[int, int] | None:
    tile = getattr(tensor, "tile", None)
    shape = getattr(tile, "tile_shape", None)
    return (int(shape[0]), int(shape[1])) if shape is not None else (32, 32)


def _padded_shape(tensor: Any) -> tuple[int, ...] | None:
    padded = getattr(tensor, "padded_shape", None)
    if padded is None and hasattr(tensor.shape, "with_tile_padding"):
        padded = tensor.shape.with_tile_padding()
    return None if padded is None else tuple(int(d) for d in padded)


def _device_tensors(tensor: Any) -> list[Any]:
    import ttnn

    try:
        parts = list(ttnn.get_device_tensors(tensor))
    except Exception:  # a single-device tensor on wheels where the call insists on multi-device storage
        return [tensor]
    return parts or [tensor]


def _distribution(tensor: Any, n_shards: int) -> Distribution | None:
    """The tensor topology (newer wheels; a single-device tensor has one too) as a Distribution.

    None where the wheel has no topology: then one shard is the tensor and several cannot be assembled.
    """
    get = getattr(tensor, "tensor_topology", None)
    if get is None:
        return None if n_shards <= 1 else Distribution((n_shards,), None, "unknown", {}, None)
    topology = get()
    shape = tuple(int(d) for d in topology.distribution_shape())
    rank = len(tensor.shape)
    placements = []
    for p in topology.placements():
        text = str(p)
        if "Shard" in text:
            dim = getattr(p, "dim", None)
            if dim is None:
                dim = text.split("(")[1].rstrip(")")
            placements.append(Placement("shard", int(dim) % rank))
        else:
            placements.append(Placement("replicate"))
    coords = tuple(tuple(int(v) for v in _coord_values(c)) for c in topology.mesh_coords())
    params: dict[str, Any] = {}
    with contextlib.suppress(Exception):  # the device mesh the host buffer spans, as .tensorbin files record it
        params["mesh_shape"] = [int(d) for d in tensor.host_buffer().shape()]
    return Distribution(shape, tuple(placements), None, params, coords or None)


def _coord_values(coord: Any) -> list[int]:
    if hasattr(coord, "coords"):
        return list(coord.coords())
    text = str(coord)  # MeshCoordinate([0, 1])
    return [int(v) for v in text[text.index("[") + 1 : text.rindex("]")].split(",") if v.strip()]


def _values(tensor: Any, dtype: str) -> np.ndarray:
    """One host shard's logical values; block floats and bfloat16 through float32, which is exact."""
    import ttnn

    source = tensor if dtype in _NUMPY_NATIVE else ttnn.to_dtype(tensor, ttnn.float32)
    try:
        array = np.asarray(source.to_numpy())
    except Exception:  # wheels whose to_numpy does not take this dtype or layout
        return _values_through_file(tensor)
    if dtype not in _NUMPY_NATIVE:
        from ..dtypes import numpy_dtype

        return array.astype(numpy_dtype("bfloat16")) if dtype in ("BFLOAT16", "BFLOAT8_B", "BFLOAT4_B") else array
    return array if array.flags.owndata else array.copy()  # never keep a view of ttnn's buffer


def _values_through_file(tensor: Any) -> np.ndarray:
    """Fallback: ``ttnn.dump_tensor`` to a temporary file and read it with reportdb's own readers."""
    import ttnn

    from . import load_tensor_file

    with tempfile.TemporaryDirectory() as tmp:
        for ext in ("tensorbin", "bin"):
            path = Path(tmp) / f"t.{ext}"
            try:
                ttnn.dump_tensor(str(path), tensor)
            except Exception:
                continue
            return load_tensor_file(path).array
    raise TtnnError(f"cannot read the values of a ttnn tensor of dtype {tensor.dtype}, layout {tensor.layout}")


def is_ttnn_object(value: Any) -> bool:
    """Whether ``value`` is an object of ttnn's bindings (a tensor, a config...), told by its type's module so that
    ttnn is never imported to ask."""
    return (type(value).__module__ or "").startswith("ttnn")
