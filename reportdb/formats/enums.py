"""Integer values of the ttnn enums that tensor files store, with the history of their meanings.

The legacy files record raw C++ enum values and no date, so a value can only be named with the
table of the file's era (spec §2). Each table lists what a value meant while that format version
was being written; a value absent from the table is corruption, not a new feature.
"""

from __future__ import annotations

from typing import Mapping

from ..errors import FormatError

#: DataType values written by v0 files (2023-08 → 2024-04-04). 4 was UINT16 until 2024-03-14 and
#: BFLOAT4_B afterwards; the reader settles it by the element count (spec §2.1, §13.2).
DATA_TYPE_V0: Mapping[int, tuple[str, ...]] = {
    0: ("BFLOAT16",),
    1: ("FLOAT32",),
    2: ("UINT32",),
    3: ("BFLOAT8_B",),
    4: ("UINT16", "BFLOAT4_B"),
    6: ("UINT16",),
}
#: v1 (2024-04-04 → 04-10): BFLOAT4_B = 4, UINT16 = 6, no INT32 or UINT8 yet.
DATA_TYPE_V1: Mapping[int, tuple[str, ...]] = {
    0: ("BFLOAT16",),
    1: ("FLOAT32",),
    2: ("UINT32",),
    3: ("BFLOAT8_B",),
    4: ("BFLOAT4_B",),
    6: ("UINT16",),
}
#: v2 (2024-04-10 → 04-13): INT32 = 7 arrived on 2024-04-12.
DATA_TYPE_V2: Mapping[int, tuple[str, ...]] = {**DATA_TYPE_V1, 7: ("INT32",)}
#: v3 and later, and every flatbuffer: UINT8 = 5 arrived on 2024-06-24. 8 (INVALID) is never data.
DATA_TYPE_CURRENT: Mapping[int, tuple[str, ...]] = {**DATA_TYPE_V2, 5: ("UINT8",)}


def data_type_table(version: int | None) -> Mapping[int, tuple[str, ...]]:
    """The DataType table for a legacy version (0-5), or the current one for ``None`` (flatbuffers)."""
    if version == 0:
        return DATA_TYPE_V0
    if version == 1:
        return DATA_TYPE_V1
    if version == 2:
        return DATA_TYPE_V2
    return DATA_TYPE_CURRENT


LAYOUT: Mapping[int, str] = {0: "ROW_MAJOR", 1: "TILE"}
#: Flatbuffer PageConfig union tags (the layout is implied by the tag).
PAGE_CONFIG: Mapping[int, str] = {1: "ROW_MAJOR", 2: "TILE"}

#: StorageType for v1-v4 (2024-04 → 2025-02): the 2024-03-07 enum.
STORAGE_TYPE_V1_V4: Mapping[int, str] = {
    0: "OWNED",
    1: "DEVICE",
    2: "BORROWED",
    3: "MULTI_DEVICE",
    4: "MULTI_DEVICE_HOST",
}
#: StorageType for v5 (2025-02-08 → 09-01). 0 was OWNED until 2025-04-28 and HOST afterwards;
#: nothing in the file tells them apart, so it is named by the later meaning (what real files say).
STORAGE_TYPE_V5: Mapping[int, str] = {**STORAGE_TYPE_V1_V4, 0: "HOST"}

TENSOR_MEMORY_LAYOUT: Mapping[int, str] = {
    0: "INTERLEAVED",
    1: "SINGLE_BANK",
    2: "HEIGHT_SHARDED",
    3: "WIDTH_SHARDED",
    4: "BLOCK_SHARDED",
}
#: Flatbuffer memory layouts add ND_SHARDED = 5 (2026-03-09).
TENSOR_MEMORY_LAYOUT_FB: Mapping[int, str] = {**TENSOR_MEMORY_LAYOUT, 5: "ND_SHARDED"}
BUFFER_TYPE: Mapping[int, str] = {0: "DRAM", 1: "L1", 2: "SYSTEM_MEMORY", 3: "L1_SMALL", 4: "TRACE"}
SHARD_ORIENTATION: Mapping[int, str] = {0: "ROW_MAJOR", 1: "COL_MAJOR"}
SHARD_MODE: Mapping[int, str] = {0: "PHYSICAL", 1: "LOGICAL"}
SHARD_DISTRIBUTION_STRATEGY: Mapping[int, str] = {0: "ROUND_ROBIN_1D", 1: "GRID_2D"}

#: DistributedTensorConfig variant index (legacy v3+). Index 2 was AllGather until 2024-08-09
#: (inside the v3 era) and Shard2D afterwards; v3 readers settle it from the parameters.
STRATEGY_V3: Mapping[int, str] = {0: "Replicate", 1: "Shard", 2: "Shard2D|AllGather", 3: "AllGather"}
STRATEGY_V4_V5: Mapping[int, str] = {0: "Replicate", 1: "Shard", 2: "Shard2D", 3: "AllGather"}

#: MeshMapperPlacement.type in .tensorbin topologies.
PLACEMENT_TYPE: Mapping[int, str] = {0: "replicate", 1: "shard"}


def lookup(table: Mapping[int, str], value: int, what: str) -> str:
    """Name ``value`` from ``table``, or raise FormatError saying which field held what."""
    name = table.get(value)
    if name is None:
        raise FormatError(f"unknown {what} value {value}")
    return name


def lookup_lenient(table: Mapping[int, str], value: int) -> str:
    """Name ``value`` for metadata only: a value newer than this table reads as ``UNKNOWN(n)``."""
    return table.get(value, f"UNKNOWN({value})")
