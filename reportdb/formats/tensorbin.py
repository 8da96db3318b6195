"""Reader of the multi-host ``.tensorbin`` format (spec §8-§9) and of the TensorSpec flatbuffer.

A ``.tensorbin`` is ``u64 header_size``, a flatbuffer ``Tensor`` (per-device TensorSpec, mesh
shape, shard records, optional topology), then the shard bytes. The TensorSpec parser here is
shared with legacy v5 ``.bin`` files, which embed the same flatbuffer.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import FormatError
from ..spec import MAX_RANK, MAX_SHARDS, Distribution, LoadedTensor, Placement, TensorSpec
from . import enums
from .flatbuf import FlatBuffer, Table
from .tiles import ELEMENT_DTYPES, BufferLayout, decode, spec_layout

#: At most this many core ranges in a shard grid (a chip has about a hundred cores).
MAX_CORE_RANGES = 65536
#: The assembled tensor may take this many times the file's size, plus ``_SLACK`` bytes. Shard records
#: that share one offset (replicated shards written once) are decoded once and share their array, and
#: distinct records may not overlap, so the shards themselves never take more than the block-float
#: expansion (at most 3.6x) of the file; this bounds what assembling them along sharded mesh axes makes.
MAX_EXPANSION = 64
_SLACK = 64 << 20


@dataclass(frozen=True)
class ParsedSpec:
    """A TensorSpec flatbuffer, decoded: ttnn names, shapes and the buffer layout it implies."""

    dtype: str
    layout: str
    tile: tuple[int, int] | None
    transpose: bool
    logical: tuple[int, ...]
    memory_config: dict[str, Any] | None
    buffer: BufferLayout


def parse_tensor_spec(data: bytes | memoryview) -> ParsedSpec:
    """Decode a standalone TensorSpec flatbuffer (the v5 ``.bin`` header and per-buffer specs)."""
    return spec_from_table(FlatBuffer(data).root())


def spec_from_table(spec: Table) -> ParsedSpec:
    """Decode a TensorSpec table (§8): logical shape, dtype, page config, memory config, alignment."""
    shape = spec.u32_vector(0, "TensorSpec.shape", MAX_RANK) or []
    layout_table = spec.table(1, "TensorLayout")
    if layout_table is None:
        raise FormatError("TensorSpec has no tensor_layout")
    dtype = _data_type(layout_table.u8(0))
    page = enums.lookup(enums.PAGE_CONFIG, layout_table.u8(1), "PageConfig type")
    tile: tuple[int, int] | None = None
    transpose = False
    if page == "TILE":
        page_config = layout_table.table(2, "TilePageConfig")
        tile_table = None if page_config is None else page_config.table(0, "Tile")
        tile = (32, 32) if tile_table is None else (tile_table.u32(0), tile_table.u32(1))
        transpose = tile_table is not None and bool(tile_table.u8(2))
    memory_table = layout_table.table(3, "MemoryConfig")
    memory_config = None if memory_table is None else _memory_config(memory_table)
    alignment = tuple(layout_table.u32_vector(4, "TensorLayout.alignment", MAX_RANK) or ())
    logical = tuple(shape)
    shard = memory_config["shard_spec"] if memory_config else None
    logical_shard = None
    if shard is not None and shard["mode"] == "LOGICAL":
        physical = shard["physical_shard_shape"]
        logical_shard = (tuple(shard["shape"]), None if physical is None else tuple(physical))
    buffer = spec_layout(dtype, tile, transpose, logical, alignment, logical_shard)  # type: ignore[arg-type]
    return ParsedSpec(dtype, page, tile, transpose, logical, memory_config, buffer)


def _data_type(value: int) -> str:
    names = enums.DATA_TYPE_CURRENT.get(value)
    if names is None:
        raise FormatError(f"unknown DataType value {value}")
    return names[0]


def _grid(table: Table | None) -> list[list[list[int]]]:
    if table is None:
        return []
    ranges = []
    for core_range in table.tables(0, "CoreRangeSet.ranges", MAX_CORE_RANGES) or []:
        corners = []
        for slot, name in ((0, "start"), (1, "end")):
            coord = core_range.table(slot, f"CoreRange.{name}")
            corners.append([0, 0] if coord is None else [coord.i32(0), coord.i32(1)])
        ranges.append(corners)
    return ranges


def _memory_config(table: Table) -> dict[str, Any]:
    """MemoryConfig table as the structured dict of TensorSpec.memory_config."""
    shard_spec = None
    shard = table.table(2, "ShardSpec")
    if shard is not None:
        physical = shard.table(5, "ShardShape")
        shard_spec = {
            "grid": _grid(shard.table(0, "CoreRangeSet")),
            "shape": [shard.u32(1), shard.u32(2)],
            "orientation": enums.lookup_lenient(enums.SHARD_ORIENTATION, shard.u8(3)),
            "mode": enums.lookup_lenient(enums.SHARD_MODE, shard.u8(4)),
            "physical_shard_shape": None if physical is None else [physical.u32(0), physical.u32(1)],
            "halo": None,
        }
    nd_shard_spec = None
    nd = table.table(3, "NdShardSpec")
    if nd is not None:
        nd_shard_spec = {
            "shard_shape": nd.u32_vector(0, "NdShardSpec.shard_shape", MAX_RANK) or [],
            "grid": _grid(nd.table(1, "CoreRangeSet")),
            "orientation": enums.lookup_lenient(enums.SHARD_ORIENTATION, nd.u8(2)),
            "distribution_strategy": enums.lookup_lenient(enums.SHARD_DISTRIBUTION_STRATEGY, nd.u8(3)),
        }
    return {
        "memory_layout": enums.lookup_lenient(enums.TENSOR_MEMORY_LAYOUT_FB, table.u16(0)),
        "buffer_type": enums.lookup_lenient(enums.BUFFER_TYPE, table.u16(1)),
        "shard_spec": shard_spec,
        "nd_shard_spec": nd_shard_spec,
    }


def _mesh_dims(table: Table | None, what: str) -> tuple[int, ...] | None:
    if table is None:
        return None
    return tuple(table.u32_vector(0, what, MAX_RANK) or ())


def _inline_storage(record: Table, what: str) -> tuple[int, int]:
    """(offset, size) of an InlineFileStorage union member."""
    kind = record.u8(0)
    if kind != 1:
        raise FormatError(f"{what} has buffer type {kind}, not InlineFileStorage (1)")
    pos = record.struct_at(1, 16, f"{what} InlineFileStorage")
    if pos is None:
        raise FormatError(f"{what} has no buffer")
    offset, size = struct.unpack_from("<QQ", record.fb.data, pos)
    return int(offset), int(size)


def _shard_records(records: list[Table]) -> list[tuple[tuple[int, ...], int, int]]:
    """(mesh coordinate, offset, size) of each TensorShard table."""
    shards = []
    for i, record in enumerate(records):
        coord_table = record.table(2, f"shard {i} MeshCoordinate")
        coord = () if coord_table is None else tuple(coord_table.u32_vector(0, "MeshCoordinate.values", MAX_RANK) or ())
        shards.append((coord, *_inline_storage(record, f"shard {i}")))
    return shards


def _new_schema(root: Table) -> tuple[Table, tuple[int, ...] | None, list[tuple[tuple[int, ...], int, int]], Table | None]:
    """Tensor (2025-07-10 →): spec, mesh shape, shards [(coordinate, offset, size)], topology."""
    spec = root.table(0, "Tensor.tensor_spec")
    if spec is None:
        raise FormatError("Tensor has no tensor_spec")
    mesh = _mesh_dims(root.table(1, "MeshShape"), "MeshShape.dimensions")
    records = root.tables(2, "Tensor.shards", MAX_SHARDS)
    if records is None:
        raise FormatError("Tensor has no shards")
    return spec, mesh, _shard_records(records), root.table(3, "TensorTopology")


def _old_schema(root: Table) -> tuple[Table, tuple[int, ...] | None, list[tuple[tuple[int, ...], int, int]], Table | None]:
    """Tensor of 2025-05-31 → 07-10: spec, then a Replicated/Sharded union (spec §8)."""
    spec = root.table(0, "Tensor.tensor_spec")
    kind = root.u8(1)
    body = root.table(2, "Tensor.tensor_type")
    if spec is None or body is None or kind not in (1, 2):
        raise FormatError("Tensor matches neither flatbuffer schema")
    if kind == 1:  # ReplicatedTensor: one buffer for the whole mesh
        return spec, None, [((), *_inline_storage(body, "ReplicatedTensor"))], None
    mesh = _mesh_dims(body.table(0, "MeshShape"), "MeshShape.dimensions")
    records = body.tables(1, "ShardedTensor.shards", MAX_SHARDS)
    if records is None:
        raise FormatError("ShardedTensor has no shards")
    return spec, mesh, _shard_records(records), None


def _topology(
    table: Table, rank: int
) -> tuple[tuple[int, ...], tuple[Placement, ...], tuple[tuple[int, ...], ...]]:
    shape = _mesh_dims(table.table(0, "TensorTopology.distribution_shape"), "distribution shape") or ()
    placements = []
    for entry in table.tables(1, "TensorTopology.placements", MAX_RANK) or []:
        kind = enums.lookup(enums.PLACEMENT_TYPE, entry.u8(0), "MeshMapperPlacement type")
        if kind == "replicate":
            placements.append(Placement("replicate"))
            continue
        dim = entry.i32(1)
        if not -rank <= dim < rank:
            raise FormatError(f"topology shards tensor dim {dim} of a rank-{rank} tensor")
        placements.append(Placement("shard", dim % rank))
    if len(placements) != len(shape):
        raise FormatError(f"topology has {len(placements)} placements for a distribution of rank {len(shape)}")
    coords = tuple(
        tuple(c.u32_vector(0, "MeshCoordinate.values", MAX_RANK) or ())
        for c in table.tables(2, "TensorTopology.mesh_coords", MAX_SHARDS) or []
    )
    return shape, tuple(placements), coords


def read_tensorbin(buf: np.ndarray, byte_order: str) -> LoadedTensor:
    """Parse a whole ``.tensorbin`` file held in ``buf`` (uint8); ``byte_order`` of its header and data."""
    fmt = "<Q" if byte_order == "little" else ">Q"
    header = int(struct.unpack(fmt, buf[:8].tobytes())[0])
    if header < 8 or 8 + header > buf.size:
        raise FormatError(f"header size {header} does not fit the {buf.size}-byte file")
    fb = FlatBuffer(buf[8 : 8 + header].data)
    data = buf[8 + header :]
    root = fb.root()
    try:
        parts = _new_schema(root)
        spec_table = parts[0]
        parsed = spec_from_table(spec_table)
    except FormatError as first:
        try:
            parts = _old_schema(root)
            parsed = spec_from_table(parts[0])
        except FormatError:
            raise first from None
    _, mesh, records, topology_table = parts
    if not records:
        raise FormatError("the tensor has no shards")
    coords = [coord for coord, _, _ in records]
    if len(set(coords)) != len(coords):
        raise FormatError("two shards have the same mesh coordinate")
    need = parsed.buffer.nbytes
    for coord, offset, size in records:
        if size != need:
            raise FormatError(f"shard {list(coord)} holds {size} bytes, its spec needs {need}")
        if offset + size > data.size:
            raise FormatError(f"shard {list(coord)} at {offset}+{size} lies outside the {data.size}-byte data region")
    _check_regions(sorted({offset for _, offset, _ in records}), need, data.size)
    distribution = _distribution(mesh, topology_table, parsed.logical)
    global_shape = _global_shape(parsed.logical, distribution)
    _check_assembled_size(len(records), parsed, global_shape, buf.size)
    decoded: dict[int, np.ndarray] = {}  # replicated shards written once share one decoded array
    shards = []
    for coord, offset, size in records:
        if offset not in decoded:
            decoded[offset] = decode(data[offset : offset + size], parsed.buffer, byte_order)
        shards.append((coord, decoded[offset]))
    spec = TensorSpec(
        ttnn_dtype=parsed.dtype,
        layout=parsed.layout,
        tile_shape=parsed.tile,
        transpose_tile=parsed.transpose,
        logical_shape=global_shape,
        padded_shape=parsed.buffer.padded,
        storage_type="HOST",
        memory_config=parsed.memory_config,
        distribution=distribution,
    )
    return LoadedTensor(shards=shards, spec=spec, source={"format": "tensorbin", "version": None, "byte_order": byte_order})


def _check_regions(offsets: list[int], size: int, data_size: int) -> None:
    """Distinct shard regions (sorted ``offsets``, ``size`` bytes each) must not overlap and must end the file:
    overlapping records would let a small file describe many large shards."""
    for first, second in zip(offsets, offsets[1:]):
        if second < first + size:
            raise FormatError(f"shards at offsets {first} and {second} overlap ({size} bytes each)")
    end = offsets[-1] + size
    if end != data_size:
        raise FormatError(f"{data_size - end} bytes after the last shard")


def _check_assembled_size(count: int, parsed: ParsedSpec, global_shape: tuple[int, ...], file_size: int) -> None:
    """Refuse shards whose assembled tensor (``global_shape``) would exceed ``MAX_EXPANSION`` x the file's size
    + ``_SLACK``: many records sharing one offset, concatenated along a sharded mesh axis."""
    itemsize = 2 if parsed.dtype in ("BFLOAT8_B", "BFLOAT4_B") else np.dtype(ELEMENT_DTYPES[parsed.dtype]).itemsize
    nbytes = math.prod(global_shape) * itemsize
    if nbytes > MAX_EXPANSION * file_size + _SLACK:
        raise FormatError(
            f"{count} shards would assemble a tensor of shape {list(global_shape)} ({nbytes} bytes), implausible for "
            f"a {file_size}-byte file (more than {MAX_EXPANSION}x its size + {_SLACK})"
        )


def _distribution(mesh: tuple[int, ...] | None, topology: Table | None, logical: tuple[int, ...]) -> Distribution:
    """The topology's placements; without one, ttnn assumes full replication over the mesh."""
    params: dict[str, Any] = {} if mesh is None else {"mesh_shape": list(mesh)}
    if topology is not None:
        shape, placements, coords = _topology(topology, len(logical))
        return Distribution(shape, placements, None, params, coords or None)
    dims = mesh if mesh else (1,)
    return Distribution(dims, tuple(Placement("replicate") for _ in dims), None, params, None)


def _global_shape(shard_shape: tuple[int, ...], distribution: Distribution) -> tuple[int, ...]:
    """The global logical shape: shard dims multiplied along every sharded distribution axis."""
    dims = list(shard_shape)
    for count, placement in zip(distribution.mesh_shape, distribution.placements or ()):
        if placement.kind == "shard" and placement.dim is not None:
            dims[placement.dim] *= count
    return tuple(dims)

