"""Replay of collectives from the per-device shards a report stores, judged device by device on a 2x4 mesh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import reportdb
from reportdb.analysis.replay_rows import judged
from reportdb.spec import Distribution, LoadedTensor, Placement, TensorSpec

BF16 = ml_dtypes.bfloat16
ROOT = Path(__file__).resolve().parents[1]
MESH = [(r, c) for r in range(2) for c in range(4)]


def summary(tensor_id: int) -> str:
    """A tensor argument as ttnn 0.81's graph report records it."""
    return f"ttnn.Tensor(shape=Shape([1, 1, 32, 32]), dtype=DataType.BFLOAT16, tensor_id={tensor_id})"


def mesh(shards: dict[tuple[int, int], np.ndarray]) -> LoadedTensor:
    """A tensor of one shard per device of the 2x4 mesh."""
    spec = TensorSpec(ttnn_dtype="BFLOAT16", layout="TILE",
                      distribution=Distribution((2, 4), (Placement("shard", 2), Placement("shard", 3))))
    return LoadedTensor([(c, shards[c]) for c in MESH], spec, {})


def ring_sum(parts: list[np.ndarray], start: int) -> np.ndarray:
    """A sum as a ring adds it: from device ``start`` on, each hop's partial sum rounded to bfloat16."""
    order = parts[start:] + parts[:start]
    total = order[0].astype(np.float32)
    for part in order[1:]:
        total = (total + part.astype(np.float32)).astype(BF16).astype(np.float32)
    return total.astype(BF16)


def make_mesh_report(path: Path) -> np.ndarray:
    """Six collectives on a 2x4 mesh, device outputs as the devices would give them; in the all_gather (op 1),
    device (1, 2) kept a stale copy of device (1, 0)'s shard. Returns the all_reduce's cancelling inputs' sum."""
    rng = np.random.default_rng(4)
    x = {c: rng.standard_normal((1, 1, 32, 32)).astype(BF16) for c in MESH}
    gathered = {c: np.concatenate([x[(c[0], k)] for k in range(4)], axis=3) for c in MESH}
    stale = {c: a.copy() for c, a in gathered.items()}
    stale[(1, 2)][..., :32] = rng.standard_normal((1, 1, 32, 32)).astype(BF16)
    y = {c: rng.standard_normal((1, 1, 32, 64)).astype(BF16) for c in MESH}
    scattered = {c: ring_sum([y[(0, c[1])], y[(1, c[1])]], c[0])[..., 32 * c[0]: 32 * (c[0] + 1)] for c in MESH}
    z = {c: rng.standard_normal((1, 1, 32, 32)).astype(BF16) for c in MESH[:-1]}
    exact = sum(a.astype(np.float64) for a in z.values())
    z[MESH[-1]] = (-exact + rng.standard_normal((1, 1, 32, 32)) * 1e-3).astype(BF16)  # a sum that nearly cancels
    parts = [z[c] for c in MESH]
    reduced = {c: ring_sum(parts, i) for i, c in enumerate(MESH)}  # each device adds in its own ring order
    quarters = {c: gathered[c][..., 32 * c[1]: 32 * (c[1] + 1)] for c in MESH}
    with reportdb.Writer(path) as w:
        for tensor_id, shards in ((1, x), (2, stale), (3, y), (4, scattered), (5, z), (6, reduced), (7, gathered),
                                  (8, gathered), (9, quarters), (10, scattered)):
            w.put_tensor(tensor_id, mesh(shards))
        w.add_operation(1, "ttnn.all_gather", inputs=[1], outputs=[2],
                        arguments={"0": summary(1), "dim": "3", "cluster_axis": "1", "num_links": "1",
                                   "topology": "Topology.Linear"})
        w.add_operation(2, "ttnn.reduce_scatter", inputs=[3], outputs=[4],
                        arguments={"0": summary(3), "1": "3", "cluster_axis": "0"})
        w.add_operation(3, "ttnn.all_reduce", inputs=[5], outputs=[6], arguments={"0": summary(5)})
        w.add_operation(4, "ttnn.experimental.all_gather_async", inputs=[1], outputs=[7],
                        arguments={"0": summary(1), "dim": "3", "cluster_axis": "1",
                                   "multi_device_global_semaphore": "[<ttnn.GlobalSemaphore object>]",
                                   "num_links": "2", "topology": "Topology.Ring", "subdevice_id": "None"})
        w.add_operation(5, "ttnn.mesh_partition", inputs=[8], outputs=[9],
                        arguments={"0": summary(8), "dim": "3", "cluster_axis": "1"})
        w.add_operation(6, "ttnn.experimental.reduce_scatter_minimal_async", inputs=[3], outputs=[10],
                        arguments={"0": summary(3), "persistent_output_buffers": "None", "dim": "3",
                                   "multi_device_global_semaphore": "[<ttnn.GlobalSemaphore object>]",
                                   "barrier_semaphore": "<ttnn.GlobalSemaphore object>", "cluster_axis": "0"})
    return exact


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("collectives") / "mesh.sqlite"
    make_mesh_report(path)
    return path


def test_one_stale_device_fails_that_device(report: Path) -> None:
    result = reportdb.replay(report)
    rows = {r.operation_id: r for r in result.rows}
    assert [(r.operation_id, r.status, r.passed) for r in result.rows] == [
        (1, "compared", False), (2, "compared", True), (3, "compared", True), (4, "compared", True),
        (5, "compared", True), (6, "compared", True)]
    gather = rows[1]
    assert [d.coordinate for d in gather.devices] == MESH
    assert [d.coordinate for d in gather.devices if not d.passed] == [(1, 2)]
    assert gather.detail == "fails on device 1,2" and gather.failed
    assert all(len(r.devices) == 8 and all(d.passed for d in r.devices) for r in result.rows[1:])


def test_the_ring_order_of_a_sum_is_allowed(report: Path, tmp_path: Path) -> None:
    """The all_reduce's inputs nearly cancel, so the ring's bfloat16 partial sums are far from the exact sum in
    relative terms: the exact reference alone fails every device, the summation-order slack passes them."""
    exact = make_mesh_report(tmp_path / "again.sqlite")
    policy = reportdb.Policy.default()
    with reportdb.open(report) as rep:
        for coordinate, device in rep.shards(6):
            _, verdict = judged(policy, "ttnn.all_reduce", "BFLOAT16", device, exact)
            assert not verdict.passed, coordinate
    row = reportdb.replay(report, ops="ttnn.all_reduce").rows[0]
    assert row.passed and row.metrics is not None and row.metrics.max_abs_error == 0


def test_collectives_in_a_chain_and_the_catalogue(report: Path) -> None:
    chained = reportdb.replay(report, chain=True)
    assert {r.status for r in chained.rows} == {"missing_inputs"} and "isolation" in chained.rows[0].detail
    entries = {e["name"]: e for e in reportdb.analysis.references.catalogue()}
    assert entries["ttnn.experimental.all_gather_async"]["per_device"] is True
    assert "multi_device_global_semaphore" in entries["ttnn.experimental.all_gather_async"]["ignored"]


def test_an_axis_the_mesh_lacks_and_a_single_array_are_named(tmp_path: Path) -> None:
    with reportdb.Writer(tmp_path / "bad.sqlite") as w:
        x = {c: np.ones((1, 1, 32, 32), BF16) for c in MESH}
        w.put_tensor(1, mesh(x))
        w.put_tensor(2, mesh(x))
        w.put_tensor(3, np.ones((1, 1, 32, 32), BF16))
        w.add_operation(1, "ttnn.all_reduce", inputs=[1], outputs=[2], arguments={"0": summary(1), "cluster_axis": "2"})
        w.add_operation(2, "ttnn.all_gather", inputs=[3], outputs=[3], arguments={"0": summary(3), "dim": "3"})
    axis, single = reportdb.replay(tmp_path / "bad.sqlite").rows
    assert (axis.status, axis.unsupported) == ("unsupported_arguments", ("cluster_axis",))
    assert (single.status, single.unsupported) == ("unsupported_arguments", ("input_tensor",))
    assert "one array" in single.detail


@pytest.mark.process
def test_cli_names_the_failing_device(report: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-m", "reportdb", "replay", str(report)], capture_output=True, text=True,
                         env=env, timeout=300)
    assert run.returncode == 1, run.stderr
    assert "(device 1,2)" in run.stdout.splitlines()[1]
    data = json.loads(subprocess.run([sys.executable, "-m", "reportdb", "replay", str(report), "--json"],
                                     capture_output=True, text=True, env=env, timeout=300).stdout)
    assert [d["coordinate"] for d in data["rows"][0]["devices"] if not d["passed"]] == [[1, 2]]
