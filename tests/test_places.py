"""The worst tile of a verdict on a stored tensor named in the hardware's terms (``analysis/places.py``): the core of
its sharded memory config and the mesh device of its shard, in golden comparisons, run vs run and locate's
per-device verdicts. Reports are written with ``reportdb.Writer`` and real specs (TILE bfloat16, sharded memory
configs, mesh distributions); the expected cores come from tt-metal's placement rules written out here by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import reportdb
from reportdb import Distribution, Placement, TensorSpec
from reportdb.analysis.places import Place, placed_notes, tile_place
from reportdb.spec import LoadedTensor

RNG = np.random.default_rng(11)


def _silu(x: np.ndarray) -> np.ndarray:
    return (x / (1 + np.exp(-x))).astype(np.float32)


def _height_sharded(grid: list[list[list[int]]], shard: list[int], orientation: str) -> dict[str, Any]:
    return {"memory_layout": "HEIGHT_SHARDED", "buffer_type": "L1", "shard_spec": {
        "grid": grid, "shape": shard, "orientation": orientation, "mode": "PHYSICAL"}, "nd_shard_spec": None}


def _cores(grid: tuple[int, int], row_major: bool) -> list[tuple[int, int]]:
    """The cores of a ``(columns, rows)`` grid from (0, 0) in shard order: x fastest row major, y fastest else."""
    nx, ny = grid
    if row_major:
        return [(x, y) for y in range(ny) for x in range(nx)]
    return [(x, y) for x in range(nx) for y in range(ny)]


def _golden_report(path: Path, device: Any, golden: np.ndarray, **meta: Any) -> Path:
    """Tensor 1 (``device``: an array or a LoadedTensor) output by ``ttnn.silu`` with its local golden, tensor 2."""
    with reportdb.Writer(path) as w:
        w.put_tensor(0, golden.astype(ml_dtypes.bfloat16), ttnn_dtype="BFLOAT16")
        w.put_tensor(1, device, ttnn_dtype="BFLOAT16", layout="TILE", **meta)
        w.put_tensor(2, golden)
        w.add_operation(1, "ttnn.silu", inputs=[0], outputs=[1])
        w.add_rows("local_tensor_comparison_records", [{"tensor_id": 1, "golden_tensor_id": 2, "desired_pcc": 0.99}])
    return path


@pytest.mark.parametrize("orientation", ["ROW_MAJOR", "COL_MAJOR"])
def test_one_cores_shard_wrong_fails_with_the_core_named(tmp_path: Path, orientation: str) -> None:
    """A [1, 1, 512, 128] bfloat16 output height sharded 64 rows a core on a 4x2 grid; core 3's rows x1.5: the golden
    verdict fails tile_sqnr_db and the note names core 3, (3, 0) row major and (1, 1) column major; the same output
    correct passes with no core named; run vs run names it too."""
    golden = _silu(RNG.standard_normal((1, 1, 512, 128)).astype(np.float32))
    device = golden.astype(ml_dtypes.bfloat16).astype(np.float32)
    faulty = device.copy()
    faulty[..., 3 * 64 : 4 * 64, :] *= 1.5
    mc = _height_sharded([[[0, 0], [3, 1]]], [64, 128], orientation)
    core3 = _cores((4, 2), orientation == "ROW_MAJOR")[3]
    assert core3 == ((3, 0) if orientation == "ROW_MAJOR" else (1, 1))
    path = _golden_report(tmp_path / "faulty", faulty.astype(ml_dtypes.bfloat16), golden, memory_config=mc)
    (record,) = [r for r in reportdb.compare_golden(path, store=False) if r.kind == "local"]
    assert record.verdict == "fail" and "tile_sqnr_db" in record.failed
    assert record.metrics is not None and record.metrics.worst_tile is not None
    lead, row, col = record.metrics.worst_tile
    assert lead == 0 and 6 <= row < 8  # tile rows 6, 7: core 3's 64 rows
    note = next(n for n in record.notes if n.startswith("tile_sqnr_db"))
    assert f"32x32 tile {(lead, row, col)} on core {core3}:" in note, record.notes

    clean = _golden_report(tmp_path / "clean", device.astype(ml_dtypes.bfloat16), golden, memory_config=mc)
    (ok,) = [r for r in reportdb.compare_golden(clean, store=False) if r.kind == "local"]
    assert ok.verdict == "pass" and not any("core" in n for n in ok.notes)

    runs = reportdb.compare_runs(clean, path)  # B (the faulty run) measured against A
    (row_,) = [r for r in runs.rows if r.tensor_a == 1]
    assert row_.verdict == "diverges" and "tile_sqnr_db" in row_.failed
    assert any(f"on core {core3}:" in n for n in row_.notes), row_.notes


@pytest.mark.parametrize("orientation", ["ROW_MAJOR", "COL_MAJOR"])
def test_every_tile_of_a_block_sharded_tensor_on_its_core(tmp_path: Path, orientation: str) -> None:
    """tile_place against tt-metal's block sharding by hand: a [2, 96, 256] tensor (rows of the two matrices stacked:
    192 physical rows) in 64x64 shards on a 4x3 grid, shard (i, j) on grid position (j, i) row major."""
    values = RNG.standard_normal((2, 96, 256)).astype(ml_dtypes.bfloat16)
    mc = {"memory_layout": "BLOCK_SHARDED", "buffer_type": "L1", "nd_shard_spec": None,
          "shard_spec": {"grid": [[[0, 0], [3, 2]]], "shape": [64, 64], "orientation": orientation}}
    with reportdb.Writer(tmp_path / "r") as w:
        w.put_tensor(1, values, ttnn_dtype="BFLOAT16", layout="TILE", memory_config=mc)
        w.put_tensor(2, values, ttnn_dtype="BFLOAT16", layout="TILE")  # interleaved: no core
    cores = _cores((4, 3), orientation == "ROW_MAJOR")
    with reportdb.open(tmp_path / "r") as report:
        for lead in range(2):
            for row in range(3):
                for col in range(8):
                    place = tile_place(report, 1, (lead, row, col))
                    physical_row = lead * 96 + row * 32
                    shard = (physical_row // 64) * 4 + (col * 32) // 64
                    assert place == Place((lead, row, col), (lead, row * 32, col * 32), cores[shard], None)
        assert tile_place(report, 2, (1, 2, 7)).describe() == ""
        assert placed_notes(report, 1, (0, 2, 3), ["tile_sqnr_db: 32x32 tile (0, 2, 3): 1.0 dB < 26 dB"]) == (
            f"tile_sqnr_db: 32x32 tile (0, 2, 3) on core {cores[5]}: 1.0 dB < 26 dB",)
        with pytest.raises(ValueError, match="outside"):
            tile_place(report, 1, (2, 0, 0))


def test_one_devices_shard_stale_fails_with_the_device_named(tmp_path: Path) -> None:
    """A [1, 1, 256, 512] bfloat16 output on a 2x4 mesh (rows over mesh rows, columns over mesh columns), each
    device's [128, 128] shard height sharded 32 rows a core over 4 cores; device (1, 2) holds last run's values (the
    op on another input). locate's verdict for that device fails tile_sqnr_db (its tiles are judged), the others
    pass; the golden verdict's note names the device and the core of the worst tile."""
    x_now, x_last = RNG.standard_normal((2, 1, 1, 256, 512)).astype(np.float32)
    golden, last = _silu(x_now), _silu(x_last)
    shards = []
    for r in range(2):
        for c in range(4):
            source = last if (r, c) == (1, 2) else golden
            part = source[..., r * 128 : (r + 1) * 128, c * 128 : (c + 1) * 128]
            shards.append(((r, c), part.astype(ml_dtypes.bfloat16)))
    dist = Distribution((2, 4), (Placement("shard", 2), Placement("shard", 3)))
    mc = _height_sharded([[[0, 0], [3, 0]]], [32, 128], "ROW_MAJOR")
    loaded = LoadedTensor(shards=shards, spec=TensorSpec(distribution=dist), source={})
    path = _golden_report(tmp_path / "r", loaded, golden, memory_config=mc)

    located = reportdb.locate(path, 1, golden="local")
    by_device = {d.coordinate: d for d in located.devices}
    stale = by_device.pop((1, 2))
    assert not stale.passed and "tile_sqnr_db" in stale.failed and stale.worst_tile is not None
    _, row, _ = stale.worst_tile
    assert any(f"tile {stale.worst_tile} on core {(row, 0)} of device (1, 2):" in n for n in stale.notes), stale.notes
    assert all(d.passed for d in by_device.values()), [(d.coordinate, d.failed) for d in by_device.values()]

    (record,) = [r for r in reportdb.compare_golden(path, store=False) if r.kind == "local"]
    assert record.verdict == "fail" and "tile_sqnr_db" in record.failed
    assert record.metrics is not None and record.metrics.worst_tile is not None
    lead, row, col = record.metrics.worst_tile
    assert (row // 4, col // 4) == (1, 2)  # the stale device's tiles
    note = next(n for n in record.notes if n.startswith("tile_sqnr_db"))
    assert f"tile {(lead, row, col)} on core {(row % 4, 0)} of device (1, 2):" in note, record.notes


def test_replicated_mesh_axis_names_the_replica_read(tmp_path: Path) -> None:
    """On a 2x2 mesh replicated over rows and sharded over columns, an assembled read takes mesh row 0: a tile is
    placed on row 0's device of its column, and a single-device, interleaved tensor's tiles are placed nowhere."""
    golden = RNG.standard_normal((64, 128)).astype(np.float32)
    shards = [((r, c), golden[:, c * 64 : (c + 1) * 64].astype(ml_dtypes.bfloat16)) for r in range(2) for c in range(2)]
    dist = Distribution((2, 2), (Placement("replicate"), Placement("shard", 1)))
    with reportdb.Writer(tmp_path / "r") as w:
        w.put_tensor(1, LoadedTensor(shards=shards, spec=TensorSpec(distribution=dist), source={}),
                     ttnn_dtype="BFLOAT16", layout="TILE")
        w.put_tensor(2, golden)
    with reportdb.open(tmp_path / "r") as report:
        assert tile_place(report, 1, (0, 1, 3)) == Place((0, 1, 3), (32, 96), None, (0, 1))
        assert tile_place(report, 1, (0, 0, 1)).describe() == "on device (0, 0)"
        assert tile_place(report, 2, (0, 1, 3)) == Place((0, 1, 3), (32, 96), None, None)


@pytest.mark.process
def test_the_locate_command_prints_the_failing_devices_notes(tmp_path: Path) -> None:
    """``reportdb locate`` prints what a failing device's verdict saw under its table: the tile, core and device."""
    import subprocess
    import sys

    x_now, x_last = RNG.standard_normal((2, 1, 1, 64, 128)).astype(np.float32)
    golden, last = _silu(x_now), _silu(x_last)
    shards = [((0, c), (last if c == 1 else golden)[..., :, c * 64 : (c + 1) * 64].astype(ml_dtypes.bfloat16))
              for c in range(2)]
    dist = Distribution((1, 2), (Placement("replicate"), Placement("shard", 3)))
    loaded = LoadedTensor(shards=shards, spec=TensorSpec(distribution=dist), source={})
    path = _golden_report(tmp_path / "r", loaded, golden)
    out = subprocess.run([sys.executable, "-m", "reportdb", "locate", str(path), "1", "--golden"], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    assert any(line.startswith("  device 0,1: tile_sqnr_db:") and "on device (0, 1)" in line
               for line in out.stdout.splitlines()), out.stdout
