"""``.tensorbin`` reader, tiles and block floats: real ttnn 0.81.1 / tt-mlir / report files, generated files."""

from __future__ import annotations

import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import gen_legacy as gen
from conftest import FIXTURES, assert_values_equal, manifest, manifest_entries
from reportdb.errors import AssemblyError, FormatError
from reportdb.formats import blockfloat, load_tensor_file
from reportdb.formats.tiles import TILE_SHAPES, padded_shape, untilize
from reportdb.spec import Placement

# tt-mlir-public is only in the extra corpus (shared/fixtures), when that is present
REAL = [(FIXTURES / "ttnn-0.81.1-tensorbin", e) for e in manifest("ttnn-0.81.1-tensorbin")] + manifest_entries(
    "tt-mlir-public"
)
REPORT = "ttnn-0.64.5-report-tensorbin"


@pytest.mark.parametrize("folder,entry", REAL, ids=lambda v: v.name if isinstance(v, Path) else v["name"])
def test_real_tensorbin_files(folder: Path, entry: dict) -> None:
    loaded = load_tensor_file(folder / entry["file"])
    expected_dir = folder / "expected"
    assert len(loaded.shards) == entry.get("num_shards", 1)
    if len(loaded.shards) == 1:
        assert_values_equal(loaded.array, np.load(expected_dir / f"{entry['name']}.npy"))
    else:
        for i, (_, array) in enumerate(loaded.shards):
            assert_values_equal(array, np.load(expected_dir / f"{entry['name']}.shard{i}.npy"))
        assert loaded.array.shape[0] == entry["shape"][0] * len(loaded.shards)  # all real topologies shard dim 0
        assert loaded.spec.logical_shape == loaded.array.shape
    spec = loaded.spec
    assert spec.ttnn_dtype == entry["dtype"].split(".")[1]
    assert spec.layout == entry["layout"].split(".")[1]
    assert list(spec.padded_shape) == entry["padded_shape"]
    assert loaded.source["format"] == "tensorbin" and loaded.source["byte_order"] == "little"
    for _, array in loaded.shards:
        assert array.flags.c_contiguous
        if spec.ttnn_dtype in ("BFLOAT16", "BFLOAT8_B", "BFLOAT4_B"):
            assert array.dtype == ml_dtypes.bfloat16
    if "mesh" in entry:
        assert spec.distribution.params["mesh_shape"] == entry["mesh"]
        assert [c for c, _ in loaded.shards] == list(spec.distribution.device_coords)


def test_real_custom_tile_shapes_are_reported() -> None:
    folder = FIXTURES / "ttnn-0.81.1-tensorbin" / "files"
    assert load_tensor_file(folder / "t031_tile16x32_bfloat16.tensorbin").spec.tile_shape == (16, 32)
    assert load_tensor_file(folder / "t036_tile32x16_float32.tensorbin").spec.tile_shape == (32, 16)
    assert load_tensor_file(folder / "t038_tile16x16_bfloat8_b.tensorbin").spec.tile_shape == (16, 16)


def test_real_topology_becomes_a_distribution() -> None:
    loaded = load_tensor_file(FIXTURES / "ttnn-0.81.1-tensorbin" / "files" / "t043_mesh2x4_bfloat16.tensorbin")
    dist = loaded.spec.distribution
    assert dist.mesh_shape == (8,) and dist.placements == (Placement("shard", 0),)
    assert dist.device_coords == ((0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3))
    assert loaded.spec.logical_shape == (16, 43, 17)


@pytest.mark.parametrize("path", sorted((FIXTURES / REPORT / "report" / "tensors").glob("*.tensorbin")), ids=lambda p: p.name)
def test_real_report_tensorbins(path: Path) -> None:
    loaded = load_tensor_file(path)
    expected = FIXTURES / REPORT / "report_expected"
    if (expected / f"{path.stem}.npy").exists():
        assert_values_equal(loaded.array, np.load(expected / f"{path.stem}.npy"))
    else:
        for i, (_, array) in enumerate(loaded.shards):
            assert_values_equal(array, np.load(expected / f"{path.stem}.shard{i}.npy"))


# ---------------------------------------------------------------------------------------------
# Tiles and block floats against the spec's formulas, written independently of the reader


def _index_formula(rows: int, cols: int, tile: tuple[int, int], transpose: bool) -> np.ndarray:
    """Flat buffer index of each (R, C), straight from spec §11.2 (loops; small shapes only)."""
    th, tw = tile
    fh, fw = min(th, 16), 16
    out = np.empty((rows, cols), dtype=np.int64)
    for r_ in range(rows):
        for c_ in range(cols):
            tr, r0 = divmod(r_, th)
            tc, c0 = divmod(c_, tw)
            fr, r = divmod(r0, fh)
            fc, c = divmod(c0, fw)
            face = fr * (tw // fw) + fc
            inner = r * fw + c
            if transpose:
                inner = c * fh + r
                if th // fh > 1 and tw // fw > 1:
                    face = fc * (tw // fw) + fr
            out[r_, c_] = (tr * (cols // tw) + tc) * th * tw + face * fh * fw + inner
    return out


@pytest.mark.parametrize(
    "tile,transpose", [(t, tr) for t in sorted(TILE_SHAPES) for tr in (False, True) if not tr or t[0] in (16, 32)]
)
def test_untilize_matches_the_index_formula(tile: tuple[int, int], transpose: bool) -> None:
    rows, cols = tile[0] * 2, tile[1] * 3
    flat = np.arange(rows * cols, dtype=np.int64)
    index = _index_formula(rows, cols, tile, transpose)
    assert np.array_equal(untilize(flat, rows, cols, tile, transpose), flat[index])


def test_square_transposed_tile_is_the_transposed_tile() -> None:
    data = np.arange(64 * 64, dtype=np.int64).reshape(64, 64)
    blocks = data.reshape(2, 32, 2, 32).transpose(0, 2, 3, 1).transpose(0, 2, 1, 3).reshape(64, 64)
    normal = gen.tilize(blocks, (32, 32), False)
    assert np.array_equal(untilize(normal, 64, 64, (32, 32), True), data)


@pytest.mark.parametrize("dtype", ["BFLOAT8_B", "BFLOAT4_B"])
@pytest.mark.parametrize("tile", [(32, 32), (16, 32), (16, 16), (1, 16), (8, 32)])
def test_block_float_round_trip_and_layout(dtype: str, tile: tuple[int, int]) -> None:
    bits = blockfloat.MANTISSA_BITS[dtype]
    rng = np.random.default_rng(1)
    ntiles = 5
    datums = tile[0] * tile[1]
    values = rng.integers(-(2**bits) + 1, 2**bits, (ntiles, datums)).astype(np.float32) * np.float32(2.0**-3)
    packed = blockfloat.encode(values, dtype, tile)
    assert packed.size == ntiles * blockfloat.tile_nbytes(dtype, tile)
    decoded = blockfloat.decode(packed, dtype, tile)
    assert np.array_equal(decoded.view(ml_dtypes.bfloat16).astype(np.float32), values.reshape(-1))


def test_block_float_sizes_and_decode_formula() -> None:
    assert blockfloat.tile_nbytes("BFLOAT8_B", (32, 32)) == 1088
    assert blockfloat.tile_nbytes("BFLOAT4_B", (32, 32)) == 576
    exps = np.full(64, 130, dtype=np.uint8)  # 2**(130-127) = 8
    mants = np.arange(1024, dtype=np.uint64) % 256
    packed = np.concatenate([exps, mants.astype(np.uint8)])
    got = blockfloat.decode(packed, "BFLOAT8_B", (32, 32)).view(ml_dtypes.bfloat16).astype(np.float64)
    sign = np.where(mants >= 128, -1.0, 1.0)
    assert np.array_equal(got, sign * (mants % 128) * 2.0 ** (130 - 133))
    nib = np.concatenate([exps, np.full(512, 0xF3, dtype=np.uint8)])  # low nibble 3, high nibble -7
    got4 = blockfloat.decode(nib, "BFLOAT4_B", (32, 32)).view(ml_dtypes.bfloat16).astype(np.float64)
    assert np.array_equal(got4[:2], [3 * 2.0 ** (130 - 129), -7 * 2.0 ** (130 - 129)])


def test_block_float_flush_to_zero_corner() -> None:
    exps = np.zeros(64, dtype=np.uint8)
    exps[0] = 3
    mants = np.zeros(1024, dtype=np.uint8)
    mants[0] = 1  # shift 6 > exponent 3: ttnn flushes to zero
    mants[16:18] = [0x80, 0x40]  # -0 keeps its sign; m=64 with E=0: shift 0 == E gives a denormal pattern
    out = blockfloat.decode(np.concatenate([exps, mants]), "BFLOAT8_B", (32, 32))
    assert out[0] == 0 and out[16] == 0x8000 and out[17] == 0x0000


def test_padded_shape_rule() -> None:
    assert padded_shape((48,), (32, 32)) == (32, 64)
    assert padded_shape((3, 1, 3, 38, 24), (32, 32)) == (3, 1, 3, 64, 32)
    assert padded_shape((2, 40, 50), (16, 32)) == (2, 48, 64)
    assert padded_shape((3, 16, 32), (64, 1, 32)) == (4, 16, 32)  # 64 rows of alignment = 4 blocks of 16
    assert padded_shape((3, 32, 32), (32, 1, 32)) == (3, 32, 32)  # already a multiple: kept


# ---------------------------------------------------------------------------------------------
# Generated .tensorbin


def _values(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype in ("BFLOAT8_B", "BFLOAT4_B"):
        top = 2 ** blockfloat.MANTISSA_BITS[dtype] - 1
        return rng.integers(-top, top + 1, shape).astype(np.float32)
    if dtype == "BFLOAT16":
        return rng.integers(-256, 256, shape).astype(np.float32) / 4
    if dtype == "FLOAT32":
        return rng.standard_normal(shape).astype(np.float32)
    return rng.integers(0, 250, shape)


SPECS = [
    gen.Spec(dtype, tile, transpose)
    for dtype in gen.DTYPE_VALUES
    for tile in ([None] if not dtype.endswith("_B") else []) + [(32, 32), (16, 32), (32, 16), (16, 16), (4, 32), (1, 16)]
    for transpose in ([False, True] if tile is not None and tile[0] in (16, 32) else [False])
]


@pytest.mark.parametrize("order", ["little", "big"])
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.dtype}-{s.tile}-{'T' if s.transpose else 'N'}")
def test_generated_single_device(tmp_path: Path, order: str, spec: gen.Spec) -> None:
    values = _values((3, 21, 45), spec.dtype)
    path = tmp_path / "t.tensorbin"
    gen.write_tensorbin(path, [((0, 0), values)], spec, order=order)
    loaded = load_tensor_file(path)
    assert_values_equal(loaded.array, values)
    assert loaded.shards[0][0] == (0, 0)
    assert loaded.spec.tile_shape == spec.tile and loaded.spec.transpose_tile == spec.transpose
    assert loaded.spec.storage_type == "HOST"
    assert loaded.source == {"format": "tensorbin", "version": None, "byte_order": order, "path": str(path)}


@pytest.mark.parametrize("shape", [(), (1,), (50,), (1, 1), (33, 1), (2, 0, 5)])
def test_generated_small_ranks(tmp_path: Path, shape: tuple[int, ...]) -> None:
    values = _values(shape, "FLOAT32")
    path = tmp_path / "t.tensorbin"
    for spec in (gen.Spec("FLOAT32", (32, 32)), gen.Spec("FLOAT32", None)):
        gen.write_tensorbin(path, [((0, 0), values)], spec)
        assert_values_equal(load_tensor_file(path).array, values)


def test_padding_filled_with_a_value_is_ignored(tmp_path: Path) -> None:
    values = _values((10, 10), "FLOAT32")
    path = tmp_path / "t.tensorbin"
    gen.write_tensorbin(path, [((0, 0), values)], gen.Spec("FLOAT32", (32, 32), pad_value=3.0))
    assert_values_equal(load_tensor_file(path).array, values)


@pytest.mark.parametrize("order", ["little", "big"])
def test_generated_mesh_with_topology(tmp_path: Path, order: str) -> None:
    arrays = [_values((2, 30, 20), "BFLOAT8_B", seed=i) for i in range(8)]
    coords = [(r, c) for r in range(2) for c in range(4)]
    path = tmp_path / "t.tensorbin"
    topology = ((2, 4), [("replicate", -1), ("shard", 2)], coords)
    gen.write_tensorbin(path, list(zip(coords, arrays)), gen.Spec("BFLOAT8_B", (32, 32)), mesh_shape=(2, 4), topology=topology, order=order)
    loaded = load_tensor_file(path)
    assert loaded.spec.distribution.placements == (Placement("replicate"), Placement("shard", 2))
    assert_values_equal(loaded.array, np.concatenate(arrays[:4], axis=2))
    assert loaded.spec.logical_shape == (2, 30, 80)


def test_generated_dedup_without_topology_is_replicated(tmp_path: Path) -> None:
    values = _values((64,), "BFLOAT16")
    path = tmp_path / "t.tensorbin"
    gen.write_tensorbin(path, [((0, 0), values), ((0, 1), values)], gen.Spec("BFLOAT16", None), mesh_shape=(1, 2), dedup=True)
    loaded = load_tensor_file(path)
    assert len(loaded.shards) == 2 and path.stat().st_size < 8 + 1024 + 2 * 128
    assert loaded.spec.distribution.placements == (Placement("replicate"), Placement("replicate"))
    assert_values_equal(loaded.array, values)
    assert loaded.spec.logical_shape == (64,)


@pytest.mark.parametrize("shards", [1, 3])
def test_generated_old_schema(tmp_path: Path, shards: int) -> None:
    arrays = [_values((4, 40), "FLOAT32", seed=i) for i in range(shards)]
    coords = [()] if shards == 1 else [(0, i) for i in range(shards)]
    path = tmp_path / "t.tensorbin"
    gen.write_tensorbin(path, list(zip(coords, arrays)), gen.Spec("FLOAT32", (32, 32)), mesh_shape=(1, shards), old_schema=True)
    loaded = load_tensor_file(path)
    for (_, got), want in zip(loaded.shards, arrays):
        assert_values_equal(got, want)


def test_sharded_mesh_without_all_shards_cannot_assemble(tmp_path: Path) -> None:
    arrays = [_values((4, 4), "INT32", seed=i) for i in range(2)]
    path = tmp_path / "t.tensorbin"
    topology = ((4,), [("shard", 0)], [(0, i) for i in range(4)])
    gen.write_tensorbin(path, [((0, 0), arrays[0]), ((0, 2), arrays[1])], gen.Spec("INT32", None), mesh_shape=(1, 4), topology=topology)
    loaded = load_tensor_file(path)
    with pytest.raises(AssemblyError):
        loaded.array


def test_tensorbin_errors(tmp_path: Path) -> None:
    path = tmp_path / "t.tensorbin"
    gen.write_tensorbin(path, [((0, 0), _values((32, 32), "FLOAT32"))], gen.Spec("FLOAT32", (32, 32)))
    data = path.read_bytes()
    header = struct.unpack("<Q", data[:8])[0]
    bad = {
        "truncated": data[:-4],
        "trailing": data + b"\0" * 8,
        "header too big": struct.pack("<Q", len(data)) + data[8:],
        "root offset": data[:8] + struct.pack("<I", 2**31) + data[12:],
        "header only": data[: 8 + header],
    }
    for name, blob in bad.items():
        path.write_bytes(blob)
        with pytest.raises(FormatError) as info:
            load_tensor_file(path)
        assert str(path) in str(info.value), name


def test_shared_buffers_cannot_amplify_without_bound(tmp_path: Path) -> None:
    """Shards sharing one buffer: replicated ones decode once and share the array, whatever their number;
    concatenated along a sharded mesh axis they are refused when the assembled tensor would explode."""
    values = np.zeros((512, 1024), dtype=np.float32)  # 2 MiB per shard, 2 MiB in the file
    path = tmp_path / "t.tensorbin"
    spec = gen.Spec("FLOAT32", None)
    gen.write_tensorbin(path, [((0, i), values) for i in range(8)], spec, mesh_shape=(1, 8), dedup=True)
    assert len(load_tensor_file(path).shards) == 8
    gen.write_tensorbin(path, [((0, i), values) for i in range(200)], spec, mesh_shape=(1, 200), dedup=True)
    loaded = load_tensor_file(path)  # replicated: 200 shards, one decoded array
    assert len(loaded.shards) == 200 and len({id(array) for _, array in loaded.shards}) == 1
    assert loaded.array.shape == (512, 1024)
    coords = [(0, i) for i in range(200)]
    topology = ((1, 200), [("replicate", -1), ("shard", 0)], coords)
    gen.write_tensorbin(path, [(c, values) for c in coords], spec, mesh_shape=(1, 200), topology=topology, dedup=True)
    with pytest.raises(FormatError, match="implausible"):  # would assemble 400 MiB from 2 MiB
        load_tensor_file(path)
    topology = ((1, 8), [("replicate", -1), ("shard", 0)], coords[:8])
    gen.write_tensorbin(path, [(c, values) for c in coords[:8]], spec, mesh_shape=(1, 8), topology=topology, dedup=True)
    assert load_tensor_file(path).array.shape == (8 * 512, 1024)  # 16 MiB from 2 MiB: within the bound


def test_overlapping_shard_records_refused(tmp_path: Path) -> None:
    """Records one byte apart over one region would describe N full shards with N extra bytes."""
    values = np.arange(64, dtype=np.float32).reshape(8, 8)
    path = tmp_path / "t.tensorbin"
    gen.write_tensorbin(path, [((0, 0), values), ((0, 1), values + 1)], gen.Spec("FLOAT32", None), mesh_shape=(1, 2))
    data = bytearray(path.read_bytes())
    header = struct.unpack_from("<Q", data)[0]
    second = data.find(struct.pack("<QQ", 256, 256), 8, 8 + header)  # the second record's (offset, size)
    assert second > 0
    struct.pack_into("<Q", data, second, 4)  # now at offset 4: overlaps the first
    path.write_bytes(bytes(data[: 8 + header + 260]))
    with pytest.raises(FormatError, match="overlap"):
        load_tensor_file(path)


def test_flatbuffer_vectors_are_bounded_before_they_become_lists(tmp_path: Path) -> None:
    """A vector length is checked against what the caller can use (shards, rank) before the bytes, so no
    count builds a list of Python objects (9-25x the vector's bytes)."""
    from reportdb.formats.flatbuf import FlatBuffer
    from reportdb.formats.tensorbin import MAX_RANK, MAX_SHARDS

    values = np.arange(64, dtype=np.float32).reshape(8, 8)
    path = tmp_path / "t.tensorbin"
    gen.write_tensorbin(path, [((0, 0), values)], gen.Spec("FLOAT32", None), mesh_shape=(1, 1))
    clean = path.read_bytes()
    header = struct.unpack_from("<Q", clean)[0]
    root = FlatBuffer(clean[8 : 8 + header]).root()
    spec = root.table(0, "spec")
    assert spec is not None
    shards_at, shape_at = root._target(2), spec._target(0)
    assert shards_at is not None and shape_at is not None
    for at, count, message in ((shards_at, MAX_SHARDS + 1, f"more than the {MAX_SHARDS} allowed"),
                               (shape_at, MAX_RANK + 1, f"more than the {MAX_RANK} allowed"),
                               (shards_at, 2**32 - 1, "allowed")):
        data = bytearray(clean)
        struct.pack_into("<I", data, 8 + at, count)
        path.write_bytes(bytes(data))
        with pytest.raises(FormatError, match=message):
            load_tensor_file(path)
