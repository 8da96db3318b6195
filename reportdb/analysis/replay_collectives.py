"""Replay device by device: a collective (all_gather, reduce_scatter, all_reduce, mesh_partition...) from the
per-device input shards the report stores (:mod:`.references.collectives`), and any other operation on a tensor
stored as several device shards once per device, on that device's shards, as a mesh runs it (a norm's statistics
or a matmul of one device's slice are not those of the assembled tensor). Each device's output shard is judged
against that device's reference and the device named where one fails, so a stale shard fails its device, not the
operation as a blur.

A summed output is judged against the value nearest the device's within the summation-order slack of its reference
(the ring's order is not in the report; the slack's bound is in :mod:`.references.collectives`), so only an error
no order of the sum explains counts. ``--store`` keeps each device's reference as one shard of a new tensor.

In a chain values travel device by device from the first operation that reads a tensor stored as several device
shards: each device runs the operation on its own chained shards, a collective takes every device's chained shard,
and each device's output is judged against its own shard of the stored output and carried on to the consumers
(:class:`ChainValues`), so an error made before a collective is seen after it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ReportDBError
from . import references
from .graph import TensorGraph, judged_dtype
from .policy import canonical_dtype
from .references.collectives import Coordinate, MeshResult, MeshTensor
from .replay_parallel import Reads
from .replay_rows import DeviceVerdict, ReplayRow, judged

if TYPE_CHECKING:
    from ..report import Report
    from .policy import Policy
    from .replay_store import ReplayStore


class ChainValues(dict[int, np.ndarray]):
    """A chain's values: one array per tensor computed whole (what :func:`.replay.replay_operation` reads and
    writes), and in :attr:`meshes` the tensors the chain carries device by device, each device's shard by its mesh
    coordinate."""

    def __init__(self) -> None:
        super().__init__()
        self.meshes: dict[int, dict[Coordinate, np.ndarray]] = {}

    def covers(self, tensor_id: int) -> bool:
        """Whether the chain holds a value of ``tensor_id``, whole or per device."""
        return tensor_id in self or tensor_id in self.meshes

    def drop(self, tensor_id: int) -> None:
        """Forget ``tensor_id`` (its last consumer has run)."""
        self.pop(tensor_id, None)
        self.meshes.pop(tensor_id, None)

    def share(self, other: "ChainValues", tensor_ids: "list[int]") -> None:
        """Take ``other``'s values of ``tensor_ids`` (where it has them) as this chain's own."""
        for t in tensor_ids:
            if t in other:
                self[t] = other[t]
            if t in other.meshes:
                self.meshes[t] = other.meshes[t]

    def take_stored(self, report: "Report", tensor_id: int, rank: int) -> None:
        """Carry the report's stored value of ``tensor_id`` from here on: per device when it is stored as several
        device shards, else whole."""
        if len(report.tensor_info(tensor_id, rank).shards) > 1:
            self.pop(tensor_id, None)
            self.meshes[tensor_id] = {tuple(c): a for c, a in report.shards(tensor_id, rank)}
        else:
            self.meshes.pop(tensor_id, None)
            self[tensor_id] = report.tensor(tensor_id, rank)


def runs_per_device(report: "Report", graph: TensorGraph, op_id: int, rank: int, chain: ChainValues | None = None,
                    reads: "Reads | None" = None) -> bool:
    """Whether operation ``op_id`` runs device by device: it is a collective, or it reads a tensor stored as several
    device shards (in a ``chain``: a value the chain carries per device, or such a tensor no operation made).
    ``reads`` answers which tensors are stored and their metadata (default: the report, asked each time)."""
    known = references.lookup(graph.names.get(op_id, ""))
    if known is not None and known.per_device:
        return True
    reads = reads or Reads(report, rank)
    for t in dict.fromkeys(graph.inputs.get(op_id, [])):
        if chain is not None and t in chain.meshes:
            return True
        if (chain is None or (t not in chain and t not in graph.producer)) and reads.has(t) and \
                len(reads.info(t).shards) > 1:
            return True
    return False


def replay_per_device(
    report: "Report", graph: TensorGraph, op_id: int, arguments: list[references.Argument], policy: "Policy",
    rank: int, chain: ChainValues | None = None, in_place: frozenset[str] = frozenset(),
    keeper: "ReplayStore | None" = None, *, full: bool = True,
) -> list[ReplayRow]:
    """The rows of one operation run device by device (see the module's docstring): per output, ``compared`` with a
    verdict per device shard (:attr:`ReplayRow.devices`; the output passes when every device does), or why it was
    not compared. In isolation (no ``chain``) the inputs are the stored ones, per device when stored as several
    shards; in a chain they are the chain's values (per device, or whole and then the same on every device) and,
    for tensors no operation made, the stored ones, and ``chain`` then carries each output per device. An output
    that is also an input of an operation that is no collective is judged only for the families ``in_place`` names
    (as replay judges whole arrays: :data:`.replay.IN_PLACE_FAMILIES`). ``keeper`` stores each compared output's
    per-device references (in float32) and result. Without ``full`` each device's verdict and a passing output's
    row hold only the metrics verdicts read (:func:`.replay_rows.judged`)."""
    name = graph.names.get(op_id, "")
    ref = references.lookup(name)
    outputs = graph.outputs.get(op_id, {})
    if ref is None:
        return [ReplayRow(op_id, name, "no_reference", detail=f"no reference for {name or 'an unnamed operation'}")]
    if not outputs:
        return [ReplayRow(op_id, name, "missing_inputs", detail="the report lists no output for it")]
    first = outputs[min(outputs)]
    distinct = list(dict.fromkeys(graph.inputs.get(op_id, [])))
    aliased = sorted(set(outputs.values()) & set(distinct))
    if aliased and not ref.per_device and ref.family not in in_place:
        return [ReplayRow(op_id, name, "in_place", output_tensor_id=aliased[0], detail=(
            f"tensor {aliased[0]} is both an input and an output of this in-place call, and the report keeps one value "
            "for it: nothing to compare its result with"))]
    carried = chain if chain is not None else ChainValues()  # in isolation the chain carries nothing
    broken = [t for t in distinct if chain is not None and t in graph.producer and not chain.covers(t)]
    if broken:
        return [ReplayRow(op_id, name, "missing_inputs", output_tensor_id=first, detail="the chain does not cover the "
                          "operations that made " + ", ".join(f"tensor {t} (operation {graph.producer[t][0]})"
                                                              for t in broken))]
    absent = [t for t in distinct if not carried.covers(t) and not report.has_tensor(t, rank)]
    if absent:
        return [ReplayRow(op_id, name, "missing_inputs", output_tensor_id=first,
                          detail="tensors not stored: " + ", ".join(map(str, absent)))]
    try:
        values = {t: _device_values(report, t, rank, carried) for t in distinct}
        expected, slack = _per_device_references(report, graph, op_id, ref, values, arguments, rank)
    except references.UnsupportedArguments as exc:
        names = () if isinstance(exc, references.Oversized) else exc.names
        return [ReplayRow(op_id, name, "unsupported_arguments", output_tensor_id=first, unsupported=names,
                          detail=str(exc))]
    except (ValueError, IndexError, ReportDBError) as exc:
        return [ReplayRow(op_id, name, "unsupported_arguments", output_tensor_id=first, unsupported=("inputs",),
                          detail=f"the stored inputs do not fit {name}: {exc}")]
    rows = []
    for index, out_id in sorted(outputs.items()):
        if index >= len(expected):
            rows.append(ReplayRow(op_id, name, "no_reference", output_tensor_id=out_id, output_index=index,
                                  detail=f"its reference gives {len(expected)} output(s), none for output {index}"))
            continue
        if not report.has_tensor(out_id, rank):
            carried.meshes[out_id] = expected[index]
            rows.append(ReplayRow(op_id, name, "missing_inputs", output_tensor_id=out_id, output_index=index,
                                  detail=f"tensors not stored: {out_id}"))
            continue
        device = {tuple(c): a for c, a in report.shards(out_id, rank)}
        if chain is not None:  # undefined elements travel as the device's own
            chain.meshes[out_id] = {c: references.completed(name, e, device[c]) if c in device else e
                                    for c, e in expected[index].items()}
        row = _judged_devices(graph, op_id, index, out_id, device, expected[index], slack if index == 0 else None,
                              policy, report, rank, accumulated=chain is not None, full=full or keeper is not None)
        if keeper is not None and row.status == "compared":
            keeper.keep(row, [(c, _float32(e)) for c, e in sorted(expected[index].items())], policy,
                        report.tensor_info(out_id, rank).spec.distribution)
        rows.append(row)
    return rows


def _float32(array: np.ndarray) -> np.ndarray:
    """A reference as stored: float64 (a collective's exact sum) rounded to float32, any other dtype kept."""
    return array.astype(np.float32) if array.dtype == np.float64 else array


def _device_values(report: "Report", tensor_id: int, rank: int, chain: ChainValues) -> dict[Coordinate, np.ndarray]:
    """An input's value on each device: the chain's (per device, or whole under the empty coordinate ``()``, the
    same on every device), else the stored one (per device when stored as several shards)."""
    if tensor_id in chain.meshes:
        return chain.meshes[tensor_id]
    if tensor_id in chain:
        return {(): chain[tensor_id]}
    shards = report.shards(tensor_id, rank)
    return {tuple(c): a for c, a in shards} if len(shards) > 1 else {(): shards[0][1]}


def _per_device_references(
    report: "Report", graph: TensorGraph, op_id: int, ref: references.Reference,
    values: dict[int, dict[Coordinate, np.ndarray]], arguments: list[references.Argument], rank: int,
) -> tuple[list[dict[Coordinate, np.ndarray]], dict[Coordinate, np.ndarray] | None]:
    """Each output's reference on each device, and a collective's summation slack (None for any other operation):
    a collective's function takes every device's shards at once; any other operation runs once per device on that
    device's inputs. Devices whose per-device inputs disagree on the mesh are refused."""
    name, input_ids = graph.names[op_id], graph.inputs[op_id]
    meshes = {frozenset(v) for v in values.values() if () not in v}
    if len(meshes) > 1:
        raise references.UnsupportedArguments(["inputs"], "its inputs are on different devices")
    if ref.per_device:
        bound = references.bind(ref, [(t, MeshTensor(values[t])) for t in input_ids], arguments)
        with np.errstate(all="ignore"):
            result: MeshResult = ref.function(**bound)
        return [result.expected], result.slack
    devices = sorted(next(iter(meshes), frozenset()))
    dtypes = {t: judged_dtype(report, graph, t, rank) for t in values}
    stored = [_largest_shard(report, t, rank) for t in graph.outputs[op_id].values() if report.has_tensor(t, rank)]
    expected: list[dict[Coordinate, np.ndarray]] = []
    for device in devices:
        inputs = [(t, values[t][device] if device in values[t] else values[t][()]) for t in input_ids]
        limit = references.justified_elements([a.size for _, a in inputs] + stored)
        with np.errstate(all="ignore"):
            outputs = references.compute_outputs(name, inputs, arguments, dtypes, max_elements=limit)
        for index, output in enumerate(outputs):
            if index == len(expected):
                expected.append({})
            expected[index][device] = output
    return expected, None


def _largest_shard(report: "Report", tensor_id: int, rank: int) -> int:
    """Elements of a stored tensor's largest device shard (what one device's reference may justify building)."""
    return max((int(np.prod(s.shape)) for s in report.tensor_info(tensor_id, rank).shards), default=0)


def _judged_devices(
    graph: TensorGraph, op_id: int, index: int, out_id: int, device: dict[Coordinate, np.ndarray],
    expected: dict[Coordinate, np.ndarray], slack: dict[Coordinate, np.ndarray] | None, policy: "Policy",
    report: "Report", rank: int, *, accumulated: bool, full: bool = True,
) -> ReplayRow:
    """Output ``index`` of an operation judged device by device: each ``device`` shard of stored output ``out_id``
    against its reference (within the summation ``slack`` where given, and only where the operation defines its
    output); ``accumulated``: the references were computed from a chain's values (:meth:`Policy.judge`). The row's
    metrics are those of every device's shards together, the full vector when ``full`` or a device fails; each
    device's verdict reads only what it needs."""
    name = graph.names.get(op_id, "")
    if set(device) != set(expected) or any(np.shape(device[c]) != np.shape(expected[c]) for c in device):
        return ReplayRow(op_id, name, "unsupported_arguments", output_tensor_id=out_id, output_index=index,
                         unsupported=("inputs",), detail=f"the output's device shards ({_shapes(device)}) are not "
                         f"those its reference gives ({_shapes(expected)})")
    dtype = canonical_dtype(judged_dtype(report, graph, out_id, rank))
    verdicts, gots, wants = [], [], []
    for coord in sorted(expected):
        got, want = references.defined_part(name, device[coord]), references.defined_part(name, expected[coord])
        if slack is not None:  # the value nearest the device's that some order of the sum gives
            room = references.defined_part(name, slack[coord])
            want = np.clip(np.asarray(got, dtype=np.float64), want - room, want + room)
        metrics, verdict = judged(policy, name, dtype, got, want, full=False, accumulated=accumulated)
        verdicts.append(DeviceVerdict(coord, bool(verdict.passed), tuple(verdict.failed), metrics.max_abs_error))
        gots.append(np.asarray(got).ravel())
        wants.append(np.asarray(want, dtype=np.float64).ravel())
    bad = [v for v in verdicts if not v.passed]
    metrics, _ = judged(policy, name, dtype, np.concatenate(gots), np.concatenate(wants), full=full or bool(bad),
                        accumulated=accumulated)
    failed = tuple(sorted({f for v in bad for f in v.failed}))
    detail = ("fails on device " + ", ".join(",".join(map(str, v.coordinate)) for v in bad)) if bad else ""
    return ReplayRow(op_id, name, "compared", passed=not bad, output_tensor_id=out_id, output_index=index,
                     dtype=dtype, failed=failed, metrics=metrics, detail=detail, devices=tuple(verdicts))


def _shapes(shards: "dict[Coordinate, Any]") -> str:
    """The shards' count and first shape, for a message."""
    first = next(iter(shards.values()), None)
    return f"{len(shards)} shards" + ("" if first is None else f" of shape {list(first.shape)}")
