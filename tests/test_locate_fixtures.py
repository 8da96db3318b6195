"""`reportdb locate` on the real fixtures' multi-device tensors and golden records, and the CLI in a subprocess."""

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
from conftest import FIXTURES, ROOT
from reportdb.analysis.policy import Policy

REPORT = FIXTURES / "ttnn-0.64.5-report-tensorbin" / "report"
MESH_TENSORS = [2, 10, 17, 23]  # the report's 1x2 mesh tensors (sharded along dim 0)


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("locate") / "r64"
    reportdb.migrate(REPORT, out)
    return out


def _scaled_copy(src: Path, dst: Path, tensor_id: int, device: tuple[int, ...], scale: float) -> dict[tuple[int, ...], np.ndarray]:
    """Store ``tensor_id`` of ``src`` in ``dst`` with one device's shard scaled, and its assembled golden as 1000."""
    with reportdb.open(src) as report:
        info = report.tensor_info(tensor_id)
        shards = report.shards(tensor_id)
        whole = report.tensor(tensor_id).astype(np.float32)
    changed = [(c, (a.astype(np.float32) * (scale if c == device else 1.0)).astype(a.dtype)) for c, a in shards]
    with reportdb.open(dst, "a") as out:
        out.put_tensor(tensor_id, shards=changed, distribution=info.spec.distribution, layout=info.spec.layout,
                       tile_shape=info.spec.tile_shape, ttnn_dtype=info.spec.ttnn_dtype)
        out.put_tensor(1000, whole)
    return dict(changed)


@pytest.mark.parametrize("tensor_id", MESH_TENSORS)
def test_fixture_mesh_tensors_one_device_off(migrated: Path, tmp_path: Path, tensor_id: int) -> None:
    changed = _scaled_copy(migrated, tmp_path / "c.sqlite", tensor_id, (0, 1), 1.5)
    with reportdb.open(tmp_path / "c.sqlite") as copy, reportdb.open(migrated) as original:
        info = original.tensor_info(tensor_id)
        golden = original.tensor(tensor_id).astype(np.float64)
        shard_wise = reportdb.locate(copy, tensor_id, against=(original, tensor_id))  # shard against shard
        global_golden = reportdb.locate(copy, tensor_id, against=1000)  # each shard against its slice of the whole
    rows = info.shards[0].shape[0]
    for result in (shard_wise, global_golden):
        assert [d.coordinate for d in result.devices] == [(0, 0), (0, 1)]
        good, bad = result.devices
        assert good.fit_scale == pytest.approx(1.0, abs=1e-9) and good.max_abs_error == 0 and good.passed
        a = changed[(0, 1)].astype(np.float64).reshape(-1)
        g = golden[rows:].reshape(-1)
        assert bad.fit_scale == pytest.approx(np.polyfit(g, a, 1)[0], rel=1e-6)
        assert bad.max_abs_error == pytest.approx(np.abs(a - g).max(), rel=1e-6)
        assert not bad.passed
        assert result.worst_tiles[0].device == (0, 1)
    assert [d.origin for d in global_golden.devices] == [(0, 0, 0), (rows, 0, 0)]
    assert global_golden.tile_map is not None and global_golden.tile_map.shape[0] == 2
    assert global_golden.tile_map[0].max() == 0 and global_golden.tile_map[1].max() > 0


def test_fixture_golden_record(migrated: Path) -> None:
    with reportdb.open(migrated) as report:
        records = {(r.kind, r.tensor_id): r for r in reportdb.compare_golden(report, store=False)}
        result = reportdb.locate(report, 7, golden="local")
        actual = report.tensor(7).astype(np.float64)
        golden = report.tensor(records[("local", 7)].golden_tensor_id).astype(np.float64)
    rtol, atol = Policy.default().tolerances("ttnn.embedding", "BFLOAT16")
    err = np.abs(actual - golden)
    assert result.op == "ttnn.embedding" and result.golden.startswith("local golden tensor")
    assert result.max_abs_error == pytest.approx(err.max(), rel=1e-6)
    assert result.mismatches == int((err > atol + rtol * np.abs(golden)).sum())
    assert result.worst_tiles[0].tile == (0, 0, 0, 0) and result.worst_tiles[0].ranges == ((0, 1), (0, 1), (0, 32), (0, 14))


@pytest.mark.parametrize("name", ["t043_mesh2x4_bfloat16", "t042_mesh1x2_bfloat8_b", "t040_mesh1x2_bfloat16"])
def test_tensorbin_mesh_fixtures(tmp_path: Path, name: str) -> None:
    loaded = reportdb.load_tensor_file(FIXTURES / "ttnn-0.81.1-tensorbin" / "files" / f"{name}.tensorbin")
    coords = [c for c, _ in loaded.shards]
    off = coords[-2]
    shards = [(c, (a.astype(np.float32) * (1.25 if c == off else 1.0)).astype(a.dtype)) for c, a in loaded.shards]
    golden = loaded.array.astype(np.float32)
    with reportdb.open(tmp_path / "r.sqlite", "a") as report:
        report.put_tensor(1, shards=shards, **{k: v for k, v in loaded.spec.as_metadata().items() if v is not None})
        report.put_tensor(2, golden)
    with reportdb.open(tmp_path / "r.sqlite") as report:
        result = reportdb.locate(report, 1, against=2)
    assert [d.coordinate for d in result.devices] == coords
    for entry in result.devices:
        assert entry.fit_scale == pytest.approx(1.25 if entry.coordinate == off else 1.0, rel=1e-2)
        assert (entry.max_abs_error > 0) == (entry.coordinate == off)
    assert result.worst_tiles[0].device == off


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "reportdb", *args], capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.process
def test_cli_locate(tmp_path: Path) -> None:
    golden = np.random.default_rng(3).standard_normal((1, 64, 64)).astype(np.float32)
    actual = golden.astype(ml_dtypes.bfloat16)
    actual[0, 32:, :32] += 2
    mc = {"memory_layout": "HEIGHT_SHARDED", "buffer_type": "L1", "shard_spec": {"grid": [[[0, 0], [1, 0]]],
          "shape": [32, 64], "orientation": "ROW_MAJOR"}, "nd_shard_spec": None}
    with reportdb.open(tmp_path / "a.sqlite", "a") as report:
        report.put_tensor(1, actual, layout="TILE", ttnn_dtype="BFLOAT16", memory_config=mc)
        report.put_tensor(2, golden)
    with reportdb.open(tmp_path / "b.sqlite", "a") as report:
        report.put_tensor(5, golden)
    path = str(tmp_path / "a.sqlite")
    before = (Path(path).read_bytes(), os.stat(path).st_mtime_ns)
    for against in ("2", f"{tmp_path / 'b.sqlite'}:5"):
        done = run("locate", path, "1", "--against", against, "--json")
        assert done.returncode == 0, done.stderr
        data = json.loads(done.stdout)
        assert data["worst_tiles"][0]["tile"] == [0, 1, 0]
        assert [c["core"] for c in data["cores"]] == [[0, 0], [1, 0]]
        assert data["cores"][1]["mismatches"] == 1024 and data["cores"][0]["mismatches"] == 0
        assert len(data["tile_map"]) == 1 and len(data["tile_map"][0]) == 2
    text = run("locate", path, "1", "--against", "2")
    assert text.returncode == 0, text.stderr
    assert "worst tiles:" in text.stdout and "HEIGHT_SHARDED" in text.stdout and "32:64" in text.stdout
    for args, message, status in [(("--golden",), "no local comparison record", 1),
                                  (("--against", "2", "--device", "a,b"), "--device takes", 2)]:  # 2: a usage error
        bad = run("locate", path, "1", *args)
        assert bad.returncode == status and message in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert (Path(path).read_bytes(), os.stat(path).st_mtime_ns) == before  # reading changed nothing
