"""A tile of a stored tensor named in the hardware's terms: the core of its sharded memory config and the mesh device
whose shard hold it.

A verdict on a stored tensor names its worst tile as the comparison's tile grid counts it: ``(flattened leading
index, tile row, tile col)`` of the global tensor (``numeric/tiles.py``; a thin tensor's "tile" is a run of values).
A fault on real hardware follows the hardware's grids: one core's shard (a sharded memory config places shards on
the cores of its shard spec's grid, :mod:`.grids`) or one device's shard (a multi-device tensor's distribution
places shards on the mesh). :func:`tile_place` maps the tile's first element through both, so the verdict can say
"tile (0, 3, 17) on core (2, 1) of device (0, 1)" and the engineer knows which kernel core or which device (a CCL,
a stale buffer) to look at. In TILE layout shards are whole tiles, so that element's core holds the whole tile.

:func:`placed_notes` is what a verdict's caller adds: the verdict's notes with the place put after the tile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..errors import AssemblyError, ReportDBError, SpecError
from ..numeric.tiles import DEFAULT_TILE, TileGeometry
from ..results import Result
from ..spec import distribution_coordinate
from .grids import Core, ShardLayout, matrix_dims, shard_layout

if TYPE_CHECKING:
    from ..report import Report
    from ..store.rows import TensorInfo


@dataclass(frozen=True)
class Place(Result):
    """Where tile ``tile`` of a stored tensor lives: ``element`` is its first element (global index), ``device`` the
    mesh coordinate of the device shard that holds it (None for a single-device tensor; of a replicated mesh axis,
    the replica an assembled read takes: index 0), ``core`` the ``(x, y)`` core of the shard spec's grid that holds
    it (None when the memory config is not sharded, or says no core for it)."""

    tile: tuple[int, ...]
    element: tuple[int, ...]
    core: Core | None
    device: tuple[int, ...] | None

    def describe(self) -> str:
        """``"on core (2, 1) of device (0, 1)"``, ``"on core (2, 1)"``, ``"on device (0, 1)"`` or ``""``."""
        parts = []
        if self.core is not None:
            parts.append(f"on core {tuple(self.core)}")
        if self.device is not None:
            parts.append(f"{'of' if parts else 'on'} device {tuple(self.device)}")
        return " ".join(parts)


def shard_origins(info: "TensorInfo") -> dict[int, tuple[int, ...]]:
    """Where each device shard of ``info`` starts in the global tensor by the distribution (a replicated mesh axis adds
    nothing: the shard spans the whole tensor along every dim it is not sharded on), by shard index; AssemblyError
    when it cannot be said."""
    dist = info.spec.distribution
    if len(info.shards) == 1 and info.shape is not None:
        return {0: (0,) * len(info.shape)}
    if info.shape is None or dist is None or dist.placements is None:
        raise AssemblyError(
            f"tensor {info.tensor_id} (rank {info.rank}) has {len(info.shards)} device shards without a distribution "
            "that says where each lies: compare it with a golden of the same shards, or one device with --device"
        )
    rank_n = len(info.shape)
    coords = [distribution_coordinate(s.mesh_coordinate, i, dist) for i, s in enumerate(info.shards)]
    by_coord = {c: s.shape for c, s in zip(coords, info.shards)}
    origins: dict[int, tuple[int, ...]] = {}
    for index, coord in enumerate(coords):
        origin = [0] * rank_n
        for axis, placement in enumerate(dist.placements):
            if placement.kind != "shard":
                continue
            dim = (placement.dim or 0) % rank_n
            for j in range(coord[axis]):
                before = by_coord.get(coord[:axis] + (j,) + coord[axis + 1 :])
                if before is None:
                    raise AssemblyError(f"tensor {info.tensor_id}: no shard at distribution coordinate "
                                        f"{list(coord[:axis] + (j,) + coord[axis + 1:])}")
                origin[dim] += before[dim]
        if any(o + n > g for o, n, g in zip(origin, info.shards[index].shape, info.shape)):
            raise AssemblyError(f"tensor {info.tensor_id}: shard {list(info.shards[index].mesh_coordinate)} does not "
                                f"fit the global shape {list(info.shape)}")
        origins[index] = tuple(origin)
    return origins


def tensor_shard_layout(info: "TensorInfo", shape: Sequence[int], tile: Sequence[int]) -> ShardLayout | None:
    """The sharded memory config's layout of a part of ``shape`` of ``info`` (the spec is per device: a device's
    shard's shape), None when not sharded; TILE layout pads rows and columns to ``tile``. SpecError for a shard spec
    that cannot describe it."""
    padded = (int(tile[0]), int(tile[1])) if (info.spec.layout or "").upper() == "TILE" else None
    return shard_layout(info.spec.memory_config, shape, padded)


def core_of(layout: ShardLayout | None, shape: Sequence[int], element: Sequence[int]) -> Core | None:
    """The core of ``layout`` (a tensor of ``shape``'s) that holds ``element``; None without a layout."""
    if layout is None:
        return None
    lead, _, _ = matrix_dims(shape)
    index = [int(i) for i in element]
    if len(shape) >= 2:
        b = int(np.ravel_multi_index(index[:-2], lead)) if lead else 0
        h, w = index[-2], index[-1]
    else:
        b, h, w = 0, 0, index[0] if index else 0
    return layout.core(layout.shard_of(b, h, w))


def tile_element(shape: Sequence[int], tile: Sequence[int], worst_tile: Sequence[int]) -> tuple[int, ...]:
    """The first element of ``worst_tile`` (a comparison's ``(lead, tile row, tile col)``) of a tensor of ``shape``
    judged by tiles of ``tile``, as the comparison's own :class:`TileGeometry` lays them out (a thin tensor's runs
    of values included)."""
    geometry = TileGeometry(tuple(int(s) for s in shape), (int(tile[0]), int(tile[1])))
    lead, row, col = (int(v) for v in worst_tile)
    th, tw = geometry.tile
    flat = (lead * geometry.height + row * th) * geometry.width + col * tw
    if not shape:
        return ()
    if not 0 <= flat < math.prod(shape):
        raise ValueError(f"tile {tuple(worst_tile)} lies outside a tensor of shape {list(shape)}")
    return tuple(int(i) for i in np.unravel_index(flat, tuple(shape)))


def tile_place(
    report: "Report", tensor_id: int, worst_tile: Sequence[int], *, rank: int = 0, tile: Sequence[int] | None = None
) -> Place:
    """Where ``worst_tile`` of stored tensor ``tensor_id`` lives on the hardware (:class:`Place`). ``tile`` is the
    tile shape the comparison judged (default: the tensor's stored tile, else 32x32, as ``compare_stored`` does).
    SpecError/AssemblyError when the spec cannot say; ValueError for a tile outside the tensor."""
    info = report.tensor_info(tensor_id, rank)
    tile_shape = tuple(tile or info.spec.tile_shape or DEFAULT_TILE)
    spec_tile = tuple(info.spec.tile_shape or DEFAULT_TILE)
    if info.shape is None:
        raise AssemblyError(f"tensor {tensor_id} (rank {rank}) has shards that do not assemble into one array")
    shape = tuple(int(s) for s in info.shape)
    element = tile_element(shape, tile_shape, worst_tile)
    if len(info.shards) <= 1:
        layout = tensor_shard_layout(info, shape, spec_tile)
        return Place(tuple(int(v) for v in worst_tile), element, core_of(layout, shape, element), None)
    dist = info.spec.distribution
    replicated = [a for a, p in enumerate(dist.placements or ()) if p.kind != "shard"] if dist is not None else []
    for index, origin in sorted(shard_origins(info).items()):
        shard = info.shards[index]
        local = tuple(e - o for e, o in zip(element, origin))
        if not all(0 <= i < n for i, n in zip(local, shard.shape)):
            continue
        assert dist is not None
        coord = distribution_coordinate(shard.mesh_coordinate, index, dist)
        if any(coord[a] for a in replicated if a < len(coord)):
            continue  # a replica other than the one an assembled read takes
        layout = tensor_shard_layout(info, shard.shape, spec_tile)
        return Place(tuple(int(v) for v in worst_tile), element, core_of(layout, shard.shape, local),
                     tuple(shard.mesh_coordinate))
    raise AssemblyError(f"tensor {tensor_id}: no device shard holds element {list(element)}")


def placed_notes(
    report: "Report", tensor_id: int, worst_tile: Sequence[int] | None, notes: Sequence[str], *, rank: int = 0,
    tile: Sequence[int] | None = None,
) -> tuple[str, ...]:
    """``notes`` (a verdict's) with the place of ``worst_tile`` (of stored tensor ``tensor_id``, judged by tiles of
    ``tile``) put after the tile where a note names it: ``"tile_sqnr_db: 32x32 tile (0, 3, 17) on core (2, 1) of
    device (0, 1): 2.1 dB < 26 dB"``. Unchanged when there is no worst tile, no place to name, or the spec cannot
    say (the verdict stands without it)."""
    if worst_tile is None or not notes:
        return tuple(notes)
    try:
        where = tile_place(report, tensor_id, worst_tile, rank=rank, tile=tile).describe()
    except (ReportDBError, SpecError, ValueError):
        return tuple(notes)
    return with_place(notes, worst_tile, where)


def with_place(notes: Sequence[str], worst_tile: Sequence[int], where: str) -> tuple[str, ...]:
    """``notes`` with ``where`` put after each mention of ``tile (lead, row, col)`` of ``worst_tile``."""
    if not where:
        return tuple(notes)
    named = f"tile {tuple(int(v) for v in worst_tile)}"
    return tuple(n.replace(named, f"{named} {where}", 1) for n in notes)
