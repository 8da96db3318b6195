"""Write TTNN tensor files of every legacy version (v0-v5) and ``.tensorbin`` from the format spec.

No public wheel can write v0-v4 any more, and real files exist for few variants, so the tests and
the benchmark build them here, field by field, as spec §4-§10 and §15 describe: packed fields, a
184-byte LegacyShape, i32 enums, memory-config blocks, multi-device payloads with every strategy,
hand-built flatbuffers, tilized and block-float payloads, and big-endian variants in which every
field and element is byte-swapped (flatbuffers stay little-endian, as on every host).
"""

from __future__ import annotations

import json
import math
import os
import resource
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Sequence

import ml_dtypes
import numpy as np

from reportdb.formats import blockfloat
from reportdb.formats.tiles import physical_shape, tilize

DTYPE_VALUES = {"BFLOAT16": 0, "FLOAT32": 1, "UINT32": 2, "BFLOAT8_B": 3, "BFLOAT4_B": 4, "UINT8": 5, "UINT16": 6, "INT32": 7}
HOST_TYPES = {"FLOAT32": "<f4", "UINT32": "<u4", "INT32": "<i4", "UINT16": "<u2", "UINT8": "u1"}
STRATEGY_INDEX = {"Replicate": 0, "Shard": 1, "Shard2D": 2, "AllGather": 3}
SENTINEL = b"\xff" * 8
Path = str | os.PathLike


# ---------------------------------------------------------------------------------------------
# Element payloads


def host_elements(array2d: np.ndarray, dtype: str, tile: tuple[int, int] | None, transpose: bool = False) -> np.ndarray:
    """The host elements of a physical 2-D array: tilized if ``tile``; uint8 tiles for block floats."""
    flat = tilize(np.ascontiguousarray(array2d), tile, transpose) if tile else np.ascontiguousarray(array2d).reshape(-1)
    if blockfloat.is_block_float(dtype):
        assert tile is not None
        return blockfloat.encode(flat.astype(np.float32), dtype, tile)
    if dtype == "BFLOAT16":
        return flat.astype(np.float32).astype(ml_dtypes.bfloat16).view("<u2")
    return flat.astype(HOST_TYPES[dtype])


def element_bytes(elements: np.ndarray, dtype: str, order: str) -> bytes:
    """Raw bytes of host elements in ``order``; block floats swap as u32 words."""
    if order == "little":
        return elements.tobytes()
    if blockfloat.is_block_float(dtype):
        return elements.view("<u4").astype(">u4").tobytes()
    return elements.astype(elements.dtype.newbyteorder(">")).tobytes()


def _fill(shape: Sequence[int], pad_value: float, values: np.ndarray) -> np.ndarray:
    return np.full(tuple(shape), pad_value, dtype=values.dtype if values.dtype.kind == "f" else np.int64)


def legacy_physical(values: np.ndarray, dims: Sequence[int], pad_value: float = 0) -> np.ndarray:
    """The padded legacy tensor (logical values at the front of each dim) as a 2-D array."""
    padded = _fill(dims, pad_value, values)
    padded[tuple(slice(0, n) for n in values.shape)] = values
    return padded.reshape(-1, dims[-1])


def spec_physical(
    values: np.ndarray,
    alignment: Sequence[int],
    pad_value: float = 0,
    logical_shard: tuple[tuple[int, int], tuple[int, int]] | None = None,
) -> np.ndarray:
    """The physical 2-D array of a v5 / .tensorbin buffer (spec §11.1 steps 1-4)."""
    logical = values.shape
    rows = logical[-2] if len(logical) >= 2 else 1
    cols = logical[-1] if logical else 1
    if logical_shard is not None:
        (sh, sw), (ph, pw) = logical_shard
        rows2d = math.prod(logical[:-1]) if logical else 1
        align_h = alignment[-2] if len(alignment) >= 2 else 1
        height = rows2d // sh * ph + -(-(rows2d % sh) // align_h) * align_h
        width = cols // sw * pw + -(-(cols % sw) // alignment[-1]) * alignment[-1]
        out = _fill((height, width), pad_value, values)
        for r in range(rows2d):
            for c in range(cols):
                out[r // sh * ph + r % sh, c // sw * pw + c % sw] = values.reshape(rows2d, cols)[r, c]
        return out
    height, width = physical_shape(tuple(logical), tuple(alignment))
    out = _fill((height, width), pad_value, values)
    block = -(-rows // alignment[-2]) * alignment[-2] if len(alignment) >= 2 else rows
    blocks = math.prod(logical[:-2])
    out[: blocks * block].reshape(blocks, block, width)[:, :rows, :cols] = values.reshape(blocks, rows, cols)
    return out


# ---------------------------------------------------------------------------------------------
# Flatbuffers


@dataclass
class FB:
    """A flatbuffer table to build: ``fields`` maps slot → (kind, value).

    Kinds: u8, u16, u32, i32 (scalars); table; u32vec; tablevec; struct (out-of-line bytes, 8-aligned).
    """

    fields: dict[int, tuple[str, Any]] = field(default_factory=dict)


_SCALARS = {"u8": "<B", "u16": "<H", "u32": "<I", "i32": "<i"}


class _Builder:
    """Writes tables front to back: a vtable, its table, then the children its offsets point to."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def align(self, n: int) -> None:
        self.buf += b"\0" * (-len(self.buf) % n)

    def table(self, table: FB) -> int:
        slots = max(table.fields, default=-1) + 1
        self.align(2)
        vtable = len(self.buf)
        self.buf += b"\0" * (4 + 2 * slots)
        self.align(4)
        start = len(self.buf)
        self.buf += struct.pack("<i", start - vtable)
        offsets = [0] * slots
        pending = []
        for slot in sorted(table.fields):
            kind, value = table.fields[slot]
            fmt = _SCALARS.get(kind, "<I")
            self.align(struct.calcsize(fmt))
            offsets[slot] = len(self.buf) - start
            if kind in _SCALARS:
                self.buf += struct.pack(fmt, value)
            else:
                pending.append((len(self.buf), kind, value))
                self.buf += b"\0\0\0\0"
        struct.pack_into(f"<HH{slots}H", self.buf, vtable, 4 + 2 * slots, len(self.buf) - start, *offsets)
        for pos, kind, value in pending:
            struct.pack_into("<I", self.buf, pos, self.place(kind, value) - pos)
        return start

    def place(self, kind: str, value: Any) -> int:
        if kind == "table":
            return self.table(value)
        if kind == "struct":
            self.align(8)
            pos = len(self.buf)
            self.buf += value
            return pos
        self.align(4)
        pos = len(self.buf)
        self.buf += struct.pack("<I", len(value))
        if kind == "u32vec":
            self.buf += struct.pack(f"<{len(value)}I", *value)
            return pos
        slots = len(self.buf)
        self.buf += b"\0" * (4 * len(value))
        for i, child in enumerate(value):
            slot = slots + 4 * i
            struct.pack_into("<I", self.buf, slot, self.table(child) - slot)
        return pos


def build_flatbuffer(root: FB, align: int = 8) -> bytes:
    """The flatbuffer bytes of ``root`` (u32 root offset first), padded to a multiple of ``align``."""
    builder = _Builder()
    builder.buf += b"\0" * 8  # root offset, then padding so tables start 8-aligned
    struct.pack_into("<I", builder.buf, 0, builder.table(root))
    builder.align(align)
    return bytes(builder.buf)


def _grid(ranges: Sequence[Sequence[Sequence[int]]]) -> FB:
    def coord(xy: Sequence[int]) -> FB:
        return FB({0: ("i32", xy[0]), 1: ("i32", xy[1])})

    return FB({0: ("tablevec", [FB({0: ("table", coord(a)), 1: ("table", coord(b))}) for a, b in ranges])})


def memory_config_table(mc: dict[str, Any]) -> FB:
    """A MemoryConfig table from {memory_layout, buffer_type, shard_spec?, nd_shard_spec?} (ints)."""
    fields: dict[int, tuple[str, Any]] = {0: ("u16", mc.get("memory_layout", 0)), 1: ("u16", mc.get("buffer_type", 0))}
    shard = mc.get("shard_spec")
    if shard is not None:
        sf: dict[int, tuple[str, Any]] = {
            0: ("table", _grid(shard["grid"])),
            1: ("u32", shard["shape"][0]),
            2: ("u32", shard["shape"][1]),
            3: ("u8", shard.get("orientation", 0)),
            4: ("u8", shard.get("mode", 0)),
        }
        if shard.get("physical_shard_shape") is not None:
            ph, pw = shard["physical_shard_shape"]
            sf[5] = ("table", FB({0: ("u32", ph), 1: ("u32", pw)}))
        fields[2] = ("table", FB(sf))
    nd = mc.get("nd_shard_spec")
    if nd is not None:
        fields[3] = (
            "table",
            FB({0: ("u32vec", list(nd["shard_shape"])), 1: ("table", _grid(nd["grid"])), 2: ("u8", nd.get("orientation", 0)), 3: ("u8", nd.get("strategy", 0))}),
        )
    return FB(fields)


def tensor_spec_table(
    logical: Sequence[int],
    dtype: str,
    tile: tuple[int, int] | None,
    alignment: Sequence[int],
    transpose: bool = False,
    memory_config: dict[str, Any] | None = None,
) -> FB:
    """A TensorSpec table; ROW_MAJOR when ``tile`` is None. Defaults are written out explicitly."""
    if tile is None:
        page = (1, FB())
    else:
        page = (2, FB({0: ("table", FB({0: ("u32", tile[0]), 1: ("u32", tile[1]), 2: ("u8", int(transpose))}))}))
    layout = FB(
        {
            0: ("u8", DTYPE_VALUES[dtype]),
            1: ("u8", page[0]),
            2: ("table", page[1]),
            3: ("table", memory_config_table(memory_config or {})),
            4: ("u32vec", list(alignment)),
        }
    )
    return FB({0: ("u32vec", list(logical)), 1: ("table", layout)})


def default_alignment(tile: tuple[int, int] | None) -> tuple[int, ...]:
    """What ttnn uses: the tile for TILE, [1] for ROW_MAJOR."""
    return tuple(tile) if tile else (1,)


# ---------------------------------------------------------------------------------------------
# Legacy v0-v4


def legacy_shape(dims: Sequence[int], logical: Sequence[int], order: str = "little") -> bytes:
    """A 184-byte LegacyShape image; zeros in unused slots and tail padding."""
    p = "<" if order == "little" else ">"
    rank = len(dims)
    dims8 = list(dims) + [0] * (8 - rank)
    pads: list[int] = []
    for d, n in zip(dims, logical):
        pads += [0, d - n]
    pads += [0] * (16 - len(pads))
    return struct.pack(p + "Q8IQ16Qi4x", rank, *dims8, rank, *pads, 0)


def legacy_dims(shape: Sequence[int], tiled: bool) -> tuple[int, ...]:
    """Padded dims of a legacy tensor: last two rounded up to 32 for TILE."""
    dims = list(shape)
    if tiled:
        dims[-1] = -(-dims[-1] // 32) * 32
        dims[-2] = -(-dims[-2] // 32) * 32
    return tuple(dims)


def _legacy_record(values: np.ndarray, dtype: str, tiled: bool, order: str, dims: Sequence[int] | None = None) -> tuple[bytes, bytes]:
    """(buffer record, LegacyShape) for one legacy buffer."""
    dims = tuple(dims) if dims is not None else legacy_dims(values.shape, tiled)
    elements = host_elements(legacy_physical(values, dims), dtype, (32, 32) if tiled else None)
    data = element_bytes(elements, dtype, order)
    count = len(data) // (4 if blockfloat.is_block_float(dtype) else elements.itemsize)
    p = "<" if order == "little" else ">"
    return struct.pack(p + "Q", count) + data, legacy_shape(dims, values.shape, order)


def write_v0(path: Path, values: np.ndarray, dtype: str, layout: str = "ROW_MAJOR", *, dtype_value: int | None = None, order: str = "little") -> None:
    """A v0 file (no sentinel). ``dtype_value`` overrides the DataType number (e.g. 4 for UINT16)."""
    record, shape = _legacy_record(values, dtype, layout == "TILE", order)
    p = "<" if order == "little" else ">"
    value = DTYPE_VALUES[dtype] if dtype_value is None else dtype_value
    with open(path, "wb") as f:
        f.write(shape + struct.pack(p + "ii", value, int(layout == "TILE")) + record)


def memory_config_block(version: int, memory_layout: int = 0, buffer_type: int = 0, shard: dict[str, Any] | None = None, order: str = "little") -> bytes:
    """The packed legacy memory-config block of spec §6 (halo byte only for versions <= 3)."""
    p = "<" if order == "little" else ">"
    out = struct.pack(p + "Bii?", version, memory_layout, buffer_type, shard is not None)
    if shard is not None:
        grid = shard["grid"]
        out += struct.pack(p + "Q", len(grid))
        for (x0, y0), (x1, y1) in grid:
            out += struct.pack(p + "4Q", x0, y0, x1, y1)
        out += struct.pack(p + "IIi", shard["shape"][0], shard["shape"][1], shard.get("orientation", 0))
        if version <= 3:
            out += struct.pack("?", shard.get("halo", False))
    return out


def strategy_bytes(strategy: tuple[Any, ...], order: str = "little", index: int | None = None) -> bytes:
    """The 8-byte DistributedTensorConfig image: union at 0, variant index at byte 4."""
    p = "<" if order == "little" else ">"
    kind = strategy[0]
    if kind in ("Replicate", "Shard"):
        union = struct.pack(p + "i", strategy[1])
    elif kind == "Shard2D":
        union = struct.pack(p + "HH", strategy[1], strategy[2])
    else:
        union = b"\0\0\0\0"
    return union + bytes([STRATEGY_INDEX[kind] if index is None else index]) + b"\0\0\0"


def write_legacy(
    path: Path,
    version: int,
    buffers: np.ndarray | Sequence[np.ndarray],
    dtype: str,
    layout: str = "ROW_MAJOR",
    *,
    storage: int = 0,
    memory_config: bytes | None = None,
    strategy: tuple[Any, ...] | None = None,
    strategy_index: int | None = None,
    order: str = "little",
    dims: Sequence[int] | None = None,
) -> None:
    """A v1-v4 file. One array → single-buffer payload; a list → multi-device payload (storage 3/4).

    ``memory_config`` is a block from ``memory_config_block`` (v2+; None writes has_memory_config=0).
    ``strategy`` (v3+) is ("Replicate", factor) | ("Shard", dim) | ("Shard2D", y, x) | ("AllGather",).
    """
    p = "<" if order == "little" else ">"
    tiled = layout == "TILE"
    multi = not isinstance(buffers, np.ndarray)
    arrays = list(buffers) if multi else [buffers]  # type: ignore[list-item]
    records = [_legacy_record(a, dtype, tiled, order, dims) for a in arrays]
    out = bytearray(SENTINEL + bytes([version]))
    out += records[0][1]
    out += struct.pack(p + "iii", DTYPE_VALUES[dtype], int(tiled), storage)
    if version >= 2:
        out += b"\1" + memory_config if memory_config is not None else b"\0"
    if multi:
        out += struct.pack(p + "Q", len(arrays))
        if version >= 3:
            assert strategy is not None
            out += strategy_bytes(strategy, order, strategy_index)
            if strategy[0] == "Replicate":
                records = records[:1]
        out += b"".join(r for r, _ in records) + b"".join(s for _, s in records)
    else:
        out += records[0][0]
    with open(path, "wb") as f:
        f.write(out)


# ---------------------------------------------------------------------------------------------
# v5 and .tensorbin


@dataclass
class Spec:
    """What a v5 / .tensorbin TensorSpec says about each buffer."""

    dtype: str
    tile: tuple[int, int] | None = None
    transpose: bool = False
    alignment: tuple[int, ...] | None = None
    memory_config: dict[str, Any] | None = None
    pad_value: float = 0

    @property
    def align(self) -> tuple[int, ...]:
        return self.alignment if self.alignment is not None else default_alignment(self.tile)

    def logical_shard(self) -> tuple[tuple[int, int], tuple[int, int]] | None:
        shard = (self.memory_config or {}).get("shard_spec")
        if shard is None or shard.get("mode", 0) != 1:
            return None
        sh, sw = shard["shape"]
        phys = shard.get("physical_shard_shape")
        if phys is None:
            a = self.align
            ah = a[-2] if len(a) >= 2 else 1
            phys = (-(-sh // ah) * ah, -(-sw // a[-1]) * a[-1])
        return (sh, sw), tuple(phys)  # type: ignore[return-value]

    def table(self, logical: Sequence[int]) -> FB:
        return tensor_spec_table(logical, self.dtype, self.tile, self.align, self.transpose, self.memory_config)

    def payload(self, values: np.ndarray, order: str) -> bytes:
        physical = spec_physical(values, self.align, self.pad_value, self.logical_shard())
        return element_bytes(host_elements(physical, self.dtype, self.tile, self.transpose), self.dtype, order)


def _spec_bytes(spec: Spec, logical: Sequence[int]) -> bytes:
    return build_flatbuffer(spec.table(logical), align=4)


def write_v5(
    path: Path,
    buffers: np.ndarray | Sequence[np.ndarray],
    spec: Spec,
    *,
    storage: int = 0,
    strategy: tuple[Any, ...] | None = None,
    order: str = "little",
) -> None:
    """A v5 file. One array → single payload; a list → multi-device payload with per-buffer specs."""
    p = "<" if order == "little" else ">"
    multi = not isinstance(buffers, np.ndarray)
    arrays = list(buffers) if multi else [buffers]  # type: ignore[list-item]
    header = _spec_bytes(spec, arrays[0].shape)
    out = bytearray(SENTINEL + b"\5" + struct.pack(p + "Q", len(header)) + header + struct.pack(p + "i", storage))
    unit = 4 if blockfloat.is_block_float(spec.dtype) else (np.dtype(HOST_TYPES[spec.dtype]).itemsize if spec.dtype in HOST_TYPES else 2)

    def record(values: np.ndarray) -> bytes:
        data = spec.payload(values, order)
        return struct.pack(p + "Q", len(data) // unit) + data

    if not multi:
        out += record(arrays[0])
    else:
        assert strategy is not None
        out += struct.pack(p + "Q", len(arrays)) + strategy_bytes(strategy, order)
        kept = arrays[:1] if strategy[0] == "Replicate" else arrays
        out += b"".join(record(a) for a in kept)
        for a in kept:
            own = _spec_bytes(spec, a.shape)
            out += struct.pack(p + "Q", len(own)) + own
    with open(path, "wb") as f:
        f.write(out)


def write_tensorbin(
    path: Path,
    shards: Sequence[tuple[Sequence[int], np.ndarray]],
    spec: Spec,
    *,
    mesh_shape: Sequence[int] | None = None,
    topology: tuple[Sequence[int], Sequence[tuple[str, int]], Sequence[Sequence[int]]] | None = None,
    dedup: bool = False,
    order: str = "little",
    old_schema: bool = False,
) -> None:
    """A .tensorbin file: u64 header size, Tensor flatbuffer (8-aligned), concatenated shard buffers.

    ``topology`` = (distribution shape, [("shard", dim) | ("replicate", -1)], mesh coords).
    ``dedup`` makes shards with identical bytes share one buffer. ``old_schema`` writes the
    2025-05-31 → 07-10 layout (a ShardedTensor, or a ReplicatedTensor for one coordinate ``()``).
    """
    blobs: list[bytes] = []
    records = []
    offset = 0
    seen: dict[bytes, int] = {}
    for coord, values in shards:
        data = spec.payload(values, order)
        if dedup and data in seen:
            at = seen[data]
        else:
            at = offset
            seen[data] = at
            blobs.append(data)
            offset += len(data)
        storage = struct.pack("<QQ", at, len(data))
        records.append(FB({0: ("u8", 1), 1: ("struct", storage), 2: ("table", FB({0: ("u32vec", list(coord))}))}))
    spec_table = spec.table(shards[0][1].shape)
    mesh = FB({0: ("u32vec", list(mesh_shape if mesh_shape is not None else [1, 1]))})
    if old_schema:
        if len(shards) == 1 and not list(shards[0][0]):
            body = FB({0: ("u8", 1), 1: ("struct", struct.pack("<QQ", 0, offset))})
            root = FB({0: ("table", spec_table), 1: ("u8", 1), 2: ("table", body)})
        else:
            root = FB({0: ("table", spec_table), 1: ("u8", 2), 2: ("table", FB({0: ("table", mesh), 1: ("tablevec", records)}))})
    else:
        root = FB({0: ("table", spec_table), 1: ("table", mesh), 2: ("tablevec", records)})
        if topology is not None:
            dist, placements, coords = topology
            root.fields[3] = (
                "table",
                FB(
                    {
                        0: ("table", FB({0: ("u32vec", list(dist))})),
                        1: ("tablevec", [FB({0: ("u8", int(k == "shard")), 1: ("i32", d)}) for k, d in placements]),
                        2: ("tablevec", [FB({0: ("u32vec", list(c))}) for c in coords]),
                    }
                ),
            )
    header = build_flatbuffer(root)
    p = "<" if order == "little" else ">"
    with open(path, "wb") as f:
        f.write(struct.pack(p + "Q", len(header)) + header + b"".join(blobs))


# ---------------------------------------------------------------------------------------------
# Reading hostile files under a memory cap

#: Address space of the process that reads hostile files: a reader that trusts a size fails, not swaps.
READ_LIMIT = 3 << 29  # 1.5 GiB

_READER = """
import json, sys
from reportdb.errors import ReportDBError
from reportdb.formats import load_tensor_file
for path in sys.argv[1:]:
    try:
        load_tensor_file(path).array
        outcome = ["ok", ""]
    except ReportDBError as exc:
        outcome = [type(exc).__name__, str(exc)]
    except BaseException as exc:
        outcome = ["other " + type(exc).__name__, str(exc)]
    print(json.dumps(outcome), flush=True)
"""


def read_under_limit(paths: Sequence[Path], limit: int = READ_LIMIT, timeout: float = 120.0) -> list[tuple[str, str]]:
    """Read each file with ``load_tensor_file`` (and assemble its array) in one subprocess whose address
    space is capped at ``limit``; return (exception class name or "ok", message) per file.

    A reader that allocates from a hostile size gets a MemoryError there (or crashes the subprocess,
    which fails the caller's assertion on the return code) instead of swapping the machine.
    """

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-c", _READER, *map(str, paths)],
        capture_output=True, text=True, timeout=timeout, preexec_fn=cap, env=env,
    )
    assert proc.returncode == 0, f"the reader process died ({proc.returncode}): {proc.stderr[-3000:]}"
    outcomes = [tuple(json.loads(line)) for line in proc.stdout.splitlines()]
    assert len(outcomes) == len(paths), proc.stdout
    return outcomes  # type: ignore[return-value]
