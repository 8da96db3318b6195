"""Legacy ``.bin`` readers (v0-v5): real ttnn 0.62.2 files, report tensors, and generated v0-v5 files."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import pytest

import gen_legacy as gen
from conftest import FIXTURES, assert_values_equal, manifest
from reportdb.errors import AssemblyError, FormatError, ReportDBError
from reportdb.formats import load_tensor_file
from reportdb.spec import Placement

BIN = "ttnn-0.62.2-bin"
ORDERS = ["little", "big"]


def _values(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    """Test values every reader path returns exactly (block floats: small integers, see blockfloat)."""
    rng = np.random.default_rng(seed)
    if dtype == "BFLOAT8_B":
        return rng.integers(-127, 128, shape).astype(np.float32)
    if dtype == "BFLOAT4_B":
        return rng.integers(-7, 8, shape).astype(np.float32)
    if dtype == "BFLOAT16":
        return rng.integers(-(2**8), 2**8, shape).astype(np.float32) / 4
    if dtype == "FLOAT32":
        return rng.standard_normal(shape).astype(np.float32)
    top = {"UINT8": 255, "UINT16": 65535, "INT32": 2**31 - 1, "UINT32": 2**32 - 1}[dtype]
    return rng.integers(0, top, shape, dtype=np.int64)


# ---------------------------------------------------------------------------------------------
# Real files


@pytest.mark.parametrize("entry", manifest(BIN), ids=lambda e: e["name"])
def test_real_v5_files(entry: dict) -> None:
    loaded = load_tensor_file(FIXTURES / BIN / entry["file"])
    expected = np.load(FIXTURES / BIN / "expected" / f"{entry['name']}.npy")
    assert_values_equal(loaded.array, expected)
    spec = loaded.spec
    assert spec.ttnn_dtype == entry["dtype"].split(".")[1]
    assert spec.layout == entry["layout"].split(".")[1]
    assert list(spec.logical_shape) == entry["shape"]
    assert list(spec.padded_shape) == entry["padded_shape"]
    assert loaded.source["format"] == "bin" and loaded.source["version"] == 5
    assert loaded.source["byte_order"] == "little"
    assert len(loaded.shards) == 1 and loaded.shards[0][0] == ()
    assert loaded.shards[0][1].flags.c_contiguous
    assert spec.memory_config is not None
    assert spec.memory_config["memory_layout"] in entry["memory_config"]


def test_real_memory_config_is_structured() -> None:
    loaded = load_tensor_file(FIXTURES / BIN / "files" / "t024_mc_height_sharded_l1.bin")
    mc = loaded.spec.memory_config
    assert mc is not None
    assert mc["memory_layout"] == "HEIGHT_SHARDED" and mc["buffer_type"] == "L1"
    assert mc["shard_spec"] == {
        "grid": [[[0, 0], [1, 0]]],
        "shape": [32, 64],
        "orientation": "ROW_MAJOR",
        "mode": "PHYSICAL",
        "physical_shard_shape": None,
        "halo": None,
    }
    assert mc["nd_shard_spec"]["shard_shape"] == [32, 64]


def _report_files(folder: str, ext: str) -> list[Path]:
    return sorted((FIXTURES / folder / "report" / "tensors").glob(f"*{ext}"))


@pytest.mark.parametrize("path", _report_files(BIN, ".bin"), ids=lambda p: p.name)
def test_real_report_tensors(path: Path) -> None:
    loaded = load_tensor_file(path)
    assert_values_equal(loaded.array, np.load(FIXTURES / BIN / "report_expected" / f"{path.stem}.npy"))
    assert loaded.spec.storage_type == "HOST"
    assert loaded.source["path"] == str(path)


# ---------------------------------------------------------------------------------------------
# Generated v0-v4


DTYPES_BY_VERSION = {
    0: ["BFLOAT16", "FLOAT32", "UINT32", "BFLOAT8_B", "BFLOAT4_B", "UINT16"],
    1: ["BFLOAT16", "FLOAT32", "UINT32", "BFLOAT8_B", "BFLOAT4_B", "UINT16"],
    2: ["BFLOAT16", "FLOAT32", "UINT32", "BFLOAT8_B", "BFLOAT4_B", "UINT16", "INT32"],
    3: list(gen.DTYPE_VALUES),
    4: list(gen.DTYPE_VALUES),
}
CASES = [
    (version, dtype, layout, order)
    for version, dtypes in DTYPES_BY_VERSION.items()
    for dtype in dtypes
    for layout in ("ROW_MAJOR", "TILE")
    if layout == "TILE" or not dtype.endswith("_B")
    for order in ORDERS
]


@pytest.mark.parametrize("version,dtype,layout,order", CASES)
def test_generated_single_buffer(tmp_path: Path, version: int, dtype: str, layout: str, order: str) -> None:
    values = _values((2, 3, 37, 45), dtype)
    path = tmp_path / "t.bin"
    if version == 0:
        gen.write_v0(path, values, dtype, layout, order=order)
    else:
        gen.write_legacy(path, version, values, dtype, layout, order=order)
    loaded = load_tensor_file(path)
    assert_values_equal(loaded.array, values)
    assert loaded.source == {"format": "bin", "version": version, "byte_order": order, "path": str(path)}
    spec = loaded.spec
    assert spec.ttnn_dtype == dtype and spec.layout == layout
    assert spec.logical_shape == values.shape
    assert spec.padded_shape == gen.legacy_dims(values.shape, layout == "TILE")
    assert spec.tile_shape == ((32, 32) if layout == "TILE" else None)
    assert spec.storage_type == (None if version == 0 else "OWNED")
    assert loaded.shards[0][0] == ()
    array = loaded.shards[0][1]
    assert array.dtype.byteorder in ("<", "=", "|") and array.flags.c_contiguous


def test_outer_dim_padding_is_cropped(tmp_path: Path) -> None:
    values = _values((3, 5, 40), "FLOAT32")
    path = tmp_path / "t.bin"
    gen.write_legacy(path, 3, values, "FLOAT32", "TILE", dims=(4, 32, 64))
    loaded = load_tensor_file(path)
    assert_values_equal(loaded.array, values)
    assert loaded.spec.padded_shape == (4, 32, 64)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("layout,dtype", [("ROW_MAJOR", "UINT16"), ("TILE", "UINT16"), ("TILE", "BFLOAT4_B")])
def test_v0_datatype_4_is_settled_by_count(tmp_path: Path, order: str, layout: str, dtype: str) -> None:
    values = _values((1, 1, 64, 64), dtype)
    path = tmp_path / "t.bin"
    gen.write_v0(path, values, dtype, layout, dtype_value=4, order=order)
    loaded = load_tensor_file(path)
    assert loaded.spec.ttnn_dtype == dtype
    assert_values_equal(loaded.array, values)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("version", [2, 3, 4])
@pytest.mark.parametrize("sharded", [False, True])
def test_memory_config_block(tmp_path: Path, order: str, version: int, sharded: bool) -> None:
    shard = {"grid": [((0, 0), (3, 7)), ((5, 0), (5, 1))], "shape": (32, 128), "orientation": 1, "halo": True} if sharded else None
    block = gen.memory_config_block(version, 2 if sharded else 0, 1, shard, order)
    values = _values((1, 1, 64, 128), "BFLOAT16")
    path = tmp_path / "t.bin"
    gen.write_legacy(path, version, values, "BFLOAT16", "TILE", storage=1, memory_config=block, order=order)
    loaded = load_tensor_file(path)
    assert_values_equal(loaded.array, values)
    assert loaded.spec.storage_type == "DEVICE"
    mc = loaded.spec.memory_config
    assert mc is not None and mc["buffer_type"] == "L1"
    if not sharded:
        assert mc == {"memory_layout": "INTERLEAVED", "buffer_type": "L1", "shard_spec": None, "nd_shard_spec": None}
        return
    assert mc["memory_layout"] == "HEIGHT_SHARDED"
    assert mc["shard_spec"] == {
        "grid": [[[0, 0], [3, 7]], [[5, 0], [5, 1]]],
        "shape": [32, 128],
        "orientation": "COL_MAJOR",
        "mode": None,
        "physical_shard_shape": None,
        "halo": True if version <= 3 else None,
    }


def test_real_standalone_memory_config_layout(tmp_path: Path) -> None:
    """The 63-byte memory_config.bin of tt-metal (spec §14) is exactly what the generator writes."""
    block = gen.memory_config_block(1, 2, 1, {"grid": [((0, 0), (3, 7))], "shape": (32, 128), "orientation": 0})
    assert len(block) == 63


def _devices(n: int, dtype: str, shape: tuple[int, ...] = (1, 2, 40, 33)) -> list[np.ndarray]:
    return [_values(shape, dtype, seed=i) for i in range(n)]


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("version,storage", [(1, 4), (2, 3), (2, 4)])
def test_multi_device_without_strategy(tmp_path: Path, order: str, version: int, storage: int) -> None:
    arrays = _devices(3, "FLOAT32")
    path = tmp_path / "t.bin"
    gen.write_legacy(path, version, arrays, "FLOAT32", "TILE", storage=storage, order=order)
    loaded = load_tensor_file(path)
    assert [c for c, _ in loaded.shards] == [(0,), (1,), (2,)]
    for (_, got), want in zip(loaded.shards, arrays):
        assert_values_equal(got, want)
    assert loaded.spec.storage_type == {3: "MULTI_DEVICE", 4: "MULTI_DEVICE_HOST"}[storage]
    with pytest.raises(AssemblyError):
        loaded.array


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("version", [3, 4])
@pytest.mark.parametrize("dtype", ["BFLOAT16", "BFLOAT8_B", "INT32"])
def test_multi_device_strategies(tmp_path: Path, order: str, version: int, dtype: str) -> None:
    arrays = _devices(4, dtype)
    path = tmp_path / "t.bin"

    gen.write_legacy(path, version, arrays, dtype, "TILE", storage=4, strategy=("Shard", 2), order=order)
    loaded = load_tensor_file(path)
    assert_values_equal(loaded.array, np.concatenate(arrays, axis=2))
    dist = loaded.spec.distribution
    assert dist is not None and dist.mesh_shape == (4,) and dist.placements == (Placement("shard", 2),)
    assert loaded.spec.logical_shape == (1, 2, 160, 33)

    gen.write_legacy(path, version, arrays, dtype, "TILE", storage=4, strategy=("Shard", -1), order=order)
    assert_values_equal(load_tensor_file(path).array, np.concatenate(arrays, axis=-1))

    gen.write_legacy(path, version, arrays, dtype, "TILE", storage=4, strategy=("Replicate", 4), order=order)
    loaded = load_tensor_file(path)
    assert len(loaded.shards) == 1
    assert_values_equal(loaded.array, arrays[0])
    assert loaded.spec.distribution.strategy == "Replicate"
    assert loaded.spec.distribution.params["replication_factor"] == 4

    gen.write_legacy(path, version, arrays, dtype, "TILE", storage=3, strategy=("Shard2D", 2, 2), order=order)
    loaded = load_tensor_file(path)
    assert [c for c, _ in loaded.shards] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert loaded.spec.distribution.strategy == "Shard2D" and loaded.spec.distribution.placements is None
    assert loaded.spec.distribution.params == {"mesh_y": 2, "mesh_x": 2}
    with pytest.raises(AssemblyError, match="shards"):
        loaded.array

    gen.write_legacy(path, version, arrays, dtype, "TILE", storage=4, strategy=("AllGather",), order=order)
    loaded = load_tensor_file(path)
    assert loaded.spec.distribution.strategy == "AllGather"
    for (_, got), want in zip(loaded.shards, arrays):
        assert_values_equal(got, want)


def test_v3_index_2_before_august_2024_is_allgather(tmp_path: Path) -> None:
    arrays = _devices(3, "FLOAT32")
    path = tmp_path / "t.bin"
    gen.write_legacy(path, 3, arrays, "FLOAT32", "TILE", storage=4, strategy=("AllGather",), strategy_index=2)
    assert load_tensor_file(path).spec.distribution.strategy == "AllGather"


def test_per_buffer_shapes_may_differ(tmp_path: Path) -> None:
    arrays = [_values((1, 1, 40, 33), "FLOAT32", 1), _values((1, 1, 7, 33), "FLOAT32", 2)]
    path = tmp_path / "t.bin"
    gen.write_legacy(path, 3, arrays, "FLOAT32", "TILE", storage=4, strategy=("Shard", 2))
    loaded = load_tensor_file(path)
    assert_values_equal(loaded.array, np.concatenate(arrays, axis=2))
    assert loaded.spec.logical_shape == (1, 1, 47, 33)


# ---------------------------------------------------------------------------------------------
# Generated v5


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize(
    "spec",
    [
        gen.Spec("BFLOAT16", (32, 32)),
        gen.Spec("BFLOAT8_B", (32, 32)),
        gen.Spec("BFLOAT4_B", (16, 32)),
        gen.Spec("FLOAT32", (32, 16), transpose=True),
        gen.Spec("UINT8", None),
        gen.Spec("INT32", (32, 32), pad_value=7),
    ],
    ids=lambda s: f"{s.dtype}-{s.tile}-{s.transpose}",
)
def test_v5_storage_variants(tmp_path: Path, order: str, spec: gen.Spec) -> None:
    values = _values((2, 3, 20, 50), spec.dtype)
    path = tmp_path / "t.bin"
    for storage, name in ((0, "HOST"), (2, "BORROWED"), (1, "DEVICE")):
        gen.write_v5(path, values, spec, storage=storage, order=order)
        loaded = load_tensor_file(path)
        assert_values_equal(loaded.array, values)
        assert loaded.spec.storage_type == name and loaded.shards[0][0] == ()
        assert loaded.spec.tile_shape == spec.tile and loaded.spec.transpose_tile == spec.transpose
        assert loaded.source["byte_order"] == order
    arrays = [_values((2, 3, 20, 50), spec.dtype, seed=i) for i in range(2)]
    for storage, name in ((1, "DEVICE"), (3, "MULTI_DEVICE"), (4, "MULTI_DEVICE_HOST")):
        gen.write_v5(path, arrays, spec, storage=storage, strategy=("Shard", 0), order=order)
        loaded = load_tensor_file(path)
        assert loaded.spec.storage_type == name
        assert_values_equal(loaded.array, np.concatenate(arrays, axis=0))
        assert loaded.spec.logical_shape == (4, 3, 20, 50)


def test_v5_multi_device_with_differing_per_buffer_specs(tmp_path: Path) -> None:
    spec = gen.Spec("BFLOAT16", (32, 32))
    arrays = [_values((1, 30, 64), "BFLOAT16", 1), _values((1, 70, 64), "BFLOAT16", 2)]
    path = tmp_path / "t.bin"
    gen.write_v5(path, arrays, spec, storage=4, strategy=("Shard", 1))
    loaded = load_tensor_file(path)
    assert_values_equal(loaded.array, np.concatenate(arrays, axis=1))
    gen.write_v5(path, arrays, spec, storage=4, strategy=("Replicate", 2))
    loaded = load_tensor_file(path)
    assert len(loaded.shards) == 1
    assert_values_equal(loaded.array, arrays[0])


def test_v5_logical_shard_mode(tmp_path: Path) -> None:
    mc = {"memory_layout": 2, "buffer_type": 1, "shard_spec": {"grid": [((0, 0), (1, 0))], "shape": (40, 50), "mode": 1}}
    spec = gen.Spec("BFLOAT16", (32, 32), memory_config=mc)
    values = _values((2, 50, 70), "BFLOAT16")
    path = tmp_path / "t.bin"
    gen.write_v5(path, values, spec)
    loaded = load_tensor_file(path)
    assert_values_equal(loaded.array, values)
    assert loaded.spec.memory_config["shard_spec"]["mode"] == "LOGICAL"


# ---------------------------------------------------------------------------------------------
# Errors


def _write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "bad.bin"
    path.write_bytes(data)
    return path


def test_errors_name_the_file_and_the_problem(tmp_path: Path) -> None:
    good = tmp_path / "good.bin"
    gen.write_legacy(good, 3, _values((1, 1, 32, 32), "FLOAT32"), "FLOAT32", "TILE")
    data = good.read_bytes()
    cases = {
        "truncated": data[:-1],
        "trailing": data + b"\0",
        "version": data[:8] + b"\x09" + data[9:],
        "rank": data[:9] + struct.pack("<Q", 12) + data[17:],
        "dtype": data[:193] + struct.pack("<i", 99) + data[197:],
        "empty": b"",
        "short": b"\xff" * 8,
        "garbage": os.urandom(64),
    }
    for name, blob in cases.items():
        path = _write(tmp_path, blob)
        with pytest.raises(FormatError) as info:
            load_tensor_file(path)
        assert str(path) in str(info.value), name


def test_count_must_match_the_shape(tmp_path: Path) -> None:
    path = tmp_path / "t.bin"
    gen.write_legacy(path, 1, _values((1, 1, 2, 3), "BFLOAT16"), "BFLOAT16")
    data = bytearray(path.read_bytes())
    struct.pack_into("<Q", data, 205, 5)
    with pytest.raises(ReportDBError, match="count|elements|remain"):
        load_tensor_file(_write(tmp_path, bytes(data[:-2])))


def test_worked_offsets_of_the_spec(tmp_path: Path) -> None:
    """Spec §12: a v3 host ROW_MAJOR bf16 [1,1,2,3] file is 226 bytes, v1 is 225 and v0 is 212."""
    values = _values((1, 1, 2, 3), "BFLOAT16")
    sizes = {}
    for version in (0, 1, 3):
        path = tmp_path / f"v{version}.bin"
        if version:
            gen.write_legacy(path, version, values, "BFLOAT16")
        else:
            gen.write_v0(path, values, "BFLOAT16")
        sizes[version] = path.stat().st_size
        assert_values_equal(load_tensor_file(path).array, values)
    assert sizes == {0: 212, 1: 225, 3: 226}


@pytest.mark.process
def test_missing_and_unreadable_paths_raise_reportdb_errors(tmp_path) -> None:
    from reportdb.errors import ReportNotFoundError

    with pytest.raises(ReportNotFoundError, match="no such tensor file"):
        load_tensor_file(tmp_path / "missing.bin")
    with pytest.raises(ReportNotFoundError, match="is a folder"):
        load_tensor_file(tmp_path)
    os.mkfifo(tmp_path / "pipe.bin")
    [(kind, message)] = gen.read_under_limit([tmp_path / "pipe.bin"], timeout=30)  # must not block on the FIFO
    assert kind == "FormatError" and "not a regular file" in message, message


# ---------------------------------------------------------------- declared sizes far beyond the bytes present


def _patched(path: Path, at: int, value: bytes) -> Path:
    data = bytearray(path.read_bytes())
    data[at : at + len(value)] = value
    path.write_bytes(bytes(data))
    return path


@pytest.mark.process
def test_declared_counts_beyond_the_file_are_refused_before_allocating(tmp_path: Path) -> None:
    """Counts, shapes and sizes claiming far more than the file holds: each refused, in a process whose
    address space is capped, so a reader that allocated from the claim would fail here instead of swapping."""
    values = _values((1, 1, 32, 32), "BFLOAT16")
    cases: dict[str, tuple[Path, str]] = {}

    def case(name: str, message: str) -> Path:
        cases[name] = (tmp_path / f"{name}.bin", message)
        return cases[name][0]

    # v1: sentinel, version, 184-byte LegacyShape, DataType+Layout, StorageType: the element count is at 205
    gen.write_legacy(case("element-count", "claims"), 1, values, "BFLOAT16")
    _patched(cases["element-count"][0], 205, struct.pack("<Q", 1 << 62))
    gen.write_legacy(case("shape", "needs"), 1, values, "BFLOAT16")  # LegacyShape dims: 4 x (2**32 - 1)
    _patched(cases["shape"][0], 9 + 8, struct.pack("<4I", *[2**32 - 1] * 4))
    # v3 multi-device: has_memory_config (205) = 0, then num_buffers at 206
    gen.write_legacy(case("num-buffers", "num_buffers"), 3, [values, values], "BFLOAT16", storage=4, strategy=("Shard", 0))
    _patched(cases["num-buffers"][0], 206, struct.pack("<Q", 1 << 40))
    # v2 memory config: flag 205, mc version 206, layouts 207-214, has_shard_spec 215, core range count at 216
    block = gen.memory_config_block(2, 2, 1, {"grid": [((0, 0), (1, 1))], "shape": [32, 32]})
    gen.write_legacy(case("core-ranges", "core ranges"), 2, values, "BFLOAT16", memory_config=block)
    _patched(cases["core-ranges"][0], 216, struct.pack("<Q", 1 << 40))
    gen.write_v5(case("v5-spec-size", "implausible TensorSpec size"), values, gen.Spec("BFLOAT16", None))
    _patched(cases["v5-spec-size"][0], 9, b"\x7f" * 8)  # implausible in either byte order
    names = list(cases)
    outcomes = gen.read_under_limit([cases[n][0] for n in names])
    for name, (kind, message) in zip(names, outcomes):
        assert kind == "FormatError" and cases[name][1] in message, (name, kind, message)


@pytest.mark.slow
def test_core_range_count_is_capped_even_when_the_bytes_are_there(tmp_path: Path) -> None:
    """Each 32-byte core range becomes ~10x as Python lists: a grid larger than any chip's is refused."""
    from reportdb.formats.tensorbin import MAX_CORE_RANGES

    values = _values((1, 1, 32, 32), "BFLOAT16")
    grid = [((0, 0), (1, 1))] * (MAX_CORE_RANGES + 1)
    block = gen.memory_config_block(2, 2, 1, {"grid": grid, "shape": [32, 32]})
    path = tmp_path / "grid.bin"
    gen.write_legacy(path, 2, values, "BFLOAT16", memory_config=block)
    with pytest.raises(FormatError, match=f"or than {MAX_CORE_RANGES}"):
        load_tensor_file(path)
    gen.write_legacy(path, 2, values, "BFLOAT16", memory_config=gen.memory_config_block(2, 2, 1, {"grid": grid[:100], "shape": [32, 32]}))
    assert len(load_tensor_file(path).spec.memory_config["shard_spec"]["grid"]) == 100
