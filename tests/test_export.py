"""Loaded tensors written as .npy / .npz / .safetensors read back exactly, and failures leave no file."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from reportdb.dtypes import DTYPES
from reportdb.errors import AssemblyError, UnsupportedDTypeError
from reportdb.formats import export
from reportdb.formats.export import SAFETENSORS_DTYPES, ExportFormatError, describe, write_array
from reportdb.spec import Distribution, LoadedTensor, Placement, TensorSpec

SPEC = TensorSpec(
    ttnn_dtype="BFLOAT16",
    layout="TILE",
    tile_shape=(32, 32),
    logical_shape=(3, 4),
    padded_shape=(32, 32),
    memory_config={"memory_layout": "INTERLEAVED", "buffer_type": "DRAM", "shard_spec": None, "nd_shard_spec": None},
)


def _values(dtype: np.dtype, shape: tuple[int, ...] = (3, 4)) -> np.ndarray:
    """Distinct, exactly representable values of ``dtype``."""
    count = int(np.prod(shape))
    if dtype == np.bool_:
        return (np.arange(count) % 3 == 0).reshape(shape)
    base = np.arange(count, dtype=np.float64) % 100 - (50 if dtype.kind in "fV" or dtype.kind == "i" else 0)
    return base.astype(np.float32).astype(dtype).reshape(shape)


def _single(array: np.ndarray, spec: TensorSpec = SPEC) -> LoadedTensor:
    return LoadedTensor(shards=[((0, 0), array)], spec=spec, source={"path": Path("/r/tensors/7.bin"), "kind": "bin"})


def _mesh(placements: tuple[Placement, ...] | None) -> LoadedTensor:
    shards = [((0, i), _values(np.dtype(ml_dtypes.bfloat16)) + i) for i in range(2)]
    spec = TensorSpec(ttnn_dtype="BFLOAT16", distribution=Distribution(mesh_shape=(1, 2), placements=placements))
    return LoadedTensor(shards=shards, spec=spec, source={"kind": "tensorbin"})


SHARDED = (Placement("replicate"), Placement("shard", 1))


def _read_safetensors(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Parse a safetensors file by the format's own rules, independently of the safetensors package."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    assert length % 8 == 0
    text = raw[8 : 8 + length]
    assert text.startswith(b"{") and text.rstrip(b" ").endswith(b"}"), "JSON padded with spaces only"
    header = json.loads(text)
    codes = {code: name for name, code in SAFETENSORS_DTYPES.items()}
    data = raw[8 + length :]
    tensors: dict[str, np.ndarray] = {}
    end = 0
    for name, info in sorted(((k, v) for k, v in header.items() if k != "__metadata__"), key=lambda kv: kv[1]["data_offsets"]):
        begin, stop = info["data_offsets"]
        assert begin == end, "tensors must be packed without gaps"
        end = stop
        tensors[name] = np.frombuffer(data[begin:stop], dtype=DTYPES[codes[info["dtype"]]]).reshape(info["shape"])
    assert end == len(data), "no trailing bytes"
    return header, tensors


# --- .npy -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_npy_round_trip_every_dtype(tmp_path: Path, name: str) -> None:
    array = _values(DTYPES[name])
    write_array(_single(array), tmp_path / "t.npy")
    back = np.load(tmp_path / "t.npy")
    if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        assert back.dtype == np.float32  # numpy cannot name ml_dtypes in .npy: widened, exactly
        assert np.array_equal(back.astype(array.dtype).view(np.uint8), array.view(np.uint8))
    else:
        assert back.dtype == DTYPES[name]
        assert np.array_equal(back, array)


def test_npy_bfloat16_widening_streams_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(export, "_CHUNK_BYTES", 40)  # 10 float32 values per chunk
    array = (np.arange(1001, dtype=np.float32) / 7).astype(ml_dtypes.bfloat16).reshape(7, 11, 13)
    write_array(_single(array), tmp_path / "t.npy")
    assert np.array_equal(np.load(tmp_path / "t.npy"), array.astype(np.float32))


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12, dtype=">i4").reshape(3, 4),
        np.arange(24, dtype=np.float32).reshape(4, 6)[::2, ::3],
        np.arange(12, dtype=np.float64).reshape(3, 4).T,
        np.array(2.5, dtype=np.float32),
        np.zeros((0, 5), dtype=np.int16),
    ],
    ids=["big-endian", "strided", "transposed", "0-d", "empty"],
)
def test_npy_layouts(tmp_path: Path, array: np.ndarray) -> None:
    write_array(_single(array), tmp_path / "t.npy")
    back = np.load(tmp_path / "t.npy")
    assert back.shape == array.shape and back.dtype.byteorder in ("<", "=", "|")
    assert np.array_equal(back, array)


def test_npy_of_assembled_mesh_tensor(tmp_path: Path) -> None:
    loaded = _mesh(SHARDED)
    write_array(loaded, tmp_path / "t.npy")
    assert np.array_equal(np.load(tmp_path / "t.npy"), loaded.array.astype(np.float32))
    assert np.load(tmp_path / "t.npy").shape == (3, 8)


# --- .npz -----------------------------------------------------------------------------------------


def test_npz_single_device(tmp_path: Path) -> None:
    array = _values(np.dtype(ml_dtypes.bfloat16))
    write_array(_single(array), tmp_path / "t.npz")
    with np.load(tmp_path / "t.npz") as data:
        assert sorted(data.files) == ["dtype", "global", "shard_0_0_0", "spec"]
        assert data["spec"].shape == () and data["spec"].dtype.kind == "U"
        assert TensorSpec.from_json(json.loads(str(data["spec"]))) == SPEC
        assert str(data["dtype"]) == "bfloat16"
        restored = data["shard_0_0_0"].astype(getattr(ml_dtypes, str(data["dtype"])))
        assert np.array_equal(restored.view(np.uint16), array.view(np.uint16))
        assert np.array_equal(data["global"], data["shard_0_0_0"])


def test_npz_mesh_with_and_without_assembly(tmp_path: Path) -> None:
    sharded = _mesh(SHARDED)
    write_array(sharded, tmp_path / "a.npz")
    with np.load(tmp_path / "a.npz") as data:
        assert sorted(data.files) == ["dtype", "global", "shard_0_0_0", "shard_1_0_1", "spec"]
        assert np.array_equal(data["shard_1_0_1"], sharded.shards[1][1].astype(np.float32))
        assert np.array_equal(data["global"], np.concatenate([a for _, a in sharded.shards], axis=1).astype(np.float32))

    unknown = _mesh(None)  # legacy strategy without tensor dims: shards only
    write_array(unknown, tmp_path / "b.npz")
    with np.load(tmp_path / "b.npz") as data:
        assert sorted(data.files) == ["dtype", "shard_0_0_0", "shard_1_0_1", "spec"]


# --- .safetensors ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_safetensors_every_dtype_kept(tmp_path: Path, name: str) -> None:
    array = _values(DTYPES[name], (2, 3, 5))
    write_array(_single(array), tmp_path / "t.safetensors")
    header, tensors = _read_safetensors(tmp_path / "t.safetensors")
    assert header["tensor"]["dtype"] == SAFETENSORS_DTYPES[name]
    assert header["tensor"]["shape"] == [2, 3, 5]
    assert tensors["tensor"].dtype == DTYPES[name]
    assert np.array_equal(tensors["tensor"].view(np.uint8), np.ascontiguousarray(array).view(np.uint8))
    assert TensorSpec.from_json(json.loads(header["__metadata__"]["spec"])) == SPEC
    assert json.loads(header["__metadata__"]["source"]) == {"path": "/r/tensors/7.bin", "kind": "bin"}


def test_safetensors_one_tensor_per_shard(tmp_path: Path) -> None:
    loaded = _mesh(None)
    write_array(loaded, tmp_path / "t.safetensors")
    header, tensors = _read_safetensors(tmp_path / "t.safetensors")
    assert sorted(tensors) == ["shard_0_0_0", "shard_1_0_1"]
    for (_, array), name in zip(loaded.shards, ["shard_0_0_0", "shard_1_0_1"]):
        assert header[name]["dtype"] == "BF16"
        assert np.array_equal(tensors[name].view(np.uint16), array.view(np.uint16))


def test_safetensors_big_endian_and_strided(tmp_path: Path) -> None:
    array = np.arange(60, dtype=">f8").reshape(6, 10)[::2, 1::3]
    write_array(_single(array), tmp_path / "t.safetensors")
    _, tensors = _read_safetensors(tmp_path / "t.safetensors")
    assert np.array_equal(tensors["tensor"], array)


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_safetensors_package_reads_our_files(tmp_path: Path, name: str) -> None:
    safetensors = pytest.importorskip("safetensors")
    st_numpy = pytest.importorskip("safetensors.numpy")
    array = _values(DTYPES[name], (4, 5))
    out = tmp_path / "t.safetensors"
    write_array(_single(array), out)
    [(tensor_name, info)] = safetensors.deserialize(out.read_bytes())  # the Rust parser validates the layout
    assert (tensor_name, info["dtype"], info["shape"]) == ("tensor", SAFETENSORS_DTYPES[name], [4, 5])
    assert bytes(info["data"]) == array.tobytes()
    if not name.startswith("float8"):  # safetensors.numpy looks float8 types up on numpy itself, which lacks them
        back = st_numpy.load_file(str(out))["tensor"]
        assert back.shape == array.shape
        assert np.array_equal(back.view(np.uint8), array.view(np.uint8))


# --- failures -------------------------------------------------------------------------------------


def test_unknown_suffix(tmp_path: Path) -> None:
    with pytest.raises(ExportFormatError, match=r"\.npy, \.npz, \.safetensors"):
        write_array(_single(_values(np.dtype(np.float32))), tmp_path / "t.pt")
    assert list(tmp_path.iterdir()) == []


def test_missing_or_file_folder_names_the_users_path(tmp_path: Path) -> None:
    (tmp_path / "afile").write_bytes(b"")
    for out, why in ((tmp_path / "nodir" / "t.npy", "does not exist"), (tmp_path / "afile" / "t.npy", "is not a folder")):
        with pytest.raises(export.OutputPathError) as info:
            write_array(_single(_values(np.dtype(np.float32))), out)
        assert str(info.value).startswith(f"cannot write {out}: ") and why in str(info.value) and ".tmp" not in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_npy_of_unassemblable_tensor_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(AssemblyError, match=r"\.npz or \.safetensors"):
        write_array(_mesh(None), tmp_path / "t.npy")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("suffix", export.SUPPORTED_SUFFIXES)
def test_failure_mid_write_leaves_previous_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str) -> None:
    out = tmp_path / f"t{suffix}"
    out.write_bytes(b"previous")

    def broken(*args: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(export, "_write_values", broken)
    with pytest.raises(export.OutputPathError, match=re.escape(f"cannot write {out}: disk full")):
        write_array(_single(_values(np.dtype(np.float32))), out)
    assert list(tmp_path.iterdir()) == [out]
    assert out.read_bytes() == b"previous"


def test_unsupported_dtype_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedDTypeError):
        write_array(_single(np.zeros(3, dtype=np.complex64)), tmp_path / "t.safetensors")
    assert list(tmp_path.iterdir()) == []


# --- describe -------------------------------------------------------------------------------------


def test_describe_single_device() -> None:
    array = np.array([[1.5, np.nan, -np.inf], [4.0, 2.0, np.inf]], dtype=np.float32)
    info = describe(_single(array), preview=4)
    json.dumps(info, allow_nan=False)  # strict JSON
    assert info["spec"] == SPEC.to_json()
    assert info["source"] == {"path": "/r/tensors/7.bin", "kind": "bin"}
    assert info["shape"] == [2, 3] and info["dtype"] == "float32" and info["assembly_error"] is None
    assert info["shards"] == [{"index": 0, "mesh_coordinate": [0, 0], "shape": [2, 3], "dtype": "float32"}]
    finite = np.array([1.5, 4.0, 2.0])
    stats = info["stats"]
    assert (stats["count"], stats["nan_count"], stats["inf_count"]) == (6, 1, 2)
    assert (stats["min"], stats["max"]) == (1.5, 4.0)
    assert stats["mean"] == pytest.approx(finite.mean()) and stats["std"] == pytest.approx(finite.std())
    assert info["preview"] == [1.5, "nan", "-inf", 4.0]


def test_describe_integers_bfloat16_and_empty() -> None:
    ints = describe(_single(np.arange(10, dtype=np.uint32)))
    assert ints["preview"] == [0, 1, 2, 3, 4, 5] and all(type(v) is int for v in ints["preview"])
    bf = describe(_single(np.array([0.5, 3.0], dtype=ml_dtypes.bfloat16)))
    assert bf["dtype"] == "bfloat16" and bf["preview"] == [0.5, 3.0]
    assert bf["stats"]["max"] == 3.0
    empty = describe(_single(np.zeros((0, 3), dtype=np.float32)))
    assert empty["preview"] == [] and empty["stats"]["count"] == 0 and empty["stats"]["mean"] is None


def test_describe_unassemblable_mesh() -> None:
    loaded = _mesh(None)
    info = describe(loaded, preview=14)
    json.dumps(info, allow_nan=False)
    assert info["shape"] is None and "cannot be assembled" in info["assembly_error"]
    assert [s["mesh_coordinate"] for s in info["shards"]] == [[0, 0], [0, 1]]
    everything = np.concatenate([a.astype(np.float64).ravel() for _, a in loaded.shards])
    assert info["stats"]["count"] == everything.size
    assert info["stats"]["mean"] == pytest.approx(everything.mean())
    assert info["preview"] == everything[:14].tolist()
