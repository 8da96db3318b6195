"""Collectives across the devices of a mesh: all_gather, reduce_scatter, all_reduce, mesh_partition and their
``experimental.*_async`` forms, computed from each device's input shard.

Semantics (tt-metal's documentation of the operations, docs.tenstorrent.com/tt-metal/latest/ttnn/ttnn/api/
ttnn.all_gather.html, ttnn.reduce_scatter.html, ttnn.all_reduce.html, and the ``mesh_partition`` binding in
``ttnn/cpp/ttnn/operations/ccl``): with ``cluster_axis`` given, each line of devices along that mesh axis is one
group (the other axes run independent collectives); without it, every device of the mesh is in one group, in
row-major order. A device's index in its group is its coordinate on that axis (its row-major position without one).

- ``all_gather(dim)``: every device gets the group's shards concatenated along ``dim`` in group order.
- ``reduce_scatter(dim)``: the group's shards are summed, and device ``i`` gets the ``i``-th of ``n`` equal pieces
  of the sum along ``dim``.
- ``all_reduce``: every device gets the group's sum.
- ``mesh_partition(dim)``: device ``i`` keeps the ``i``-th of ``n`` pieces of its own input along ``dim`` (no
  communication: the inverse of all_gather).

Links, topology, semaphores, persistent output buffers, sub-devices and worker counts decide how data moves, not
its values: they are accepted and ignored. A sum's order is the ring's, not known from the report, so each summed
element comes with a slack: recursive summation of ``n`` terms in a float with unit roundoff ``u`` is within
``(n - 1) * u * sum(|x_i|)`` of the exact sum whatever the order (Higham, *Accuracy and Stability of Numerical
Algorithms*, 2nd ed., section 4.2), ``u`` that of the dtype the shards are stored in (2^-8 for bfloat16).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import Param, reference
from .args import UnsupportedArguments

Coordinate = tuple[int, ...]

#: Unit roundoff by stored dtype name: the precision a device adds shards of that dtype in.
UNIT_ROUNDOFF = {"bfloat16": 2.0**-8, "float16": 2.0**-11, "float32": 2.0**-24, "float64": 2.0**-53}


@dataclass(frozen=True)
class MeshTensor:
    """A multi-device tensor as the report stores it: each device's shard by its mesh coordinate."""

    shards: dict[Coordinate, np.ndarray]

    @property
    def mesh_shape(self) -> tuple[int, ...]:
        """The mesh's extent on each axis, from the coordinates present."""
        coords = list(self.shards)
        return tuple(max(c[axis] for c in coords) + 1 for axis in range(len(coords[0])))

    @property
    def size(self) -> int:
        """Elements held over every shard (what :func:`reportdb.analysis.references.justified_elements` counts)."""
        return sum(int(a.size) for a in self.shards.values())


@dataclass(frozen=True)
class MeshResult:
    """Each device's reference output, and for a sum the slack each element may differ by in another order (None
    where the result is an exact copy of values)."""

    expected: dict[Coordinate, np.ndarray]
    slack: dict[Coordinate, np.ndarray] | None = None


def groups(tensor: MeshTensor, cluster_axis: int | None) -> list[list[Coordinate]]:
    """The device groups of a collective, each in group order (see the module's docstring)."""
    coords = sorted(tensor.shards)
    if cluster_axis is None:
        return [coords]
    if not 0 <= cluster_axis < len(coords[0]):
        raise UnsupportedArguments(["cluster_axis"], f"the mesh has {len(coords[0])} axes, no axis {cluster_axis}")
    lines: dict[Coordinate, list[Coordinate]] = {}
    for c in coords:
        lines.setdefault(c[:cluster_axis] + c[cluster_axis + 1:], []).append(c)
    return [sorted(line, key=lambda c: c[cluster_axis]) for line in lines.values()]


def _axis(dim: int, array: np.ndarray) -> int:
    """``dim`` as a non-negative axis of ``array`` (refused when out of range)."""
    if not -array.ndim <= dim < array.ndim:
        raise UnsupportedArguments(["dim"], f"dim {dim} for shards of rank {array.ndim}")
    return dim % array.ndim


def _pieces(array: np.ndarray, axis: int, count: int) -> list[np.ndarray]:
    """``array`` cut into ``count`` equal pieces along ``axis`` (refused when it does not divide)."""
    if array.shape[axis] % count:
        raise UnsupportedArguments(["dim"], f"{array.shape[axis]} elements along dim {axis} do not split over "
                                            f"{count} devices")
    return np.split(array, count, axis=axis)


def _sum(shards: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The exact (float64) sum of a group's shards, and the slack of another summation order (module docstring)."""
    unit = max(UNIT_ROUNDOFF.get(a.dtype.name, 2.0**-8) for a in shards)
    wide = [np.asarray(a, dtype=np.float64) for a in shards]
    total = np.sum(wide, axis=0)
    magnitude = np.sum([np.abs(a) for a in wide], axis=0)
    return total, (len(shards) - 1) * unit * magnitude


def _shards(tensor: Any) -> MeshTensor:
    """The bound input as per-device shards (an input stored as one array is refused: nothing says its devices)."""
    if not isinstance(tensor, MeshTensor) or not tensor.shards or () in tensor.shards:
        raise UnsupportedArguments(["input_tensor"], "a collective needs its input's per-device shards, and the report "
                                                     "stores it as one array")
    return tensor


_IGNORED = ("num_links", "topology", "subdevice_id", "multi_device_global_semaphore", "barrier_semaphore",
            "persistent_output_buffer", "persistent_output_buffers", "intermediate_memory_config", "mesh_device",
            "chunks_per_sync", "num_workers_per_link", "num_buffers_per_channel", "use_l1_small_for_semaphores",
            "num_workers", "do_sync", "use_noc1_only", "use_optimal_ccl_for_llama", "math_op")
_IN = Param("input_tensor", "tensor", 0, required=True)
_TAIL = (Param("cluster_axis", "int"), Param("output_tensor", "output"),
         *(Param(name, "ignored") for name in _IGNORED))


@reference("ttnn.all_gather", "ttnn.experimental.all_gather_async", per_device=True,
           params=(_IN, Param("dim", "int", 1, required=True), *_TAIL), keeps_values=True)
def all_gather(input_tensor: Any, dim: int, cluster_axis: int | None = None) -> MeshResult:
    """Each device: its group's shards concatenated along ``dim``."""
    mesh = _shards(input_tensor)
    expected: dict[Coordinate, np.ndarray] = {}
    for group in groups(mesh, cluster_axis):
        parts = [mesh.shards[c] for c in group]
        gathered = np.concatenate(parts, axis=_axis(dim, parts[0]))
        expected.update((c, gathered) for c in group)
    return MeshResult(expected)


@reference("ttnn.reduce_scatter", "ttnn.experimental.reduce_scatter_minimal_async", per_device=True,
           params=(_IN, Param("dim", "int", 1, required=True), *_TAIL))
def reduce_scatter(input_tensor: Any, dim: int, cluster_axis: int | None = None) -> MeshResult:
    """Device ``i`` of each group: the ``i``-th piece along ``dim`` of the group's sum."""
    mesh = _shards(input_tensor)
    expected: dict[Coordinate, np.ndarray] = {}
    slack: dict[Coordinate, np.ndarray] = {}
    for group in groups(mesh, cluster_axis):
        total, bound = _sum([mesh.shards[c] for c in group])
        axis = _axis(dim, total)
        for c, piece, room in zip(group, _pieces(total, axis, len(group)), _pieces(bound, axis, len(group))):
            expected[c], slack[c] = piece, room
    return MeshResult(expected, slack)


@reference("ttnn.all_reduce", "ttnn.experimental.all_reduce_async", per_device=True, params=(_IN, *_TAIL))
def all_reduce(input_tensor: Any, cluster_axis: int | None = None) -> MeshResult:
    """Each device: its group's sum."""
    mesh = _shards(input_tensor)
    expected: dict[Coordinate, np.ndarray] = {}
    slack: dict[Coordinate, np.ndarray] = {}
    for group in groups(mesh, cluster_axis):
        total, bound = _sum([mesh.shards[c] for c in group])
        for c in group:
            expected[c], slack[c] = total, bound
    return MeshResult(expected, slack)


@reference("ttnn.mesh_partition", "ttnn.experimental.mesh_partition", per_device=True,
           params=(_IN, Param("dim", "int", 1, required=True), Param("cluster_axis", "int", 2),
                   *_TAIL[1:]), keeps_values=True)
def mesh_partition(input_tensor: Any, dim: int, cluster_axis: int | None = None) -> MeshResult:
    """Device ``i`` of each group: the ``i``-th piece along ``dim`` of its own input."""
    mesh = _shards(input_tensor)
    expected: dict[Coordinate, np.ndarray] = {}
    for group in groups(mesh, cluster_axis):
        for index, c in enumerate(group):
            own = mesh.shards[c]
            expected[c] = _pieces(own, _axis(dim, own), len(group))[index]
    return MeshResult(expected)
