"""What describes a tensor besides its values: ttnn dtype, layout, shapes, memory config, distribution.

The same ``TensorSpec`` comes out of every legacy file reader and goes into ``Report.put_tensor``,
so a tensor read from a ``.bin`` keeps everything its file said once it is stored.
"""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from ._lazy import lazy_module

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
else:  # numpy is imported on first use: opening a report and reading its metadata need none
    np = lazy_module("numpy", globals(), "np")

from .errors import AssemblyError, SpecError

MeshCoordinate = tuple[int, ...]
Shards = list[tuple[MeshCoordinate, "np.ndarray"]]


@dataclass(frozen=True)
class Placement:
    """How one mesh dimension maps onto the tensor: ``shard`` along ``dim``, or ``replicate``."""

    kind: str  # "shard" | "replicate"
    dim: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "dim": self.dim}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Placement":
        data = _mapping(data, "placement")
        kind = data.get("kind")
        if kind not in ("shard", "replicate"):
            raise SpecError(f"placement kind must be 'shard' or 'replicate', not {_show(kind)}")
        return cls(kind=kind, dim=None if data.get("dim") is None else _int(data["dim"], "placement dim"))


@dataclass(frozen=True)
class Distribution:
    """How per-device shards form the global tensor.

    ``mesh_shape`` is the distribution shape; ``placements`` holds one Placement per mesh dimension.
    ``device_coords`` lists the device mesh coordinate of each distribution position in row-major
    order (a 1-D distribution over a 2-D device mesh); without it a shard's coordinate is its position.
    ``placements is None`` means the source did not say (legacy Shard2D, AllGather), so the shards
    cannot be assembled. ``strategy`` keeps the legacy strategy name and its raw parameters.
    """

    mesh_shape: tuple[int, ...]
    placements: tuple[Placement, ...] | None
    strategy: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    device_coords: tuple[MeshCoordinate, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "mesh_shape": list(self.mesh_shape),
            "device_coords": None if self.device_coords is None else [list(c) for c in self.device_coords],
            "placements": None if self.placements is None else [p.to_json() for p in self.placements],
            "strategy": self.strategy,
            "params": dict(self.params),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Distribution":
        """A distribution from its ``to_json`` form; a value of the wrong type raises ReportDBError."""
        data = _mapping(data, "distribution")
        placements = data.get("placements")
        if "mesh_shape" not in data:
            raise SpecError("distribution has no mesh_shape")
        return cls(
            mesh_shape=_ints(data["mesh_shape"], "distribution mesh_shape"),
            placements=None if placements is None else tuple(Placement.from_json(p) for p in _list(placements, "placements")),
            strategy=_str(data.get("strategy"), "distribution strategy"),
            params=dict(_mapping(data.get("params") or {}, "distribution params")),
            device_coords=None
            if data.get("device_coords") is None
            else tuple(_ints(c, "distribution device_coords") for c in _list(data["device_coords"], "device_coords")),
        )


@dataclass(frozen=True)
class TensorSpec:
    """Metadata of a stored tensor, as its source described it.

    ``ttnn_dtype`` keeps the hardware type (BFLOAT8_B stays BFLOAT8_B even though values are stored as
    bfloat16). ``memory_config`` is structured data: ``{"memory_layout", "buffer_type", "shard_spec":
    {"grid": [[[x0, y0], [x1, y1]], ...], "shape": [h, w], "orientation", "mode",
    "physical_shard_shape", "halo"} | None, "nd_shard_spec": {...} | None}``.
    """

    ttnn_dtype: str | None = None
    layout: str | None = None
    tile_shape: tuple[int, int] | None = None
    transpose_tile: bool = False
    logical_shape: tuple[int, ...] | None = None
    padded_shape: tuple[int, ...] | None = None
    storage_type: str | None = None
    memory_config: dict[str, Any] | None = None
    distribution: Distribution | None = None

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["distribution"] = None if self.distribution is None else self.distribution.to_json()
        for key in ("tile_shape", "logical_shape", "padded_shape"):
            if data[key] is not None:
                data[key] = list(data[key])
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "TensorSpec":
        """A spec from its ``to_json`` form (or ``put_tensor``'s metadata); a value of the wrong type raises
        ReportDBError naming the field, whether it came from a caller or from a stored report."""
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in _mapping(data, "tensor spec").items() if k in known}
        for key in ("tile_shape", "logical_shape", "padded_shape"):
            if kwargs.get(key) is not None:
                kwargs[key] = _ints(kwargs[key], key)
        if kwargs.get("tile_shape") is not None and len(kwargs["tile_shape"]) != 2:
            raise SpecError(f"tile_shape must be [height, width], not {_show(kwargs['tile_shape'])}")
        for key in ("ttnn_dtype", "layout", "storage_type"):
            kwargs[key] = _str(kwargs.get(key), key)
        if kwargs.get("memory_config") is not None:
            kwargs["memory_config"] = _mapping(kwargs["memory_config"], "memory_config")
        if "transpose_tile" in kwargs:
            kwargs["transpose_tile"] = bool(kwargs["transpose_tile"])
        if kwargs.get("distribution") is not None and not isinstance(kwargs["distribution"], Distribution):
            kwargs["distribution"] = Distribution.from_json(kwargs["distribution"])
        return cls(**kwargs)

    def as_metadata(self) -> dict[str, Any]:
        """The keyword arguments that ``Report.put_tensor`` takes for this spec."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


#: The metadata a stored tensor takes beside its values (``put_tensor``'s keyword arguments): the TensorSpec fields and
#: ``source``, where the tensor came from.
TENSOR_METADATA = frozenset({f.name for f in dataclasses.fields(TensorSpec)} | {"source"})


def check_metadata(names: Iterable[str], *, also: Iterable[str] = ()) -> None:
    """Refuse tensor metadata other than :data:`TENSOR_METADATA` and ``also`` (names the caller takes itself, such as
    the writer's ``tensors`` row columns), listing what is taken."""
    known = TENSOR_METADATA | set(also)
    unknown = set(names) - known
    if unknown:
        raise SpecError(f"unknown tensor metadata {sorted(unknown)}; known: {sorted(known)}")


#: The highest tensor rank accepted (numpy 1.26's limit).
MAX_RANK = 32
#: At most this many device shards per tensor: far above any real mesh, low enough to bound the work a stored or
#: decoded count can ask for.
MAX_SHARDS = 65536


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SpecError(f"{what} must be a mapping, not {_show(value)}")
    return value


def _list(value: Any, what: str) -> list[Any] | tuple[Any, ...]:
    if not isinstance(value, (list, tuple)):
        raise SpecError(f"{what} must be a list, not {_show(value)}")
    return value


def _str(value: Any, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise SpecError(f"{what} must be a string, not {_show(value)}")
    return value


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise SpecError(f"{what} must be an integer, not {_show(value)}")
    try:
        return operator.index(value)  # int and numpy integers; not floats or strings
    except TypeError:
        raise SpecError(f"{what} must be an integer, not {_show(value)}") from None


def _ints(value: Any, what: str) -> tuple[int, ...]:
    """A shape-like value (a list of non-negative integers of rank <= MAX_RANK) as a tuple of ints."""
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        raise SpecError(f"{what} must be a list of integers, not {_show(value)}")
    items = list(value)
    if len(items) > MAX_RANK:
        raise SpecError(f"{what} has {len(items)} dimensions; at most {MAX_RANK} are supported")
    ints = tuple(_int(v, what) for v in items)
    if any(v < 0 for v in ints):
        raise SpecError(f"{what} must not be negative: {_show(list(ints))}")
    return ints


def shape_from_json(value: Any, what: str) -> tuple[int, ...]:
    """A stored shape or mesh coordinate (decoded JSON) checked to be a list of non-negative ints of sane rank."""
    if not isinstance(value, list):
        raise SpecError(f"{what} must be a list of integers, not {_show(value)}")
    return _ints(value, what)


@dataclass
class LoadedTensor:
    """A tensor read from a legacy file: its shards, its spec and where it came from."""

    shards: Shards
    spec: TensorSpec
    source: dict[str, Any]

    @property
    def array(self) -> np.ndarray:
        """The logical array: the only shard, or the shards assembled as the distribution says."""
        return assemble(self.shards, self.spec.distribution)


def assemble(shards: Sequence[tuple[MeshCoordinate, np.ndarray]], distribution: Distribution | None) -> np.ndarray:
    """Assemble per-device shards into the global array.

    One shard is the tensor itself. Otherwise every mesh dimension with a ``shard`` placement
    concatenates along its tensor dim, and a ``replicate`` dimension keeps index 0 of that mesh axis.
    """
    return assemble_with(shards, distribution, _concat_arrays)


def assembled_shape(
    shapes: Sequence[tuple[MeshCoordinate, tuple[int, ...]]], distribution: Distribution | None
) -> tuple[int, ...]:
    """The shape ``assemble`` would give for shards of these shapes, without touching any data."""
    return assemble_with(shapes, distribution, _concat_shapes)


def _concat_arrays(parts: list[np.ndarray], dim: int) -> np.ndarray:
    try:
        return np.concatenate(parts, axis=dim)
    except ValueError as exc:  # numpy's AxisError is a ValueError too
        raise AssemblyError(f"shards do not concatenate along dim {dim}: {exc}") from exc


def _concat_shapes(parts: list[tuple[int, ...]], dim: int) -> tuple[int, ...]:
    first = parts[0]
    if not -len(first) <= dim < len(first) or any(
        len(p) != len(first) or p[:dim] + p[dim + 1 :] != first[:dim] + first[dim + 1 :] for p in parts
    ):
        raise AssemblyError(f"shards of shapes {[list(p) for p in parts]} do not concatenate along dim {dim}")
    dim %= len(first)
    return first[:dim] + (sum(p[dim] for p in parts),) + first[dim + 1 :]


def assemble_with(items: Sequence[tuple[MeshCoordinate, Any]], distribution: Distribution | None, concat: Any) -> Any:
    """Put per-device ``items`` together as ``distribution`` says, joining along an axis with ``concat`` (arrays for
    ``assemble``, shapes for ``assembled_shape``, shard boxes for the store's window planning)."""
    if len(items) == 1 and (
        distribution is None or _mesh_volume(distribution.mesh_shape) <= 1 or _all_replicate(distribution)
    ):
        return items[0][1]
    if not items:
        raise AssemblyError("the tensor has no shards")
    if distribution is None or distribution.placements is None:
        how = "no distribution" if distribution is None else f"strategy {distribution.strategy!r} without tensor dims"
        raise AssemblyError(
            f"{len(items)} device shards with {how}: the global tensor cannot be assembled; read them with shards()"
        )
    mesh = distribution.mesh_shape
    placements = distribution.placements
    if len(placements) != len(mesh):
        raise AssemblyError(f"distribution has {len(placements)} placements for a mesh of rank {len(mesh)}")
    by_coord: dict[MeshCoordinate, Any] = {}
    for position, (coord, value) in enumerate(items):
        by_coord[distribution_coordinate(tuple(coord), position, distribution)] = value

    def build(prefix: tuple[int, ...]) -> Any:
        axis = len(prefix)
        if axis == len(mesh):
            if prefix not in by_coord:
                raise AssemblyError(f"no shard at mesh coordinate {list(prefix)}; read the tensor with shards()")
            return by_coord[prefix]
        placement = placements[axis]
        if placement.kind == "replicate":
            return build(prefix + (0,))
        return concat([build(prefix + (i,)) for i in range(mesh[axis])], placement.dim or 0)

    return build(())


def distribution_coordinate(coord: MeshCoordinate, position: int, distribution: Distribution) -> MeshCoordinate:
    """Where a device shard sits in the distribution shape."""
    mesh = distribution.mesh_shape
    if distribution.device_coords is not None:
        try:
            flat = distribution.device_coords.index(coord)
        except ValueError:
            raise AssemblyError(f"shard at mesh coordinate {list(coord)} is not part of the distribution") from None
    elif len(coord) == len(mesh):
        return coord
    else:
        flat = position
    if flat >= _mesh_volume(mesh):
        raise AssemblyError(f"shard {flat} lies outside a distribution of shape {list(mesh)}")
    return tuple(int(v) for v in np.unravel_index(flat, mesh))


def _mesh_volume(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape)) if shape else 1


def _all_replicate(distribution: Distribution) -> bool:
    return distribution.placements is not None and all(p.kind == "replicate" for p in distribution.placements)
