"""Replay of a collective (all_gather, reduce_scatter, all_reduce, mesh_partition...): its reference computed from
the per-device input shards the report stores (:mod:`.references.collectives`), each device's output shard judged
against that device's reference, and the device named where one fails, so a stale shard fails its device, not the
operation as a blur.

A summed output is judged against the value nearest the device's within the summation-order slack of its reference
(the ring's order is not in the report; the slack's bound is in :mod:`.references.collectives`), so only an error
no order of the sum explains counts. A chain carries one array per tensor, not per-device shards: collectives are
replayed in isolation only, and not stored by ``--store``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import ReportDBError
from . import references
from .graph import TensorGraph, judged_dtype
from .policy import canonical_dtype
from .references.collectives import MeshResult, MeshTensor
from .replay_rows import DeviceVerdict, ReplayRow, judged

if TYPE_CHECKING:
    from ..report import Report
    from .policy import Policy


def replay_collective(
    report: "Report", graph: TensorGraph, op_id: int, arguments: list[references.Argument], policy: "Policy",
    rank: int, chained: bool = False,
) -> list[ReplayRow]:
    """The row of one collective: ``compared`` with a verdict per device shard (:attr:`ReplayRow.devices`; the
    operation passes when every device does), or why it was not compared."""
    name = graph.names.get(op_id, "")
    outputs = graph.outputs.get(op_id, {})
    if chained:
        return [ReplayRow(op_id, name, "missing_inputs", detail="a chain carries one array per tensor, not each "
                          "device's shard: collectives are replayed in isolation (without --chain)")]
    if not outputs:
        return [ReplayRow(op_id, name, "missing_inputs", detail="the report lists no output for it")]
    out_id = outputs[min(outputs)]
    distinct = list(dict.fromkeys(graph.inputs.get(op_id, [])))
    absent = [t for t in distinct + [out_id] if not report.has_tensor(t, rank)]
    if absent:
        return [ReplayRow(op_id, name, "missing_inputs", output_tensor_id=out_id,
                          detail="tensors not stored: " + ", ".join(map(str, absent)))]
    try:
        meshes = {t: MeshTensor({tuple(c): a for c, a in report.shards(t, rank)}) for t in distinct}
        ref = references.lookup(name)
        assert ref is not None
        with np.errstate(all="ignore"):
            result: MeshResult = ref.function(**references.bind(ref, [(t, meshes[t]) for t in graph.inputs[op_id]],
                                                                 arguments))
    except references.UnsupportedArguments as exc:
        return [ReplayRow(op_id, name, "unsupported_arguments", output_tensor_id=out_id, unsupported=exc.names,
                          detail=str(exc))]
    except (ValueError, IndexError, ReportDBError) as exc:
        return [ReplayRow(op_id, name, "unsupported_arguments", output_tensor_id=out_id, unsupported=("inputs",),
                          detail=f"the stored inputs do not fit {name}: {exc}")]
    device = {tuple(c): a for c, a in report.shards(out_id, rank)}
    if set(device) != set(result.expected) or any(device[c].shape != result.expected[c].shape for c in device):
        return [ReplayRow(op_id, name, "unsupported_arguments", output_tensor_id=out_id, unsupported=("inputs",),
                          detail=f"the output's device shards ({_shapes(device)}) are not those its reference gives "
                          f"({_shapes(result.expected)})")]
    dtype = canonical_dtype(judged_dtype(report, graph, out_id, rank))
    verdicts, gots, wants = [], [], []
    for coord in sorted(result.expected):
        got, want = device[coord], result.expected[coord]
        if result.slack is not None:  # the value nearest the device's that some order of the sum gives
            room = result.slack[coord]
            want = np.clip(np.asarray(got, dtype=np.float64), want - room, want + room)
        metrics, verdict = judged(policy, name, dtype, got, want)
        verdicts.append(DeviceVerdict(coord, bool(verdict.passed), tuple(verdict.failed), metrics.max_abs_error))
        gots.append(np.asarray(got).ravel())
        wants.append(np.asarray(want, dtype=np.float64).ravel())
    metrics, _ = judged(policy, name, dtype, np.concatenate(gots), np.concatenate(wants))
    bad = [v for v in verdicts if not v.passed]
    failed = tuple(sorted({f for v in bad for f in v.failed}))
    detail = ("fails on device " + ", ".join(",".join(map(str, v.coordinate)) for v in bad)) if bad else ""
    return [ReplayRow(op_id, name, "compared", passed=not bad, output_tensor_id=out_id, dtype=dtype, failed=failed,
                      metrics=metrics, detail=detail, devices=tuple(verdicts))]


def _shapes(shards: "dict[tuple[int, ...], np.ndarray]") -> str:
    """The shards' count and first shape, for a message."""
    first = next(iter(shards.values()), None)
    return f"{len(shards)} shards" + ("" if first is None else f" of shape {list(first.shape)}")
