"""`reportdb.locate`: tiles, devices and cores of a tensor against its golden, checked against numpy."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import reportdb
from reportdb import Distribution, Placement
from reportdb.analysis import scan as scan_mod
from reportdb.analysis.locate import LocateResult
from reportdb.analysis.policy import Policy
from reportdb.formats import blockfloat, tiles as tiles_mod

RNG = np.random.default_rng(7)


def tolerances(dtype: str) -> tuple[float, float]:
    return Policy.default().tolerances(None, dtype)


def tile_oracle(err: np.ndarray, bad: np.ndarray, tile: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Per-tile max and mismatch count by plain slicing (partial last tiles included)."""
    lead, (h, w) = err.shape[:-2], err.shape[-2:]
    th, tw = tile
    tr, tc = -(-h // th), -(-w // tw)
    tmax = np.zeros(lead + (tr, tc))
    tmm = np.zeros(lead + (tr, tc), dtype=np.int64)
    for idx in np.ndindex(*lead):
        for r in range(tr):
            for c in range(tc):
                block = (*idx, slice(r * th, (r + 1) * th), slice(c * tw, (c + 1) * tw))
                tmax[(*idx, r, c)] = err[block].max()
                tmm[(*idx, r, c)] = bad[block].sum()
    return tmax, tmm


def mismatches(actual: np.ndarray, golden: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    rtol, atol = tolerances(dtype)
    a, g = actual.astype(np.float64), golden.astype(np.float64)
    err = np.abs(a - g)
    return err, err > atol + rtol * np.abs(g)


def store(path: Path, items: dict[int, dict[str, Any]]) -> Path:
    with reportdb.open(path, "a") as report:
        for tensor_id, kwargs in items.items():
            report.put_tensor(tensor_id, **kwargs)
    return path


def check_tiles(result: LocateResult, actual: np.ndarray, golden: np.ndarray, dtype: str,
                tile: tuple[int, int] = (32, 32)) -> None:
    err, bad = mismatches(actual, golden, dtype)
    tmax, tmm = tile_oracle(err, bad, tile)
    assert result.tile_map is not None and result.tile_mismatch_map is not None
    np.testing.assert_allclose(result.tile_map, tmax, rtol=1e-6)
    np.testing.assert_array_equal(result.tile_mismatch_map, tmm)
    assert result.mismatches == int(bad.sum())
    assert result.max_abs_error == pytest.approx(float(err.max()), rel=1e-6)


def test_bfloat16_tile_tensor_with_one_wrong_tile(tmp_path: Path) -> None:
    golden = RNG.standard_normal((2, 50, 70)).astype(np.float32)  # padded: 2x3 tiles a matrix, the last ones partial
    actual = golden.astype(ml_dtypes.bfloat16)
    actual[1, 32:50, 64:70] += 0.75  # the bottom-right (partial) tile of matrix 1
    path = store(tmp_path / "r.sqlite", {1: dict(array=actual, layout="TILE", tile_shape=(32, 32), ttnn_dtype="BFLOAT16"),
                                         2: dict(array=golden)})
    with reportdb.open(path) as report:
        result = reportdb.locate(report, 1, against=2)
    assert result.tile_shape == (32, 32)
    worst = result.worst_tiles[0]
    assert worst.tile == (1, 1, 2)
    assert worst.ranges == ((1, 2), (32, 50), (64, 70))
    assert worst.mismatches == 18 * 6
    assert worst.max_abs_error == pytest.approx(float(np.abs(actual.astype(np.float64) - golden)[1, 32:, 64:].max()))
    assert all(t.max_abs_error < 0.05 for t in result.worst_tiles[1:])
    check_tiles(result, actual, golden, "BFLOAT16")
    assert result.devices == () and result.cores == ()
    assert result.to_dict()["tile_map"][1][1][2] == pytest.approx(worst.max_abs_error)


def _bfp8(values: np.ndarray) -> np.ndarray:
    """``values`` (..., H, W, whole tiles) rounded through BFLOAT8_B packing and back."""
    rows, cols = math.prod(values.shape[:-1]), values.shape[-1]
    flat = tiles_mod.tilize(values.reshape(rows, cols).astype(np.float32), (32, 32))
    decoded = blockfloat.decode(blockfloat.encode(flat, "BFLOAT8_B", (32, 32)), "BFLOAT8_B", (32, 32))
    out = tiles_mod.untilize(decoded, rows, cols, (32, 32), False)
    return out.view(ml_dtypes.bfloat16).reshape(values.shape)


def test_bfloat8_b_tensor_at_its_own_tolerances(tmp_path: Path) -> None:
    golden = RNG.standard_normal((1, 64, 96)).astype(np.float32)
    actual = _bfp8(golden)
    actual[0, 0:32, 32:64] = -actual[0, 0:32, 32:64]  # one tile's signs flipped
    path = store(tmp_path / "r.sqlite", {1: dict(array=actual, layout="TILE", ttnn_dtype="BFLOAT8_B"), 2: dict(array=golden)})
    with reportdb.open(path) as report:
        result = reportdb.locate(report, 1, against=2)
    assert (result.rtol, result.atol) == tolerances("BFLOAT8_B")
    assert result.dtype == "BFLOAT8_B"
    assert result.worst_tiles[0].tile == (0, 0, 1)
    check_tiles(result, actual, golden, "BFLOAT8_B")


def _mesh_report(path: Path, golden: np.ndarray, shards: list[tuple[tuple[int, int], np.ndarray]],
                 distribution: Distribution) -> Path:
    return store(path, {1: dict(shards=shards, distribution=distribution, layout="TILE", ttnn_dtype="BFLOAT16"),
                        2: dict(array=golden)})


def _check_devices(result: LocateResult, expected: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]) -> None:
    """Each device against numpy: PCC, max abs error, the least-squares line, mismatches and the policy's verdict."""
    assert [d.coordinate for d in result.devices] == list(expected)
    policy = Policy.default()
    for entry in result.devices:
        shard, part = expected[entry.coordinate]
        a, g = shard.astype(np.float64).reshape(-1), part.astype(np.float64).reshape(-1)
        scale, offset = np.polyfit(g, a, 1)
        assert entry.fit_scale == pytest.approx(scale, rel=1e-6)
        assert entry.fit_offset == pytest.approx(offset, abs=1e-6)
        assert entry.pcc == pytest.approx(np.corrcoef(a, g)[0, 1], rel=1e-9)
        assert entry.max_abs_error == pytest.approx(np.abs(a - g).max(), rel=1e-6)
        assert entry.mismatches == int(mismatches(shard, part, "BFLOAT16")[1].sum())
        rtol, atol = tolerances("BFLOAT16")
        whole = reportdb.compare(shard, part, rtol=rtol, atol=atol)  # the device's tiles judged as compare's
        verdict = policy.judge(whole, op=None, dtype="BFLOAT16")
        assert (entry.passed, entry.failed, entry.worst_tile) == (verdict.passed, verdict.failed, verdict.worst_tile)
        where = f" on device {entry.coordinate}"  # no memory config: no core
        assert tuple(n.replace(where, "") for n in entry.notes) == verdict.notes
        if "tile_sqnr_db" in entry.failed:
            assert any(f"tile {entry.worst_tile}{where}:" in n for n in entry.notes)


@pytest.mark.parametrize("scale", [1.07, 1.5])
def test_1x4_mesh_sharded_one_device_off_in_scale(tmp_path: Path, scale: float) -> None:
    golden = RNG.standard_normal((1, 1, 64, 256)).astype(np.float32)
    shards = []
    for col in range(4):
        part = golden[..., col * 64 : (col + 1) * 64]
        shards.append(((0, col), (part * (scale if col == 2 else 1.0)).astype(ml_dtypes.bfloat16)))
    dist = Distribution((1, 4), (Placement("replicate"), Placement("shard", 3)))
    path = _mesh_report(tmp_path / "r.sqlite", golden, shards, dist)
    with reportdb.open(path) as report:
        result = reportdb.locate(report, 1, against=2)
    _check_devices(result, {c: (s, golden[..., c[1] * 64 : (c[1] + 1) * 64]) for c, s in shards})
    worst = max(result.devices, key=lambda d: abs((d.fit_scale or 0) - 1))
    assert worst.coordinate == (0, 2) and worst.origin == (0, 0, 0, 128)
    assert worst.fit_scale == pytest.approx(scale, rel=0.01)
    if scale == 1.5:
        assert not worst.passed and all(d.passed for d in result.devices if d is not worst)
    assert result.worst_tiles[0].device == (0, 2)
    # the global tile map: device (0, 2) holds tile columns 4 and 5
    assert result.tile_map is not None and result.tile_map.shape == (1, 1, 2, 8)
    assert int(np.argmax(result.tile_map.max(axis=(0, 1, 2)))) in (4, 5)
    with reportdb.open(path) as report:
        one = reportdb.locate(report, 1, against=2, device=(0, 2))
    assert one.device == (0, 2) and one.devices == ()
    check_tiles(one, shards[2][1], golden[..., 128:192], "BFLOAT16")


def test_1x4_mesh_replicated_compares_each_shard_with_the_whole_golden(tmp_path: Path) -> None:
    golden = RNG.standard_normal((1, 1, 32, 64)).astype(np.float32)
    shards = [((0, c), (golden * (1.07 if c == 1 else 1.0)).astype(ml_dtypes.bfloat16)) for c in range(4)]
    dist = Distribution((1, 4), (Placement("replicate"), Placement("replicate")))
    path = _mesh_report(tmp_path / "r.sqlite", golden, shards, dist)
    with reportdb.open(path) as report:
        result = reportdb.locate(report, 1, against=2)
    _check_devices(result, {c: (s, golden) for c, s in shards})
    assert [d.origin for d in result.devices] == [(0, 0, 0, 0)] * 4
    assert result.worst_tiles[0].device == (0, 1)


@pytest.mark.parametrize("placements", [("shard", "shard"), ("replicate", "shard")])
def test_2x4_mesh_one_device_off_in_scale(tmp_path: Path, placements: tuple[str, str]) -> None:
    rows = 2 if placements[0] == "shard" else 1
    golden = RNG.standard_normal((1, 1, 32 * rows, 128)).astype(np.float32)
    shards, expected = [], {}
    for r in range(2):
        for c in range(4):
            part = golden[..., (r % rows) * 32 : (r % rows + 1) * 32, c * 32 : (c + 1) * 32]
            shard = (part * (0.93 if (r, c) == (1, 2) else 1.0)).astype(ml_dtypes.bfloat16)
            shards.append(((r, c), shard))
            expected[(r, c)] = (shard, part)
    dist = Distribution((2, 4), (Placement(placements[0], 2 if placements[0] == "shard" else None), Placement("shard", 3)))
    path = _mesh_report(tmp_path / "r.sqlite", golden, shards, dist)
    with reportdb.open(path) as report:
        result = reportdb.locate(report, 1, against=2)
    _check_devices(result, expected)
    worst = max(result.devices, key=lambda d: abs((d.fit_scale or 0) - 1))
    assert worst.coordinate == (1, 2) and worst.fit_scale == pytest.approx(0.93, rel=0.01)
    assert worst.origin == (0, 0, 32 * (rows - 1), 64)
    assert result.tile_map is not None and result.tile_map.shape == (1, 1, rows, 4)
    assert np.unravel_index(int(np.argmax(result.tile_map)), result.tile_map.shape) == (0, 0, rows - 1, 2)


# --- sharded memory configs ---------------------------------------------------------------------------------------


def physical_shards(err: np.ndarray, bad: np.ndarray, tile: tuple[int, int] | None, shard: tuple[int, int]) -> list[tuple[float, int, int]]:
    """(max abs error, mismatches, logical elements) of each shard, row-major over the shard grid, by building the
    padded physical 2-D array (padding marked) and slicing it."""
    lead, (h, w) = err.shape[:-2], err.shape[-2:]
    th, tw = tile or (1, 1)
    ph, pw = -(-h // th) * th, -(-w // tw) * tw
    b = math.prod(lead)
    phys = np.full((b, ph, pw), -1.0)
    phys_bad = np.zeros((b, ph, pw), dtype=bool)
    phys[:, :h, :w] = err.reshape(b, h, w)
    phys_bad[:, :h, :w] = bad.reshape(b, h, w)
    phys, phys_bad = phys.reshape(b * ph, pw), phys_bad.reshape(b * ph, pw)
    sh, sw = shard
    found = []
    for r in range(0, b * ph, sh):
        for c in range(0, pw, sw):
            block, block_bad = phys[r : r + sh, c : c + sw], phys_bad[r : r + sh, c : c + sw]
            logical = block >= 0
            found.append((float(block.max(initial=0.0)), int(block_bad.sum()), int(logical.sum())))
    return found


def _memory_config(layout: str, grid: list[list[list[int]]], shape: list[int], orientation: str) -> dict[str, Any]:
    return {"memory_layout": layout, "buffer_type": "L1", "shard_spec": {"grid": grid, "shape": shape,
            "orientation": orientation, "mode": "PHYSICAL", "physical_shard_shape": None, "halo": None},
            "nd_shard_spec": None}


SHARDED = [
    # layout, tensor shape, TILE?, shard shape, grid, orientation, the wrong shard, its expected core
    ("HEIGHT_SHARDED", (1, 1, 200, 64), True, [64, 64], [[[0, 0], [1, 1]]], "ROW_MAJOR", 2, (0, 1)),
    ("HEIGHT_SHARDED", (1, 1, 200, 64), True, [64, 64], [[[0, 0], [1, 1]]], "COL_MAJOR", 2, (1, 0)),
    ("HEIGHT_SHARDED", (2, 3, 40, 32), True, [96, 32], [[[0, 0], [3, 0]]], "ROW_MAJOR", 1, (1, 0)),
    ("WIDTH_SHARDED", (1, 1, 64, 300), False, [64, 128], [[[0, 0], [3, 0]]], "ROW_MAJOR", 1, (1, 0)),
    ("WIDTH_SHARDED", (1, 1, 64, 300), False, [64, 128], [[[0, 0], [0, 3]]], "COL_MAJOR", 2, (0, 2)),
    ("BLOCK_SHARDED", (1, 1, 100, 160), True, [64, 64], [[[0, 0], [2, 1]]], "ROW_MAJOR", 5, (2, 1)),
    ("BLOCK_SHARDED", (1, 1, 100, 160), True, [64, 64], [[[0, 0], [1, 2]]], "COL_MAJOR", 5, (1, 2)),
    ("BLOCK_SHARDED", (1, 1, 100, 160), True, [64, 64], [[[0, 0], [2, 1]]], "ROW_MAJOR", 1, (1, 0)),
]


@pytest.mark.parametrize("layout, shape, tiled, shard, grid, orientation, wrong, core", SHARDED)
def test_sharded_tensor_with_one_wrong_shard(
    tmp_path: Path, layout: str, shape: tuple[int, ...], tiled: bool, shard: list[int], grid: list[Any],
    orientation: str, wrong: int, core: tuple[int, int],
) -> None:
    golden = RNG.standard_normal(shape).astype(np.float32)
    actual = golden.astype(ml_dtypes.bfloat16)
    tile = (32, 32) if tiled else None
    # make the wrong shard wrong: find its logical elements through the oracle's geometry
    marker = np.zeros(shape)
    layout_rows = physical_shards(np.arange(marker.size, dtype=np.float64).reshape(shape),
                                  np.zeros(shape, dtype=bool), tile, tuple(shard))
    assert layout_rows[wrong][2] > 0
    flat_ids = np.arange(marker.size).reshape(shape)
    in_wrong = _shard_mask(flat_ids, tile, tuple(shard), wrong)
    actual[in_wrong] = (actual[in_wrong].astype(np.float32) + 1.0).astype(ml_dtypes.bfloat16)
    mc = _memory_config(layout, grid, shard, orientation)
    path = store(tmp_path / "r.sqlite", {1: dict(array=actual, layout="TILE" if tiled else "ROW_MAJOR",
                                                 ttnn_dtype="BFLOAT16", memory_config=mc), 2: dict(array=golden)})
    with reportdb.open(path) as report:
        result = reportdb.locate(report, 1, against=2)
    err, bad = mismatches(actual, golden, "BFLOAT16")
    expected = physical_shards(err, bad, tile, tuple(shard))
    assert [c.shard for c in result.cores] == list(range(len(expected)))
    for entry, (emax, emm, elems) in zip(result.cores, expected):
        assert entry.max_abs_error == pytest.approx(emax, rel=1e-6, abs=1e-12)
        assert (entry.mismatches, entry.elements) == (emm, elems)
    worst = max(result.cores, key=lambda c: c.max_abs_error)
    assert (worst.shard, worst.core) == (wrong, core)
    assert result.memory_layout == layout and result.shard_orientation == orientation
    assert sum(c.elements for c in result.cores) == actual.size


def _shard_mask(ids: np.ndarray, tile: tuple[int, int] | None, shard: tuple[int, int], which: int) -> np.ndarray:
    """A boolean mask of the logical elements of shard ``which`` (by marking the physical array)."""
    lead, (h, w) = ids.shape[:-2], ids.shape[-2:]
    th, tw = tile or (1, 1)
    ph, pw = -(-h // th) * th, -(-w // tw) * tw
    b = math.prod(lead)
    phys = np.full((b, ph, pw), -1)
    phys[:, :h, :w] = ids.reshape(b, h, w)
    phys = phys.reshape(b * ph, pw)
    sh, sw = shard
    cols = -(-pw // sw)
    r, c = divmod(which, cols)
    chosen = phys[r * sh : (r + 1) * sh, c * sw : (c + 1) * sw]
    mask = np.zeros(ids.size, dtype=bool)
    mask[chosen[chosen >= 0]] = True
    return mask.reshape(ids.shape)


def test_nd_shard_spec_round_robin(tmp_path: Path) -> None:
    shape = (4, 64, 64)
    golden = RNG.standard_normal(shape).astype(np.float32)
    actual = golden.astype(ml_dtypes.bfloat16)
    actual[2:4, 32:64, :] += 1  # ND shard (1, 1, 0): the fourth of 2x2x1
    mc = {"memory_layout": "ND_SHARDED", "buffer_type": "L1", "shard_spec": None,
          "nd_shard_spec": {"shard_shape": [2, 32, 64], "grid": [[[0, 0], [2, 0]]], "orientation": "ROW_MAJOR",
                            "shard_distribution_strategy": "ROUND_ROBIN_1D"}}
    path = store(tmp_path / "r.sqlite", {1: dict(array=actual, layout="ROW_MAJOR", ttnn_dtype="BFLOAT16", memory_config=mc),
                                         2: dict(array=golden)})
    with reportdb.open(path) as report:
        result = reportdb.locate(report, 1, against=2)
    err, bad = mismatches(actual, golden, "BFLOAT16")
    boxes = [(slice(i * 2, i * 2 + 2), slice(j * 32, j * 32 + 32)) for i in range(2) for j in range(2)]
    assert [c.core for c in result.cores] == [(0, 0), (1, 0), (2, 0), (0, 0)]  # 4 shards dealt over 3 cores
    for entry, (b, r) in zip(result.cores, boxes):
        assert entry.max_abs_error == pytest.approx(float(err[b, r].max()), rel=1e-6)
        assert (entry.mismatches, entry.elements) == (int(bad[b, r].sum()), 2 * 32 * 64)
    assert max(result.cores, key=lambda c: c.max_abs_error).shard == 3


def test_larger_than_the_read_window_is_streamed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shape = (3, 200, 300)
    golden = RNG.standard_normal(shape).astype(np.float32)
    actual = golden.astype(ml_dtypes.bfloat16)
    actual[2, 160:192, 288:300] *= -3
    mc = _memory_config("BLOCK_SHARDED", [[[0, 0], [4, 4]]], [160, 96], "ROW_MAJOR")
    path = store(tmp_path / "r.sqlite", {1: dict(array=actual, layout="TILE", ttnn_dtype="BFLOAT16", memory_config=mc),
                                         2: dict(array=golden)})
    with reportdb.open(path) as report:
        whole = reportdb.locate(report, 1, against=2)
    monkeypatch.setattr(scan_mod, "WINDOW_ELEMENTS", 4096)  # one tile row (32 x 300) is larger: whole tile columns
    reads: list[int] = []
    real = reportdb.Report.tensor

    def counting(self: reportdb.Report, *args: Any, **kwargs: Any) -> np.ndarray:
        out = real(self, *args, **kwargs)
        reads.append(out.size)
        return out

    monkeypatch.setattr(reportdb.Report, "tensor", counting)
    with reportdb.open(path) as report:
        streamed = reportdb.locate(report, 1, against=2)
    assert max(reads) <= 4096 and len(reads) > 2 * actual.size // 4096
    check_tiles(streamed, actual, golden, "BFLOAT16")
    assert streamed.worst_tiles == whole.worst_tiles
    assert streamed.cores == whole.cores
    err, bad = mismatches(actual, golden, "BFLOAT16")
    expected = physical_shards(err, bad, (32, 32), (160, 96))
    assert [(c.mismatches, c.elements) for c in streamed.cores] == [(m, e) for _, m, e in expected]


def test_golden_record_and_errors(tmp_path: Path) -> None:
    golden = RNG.standard_normal((1, 1, 32, 64)).astype(np.float32)
    actual = golden.astype(ml_dtypes.bfloat16)
    path = store(tmp_path / "r.sqlite", {1: dict(array=actual, layout="TILE", ttnn_dtype="BFLOAT16"), 2: dict(array=golden),
                                         3: dict(array=golden[..., :32])})
    with reportdb.open(path) as report:
        with pytest.raises(reportdb.errors.InvalidArgumentError):
            reportdb.locate(report, 1)
        with pytest.raises(reportdb.errors.TensorNotFoundError, match="no local comparison record"):
            reportdb.locate(report, 1, golden="local")
        with pytest.raises(reportdb.errors.ComparisonError, match="differs"):
            reportdb.locate(report, 1, against=3)
        with pytest.raises(reportdb.errors.TensorNotFoundError):
            reportdb.locate(report, 1, against=9)


def test_policy_file_and_bad_shard_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reportdb.analysis import grids

    monkeypatch.setattr(grids, "MAX_SHARDS", 1000)
    golden = RNG.standard_normal((1, 64, 64)).astype(np.float32)
    actual = golden.astype(ml_dtypes.bfloat16)
    mc = _memory_config("HEIGHT_SHARDED", [[[0, 0], [7, 7]]], [1, 1], "ROW_MAJOR")  # 4096 shards: more than tracked
    path = store(tmp_path / "r.sqlite", {1: dict(array=actual, layout="TILE", ttnn_dtype="BFLOAT16", memory_config=mc),
                                         2: dict(array=golden)})
    policy = tmp_path / "policy.toml"
    policy.write_text('[[rules]]\nop = "*"\ndtype = "BFLOAT16"\nrtol = 0.0\natol = 0.001\n')
    with reportdb.open(path) as report:
        default = reportdb.locate(report, 1, against=2)
        strict = reportdb.locate(report, 1, against=2, policy=policy)
        with pytest.raises(reportdb.errors.TensorNotFoundError, match="no shard at mesh coordinate"):
            reportdb.locate(report, 1, against=2, device=(0, 0))
    err = np.abs(actual.astype(np.float64) - golden)
    assert (strict.rtol, strict.atol) == (0.0, 0.001)
    assert strict.mismatches == int((err > 0.001).sum()) > default.mismatches == int(mismatches(actual, golden, "BFLOAT16")[1].sum())
    assert default.cores == () and any("cores not located" in n for n in default.notes)


def test_empty_scalar_vector_and_non_finite(tmp_path: Path) -> None:
    path = store(tmp_path / "r.sqlite", {
        1: dict(array=np.zeros((0, 32), np.float32)), 2: dict(array=np.zeros((0, 32), np.float32)),
        3: dict(array=np.float32(2.0)), 4: dict(array=np.float32(1.0)),
        5: dict(array=np.arange(100, dtype=np.float32)), 6: dict(array=np.arange(100, dtype=np.float32)[::-1].copy()),
        7: dict(array=np.array([np.nan, 1, np.inf, 3, -np.inf], np.float32)),
        8: dict(array=np.array([np.nan, 1, 2, np.inf, -np.inf], np.float32)),
    })
    with reportdb.open(path) as report:
        empty, scalar, vector, special = (reportdb.locate(report, a, against=a + 1) for a in (1, 3, 5, 7))
    assert (empty.mismatches, empty.worst_tiles, empty.tile_map.shape) == (0, (), (0, 1))  # type: ignore[union-attr]
    assert scalar.worst_tiles[0].ranges == () and scalar.max_abs_error == 1.0
    assert vector.worst_tiles[0].ranges == ((0, 32),) and vector.tile_map.shape == (1, 4)  # type: ignore[union-attr]
    assert vector.max_abs_error == 99.0 and vector.mismatches == 100
    # NaN against NaN and -inf against -inf match; inf against 3 and 2 against inf are infinitely wrong
    assert special.mismatches == 2 and special.max_abs_error == math.inf
    assert special.to_dict()["max_abs_error"] is None


def test_multi_device_sharded_memory_config_cores_per_device(tmp_path: Path) -> None:
    golden = RNG.standard_normal((1, 1, 128, 64)).astype(np.float32)
    halves = [golden[..., :64, :], golden[..., 64:, :]]
    shards = [((0, c), h.astype(ml_dtypes.bfloat16)) for c, h in enumerate(halves)]
    shards[1][1][..., 32:64, :] += 1  # device (0, 1), its second height shard
    mc = _memory_config("HEIGHT_SHARDED", [[[0, 0], [1, 0]]], [32, 64], "ROW_MAJOR")
    path = store(tmp_path / "r.sqlite", {1: dict(shards=shards, distribution=Distribution((1, 2), (Placement("replicate"),
                 Placement("shard", 2))), layout="TILE", ttnn_dtype="BFLOAT16", memory_config=mc),
                 2: dict(array=golden)})
    with reportdb.open(path) as report:
        result = reportdb.locate(report, 1, against=2)
    assert [(c.device, c.shard, c.core) for c in result.cores] == [
        ((0, 0), 0, (0, 0)), ((0, 0), 1, (1, 0)), ((0, 1), 0, (0, 0)), ((0, 1), 1, (1, 0))]
    for entry in result.cores:
        shard = shards[entry.device[1]][1]  # type: ignore[index]
        err, bad = mismatches(shard, halves[entry.device[1]], "BFLOAT16")  # type: ignore[index]
        emax, emm, elems = physical_shards(err, bad, (32, 32), (32, 64))[entry.shard]
        assert entry.max_abs_error == pytest.approx(emax, rel=1e-6) and (entry.mismatches, entry.elements) == (emm, elems)
    worst = max(result.cores, key=lambda c: c.max_abs_error)
    assert (worst.device, worst.core) == ((0, 1), (1, 0))
    assert not result.devices[1].passed and result.devices[0].passed
