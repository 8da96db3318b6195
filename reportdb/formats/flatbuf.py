"""A minimal, bounds-checked flatbuffer reader (spec §8.1) for the TensorSpec and Tensor tables.

ttnn's flatbuffers carry no file identifier and only a handful of tables, so a generic schema
library is not needed. Every offset is checked against the buffer before it is followed, and
vector lengths against the bytes that remain and against the largest count the caller can use, so
a corrupt buffer raises FormatError and never indexes out of range or allocates from an untrusted
count (a vector becomes a list of Python objects, 9-25 times its bytes: a 1 GB header would not fit). Flatbuffers are little-endian on
every host.
"""

from __future__ import annotations

import struct
from typing import Optional

from ..errors import FormatError

_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")


class FlatBuffer:
    """A flatbuffer held in memory (any buffer-protocol object), read with explicit bounds checks."""

    __slots__ = ("data", "size")

    def __init__(self, data: bytes | memoryview) -> None:
        self.data = data
        self.size = len(data)

    def check(self, pos: int, length: int, what: str) -> None:
        """Raise FormatError unless ``length`` bytes at ``pos`` lie inside the buffer."""
        if pos < 0 or length < 0 or pos + length > self.size:
            raise FormatError(f"flatbuffer {what} at {pos} (+{length}) lies outside its {self.size} bytes")

    def _read(self, fmt: struct.Struct, pos: int, what: str) -> int:
        self.check(pos, fmt.size, what)
        return int(fmt.unpack_from(self.data, pos)[0])

    def u8(self, pos: int, what: str = "byte") -> int:
        """The u8 at ``pos``."""
        return self._read(_U8, pos, what)

    def u16(self, pos: int, what: str = "u16") -> int:
        """The u16 at ``pos``."""
        return self._read(_U16, pos, what)

    def u32(self, pos: int, what: str = "u32") -> int:
        """The u32 at ``pos``."""
        return self._read(_U32, pos, what)

    def i32(self, pos: int, what: str = "i32") -> int:
        """The i32 at ``pos``."""
        return self._read(_I32, pos, what)

    def root(self) -> "Table":
        """The root table: the first u32 is its offset from the buffer start."""
        return Table(self, self.u32(0, "root offset"), "root table")


class Table:
    """One table: its vtable says where each slot's field lies, 0 meaning absent (schema default)."""

    __slots__ = ("fb", "pos", "vtable", "vtable_size", "table_size", "what")

    def __init__(self, fb: FlatBuffer, pos: int, what: str) -> None:
        self.fb, self.pos, self.what = fb, pos, what
        self.vtable = pos - fb.i32(pos, f"{what} vtable offset")
        self.vtable_size = fb.u16(self.vtable, f"{what} vtable")
        self.table_size = fb.u16(self.vtable + 2, f"{what} vtable")
        if self.vtable_size < 4 or self.vtable_size % 2:
            raise FormatError(f"flatbuffer {what} has a vtable of {self.vtable_size} bytes")
        if self.table_size < 4:
            raise FormatError(f"flatbuffer {what} claims {self.table_size} bytes")
        fb.check(self.vtable, self.vtable_size, f"{what} vtable")
        fb.check(pos, self.table_size, what)

    def field(self, slot: int, size: int) -> Optional[int]:
        """Position of the field in ``slot`` (``size`` bytes wide), or None when it is absent."""
        entry = 4 + 2 * slot
        if entry >= self.vtable_size:
            return None
        offset = self.fb.u16(self.vtable + entry)
        if offset == 0:
            return None
        if offset + size > self.table_size:
            raise FormatError(f"flatbuffer {self.what} slot {slot} lies outside the table")
        return self.pos + offset

    def u8(self, slot: int, default: int = 0) -> int:
        """The u8 scalar in ``slot``, or the schema default when absent."""
        pos = self.field(slot, 1)
        return default if pos is None else self.fb.u8(pos)

    def u16(self, slot: int, default: int = 0) -> int:
        """The u16 scalar in ``slot``, or the schema default when absent."""
        pos = self.field(slot, 2)
        return default if pos is None else self.fb.u16(pos)

    def u32(self, slot: int, default: int = 0) -> int:
        """The u32 scalar in ``slot``, or the schema default when absent."""
        pos = self.field(slot, 4)
        return default if pos is None else self.fb.u32(pos)

    def i32(self, slot: int, default: int = 0) -> int:
        """The i32 scalar in ``slot``, or the schema default when absent."""
        pos = self.field(slot, 4)
        return default if pos is None else self.fb.i32(pos)

    def _target(self, slot: int) -> Optional[int]:
        pos = self.field(slot, 4)
        if pos is None:
            return None
        return pos + self.fb.u32(pos, f"{self.what} slot {slot} offset")

    def table(self, slot: int, what: str) -> Optional["Table"]:
        """The sub-table referenced from ``slot``, or None."""
        target = self._target(slot)
        return None if target is None else Table(self.fb, target, what)

    def struct_at(self, slot: int, size: int, what: str) -> Optional[int]:
        """Position of an out-of-line struct reached through ``slot`` (a union member), or None."""
        target = self._target(slot)
        if target is None:
            return None
        self.fb.check(target, size, what)
        return target

    def _vector(self, slot: int, elem_size: int, what: str, limit: int) -> Optional[tuple[int, int]]:
        target = self._target(slot)
        if target is None:
            return None
        length = self.fb.u32(target, f"{what} length")
        if length > limit:
            raise FormatError(f"flatbuffer {what} has {length} entries, more than the {limit} allowed")
        self.fb.check(target + 4, length * elem_size, what)
        return target + 4, length

    def u32_vector(self, slot: int, what: str, limit: int) -> Optional[list[int]]:
        """A vector of at most ``limit`` u32 as Python ints, or None when absent."""
        vec = self._vector(slot, 4, what, limit)
        if vec is None:
            return None
        start, length = vec
        return list(struct.unpack_from(f"<{length}I", self.fb.data, start))

    def tables(self, slot: int, what: str, limit: int) -> Optional[list["Table"]]:
        """A vector of at most ``limit`` tables, or None when absent."""
        vec = self._vector(slot, 4, what, limit)
        if vec is None:
            return None
        start, length = vec
        return [
            Table(self.fb, pos + self.fb.u32(pos), f"{what}[{i}]")
            for i, pos in enumerate(range(start, start + 4 * length, 4))
        ]
