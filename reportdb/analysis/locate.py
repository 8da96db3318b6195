"""Where in the hardware a tensor is wrong: its tiles, its devices and the cores of its sharded memory config.

:func:`locate` compares a stored tensor with its golden (a local or global comparison record's golden tensor, or any
other stored tensor) in one streamed pass per part (the tensor, or each device's shard against the matching part of
the golden: its slice by the distribution, the whole golden for a replicated shard) and answers in the terms a
kernel, a CCL or a core is debugged in: the worst tiles with the element ranges they cover, the per-tile error map,
per-device PCC, least-squares fit and verdict (each device's tiles judged, its worst tile's core named), and
per-shard (core) errors. Mismatches are counted at the tolerance policy's
rtol/atol and each device's verdict is the policy's (``reportdb.analysis.policy``), as everywhere else.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from pathlib import Path
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence, Union

import numpy as np

from ..dtypes import numpy_dtype
from ..errors import (
    AssemblyError,
    ComparisonError,
    InvalidArgumentError,
    ReportDBError,
    SpecError,
    TensorNotFoundError,
)
from ..results import Result, jsonable
from .graph import opened, table_columns
from .grids import ShardLayout, TileGrid
from .places import Place, core_of, shard_origins, tensor_shard_layout, tile_element, with_place
from .policy import Policy, as_policy
from .records import golden_records
from .scan import PartErrors, Reader, scan

if TYPE_CHECKING:
    from ..report import Report
    from ..store.rows import TensorInfo

#: The default tile when a tensor records none (ROW_MAJOR, or a golden without a spec).
DEFAULT_TILE = (32, 32)

Against = Union[int, tuple["Report", int]]


@dataclass(frozen=True)
class TileError(Result):
    """One tile: its index (leading dims, tile row, tile column), the element ranges ``[start, stop)`` per axis it
    covers (within ``device``'s shard for a device of a multi-device tensor), its max abs error and mismatches."""

    tile: tuple[int, ...]
    ranges: tuple[tuple[int, int], ...]
    max_abs_error: float
    mismatches: int
    device: tuple[int, ...] | None = None


@dataclass(frozen=True)
class DeviceError(Result):
    """One device's shard against its part of the golden: PCC, max abs error, the least-squares line ``actual =
    fit_scale * golden + fit_offset``, mismatches, the policy's verdict (``failed`` names the failed criteria) and
    where the shard lies in the global tensor (``origin``, None when that cannot be said). The verdict judges the
    shard's tiles too: ``worst_tile`` is its worst (``(lead, tile row, tile col)`` of the shard) and ``notes`` say
    what a failed criterion saw, the worst tile's core and device named (``analysis/places.py``)."""

    coordinate: tuple[int, ...]
    pcc: float | None
    max_abs_error: float | None
    fit_scale: float | None
    fit_offset: float | None
    passed: bool
    mismatches: int
    failed: tuple[str, ...] = ()
    origin: tuple[int, ...] | None = None
    worst_tile: tuple[int, ...] | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class CoreError(Result):
    """One shard of a sharded memory config: the core ``[x, y]`` of the shard spec's grid that holds it (None when
    the grid has none for it), its index, max abs error, mismatches and the logical elements it holds (0 for a shard
    of padding only)."""

    core: tuple[int, int] | None
    shard: int
    max_abs_error: float
    mismatches: int
    elements: int
    device: tuple[int, ...] | None = None


@dataclass(frozen=True)
class LocateResult(Result):
    """What :func:`locate` found: ``shape`` is the compared tensor's (``device``'s shard with ``device``), ``golden``
    names what it was compared with, ``op`` the operation that output it (for the policy's rules). ``tile_map`` is
    the per-tile max abs error grid ``(*lead, tile rows, tile columns)`` of the tensor compared (of ``device``'s shard
    with ``device``; of the global tensor for a multi-device tensor whose shards lie on whole tiles, else None),
    ``tile_mismatch_map`` its mismatch counts; ``worst_tiles`` the tiles with an error, worst first (at most ``top``);
    ``devices`` one entry per shard of a multi-device tensor; ``cores`` one entry per shard of a sharded memory
    config (per device of a multi-device one). An infinite error (a non-finite value where the golden differs) is
    null in JSON."""

    tensor_id: int
    rank: int
    golden: str
    shape: tuple[int, ...]
    dtype: str | None
    op: str | None
    rtol: float
    atol: float
    device: tuple[int, ...] | None
    tile_shape: tuple[int, int]
    max_abs_error: float
    mismatches: int
    worst_tiles: tuple[TileError, ...]
    devices: tuple[DeviceError, ...]
    memory_layout: str | None
    shard_shape: tuple[int, ...] | None
    shard_orientation: str | None
    cores: tuple[CoreError, ...]
    tile_map: np.ndarray | None
    tile_mismatch_map: np.ndarray | None
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready data, the maps as nested lists."""
        data = {k: v for k, v in super().to_dict().items() if not k.endswith("_map")}
        data["tile_map"] = None if self.tile_map is None else jsonable(self.tile_map.tolist())
        data["tile_mismatch_map"] = None if self.tile_mismatch_map is None else self.tile_mismatch_map.tolist()
        return data

    def _html_fields(self) -> list[tuple[str, Any]]:
        return [(k, v) for k, v in super()._html_fields() if not k.endswith("_map")]


def _criteria(policy: "Policy", op: str | None, dtype: str | None) -> tuple[float, float, float]:
    """``(rtol, atol, pcc)`` the tolerance policy gives ``op`` and ``dtype``: what mismatches are counted at and the
    PCC threshold a device's comparison is made with."""
    rtol, atol = policy.tolerances(op, dtype or "")
    return rtol, atol, policy.pcc_threshold(op, dtype or "")


def locate(
    report: "Report | str | Path", tensor_id: int, *, golden: str | None = None,
    against: "int | tuple[Report | str | Path, int] | None" = None, device: Sequence[int] | None = None,
    policy: "Policy | str | os.PathLike[str] | None" = None, rank: int = 0, top: int = 10,
) -> LocateResult:
    """Where tensor ``tensor_id`` of ``report`` (a Report or a path, as every analysis takes) differs from its golden:
    ``golden="local"`` or ``"global"`` takes the golden tensor of that comparison record, ``against`` another stored
    tensor (an id in ``report`` or ``(other report or its path, id)``). ``device=(r, c)`` looks at that device's
    shard alone. ``policy`` (a Policy or a TOML file) sets the tolerances and verdicts. Reads window by window: memory
    stays bounded whatever the tensor's size; a report given as a path is opened for reading and closed after."""
    with ExitStack() as stack:
        own = stack.enter_context(opened(report))
        other: Against | None
        if isinstance(against, tuple):
            other = (stack.enter_context(opened(against[0])), against[1])
        else:
            other = against
        return _locate(own, tensor_id, golden=golden, against=other, device=device, policy=policy, rank=rank, top=top)


def _locate(
    report: "Report", tensor_id: int, *, golden: str | None, against: Against | None, device: Sequence[int] | None,
    policy: "Policy | str | os.PathLike[str] | None", rank: int, top: int,
) -> LocateResult:
    """:func:`locate` on open reports."""
    if (golden is None) == (against is None):
        raise InvalidArgumentError("give golden='local' or 'global', or against=ID or (report, ID), not both or neither")
    if top < 0:
        raise InvalidArgumentError(f"top must be 0 or more, not {top}")
    policy = as_policy(policy if isinstance(policy, (Policy, str)) or policy is None else Path(policy))
    info = _info(report, tensor_id, rank)
    g_report, g_id, label = _golden_source(report, tensor_id, rank, golden, against)
    g_info = _info(g_report, g_id, rank)
    op = _producer_op(report, tensor_id)
    rtol, atol, pcc = _criteria(policy, op, info.spec.ttnn_dtype or info.dtype)
    tile = tuple(info.spec.tile_shape or DEFAULT_TILE)
    assert len(tile) == 2
    parts = _parts(report, info, g_report, g_info, device)
    multi = len(info.shards) > 1 and device is None
    notes: list[str] = []
    results: list[tuple[_Part, PartErrors]] = []
    layouts: list[ShardLayout | None] = []
    for part in parts:
        layouts.append(_shard_layout(info, part.shape, tile, notes))
        found = scan(part.read_a, part.read_g, part.shape, (part.dtype_a, part.dtype_g), tile, layouts[-1], rtol=rtol,
                     atol=atol, pcc=pcc if multi else None)
        results.append((part, found))
    dtype = info.spec.ttnn_dtype or info.dtype
    # a global golden or another run's tensor carries error made before this operation: no value-keeping rule
    accumulated = golden == "global" or isinstance(against, tuple)
    devices = tuple(_device_entry(p, f, lay, policy, op, dtype, accumulated)
                    for (p, f), lay in zip(results, layouts)) if multi else ()
    tile_map, mm_map = _tile_maps(info, results, tile, multi, notes)
    layout0 = layouts[0]
    mc = info.spec.memory_config if isinstance(info.spec.memory_config, dict) else {}
    return LocateResult(
        tensor_id=tensor_id, rank=rank, golden=label,
        shape=tuple(parts[0].shape if device is not None or info.shape is None else info.shape),
        dtype=info.spec.ttnn_dtype or info.dtype, op=op, rtol=rtol, atol=atol,
        device=None if device is None else parts[0].coordinate, tile_shape=(int(tile[0]), int(tile[1])),
        max_abs_error=max(f.max_abs_error for _, f in results), mismatches=sum(f.mismatches for _, f in results),
        worst_tiles=_worst_tiles(results, tile, multi, top), devices=devices,
        memory_layout=mc.get("memory_layout"), shard_shape=None if layout0 is None else layout0.shard_shape,
        shard_orientation=None if layout0 is None else layout0.orientation,
        cores=tuple(c for (p, f), lay in zip(results, layouts) for c in _core_entries(p, f, lay, multi)),
        tile_map=tile_map, tile_mismatch_map=mm_map, notes=tuple(dict.fromkeys(notes)),
    )


def _info(report: "Report", tensor_id: int, rank: int) -> "TensorInfo":
    if not report.has_tensor(tensor_id, rank):
        raise TensorNotFoundError(f"{report.path}: tensor {tensor_id} (rank {rank}) is not stored")
    return report.tensor_info(tensor_id, rank)


def _golden_source(
    report: "Report", tensor_id: int, rank: int, golden: str | None, against: Against | None
) -> tuple["Report", int, str]:
    """The report and id of the tensor to compare with, and a label naming it."""
    if against is not None:
        if isinstance(against, tuple):
            other, other_id = against
            return other, int(other_id), f"tensor {int(other_id)} of {other.path}"
        return report, int(against), f"tensor {int(against)}"
    if golden not in ("local", "global"):
        raise InvalidArgumentError(f"golden must be 'local' or 'global', not {golden!r}")
    records = [r for r in golden_records(report) if r.tensor_id == tensor_id and r.rank == rank]
    for record in records:
        if record.kind == golden and record.golden_tensor_id is not None:
            return report, record.golden_tensor_id, f"{golden} golden tensor {record.golden_tensor_id}"
    kinds = sorted({r.kind for r in records if r.golden_tensor_id is not None})
    raise TensorNotFoundError(
        f"{report.path}: tensor {tensor_id} (rank {rank}) has no {golden} comparison record with a golden tensor"
        + (f"; it has {' and '.join(kinds)} ones (--kind)" if kinds else "; compare it with --against ID instead")
    )


def _producer_op(report: "Report", tensor_id: int) -> str | None:
    """The name of the operation that output the tensor, when the report says (for the policy's op rules)."""
    try:
        with report.session() as session:
            conn = session.connection()
            if not {"operation_id", "tensor_id"} <= table_columns(conn, "output_tensors") or not {
                "operation_id", "name"} <= table_columns(conn, "operations"):
                return None
            row = conn.exec_driver_sql(
                "SELECT o.name FROM output_tensors t JOIN operations o ON o.operation_id = t.operation_id"
                " WHERE t.tensor_id = ? ORDER BY t.rowid LIMIT 1", (tensor_id,)
            ).fetchone()
    except ReportDBError:
        return None
    return None if row is None or row[0] is None else str(row[0])


@dataclass(frozen=True)
class _Part:
    """One part compared: its device coordinate (None for the whole tensor), shape, dtypes, readers and origin."""

    coordinate: tuple[int, ...] | None
    shape: tuple[int, ...]
    dtype_a: np.dtype
    dtype_g: np.dtype
    read_a: Reader
    read_g: Reader
    origin: tuple[int, ...] | None


def _shifted(window: tuple[slice, ...] | None, origin: tuple[int, ...], shape: tuple[int, ...]) -> tuple[slice, ...]:
    if window is None:
        return tuple(slice(o, o + n) for o, n in zip(origin, shape))
    return tuple(slice(s.start + o, s.stop + o) for s, o in zip(window, origin))


def _parts(
    report: "Report", info: "TensorInfo", g_report: "Report", g_info: "TensorInfo", device: Sequence[int] | None
) -> list[_Part]:
    """The parts to compare: the whole tensor, the one device asked for, or every device of a multi-device tensor,
    each with the reader of its golden part."""
    tid, gid, rank = info.tensor_id, g_info.tensor_id, info.rank
    g_dtype = numpy_dtype(g_info.dtype)

    def whole_golden(window: tuple[slice, ...] | None) -> np.ndarray:
        return g_report.tensor(gid, rank, window=window)

    if device is None and len(info.shards) == 1:
        shape = tuple(info.shape if info.shape is not None else info.shards[0].shape)
        _same_shape(shape, g_info.shape, g_info)
        return [_Part(None, shape, numpy_dtype(info.shards[0].dtype), g_dtype,
                      lambda w: report.tensor(tid, rank, window=w), whole_golden, None)]
    shards = list(enumerate(info.shards))
    if device is not None:
        coord = tuple(int(c) for c in device)
        shards = [(i, s) for i, s in shards if s.mesh_coordinate == coord]
        if not shards:
            have = [list(s.mesh_coordinate) for s in info.shards[:16]]
            raise TensorNotFoundError(f"{report.path}: tensor {tid} (rank {rank}) has no shard at mesh coordinate "
                                      f"{list(coord)}; its shards are at {have}")
    g_coords = {s.mesh_coordinate: s for s in g_info.shards}
    shard_wise = len(g_info.shards) == len(info.shards) > 1 and all(s.mesh_coordinate in g_coords for s in info.shards)
    origins: dict[int, tuple[int, ...]] | None
    if shard_wise:
        try:
            origins = shard_origins(info)
        except AssemblyError:  # shard against shard needs no place in the global tensor
            origins = None
    else:
        origins = shard_origins(info)
        _same_shape(tuple(info.shape or ()), g_info.shape, g_info)
    parts = []
    for index, shard in shards:
        coord = shard.mesh_coordinate
        read_a = _device_reader(report, tid, rank, coord)
        origin = None if origins is None else origins.get(index)
        if shard_wise:
            _same_shape(shard.shape, g_coords[coord].shape, g_info)
            read_g = _device_reader(g_report, gid, rank, coord)
        else:
            assert origin is not None
            read_g = _part_reader(g_report, gid, rank, origin, tuple(shard.shape))
        parts.append(_Part(coord, tuple(shard.shape), numpy_dtype(shard.dtype), g_dtype, read_a, read_g, origin))
    return parts


def _device_reader(report: "Report", tensor_id: int, rank: int, coord: tuple[int, ...]) -> Reader:
    """Windows of one device's shard."""
    def read(window: tuple[slice, ...] | None) -> np.ndarray:
        return report.tensor(tensor_id, rank, device=coord, window=window)
    return read


def _part_reader(report: "Report", tensor_id: int, rank: int, origin: tuple[int, ...], shape: tuple[int, ...]) -> Reader:
    """Windows of the box at ``origin`` of ``shape`` of a whole tensor, in the box's own coordinates."""
    def read(window: tuple[slice, ...] | None) -> np.ndarray:
        return report.tensor(tensor_id, rank, window=_shifted(window, origin, shape))
    return read


def _same_shape(shape: Sequence[int], g_shape: Sequence[int] | None, g_info: "TensorInfo") -> None:
    if g_shape is None or tuple(shape) != tuple(g_shape):
        raise ComparisonError(
            f"tensor shape {list(shape)} differs from the golden tensor {g_info.tensor_id}'s "
            f"{'(unassembled shards)' if g_shape is None else list(g_shape)}: nothing can be located"
        )


def _shard_layout(info: "TensorInfo", shape: tuple[int, ...], tile: tuple[int, ...], notes: list[str]) -> ShardLayout | None:
    """The sharded memory config's layout of a part of ``shape`` (the spec is per device), None when not sharded."""
    try:
        layout = tensor_shard_layout(info, shape, tile)
    except SpecError as exc:  # a shard spec that cannot describe this tensor: the rest can still be located
        notes.append(f"cores not located: {exc}")
        return None
    if layout is not None and layout.kind == "ND_SHARDED":
        nd = (info.spec.memory_config or {}).get("nd_shard_spec") or {}
        strategy = nd.get("shard_distribution_strategy") or nd.get("distribution_strategy")
        if strategy not in (None, "ROUND_ROBIN_1D"):
            notes.append(f"ND shard distribution {strategy} is placed round-robin over the grid's cores")
    return layout


def _device_entry(
    part: _Part, found: PartErrors, layout: ShardLayout | None, policy: "Policy", op: str | None, dtype: str | None,
    accumulated: bool,
) -> DeviceError:
    """One device's shard judged by the policy (its tiles included), the worst tile's core named in the notes."""
    comparison = found.comparison
    assert comparison is not None and part.coordinate is not None
    verdict = policy.judge(comparison, op=op, dtype=dtype or "", accumulated=accumulated)
    notes = verdict.notes
    worst = verdict.worst_tile
    if worst is not None and comparison.tile_shape is not None:
        element = tile_element(part.shape, comparison.tile_shape, worst)
        place = Place(worst, element, core_of(layout, part.shape, element), part.coordinate)
        notes = with_place(notes, worst, place.describe())
    return DeviceError(
        coordinate=part.coordinate, pcc=comparison.pcc, max_abs_error=found.max_abs_error, fit_scale=found.fit[0],
        fit_offset=found.fit[1], passed=verdict.passed, mismatches=found.mismatches, failed=verdict.failed,
        origin=part.origin, worst_tile=worst, notes=notes,
    )


def _worst_tiles(
    results: list[tuple[_Part, PartErrors]], tile: tuple[int, ...], multi: bool, top: int
) -> tuple[TileError, ...]:
    """The ``top`` tiles with an error over every part, worst (max abs error, then mismatches) first."""
    found: list[tuple[float, int, int, tuple[int, ...]]] = []
    for k, (part, errors) in enumerate(results):
        flat_max = errors.tile_max.reshape(-1)
        flat_mm = errors.tile_mismatches.reshape(-1)
        if top == 0 or not flat_max.size:
            continue
        n = min(top, flat_max.size)
        order = np.lexsort((-flat_mm, -flat_max.astype(np.float64)))[:n]
        for i in order:
            if flat_max[i] > 0 or flat_mm[i] > 0:
                index = tuple(int(v) for v in np.unravel_index(i, errors.tile_max.shape))
                found.append((float(flat_max[i]), int(flat_mm[i]), k, index))
    found.sort(key=lambda t: (-t[0], -t[1]))
    tiles = []
    for err, mm, k, index in found[:top]:
        part = results[k][0]
        grid = TileGrid(part.shape, (int(tile[0]), int(tile[1])))
        ranges = tuple((a, b) for a, b in grid.ranges(index))
        tiles.append(TileError(index, ranges, err, mm, part.coordinate if multi else None))
    return tuple(tiles)


def _tile_maps(
    info: "TensorInfo", results: list[tuple[_Part, PartErrors]], tile: tuple[int, ...], multi: bool, notes: list[str]
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The tile maps of what was compared; for a multi-device tensor the global ones, its shards' placed by their
    origins (replicated shards overlapping: the worst kept), when every shard starts on a whole tile."""
    if not multi:
        return results[0][1].tile_max, results[0][1].tile_mismatches
    if info.shape is None or any(p.origin is None for p, _ in results):
        notes.append("no global tile map: the shards' places in the global tensor are not known")
        return None, None
    grid = TileGrid(tuple(info.shape), (int(tile[0]), int(tile[1])))
    tile_max = np.zeros(grid.grid_shape, dtype=np.float32)
    tile_mm = np.zeros(grid.grid_shape, dtype=np.int32)
    rank_n = len(info.shape)
    for part, errors in results:
        assert part.origin is not None
        lead = part.origin[:-2] if rank_n >= 2 else ()
        inner = part.origin[-2:] if rank_n >= 2 else part.origin[-1:]
        steps = (int(tile[0]), int(tile[1]))[-len(inner):] if inner else ()
        if any(o % s for o, s in zip(inner, steps)):
            notes.append("no global tile map: a shard does not start on a whole tile; see each device's tiles")
            return None, None
        start = lead + tuple(o // s for o, s in zip(inner, steps))
        if rank_n < 2:
            start = (0,) + start if rank_n == 1 else (0, 0)
        where = tuple(slice(s, s + n) for s, n in zip(start, errors.tile_max.shape))
        np.maximum(tile_max[where], errors.tile_max, out=tile_max[where])
        np.maximum(tile_mm[where], errors.tile_mismatches, out=tile_mm[where])
    return tile_max, tile_mm


def _core_entries(part: _Part, found: PartErrors, layout: ShardLayout | None, multi: bool) -> list[CoreError]:
    if layout is None or found.shard_max is None:
        return []
    assert found.shard_mismatches is not None and found.shard_elements is not None
    device = part.coordinate if multi else None
    return [
        CoreError(layout.core(i), i, float(found.shard_max[i]), int(found.shard_mismatches[i]),
                  int(found.shard_elements[i]), device)
        for i in range(layout.shards)
    ]
