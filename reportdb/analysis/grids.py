"""Where a tensor's elements live on the hardware: its tiles, and the cores of a sharded memory config.

A tensor of shape ``(*lead, H, W)`` is seen as ``B = prod(lead)`` matrices of ``H x W`` (a rank-1 tensor is one row,
a scalar one element). Tiles cut each matrix (tile ``(r, c)`` covers rows ``r*th ..`` and columns ``c*tw ..``, the
last ones partial where the matrix is padded). A legacy shard spec (height, width or block sharded) cuts the physical
2-D array, ``B * PH`` rows of ``PW`` columns where ``PH``/``PW`` are ``H``/``W`` padded to the tile, into shards of its
shape, numbered row-major over the shard grid and placed on the cores of its grid in the orientation's order (tt-metal's
``core_to_host_pages`` and ``corerange_to_cores``); an ND shard spec (ttnn 0.81) cuts the padded N-d tensor and deals
the shards round-robin over its cores. Shards past the tensor's end and padding hold no logical element: they count
none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..errors import SpecError

#: At most this many shards are tracked (a stored memory config is someone else's data: it must not size an array
#: beyond this); far above any core grid.
MAX_SHARDS = 1 << 20

Core = tuple[int, int]


def matrix_dims(shape: Sequence[int]) -> tuple[tuple[int, ...], int, int]:
    """``(lead, H, W)`` of a tensor of ``shape``: a rank-1 tensor is one row, a scalar one element."""
    shape = tuple(int(s) for s in shape)
    if len(shape) >= 2:
        return shape[:-2], shape[-2], shape[-1]
    return (), 1, shape[0] if shape else 1


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class TileGrid:
    """The tiles of a tensor of ``shape``: ``grid_shape`` is ``(*lead, tile rows, tile columns)``."""

    shape: tuple[int, ...]
    tile: tuple[int, int]

    @property
    def dims(self) -> tuple[tuple[int, ...], int, int]:
        return matrix_dims(self.shape)

    @property
    def grid_shape(self) -> tuple[int, ...]:
        lead, h, w = self.dims
        return lead + (_ceil(h, self.tile[0]), _ceil(w, self.tile[1]))

    def ranges(self, index: Sequence[int]) -> list[list[int]]:
        """The element ranges ``[start, stop)`` per axis of the tensor that tile ``index`` covers (a rank-1 tensor's
        tile has one range, a scalar's none)."""
        lead, h, w = self.dims
        *lead_index, tr, tc = (int(i) for i in index)
        rows = [tr * self.tile[0], min(h, (tr + 1) * self.tile[0])]
        cols = [tc * self.tile[1], min(w, (tc + 1) * self.tile[1])]
        if len(self.shape) >= 2:
            return [[i, i + 1] for i in lead_index] + [rows, cols]
        return [cols] if self.shape else []


def corerange_to_cores(grid: Sequence[Any], count: int | None, row_major: bool) -> list[Core]:
    """The cores of a core range set in order, at most ``count``: range by range, x fastest when ``row_major``, else
    y fastest (tt-metal's ``corerange_to_cores``). ``grid`` is ``[[[x0, y0], [x1, y1]], ...]``."""
    cores: list[Core] = []
    for item in grid:
        try:
            (x0, y0), (x1, y1) = item
            x0, y0, x1, y1 = (int(v) for v in (x0, y0, x1, y1))
        except (TypeError, ValueError):
            raise SpecError(f"a shard grid range must be [[x0, y0], [x1, y1]], not {item!r:.60}") from None
        if x1 < x0 or y1 < y0 or min(x0, y0) < 0:
            raise SpecError(f"shard grid range {item!r:.60} is empty or negative")
        if (x1 - x0 + 1) * (y1 - y0 + 1) > MAX_SHARDS:
            raise SpecError(f"shard grid range {item!r:.60} has more than {MAX_SHARDS} cores")
        outer, inner = ((y0, y1), (x0, x1)) if row_major else ((x0, x1), (y0, y1))
        for o in range(outer[0], outer[1] + 1):
            for i in range(inner[0], inner[1] + 1):
                if count is not None and len(cores) >= count:
                    return cores
                cores.append((i, o) if row_major else (o, i))
        if len(cores) > MAX_SHARDS:
            raise SpecError(f"the shard grid has more than {MAX_SHARDS} cores")
    return cores


@dataclass(frozen=True)
class ShardLayout:
    """How a sharded memory config cuts a tensor: a row of matrix ``b`` at row ``h`` belongs to row key
    :meth:`row_keys`, a column ``w`` to column shard ``w // shard_width``; shard id = ``key * col_shards +
    column shard``, on core :meth:`core`. ``kind`` is the memory layout (``HEIGHT_SHARDED``... or ``ND_SHARDED``)."""

    kind: str
    orientation: str
    shard_shape: tuple[int, ...]
    shards: int
    col_shards: int
    shard_width: int
    cores: tuple[Core, ...]
    round_robin: bool
    # legacy 2-D: a matrix's physical row stride and the shard height; ND: the leading shard dims and grid counts
    matrix_rows: int = 0
    shard_height: int = 1
    lead_shape: tuple[int, ...] = ()
    lead_shard: tuple[int, ...] = ()
    lead_counts: tuple[int, ...] = ()
    row_count: int = 1

    def row_keys(self, b0: int, nb: int, h0: int, h1: int) -> np.ndarray:
        """The row key of every row of matrices ``b0 .. b0+nb``, rows ``h0 .. h1``, in C order (non-decreasing when
        the matrices are consecutive along the last leading axis)."""
        b = np.arange(b0, b0 + nb, dtype=np.int64)[:, None]
        h = np.arange(h0, h1, dtype=np.int64)[None, :]
        if not self.lead_counts and self.kind != "ND_SHARDED":
            return ((b * self.matrix_rows + h) // self.shard_height).reshape(-1)
        lead = np.unravel_index(b[:, 0], self.lead_shape) if self.lead_shape else ()
        key = np.zeros(nb, dtype=np.int64)
        for idx, size, count in zip(lead, self.lead_shard, self.lead_counts):
            key = key * count + idx // size
        return (key[:, None] * self.row_count + h // self.shard_height).reshape(-1)

    def shard_of(self, b: int, h: int, w: int) -> int:
        """The shard holding row ``h``, column ``w`` of matrix ``b`` (the id :meth:`core` takes)."""
        return int(self.row_keys(b, 1, h, h + 1)[0]) * self.col_shards + w // self.shard_width

    def core(self, shard: int) -> Core | None:
        """The core that holds shard ``shard``: round-robin over the grid's cores for an ND spec; None for a legacy
        shard the grid has no core for (a spec inconsistent with the tensor)."""
        if self.round_robin:
            return self.cores[shard % len(self.cores)] if self.cores else None
        return self.cores[shard] if shard < len(self.cores) else None


def shard_layout(
    memory_config: dict[str, Any] | None, shape: Sequence[int], tile: tuple[int, int] | None
) -> ShardLayout | None:
    """The shard layout of a tensor of logical ``shape`` under ``memory_config`` (the structured form of
    ``TensorSpec.memory_config``); None when it is not sharded. ``tile`` pads the physical rows and columns (None for
    ROW_MAJOR). SpecError for a shard spec that cannot describe this tensor."""
    if not isinstance(memory_config, dict):
        return None
    kind = str(memory_config.get("memory_layout") or "").upper()
    legacy = memory_config.get("shard_spec")
    nd = memory_config.get("nd_shard_spec")
    if kind in ("HEIGHT_SHARDED", "WIDTH_SHARDED", "BLOCK_SHARDED") and isinstance(legacy, dict) and legacy.get("shape"):
        return _legacy_layout(kind, legacy, shape, tile)
    if isinstance(nd, dict) and nd.get("shard_shape") and (kind in ("ND_SHARDED", "") or "SHARDED" in kind):
        return _nd_layout(nd, shape, tile)
    return None


def _orientation(spec: dict[str, Any]) -> str:
    value = str(spec.get("orientation") or "ROW_MAJOR").upper()
    if value not in ("ROW_MAJOR", "COL_MAJOR"):
        raise SpecError(f"shard orientation must be ROW_MAJOR or COL_MAJOR, not {value!r:.40}")
    return value


def _positive(values: Any, what: str) -> tuple[int, ...]:
    try:
        out = tuple(int(v) for v in values)
    except (TypeError, ValueError):
        raise SpecError(f"{what} must be a list of integers, not {values!r:.60}") from None
    if not out or any(v <= 0 for v in out):
        raise SpecError(f"{what} must be positive, not {list(out)}")
    return out


def _legacy_layout(kind: str, spec: dict[str, Any], shape: Sequence[int], tile: tuple[int, int] | None) -> ShardLayout:
    sh_sw = _positive(spec.get("shape"), "shard shape")
    if len(sh_sw) != 2:
        raise SpecError(f"a {kind} shard shape is [height, width], not {list(sh_sw)}")
    sh, sw = sh_sw
    lead, h, w = matrix_dims(shape)
    th, tw = tile if tile is not None else (1, 1)
    ph, pw = _ceil(h, th) * th, _ceil(w, tw) * tw
    rows = math.prod(lead) * ph
    row_shards, col_shards = _ceil(rows, sh), _ceil(pw, sw)
    shards = row_shards * col_shards
    if shards > MAX_SHARDS:
        raise SpecError(f"shard shape {[sh, sw]} cuts the tensor into {shards} shards; at most {MAX_SHARDS} are tracked")
    orientation = _orientation(spec)
    cores = corerange_to_cores(spec.get("grid") or [], shards, orientation == "ROW_MAJOR")
    return ShardLayout(kind, orientation, (sh, sw), shards, col_shards, sw, tuple(cores), False, matrix_rows=ph,
                       shard_height=sh)


def _nd_layout(spec: dict[str, Any], shape: Sequence[int], tile: tuple[int, int] | None) -> ShardLayout:
    shard = _positive(spec.get("shard_shape"), "ND shard shape")
    lead, h, w = matrix_dims(shape)
    full = lead + (h, w)
    if len(shard) > len(full):
        raise SpecError(f"ND shard shape {list(shard)} has more dims than the tensor {list(shape)}")
    shard = (1,) * (len(full) - len(shard)) + shard
    th, tw = tile if tile is not None else (1, 1)
    padded = lead + (_ceil(h, th) * th, _ceil(w, tw) * tw)
    counts = tuple(_ceil(p, s) for p, s in zip(padded, shard))
    shards = math.prod(counts)
    if shards > MAX_SHARDS:
        raise SpecError(f"ND shard shape {list(shard)} cuts the tensor into {shards} shards; at most {MAX_SHARDS} are "
                        "tracked")
    orientation = _orientation(spec)
    cores = corerange_to_cores(spec.get("grid") or [], None, orientation == "ROW_MAJOR")
    return ShardLayout("ND_SHARDED", orientation, shard, shards, counts[-1], shard[-1], tuple(cores), True,
                       shard_height=shard[-2], lead_shape=lead, lead_shard=shard[:-2], lead_counts=counts[:-2],
                       row_count=counts[-2])
