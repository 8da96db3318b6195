"""Reader of the legacy versioned ``ttnn.dump_tensor`` stream, versions v0-v5 (spec §3-§7, §10).

The stream is a packed sequence of raw C++ values written by the host, so besides the version
the reader must infer the byte order (from which reading of a size or rank field is plausible)
and settle the historical ambiguities with the file size: v0 DataType 4 (UINT16 or BFLOAT4_B)
and v5 StorageType DEVICE (single or multi-device payload). Every count is checked against the
bytes that remain before anything is sliced, and the parse must end exactly at the end of file.
"""

from __future__ import annotations

import struct
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import FormatError
from ..spec import Distribution, LoadedTensor, Placement, Shards, TensorSpec
from . import enums
from .tensorbin import MAX_CORE_RANGES, ParsedSpec, parse_tensor_spec
from .tiles import LEGACY_TILE, BufferLayout, decode, legacy_layout

SENTINEL = b"\xff" * 8
MAX_RANK = 8
MAX_BUFFERS = 65536
_SHAPE_FORMAT = "Q8IQ16Qi4x"  # LegacyShape: rank, dims[8], padding rank, {front, back}[8], pad value, tail
_SHAPE_SIZE = struct.calcsize("<" + _SHAPE_FORMAT)  # 184


class _Cursor:
    """Sequential reader over the file's bytes in one byte order; every read is bounds-checked."""

    def __init__(self, buf: np.ndarray, byte_order: str, pos: int = 0) -> None:
        self.buf = buf
        self.prefix = "<" if byte_order == "little" else ">"
        self.pos = pos

    @property
    def remaining(self) -> int:
        return self.buf.size - self.pos

    def take(self, length: int, what: str) -> np.ndarray:
        """The next ``length`` bytes (a view), or FormatError if the file ends first."""
        if length < 0 or length > self.remaining:
            raise FormatError(f"{what} needs {length} bytes at offset {self.pos}, only {self.remaining} remain")
        view = self.buf[self.pos : self.pos + length]
        self.pos += length
        return view

    def unpack(self, fmt: str, what: str) -> tuple[Any, ...]:
        layout = struct.Struct(self.prefix + fmt)
        return layout.unpack(self.take(layout.size, what).tobytes())

    def u8(self, what: str) -> int:
        return int(self.take(1, what)[0])

    def flag(self, what: str) -> bool:
        value = self.u8(what)
        if value > 1:
            raise FormatError(f"{what} is {value}, not a bool")
        return bool(value)

    def u64(self, what: str) -> int:
        return int(self.unpack("Q", what)[0])

    def i32(self, what: str) -> int:
        return int(self.unpack("i", what)[0])


def is_legacy(head: bytes) -> bool:
    """Whether the first 8 bytes start a legacy stream: the sentinel, or a v0 rank in either order."""
    if head[:8] == SENTINEL:
        return True
    return len(head) >= 8 and any(1 <= int.from_bytes(head[:8], order) <= MAX_RANK for order in ("little", "big"))  # type: ignore[arg-type]


def _byte_order(buf: np.ndarray, pos: int, plausible: Callable[[int], bool], what: str) -> str:
    """The byte order in which the u64 at ``pos`` is plausible (little-endian preferred)."""
    raw = buf[pos : pos + 8].tobytes()
    if len(raw) < 8:
        raise FormatError(f"file ends before the {what}")
    for order in ("little", "big"):
        if plausible(int.from_bytes(raw, order)):  # type: ignore[arg-type]
            return order
    raise FormatError(f"implausible {what} {int.from_bytes(raw, 'little')}")


def read_bin(buf: np.ndarray) -> LoadedTensor:
    """Parse a whole legacy file held in ``buf`` (uint8), any version v0-v5, either byte order."""
    if buf[:8].tobytes() == SENTINEL:
        if buf.size < 9:
            raise FormatError("file ends after the sentinel")
        version = int(buf[8])
        if 1 <= version <= 4:
            order = _byte_order(buf, 9, lambda r: 1 <= r <= MAX_RANK, "shape rank")
            return _read_v1_v4(_Cursor(buf, order, 9), version)
        if version == 5:
            order = _byte_order(buf, 9, lambda s: 0 < s <= buf.size - 21 and s % 4 == 0, "TensorSpec size")
            return _read_v5(_Cursor(buf, order, 9))
        raise FormatError(f"unknown legacy version {version}")
    order = _byte_order(buf, 0, lambda r: 1 <= r <= MAX_RANK, "v0 shape rank")
    return _read_v0(_Cursor(buf, order))


def _legacy_shape(cur: _Cursor) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
    """A 184-byte LegacyShape: padded dims and (front, back) padding per dim; slots past rank ignored."""
    values = cur.unpack(_SHAPE_FORMAT, "LegacyShape")
    rank, dims, pad_rank, pads = values[0], values[1:9], values[9], values[10:26]
    if not 1 <= rank <= MAX_RANK:
        raise FormatError(f"LegacyShape rank {rank} is not 1..{MAX_RANK}")
    if pad_rank > MAX_RANK:
        raise FormatError(f"LegacyShape padding rank {pad_rank} is not 0..{MAX_RANK}")
    crop = tuple((pads[2 * i], pads[2 * i + 1]) if i < pad_rank else (0, 0) for i in range(rank))
    return tuple(dims[:rank]), crop


def _header(cur: _Cursor, version: int) -> tuple[tuple[str, ...], str]:
    """DataType candidates and Layout name of the i32 pair that follows the shape."""
    dtype_value, layout_value = cur.unpack("ii", "DataType and Layout")
    names = enums.data_type_table(version).get(dtype_value)
    if names is None:
        raise FormatError(f"unknown DataType value {dtype_value} for a v{version} file")
    return names, enums.lookup(enums.LAYOUT, layout_value, "Layout")


def _layout(dtype: str, layout: str, shape: tuple[tuple[int, ...], tuple[tuple[int, int], ...]]) -> BufferLayout:
    return legacy_layout(dtype, LEGACY_TILE if layout == "TILE" else None, *shape)


def _record(cur: _Cursor, element_size: int, what: str) -> np.ndarray:
    """One buffer record (u64 element count, then the elements), as raw bytes."""
    count = cur.u64(f"{what} element count")
    if count > cur.remaining // element_size:
        raise FormatError(f"{what} claims {count} elements of {element_size} bytes, only {cur.remaining} bytes remain")
    return cur.take(count * element_size, what)


def _check_end(cur: _Cursor) -> None:
    if cur.remaining:
        raise FormatError(f"{cur.remaining} unexpected bytes after the tensor data at offset {cur.pos}")


def _checked(raw: np.ndarray, layout: BufferLayout, what: str) -> np.ndarray:
    if raw.size != layout.nbytes:
        raise FormatError(
            f"{what} holds {raw.size // layout.element_size} elements, its {layout.dtype} shape "
            f"{list(layout.padded)} needs {layout.nbytes // layout.element_size}"
        )
    return raw


def _read_v0(cur: _Cursor) -> LoadedTensor:
    """v0: LegacyShape, DataType, Layout, one buffer; DataType 4 is settled by the element count."""
    shape = _legacy_shape(cur)
    names, layout_name = _header(cur, 0)
    count_pos = cur.pos
    problems = []
    for name in names:
        cur.pos = count_pos
        try:
            layout = _layout(name, layout_name, shape)
            raw = _checked(_record(cur, layout.element_size, "buffer"), layout, "buffer")
            _check_end(cur)
        except FormatError as exc:
            problems.append(f"as {name}: {exc}")
            continue
        return _loaded(cur, 0, [((), decode(raw, layout, _order(cur)))], layout, None, None, None)
    raise FormatError("; ".join(problems))


def _order(cur: _Cursor) -> str:
    return "little" if cur.prefix == "<" else "big"


def _memory_config_block(cur: _Cursor) -> dict[str, Any]:
    """The packed legacy memory-config block (spec §6); the halo byte exists up to mc_version 3."""
    mc_version = cur.u8("memory-config version")
    if not 1 <= mc_version <= 4:
        raise FormatError(f"unknown memory-config version {mc_version}")
    memory_layout, buffer_type = cur.unpack("ii", "memory config")
    shard_spec = None
    if cur.flag("has_shard_spec"):
        count = cur.u64("core range count")
        if count > min(cur.remaining // 32, MAX_CORE_RANGES):  # each becomes ~10x its bytes as Python lists
            raise FormatError(
                f"{count} core ranges: more than fit in the {cur.remaining} remaining bytes or than {MAX_CORE_RANGES}"
            )
        corners = np.frombuffer(cur.take(32 * count, "core ranges").tobytes(), dtype=cur.prefix + "u8")
        height, width, orientation = cur.unpack("IIi", "shard shape and orientation")
        shard_spec = {
            "grid": corners.reshape(count, 2, 2).tolist(),
            "shape": [height, width],
            "orientation": enums.lookup(enums.SHARD_ORIENTATION, orientation, "ShardOrientation"),
            "mode": None,
            "physical_shard_shape": None,
            "halo": cur.flag("halo") if mc_version <= 3 else None,
        }
    return {
        "memory_layout": enums.lookup(enums.TENSOR_MEMORY_LAYOUT, memory_layout, "TensorMemoryLayout"),
        "buffer_type": enums.lookup(enums.BUFFER_TYPE, buffer_type, "BufferType"),
        "shard_spec": shard_spec,
        "nd_shard_spec": None,
    }


def _read_v1_v4(cur: _Cursor, version: int) -> LoadedTensor:
    """v1-v4: sentinel header, optional memory-config block (v2+), single or multi-device payload."""
    shape = _legacy_shape(cur)
    names, layout_name = _header(cur, version)
    storage_value = cur.i32("StorageType")
    storage = enums.lookup(enums.STORAGE_TYPE_V1_V4, storage_value, "StorageType")
    memory_config = None
    if version >= 2 and cur.flag("has_memory_config"):
        memory_config = _memory_config_block(cur)
    single = {1: (0, 2), 2: (0, 1, 2)}.get(version, (0, 1, 2))
    multi = {1: (4,)}.get(version, (3, 4))
    dtype = names[0]
    if storage_value in single:
        layout = _layout(dtype, layout_name, shape)
        raw = _checked(_record(cur, layout.element_size, "buffer"), layout, "buffer")
        _check_end(cur)
        shards: Shards = [((), decode(raw, layout, _order(cur)))]
        return _loaded(cur, version, shards, layout, storage, memory_config, None)
    if storage_value not in multi:
        raise FormatError(f"a v{version} file cannot hold storage type {storage}")
    element_size = _layout(dtype, layout_name, shape).element_size
    count, strategy = _multi_prefix(cur, version)
    raws = [_record(cur, element_size, f"buffer {i}") for i in range(count)]
    layouts = [_layout(dtype, layout_name, _legacy_shape(cur)) for _ in range(count)]
    _check_end(cur)
    arrays = [decode(_checked(raw, lay, f"buffer {i}"), lay, _order(cur)) for i, (raw, lay) in enumerate(zip(raws, layouts))]
    return _multi_loaded(cur, version, arrays, layouts[0], storage, memory_config, strategy)


def _multi_prefix(cur: _Cursor, version: int) -> tuple[int, tuple[str, bytes, int] | None]:
    """num_buffers and, from v3, the DistributedTensorConfig; returns (records to read, strategy)."""
    buffers = cur.u64("num_buffers")
    if not 1 <= buffers <= min(MAX_BUFFERS, cur.remaining // 8):
        raise FormatError(f"num_buffers {buffers} is implausible for {cur.remaining} remaining bytes")
    if version < 3:
        return buffers, None
    config = cur.take(8, "DistributedTensorConfig").tobytes()
    table = enums.STRATEGY_V3 if version == 3 else enums.STRATEGY_V4_V5
    name = enums.lookup(table, config[4], "DistributedTensorConfig index")
    if name == "Shard2D|AllGather":  # v3 index 2: Shard2D only if its mesh matches the buffer count
        y, x = struct.unpack(cur.prefix + "HH", config[:4])
        name = "Shard2D" if y * x == buffers else "AllGather"
    return (1 if name == "Replicate" else buffers), (name, config[:4], buffers)


def _read_v5(cur: _Cursor) -> LoadedTensor:
    """v5: TensorSpec flatbuffer header, StorageType, then a single or multi-device payload."""
    top = _spec(cur, "TensorSpec")
    storage_value = cur.i32("StorageType")
    storage = enums.lookup(enums.STORAGE_TYPE_V5, storage_value, "StorageType")
    layout = top.buffer
    if storage_value in (0, 2) or (storage_value == 1 and _single_fits(cur, layout)):
        raw = _checked(_record(cur, layout.element_size, "buffer"), layout, "buffer")
        _check_end(cur)
        shards: Shards = [((), decode(raw, layout, _order(cur)))]
        return _loaded(cur, 5, shards, layout, storage, top.memory_config, None, top)
    count, strategy = _multi_prefix(cur, 5)
    raws = [_record(cur, layout.element_size, f"buffer {i}") for i in range(count)]
    specs = [_spec(cur, f"buffer {i} TensorSpec") for i in range(count)]
    _check_end(cur)
    arrays = []
    for i, (raw, spec) in enumerate(zip(raws, specs)):
        fits = spec.buffer.nbytes == raw.size and spec.dtype == top.dtype
        own = spec.buffer if fits else layout  # fall back to the header spec
        arrays.append(decode(_checked(raw, own, f"buffer {i}"), own, _order(cur)))
    return _multi_loaded(cur, 5, arrays, layout, storage, top.memory_config, strategy, top)


def _spec(cur: _Cursor, what: str) -> ParsedSpec:
    size = cur.u64(f"{what} size")
    if size > cur.remaining:
        raise FormatError(f"{what} of {size} bytes does not fit in the {cur.remaining} remaining bytes")
    return parse_tensor_spec(cur.take(size, what).data)


def _single_fits(cur: _Cursor, layout: BufferLayout) -> bool:
    """v5 DEVICE: a single buffer record if it ends exactly at the end of file (spec §10.3)."""
    if cur.remaining < 8:
        return False
    count = int.from_bytes(cur.buf[cur.pos : cur.pos + 8].tobytes(), _order(cur))  # type: ignore[arg-type]
    return 8 + count * layout.element_size == cur.remaining


def _loaded(
    cur: _Cursor,
    version: int,
    shards: list[tuple[tuple[int, ...], np.ndarray]],
    layout: BufferLayout,
    storage: str | None,
    memory_config: dict[str, Any] | None,
    distribution: Distribution | None,
    spec: ParsedSpec | None = None,
    logical: tuple[int, ...] | None = None,
) -> LoadedTensor:
    tile = spec.tile if spec is not None else (LEGACY_TILE if layout.tile is not None else None)
    tensor_spec = TensorSpec(
        ttnn_dtype=layout.dtype,
        layout="TILE" if layout.tile is not None else "ROW_MAJOR",
        tile_shape=tile,
        transpose_tile=spec.transpose if spec is not None else False,
        logical_shape=layout.logical if logical is None and distribution is None else logical,
        padded_shape=layout.padded,
        storage_type=storage,
        memory_config=memory_config,
        distribution=distribution,
    )
    source = {"format": "bin", "version": version, "byte_order": _order(cur)}
    return LoadedTensor(shards=shards, spec=tensor_spec, source=source)


def _multi_loaded(
    cur: _Cursor,
    version: int,
    arrays: Sequence[np.ndarray],
    layout: BufferLayout,
    storage: str,
    memory_config: dict[str, Any] | None,
    strategy: tuple[str, bytes, int] | None,
    spec: ParsedSpec | None = None,
) -> LoadedTensor:
    """A multi-device payload: shards at their mesh coordinates, and the strategy as a Distribution."""
    rank = arrays[0].ndim
    if any(a.ndim != rank for a in arrays):
        raise FormatError(f"device buffers have different ranks: {[a.ndim for a in arrays]}")
    if strategy is None:  # v1/v2 wrote no strategy: the shards cannot be placed
        coords: list[tuple[int, ...]] = [(i,) for i in range(len(arrays))]
        distribution = Distribution((len(arrays),), None if len(arrays) > 1 else (Placement("replicate"),))
        logical = arrays[0].shape if len(arrays) == 1 else None
    else:
        name, union, buffers = strategy
        distribution, coords, logical = _strategy(name, union, buffers, cur.prefix, arrays, rank)
    shards = list(zip(coords, arrays))
    return _loaded(cur, version, shards, layout, storage, memory_config, distribution, spec, logical)


def _strategy(
    name: str, union: bytes, buffers: int, prefix: str, arrays: Sequence[np.ndarray], rank: int
) -> tuple[Distribution, list[tuple[int, ...]], tuple[int, ...] | None]:
    """Distribution, shard coordinates and global logical shape for a legacy strategy (spec §10.4)."""
    count = len(arrays)
    line: list[tuple[int, ...]] = [(i,) for i in range(count)]
    if name == "Replicate":
        (factor,) = struct.unpack(prefix + "i", union)
        dist = Distribution((buffers,), (Placement("replicate"),), name, {"replication_factor": factor, "num_buffers": buffers})
        return dist, line, arrays[0].shape
    if name == "Shard":
        (dim,) = struct.unpack(prefix + "i", union)
        params = {"shard_dimension": dim}
        if not -rank <= dim < rank:
            raise FormatError(f"ShardTensor dimension {dim} is outside a rank-{rank} tensor")
        dim %= rank
        logical = list(arrays[0].shape)
        logical[dim] = sum(a.shape[dim] for a in arrays)
        return Distribution((count,), (Placement("shard", dim),), name, params), line, tuple(logical)
    if name == "Shard2D":
        y, x = struct.unpack(prefix + "HH", union)
        params = {"mesh_y": y, "mesh_x": x}
        if y * x == count:
            return Distribution((y, x), None, name, params), [divmod(i, x) for i in range(count)], None
        return Distribution((count,), None, name, params), line, None
    return Distribution((count,), None, name, {}), line, arrays[0].shape  # AllGather: full copies
