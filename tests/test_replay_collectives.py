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
from reportdb.analysis.replay_rows import ReplayRow, judged
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
    chained = reportdb.replay(report, chain=True)  # each collective on stored inputs: the chain is isolation here
    assert [(r.status, r.passed) for r in chained.rows] == [("compared", False)] + [("compared", True)] * 5
    assert [d.coordinate for d in chained.rows[0].devices if not d.passed] == [(1, 2)]
    entries = {e["name"]: e for e in reportdb.analysis.references.catalogue()}
    assert entries["ttnn.experimental.all_gather_async"]["per_device"] is True
    assert "multi_device_global_semaphore" in entries["ttnn.experimental.all_gather_async"]["ignored"]


def silu(x: np.ndarray) -> np.ndarray:
    """silu in float32, as a device output (bfloat16)."""
    v = x.astype(np.float32)
    return (v / (1 + np.exp(-v))).astype(BF16)


def make_mesh_chain(path: Path, fault: str) -> None:
    """relu -> all_gather (along the mesh's rows, dim 3) -> silu -> all_reduce (down its columns) on a 2x4 mesh,
    every device computing on the values it holds. ``fault`` plants one error: ``"relu"``, device (0, 1)'s relu
    output negated (an error made before the collective, which the gather spreads along row 0), or ``"stale"``,
    device (1, 2)'s gathered output holding a stale copy of another device's shard."""
    rng = np.random.default_rng(9)
    x = {c: rng.standard_normal((1, 1, 32, 32)).astype(BF16) for c in MESH}
    relu = {c: np.maximum(a, 0).astype(BF16) for c, a in x.items()}
    if fault == "relu":
        relu[(0, 1)] = (-relu[(0, 1)].astype(np.float32) - 0.5).astype(BF16)
    gathered = {c: np.concatenate([relu[(c[0], k)] for k in range(4)], axis=3) for c in MESH}
    if fault == "stale":
        gathered[(1, 2)] = gathered[(1, 2)].copy()
        gathered[(1, 2)][..., 64:96] = relu[(0, 2)]
    act = {c: silu(a) for c, a in gathered.items()}
    reduced = {c: ring_sum([act[(0, c[1])], act[(1, c[1])]], c[0]) for c in MESH}
    with reportdb.Writer(path) as w:
        for tensor_id, shards in ((1, x), (2, relu), (3, gathered), (4, act), (5, reduced)):
            w.put_tensor(tensor_id, mesh(shards))
        w.add_operation(1, "ttnn.relu", inputs=[1], outputs=[2], arguments={"0": summary(1)})
        w.add_operation(2, "ttnn.all_gather", inputs=[2], outputs=[3],
                        arguments={"0": summary(2), "dim": "3", "cluster_axis": "1", "topology": "Topology.Linear"})
        w.add_operation(3, "ttnn.silu", inputs=[3], outputs=[4], arguments={"0": summary(3)})
        w.add_operation(4, "ttnn.all_reduce", inputs=[4], outputs=[5], arguments={"0": summary(4), "cluster_axis": "0"})


def failing(row: ReplayRow) -> list[tuple[int, ...]]:
    """The devices a row fails on."""
    return [d.coordinate for d in row.devices if not d.passed]


ROW0 = [(0, c) for c in range(4)]


def test_a_fault_before_a_collective_is_seen_after_it_in_a_chain(tmp_path: Path) -> None:
    make_mesh_chain(tmp_path / "relu.sqlite", "relu")
    isolated = reportdb.replay(tmp_path / "relu.sqlite")  # each on what its devices had, device by device
    assert [failing(r) for r in isolated.rows] == [[(0, 1)], [], [], []]
    chained = reportdb.replay(tmp_path / "relu.sqlite", chain=True).rows
    assert [(r.status, r.passed) for r in chained] == [("compared", False)] * 4
    assert all(len(r.devices) == 8 for r in chained)
    # the gather spreads device (0, 1)'s error along row 0, and the reduction down every column of the mesh
    assert [failing(r) for r in chained] == [[(0, 1)], ROW0, ROW0, MESH]
    assert chained[1].detail == "fails on device 0,0, 0,1, 0,2, 0,3"
    # past the culprit: the chain takes each device's relu output, and every later device agrees with it again
    past = reportdb.replay(tmp_path / "relu.sqlite", substitute_failing=True).rows
    assert [(r.substitute, r.isolated, r.chained, r.substituted) for r in past] == [
        (True, False, False, False), (False, True, False, True), (False, True, False, True),
        (False, True, False, True)]


def test_a_stale_device_shard_is_named_in_a_chain_and_followed(tmp_path: Path) -> None:
    make_mesh_chain(tmp_path / "stale.sqlite", "stale")
    chained = reportdb.replay(tmp_path / "stale.sqlite", chain=True).rows
    assert [failing(r) for r in chained] == [[], [(1, 2)], [(1, 2)], [(0, 2), (1, 2)]]
    assert chained[1].detail == "fails on device 1,2"
    alone = reportdb.replay(tmp_path / "stale.sqlite").rows
    assert [r.passed for r in alone] == [True, False, True, True]  # in isolation, only the gather itself


def make_distributed_norm(path: Path, fault: bool) -> None:
    """A distributed rms_norm on a 2x4 mesh as tt_transformers runs it: each device's statistics of its quarter of
    the hidden width (rms_norm_pre_all_gather: sum(x^2) in column 0, whatever its memory held in columns 1-31),
    gathered along the mesh's rows, then each device's quarter normalized by the whole row's sum and scaled by one
    weight stored once for every device. With ``fault``, device (1, 3)'s statistic of row 5 is 20x too large."""
    rng = np.random.default_rng(13)
    x = {c: rng.standard_normal((1, 1, 32, 32)).astype(BF16) for c in MESH}
    stats = {}
    for c, a in x.items():
        s = rng.standard_normal((1, 1, 32, 32))  # not defined: no error of the device
        s[..., 0] = (a.astype(np.float64) ** 2).sum(-1)
        stats[c] = s.astype(BF16)
    if fault:
        stats[(1, 3)][0, 0, 5, 0] *= 20
    gathered = {c: np.concatenate([stats[(c[0], k)] for k in range(4)], axis=3) for c in MESH}
    weight = rng.standard_normal((1, 1, 1, 32)).astype(BF16)
    normed = {c: (x[c].astype(np.float32) / np.sqrt(gathered[c][..., ::32].astype(np.float32).sum(-1, keepdims=True)
                                                    / 128 + 1e-5) * weight.astype(np.float32)).astype(BF16)
              for c in MESH}
    with reportdb.Writer(path) as w:
        for tensor_id, shards in ((1, x), (2, stats), (3, gathered), (4, normed)):
            w.put_tensor(tensor_id, mesh(shards))
        w.put_tensor(5, weight, ttnn_dtype="BFLOAT16", layout="TILE")
        w.add_operation(1, "ttnn.rms_norm_pre_all_gather", inputs=[1], outputs=[2],
                        arguments={"0": summary(1), "dtype": "DataType.BFLOAT16"})
        w.add_operation(2, "ttnn.experimental.all_gather_async", inputs=[2], outputs=[3],
                        arguments={"0": summary(2), "dim": "3", "cluster_axis": "1", "num_links": "1"})
        w.add_operation(3, "ttnn.rms_norm_post_all_gather", inputs=[1, 3, 5], outputs=[4],
                        arguments={"0": summary(1), "1": summary(3), "epsilon": "1e-05", "weight": summary(5)})


def test_a_distributed_norm_in_a_chain_judges_only_defined_statistics(tmp_path: Path) -> None:
    make_distributed_norm(tmp_path / "norm.sqlite", fault=False)
    for chain in (False, True):  # each device's statistics of its own quarter, its post-gather norm of its own
        rows = reportdb.replay(tmp_path / "norm.sqlite", chain=chain).rows
        # in the chain the undefined columns travel as the devices' own values: the gather of them is no error
        assert [(r.status, r.passed, len(r.devices)) for r in rows] == [("compared", True, 8)] * 3, chain
    make_distributed_norm(tmp_path / "fault.sqlite", fault=True)
    chained = reportdb.replay(tmp_path / "fault.sqlite", chain=True).rows
    row1 = [(1, c) for c in range(4)]
    assert [failing(r) for r in chained] == [[(1, 3)], row1, row1]
    assert [failing(r) for r in reportdb.replay(tmp_path / "fault.sqlite").rows] == [[(1, 3)], [], []]


def test_store_keeps_each_devices_reference_as_a_shard(tmp_path: Path) -> None:
    make_mesh_chain(tmp_path / "relu.sqlite", "relu")
    for chain, kind in ((False, "replay"), (True, "replay_chain")):
        rows = reportdb.replay(tmp_path / "relu.sqlite", store=True, chain=chain).rows
        with reportdb.open(tmp_path / "relu.sqlite") as rep, rep.connection() as conn:
            stored = conn.execute("SELECT tensor_id, golden_tensor_id, passed FROM rdb_comparison WHERE kind=? "
                                  "ORDER BY tensor_id", (kind,)).fetchall()
            assert [(t, bool(p)) for t, _, p in stored] == [(r.output_tensor_id, r.passed) for r in rows]
            relu = dict(rep.shards(stored[0][1]))
            assert sorted(relu) == MESH and np.array_equal(relu[(0, 1)], np.maximum(rep.tensor(1, device=(0, 1)), 0))
            assert rep.tensor(stored[0][1]).shape == (1, 1, 64, 128)  # laid out as the output's distribution says


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


def test_devices_are_judged_on_what_their_verdicts_read(report: Path) -> None:
    """Per-device rows judge as full_stats ones do: each device's verdict and failing list the same; a passing row
    holds the light metrics, the row with the stale device the full vector; full_stats gives every row the full one."""
    light, full = reportdb.replay(report), reportdb.replay(report, full_stats=True)
    assert [(r.passed, r.failed, r.devices) for r in light.rows] == [(r.passed, r.failed, r.devices) for r in full.rows]
    for row in light.rows:
        assert row.metrics is not None and row.metrics.full_stats == (row.passed is False)
        assert (row.metrics.abs_error_p99 is None) == row.passed
    assert all(r.metrics is not None and r.metrics.full_stats for r in full.rows)
