"""Tests of the torch-free ``.pt`` reader: real torch 2.13 files, report goldens, hostile and broken files."""

from __future__ import annotations

import builtins
import collections
import functools
import json
import os
import pickle
import re
import struct
import subprocess
import zipfile
import zlib
from pathlib import Path
from typing import Any, Callable

import ml_dtypes
import numpy as np
import pytest

import reportdb
from reportdb.errors import FormatError, ReportDBError, ReportNotFoundError, UnsafePickleError, UnsupportedDTypeError
from reportdb.formats import load_tensor_file
from reportdb.formats.pt import EXPANSION_SLACK, MAX_EXPANSION, MAX_PICKLE_BYTES, budget, read_pt

import gen_legacy as gen
from conftest import FIXTURES, assert_values_equal, manifest

PT = FIXTURES / "torch-2.13-pt"
PT_ENTRIES = manifest("torch-2.13-pt")
REPORT_PTS = sorted(FIXTURES.glob("*/report/tensors/*.pt"))
ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8, "int64": 8, "int32": 4,
            "int16": 2, "int8": 1, "uint8": 1, "bool": 1}
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


def expected_values(entry: dict[str, Any]) -> np.ndarray:
    """The expected array in the manifest's logical shape.

    ``make_pt_corpus.py`` saved expectations through ``np.ascontiguousarray``, which turns a 0-d tensor
    into shape (1,); torch and the manifest say the shape is (), so only those files are reshaped.
    """
    expected = np.load(PT / "expected" / f"{entry['name']}.npy")
    return expected.reshape(entry["shape"]) if not entry["shape"] else expected


# ---------------------------------------------------------------- hand-assembled pickles (no torch)


def op_global(module: str, name: str) -> bytes:
    """A protocol-0 GLOBAL opcode, as torch's pickles use."""
    return b"c" + f"{module}\n{name}\n".encode()


def val(value: Any) -> bytes:
    """The opcodes that push ``value`` (a pickle without its PROTO header and STOP)."""
    return pickle.dumps(value, protocol=2)[2:-1]


def finish(body: bytes) -> bytes:
    """A complete protocol-2 pickle of the object ``body`` pushes."""
    return b"\x80\x02" + body + b"."


def tensor_body(
    *, size: tuple[int, ...], stride: tuple[int, ...], numel: int, offset: int = 0, storage: str = "FloatStorage",
    key: str = "0", rebuild: str = "_rebuild_tensor_v2", hooks: bytes | None = None, legacy_view: Any = "zip",
    dtype: str | None = None,
) -> bytes:
    """The opcodes torch.save writes for one tensor: rebuild(storage pid, offset, size, stride, False, hooks).

    ``legacy_view`` adds the sixth legacy persistent-id field (None or a view tuple); ``dtype`` makes it a
    ``_rebuild_tensor_v3`` call with that torch dtype.
    """
    pid = val("storage") + op_global("torch", storage) + val(key) + val("cpu") + val(numel)
    if legacy_view != "zip":
        pid += val(legacy_view)
    hooks = op_global("collections", "OrderedDict") + b")R" if hooks is None else hooks
    args = b"((" + pid + b"tQ" + val(offset) + val(tuple(size)) + val(tuple(stride)) + val(False) + hooks
    if dtype is not None:
        args += op_global("torch", dtype)
    return op_global("torch._utils", rebuild) + args + b"tR"


def write_zip(path: Path, pkl: bytes, records: dict[str, bytes], *, prefix: str = "archive",
              byteorder: bytes | None = b"little", compression: int = zipfile.ZIP_STORED) -> Path:
    """A zip ``.pt`` laid out as torch.save does: ``<prefix>/data.pkl``, ``byteorder``, ``data/<key>``."""
    with zipfile.ZipFile(path, "w", compression) as zf:
        zf.writestr(f"{prefix}/data.pkl", pkl)
        if byteorder is not None:
            zf.writestr(f"{prefix}/byteorder", byteorder)
        for key, data in records.items():
            zf.writestr(f"{prefix}/data/{key}", data)
    return path


def legacy_stream(obj_pickle: bytes, storages: list[tuple[str, bytes, int]], *, big_endian: bool = False) -> bytes:
    """The old serializer's layout: magic, protocol, sys_info, object, keys, then (numel, bytes) storages.

    ``big_endian`` writes counts (and the caller's data) as old torch did on big-endian hosts.
    """
    type_sizes = {"short": 2, "int": 4, "long": 4}
    sys_info = {"protocol_version": 1001, "little_endian": not big_endian, "type_sizes": type_sizes}
    head = pickle.dumps(LEGACY_MAGIC, 2) + pickle.dumps(1001, 2) + pickle.dumps(sys_info, 2)
    count = ">q" if big_endian else "<q"
    tail = b"".join(struct.pack(count, len(data) // size) + data for _, data, size in storages)
    return head + obj_pickle + pickle.dumps([key for key, _, _ in storages], 2) + tail


def f32(values: Any) -> bytes:
    """Little-endian float32 storage bytes."""
    return np.asarray(values, "<f4").tobytes()


def simple_pt(tmp_path: Path, pkl_body: bytes, data: bytes, name: str = "t.pt", **kwargs: Any) -> Path:
    """A zip ``.pt`` whose pickle is ``pkl_body`` and whose only storage, key "0", holds ``data``."""
    return write_zip(tmp_path / name, finish(pkl_body), {"0": data}, **kwargs)


# ---------------------------------------------------------------- real files


@pytest.mark.parametrize("entry", PT_ENTRIES, ids=[e["name"] for e in PT_ENTRIES])
def test_torch_fixture_values(entry: dict[str, Any]) -> None:
    loaded = read_pt(PT / entry["file"])
    array = loaded.array
    assert list(array.shape) == entry["shape"]
    assert loaded.spec.logical_shape == tuple(entry["shape"])
    assert_values_equal(array, expected_values(entry))
    assert array.flags.c_contiguous and array.flags.writeable
    dtype = entry["dtype"].removeprefix("torch.")
    assert loaded.source == {"format": "pt", "version": "legacy" if entry["kind"] == "legacy_serializer" else "zip",
                             "torch_dtype": dtype, "path": str(PT / entry["file"])}
    assert array.dtype == (np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype))
    assert len(loaded.shards) == 1 and loaded.shards[0][0] == ()


def test_fixture_corpus_covers_what_the_reader_claims() -> None:
    kinds = {e["kind"] for e in PT_ENTRIES}
    assert {"plain", "transposed", "slice", "detached", "legacy_serializer"} <= kinds
    assert {e["dtype"].removeprefix("torch.") for e in PT_ENTRIES} == set(ITEMSIZE)


@pytest.mark.parametrize("path", REPORT_PTS, ids=[f"{p.parents[2].name}/{p.name}" for p in REPORT_PTS])
def test_report_golden_pt(path: Path) -> None:
    """Each report's golden .pt, read as migration reads it (format found from the bytes), equals torch's values
    in torch's dtype and shape."""
    expected = np.load(path.parents[2] / "report_expected" / f"{path.stem}.npy")
    loaded = load_tensor_file(path)
    assert loaded.source["format"] == "pt" and loaded.source["path"] == str(path)
    assert loaded.array.dtype == expected.dtype and loaded.array.shape == expected.shape
    assert_values_equal(loaded.array, expected)


def test_every_report_golden_is_checked() -> None:
    """The glob above finds the reports' goldens (a moved fixture must not parametrize nothing), and every
    expected array of a report has its tensor file: no golden goes unchecked."""
    assert len(REPORT_PTS) >= 10
    for expected_dir in {path.parents[2] / "report_expected" for path in REPORT_PTS}:
        tensors = {p.stem for p in (expected_dir.parent / "report" / "tensors").iterdir()}
        orphans = [p.name for p in expected_dir.glob("*.npy") if p.name.split(".")[0] not in tensors]  # 7.shard0.npy
        assert not orphans, f"{expected_dir}: expected arrays without a tensor file: {orphans}"


def _rewrite_fixture(src: Path, dst: Path, edit: Callable[[str, bytes], bytes],
                     compression: int = zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compression) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, edit(info.filename, zin.read(info)))
    return dst


BIG_ENDIAN_CASES = [e for e in PT_ENTRIES if e["kind"] != "legacy_serializer" and e["shape"]]


@pytest.mark.parametrize("entry", BIG_ENDIAN_CASES, ids=[e["name"] for e in BIG_ENDIAN_CASES])
def test_big_endian_archive(tmp_path: Path, entry: dict[str, Any]) -> None:
    width = ITEMSIZE[entry["dtype"].removeprefix("torch.")]

    def to_big(name: str, data: bytes) -> bytes:
        if name.endswith("/byteorder"):
            return b"big"
        if "/data/" in name and not name.endswith("serialization_id"):
            return np.frombuffer(data, f"<u{width}").astype(f">u{width}").tobytes()
        return data

    path = _rewrite_fixture(PT / entry["file"], tmp_path / "big.pt", to_big)
    assert_values_equal(read_pt(path).array, expected_values(entry))


def test_deflated_archive_reads_equal(tmp_path: Path) -> None:
    entry = next(e for e in PT_ENTRIES if e["name"].endswith("int64_transposed"))
    path = _rewrite_fixture(PT / entry["file"], tmp_path / "z.pt", lambda _n, d: d, zipfile.ZIP_DEFLATED)
    assert_values_equal(read_pt(path).array, expected_values(entry))


# ---------------------------------------------------------------- hand-built valid files


def test_archive_folder_name_and_missing_byteorder(tmp_path: Path) -> None:
    body = tensor_body(size=(2, 3), stride=(1, 2), numel=6)
    path = simple_pt(tmp_path, body, f32(range(6)), prefix="some name", byteorder=None)
    np.testing.assert_array_equal(read_pt(path).array, np.arange(6, dtype="f4").reshape(3, 2).T)


def test_storage_offset_and_strides(tmp_path: Path) -> None:
    body = tensor_body(size=(2, 2), stride=(4, 2), offset=3, numel=12)
    expected = np.arange(12, dtype="f4")[3:].reshape(-1)[[0, 2, 4, 6]].reshape(2, 2)
    np.testing.assert_array_equal(read_pt(simple_pt(tmp_path, body, f32(range(12)))).array, expected)


def test_broadcast_view_with_zero_stride(tmp_path: Path) -> None:
    body = tensor_body(size=(3, 2), stride=(0, 1), numel=2)
    np.testing.assert_array_equal(read_pt(simple_pt(tmp_path, body, f32([5, 6]))).array, [[5, 6]] * 3)


def test_empty_tensor(tmp_path: Path) -> None:
    body = tensor_body(size=(0, 4), stride=(4, 1), numel=0)
    array = read_pt(simple_pt(tmp_path, body, b"")).array
    assert array.shape == (0, 4) and array.dtype == np.float32


@pytest.mark.parametrize(
    "wrap",
    [
        lambda t: b"}" + val("weight") + t + b"s",  # {"weight": t}
        lambda t: b"]" + t + b"a",  # [t]
        lambda t: b"}(" + val("t") + t + val("name") + val("x") + b"u",  # a dict with one tensor among other values
        lambda t: op_global("torch._utils", "_rebuild_parameter") + b"(" + t + b"\x88"
        + op_global("collections", "OrderedDict") + b")Rt" + b"R",  # nn.Parameter
        lambda t: op_global("torch._utils", "_rebuild_parameter_with_state") + b"(" + t + b"\x88"
        + op_global("collections", "OrderedDict") + b")R}tR",  # nn.Parameter with attributes
    ],
    ids=["dict", "list", "dict-with-extra", "parameter", "parameter-with-state"],
)
def test_containers_with_one_tensor(tmp_path: Path, wrap: Callable[[bytes], bytes]) -> None:
    body = wrap(tensor_body(size=(3,), stride=(1,), numel=3))
    np.testing.assert_array_equal(read_pt(simple_pt(tmp_path, body, f32([1, 2, 3]))).array, [1, 2, 3])


def test_rebuild_tensor_v1(tmp_path: Path) -> None:
    pid = b"(" + val("storage") + op_global("torch", "DoubleStorage") + val("0") + val("cpu") + val(4) + b"tQ"
    body = op_global("torch._utils", "_rebuild_tensor") + b"(" + pid + val(1) + val((3,)) + val((1,)) + b"tR"
    array = read_pt(simple_pt(tmp_path, body, np.arange(4, dtype="<f8").tobytes())).array
    np.testing.assert_array_equal(array, [1, 2, 3])
    assert array.dtype == np.float64


def test_rebuild_tensor_v3_untyped_storage(tmp_path: Path) -> None:
    body = tensor_body(size=(2, 2), stride=(2, 1), offset=1, numel=10, storage="UntypedStorage",
                       rebuild="_rebuild_tensor_v3", dtype="uint16")
    data = np.arange(5, dtype="<u2").tobytes()
    loaded = read_pt(simple_pt(tmp_path, body, data))
    np.testing.assert_array_equal(loaded.array, [[1, 2], [3, 4]])
    assert loaded.array.dtype == np.uint16 and loaded.source["torch_dtype"] == "uint16"


def test_bool_storage_bytes_are_normalized(tmp_path: Path) -> None:
    body = tensor_body(size=(3,), stride=(1,), numel=3, storage="BoolStorage")
    array = read_pt(simple_pt(tmp_path, body, bytes([0, 2, 255]))).array
    assert array.dtype == np.bool_ and array.tolist() == [False, True, True]


def test_legacy_stream_views_and_byte_order(tmp_path: Path) -> None:
    # torch < 0.4 pickled views of storages: ('storage', type, root, loc, numel, (view_key, offset, size)).
    body = tensor_body(size=(3,), stride=(1,), offset=1, numel=10, key="root", legacy_view=("v", 2, 5))
    data = np.arange(10, dtype=">f4").tobytes()
    path = tmp_path / "legacy.pt"
    path.write_bytes(legacy_stream(finish(body), [("root", data, 4)], big_endian=True))
    loaded = read_pt(path)
    np.testing.assert_array_equal(loaded.array, [3, 4, 5])
    assert loaded.source["version"] == "legacy"


def test_legacy_stream_skips_other_storages(tmp_path: Path) -> None:
    # the object is (a bare HalfStorage "a", a tensor on LongStorage "b"): storage "a" is skipped unread
    storage_a = b"(" + val("storage") + op_global("torch", "HalfStorage") + val("a") + val("cpu") + val(3) + val(None)
    tensor_b = tensor_body(size=(2,), stride=(1,), numel=2, key="b", storage="LongStorage", legacy_view=None)
    storages = [("a", np.zeros(3, "<f2").tobytes(), 2), ("b", np.array([7, -8], "<i8").tobytes(), 8)]
    path = tmp_path / "legacy.pt"
    path.write_bytes(legacy_stream(finish(storage_a + b"tQ" + tensor_b + b"\x86"), storages))
    np.testing.assert_array_equal(read_pt(path).array, [7, -8])


# ---------------------------------------------------------------- hostile pickles


class Reduce:
    """Pickles as ``func(*args)``: what a hostile file asks the unpickler to run."""

    def __init__(self, func: Callable[..., Any], *args: Any) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self.func, self.args


def _payloads(marker: Path) -> dict[str, tuple[bytes, str]]:
    """Hostile pickles (each would create ``marker``) and the global each must be refused for."""
    cmd = f"touch {marker}"
    return {
        "os.system-p2": (pickle.dumps(Reduce(os.system, cmd), 2), f"{os.system.__module__}.system"),
        "os.system-p0-GLOBAL": (b"cos\nsystem\n(V" + cmd.encode() + b"\ntR.", "os.system"),
        "posix.system-GLOBAL": (b"\x80\x02cposix\nsystem\nX" + struct.pack("<I", len(cmd)) + cmd.encode() + b"\x85R.",
                                "posix.system"),
        "builtins.eval-p4": (pickle.dumps(Reduce(builtins.eval, f"__import__('os').system({cmd!r})"), 4),
                             "builtins.eval"),
        "builtins.exec-p5": (pickle.dumps(Reduce(builtins.exec, f"import os; os.system({cmd!r})"), 5), "builtins.exec"),
        "subprocess.Popen": (pickle.dumps(Reduce(subprocess.Popen, ["touch", str(marker)]), 4), "subprocess.Popen"),
        "subprocess.run": (pickle.dumps(Reduce(subprocess.run, ["touch", str(marker)]), 4), "subprocess.run"),
        "functools.partial": (pickle.dumps(Reduce(functools.partial(os.system, cmd)), 4), "functools.partial"),
        "getattr-chain-p4": (b"\x80\x04" + val("torch._utils") + val("_rebuild_tensor_v2.__globals__") + b"\x93.",
                             "torch._utils._rebuild_tensor_v2.__globals__"),
        "torch.load": (b"\x80\x02ctorch\nload\n.", "torch.load"),
        "numpy-reconstruct": (b"\x80\x02cnumpy.core.multiarray\n_reconstruct\n.", "numpy.core.multiarray._reconstruct"),
    }


PAYLOAD_IDS = list(_payloads(Path("x")))


@pytest.mark.process
@pytest.mark.parametrize("kind", PAYLOAD_IDS)
def test_malicious_zip_pickle_refused(tmp_path: Path, kind: str) -> None:
    marker = tmp_path / "pwned"
    pkl, refused = _payloads(marker)[kind]
    path = write_zip(tmp_path / "evil.pt", pkl, {"0": f32([1])})
    with pytest.raises(UnsafePickleError, match=re.escape(refused)) as info:
        read_pt(path)
    assert str(path) in str(info.value)
    assert not marker.exists()


@pytest.mark.process
@pytest.mark.parametrize("kind", PAYLOAD_IDS)
def test_malicious_legacy_pickle_refused(tmp_path: Path, kind: str) -> None:
    marker = tmp_path / "pwned"
    pkl, refused = _payloads(marker)[kind]
    path = tmp_path / "evil.pt"
    path.write_bytes(legacy_stream(pkl, [("0", f32([1]), 4)]))
    with pytest.raises(UnsafePickleError, match=re.escape(refused)):
        read_pt(path)
    assert not marker.exists()


def test_malicious_object_inside_a_tensor_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    hooks = pickle.dumps(Reduce(os.system, f"touch {marker}"), 2)[2:-1]
    path = simple_pt(tmp_path, tensor_body(size=(1,), stride=(1,), numel=1, hooks=hooks), f32([1]))
    with pytest.raises(UnsafePickleError, match="system"):
        read_pt(path)
    assert not marker.exists()


def test_malicious_legacy_header_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    path.write_bytes(pickle.dumps(Reduce(os.system, f"touch {marker}"), 2) + b"rest")
    with pytest.raises(UnsafePickleError):
        read_pt(path)
    assert not marker.exists()


@pytest.mark.parametrize(
    "state",
    [{"offset": -1000}, ("x", "float32", -1000, (4,), (-1,)), (None, {"stride": (-1,)})],
    ids=["dict", "tuple", "slots"],
)
def test_pickle_build_cannot_rewrite_a_checked_tensor(tmp_path: Path, state: Any) -> None:
    body = tensor_body(size=(1,), stride=(1,), numel=1) + val(state) + b"b"  # BUILD on the rebuilt tensor
    path = simple_pt(tmp_path, body, f32([1]))
    with pytest.raises(FormatError, match=re.escape(f"{path}: the pickle tries to set the state of a TensorRef")):
        read_pt(path)


def test_pickle_build_cannot_rewrite_a_storage(tmp_path: Path) -> None:
    body = tensor_body(size=(1,), stride=(1,), numel=1).replace(b"tQ", b"tQ" + val({"numel": 1 << 40}) + b"b", 1)
    with pytest.raises(FormatError, match="set the state of a Storage"):
        read_pt(simple_pt(tmp_path, body, f32([1])))


def test_unsupported_torch_dtype(tmp_path: Path) -> None:
    body = tensor_body(size=(1,), stride=(1,), numel=1, storage="ComplexFloatStorage")
    with pytest.raises(UnsupportedDTypeError, match="ComplexFloatStorage"):
        read_pt(simple_pt(tmp_path, body, b"\0" * 8))


# ---------------------------------------------------------------- broken files


@pytest.mark.parametrize("cut", [0, 3, 30, 200, 600, -100, -22, -1])
def test_truncated_zip(tmp_path: Path, cut: int) -> None:
    data = (PT / "files" / "p004_float32_slice.pt").read_bytes()
    path = tmp_path / "cut.pt"
    path.write_bytes(data[:cut])
    with pytest.raises(FormatError, match=re.escape(str(path))):
        read_pt(path)


@pytest.mark.slow
def test_truncated_legacy_stream_at_every_byte(tmp_path: Path) -> None:
    data = (PT / "files" / "p901_legacy_serializer.pt").read_bytes()
    path = tmp_path / "cut.pt"
    for cut in range(len(data)):
        path.write_bytes(data[:cut])
        with pytest.raises(FormatError):
            read_pt(path)


@pytest.mark.slow
def test_zip_with_mutated_pickle_only_raises_reportdb_errors(tmp_path: Path) -> None:
    """Every one-byte change of a real data.pkl either reads or raises a ReportDBError naming the file."""
    src = PT / "files" / "p004_float32_slice.pt"
    with zipfile.ZipFile(src) as zf:
        pkl_name = next(n for n in zf.namelist() if n.endswith("data.pkl"))
        pkl = zf.read(pkl_name)
    outcomes: collections.Counter[str] = collections.Counter()
    wrong: list[str] = []
    for position in range(len(pkl)):
        for byte in (0x00, 0x29, 0x4B, 0x7F, 0xFF):
            mutated = pkl[:position] + bytes([byte]) + pkl[position + 1 :]
            path = _rewrite_fixture(src, tmp_path / "m.pt", lambda n, d: mutated if n == pkl_name else d)
            try:
                read_pt(path).array
                outcomes["read"] += 1
            except ReportDBError as exc:
                outcomes[type(exc).__name__] += 1
                if str(path) not in str(exc):
                    wrong.append(f"byte {position} = {byte:#x}: message does not name the file: {exc}")
            except Exception as exc:  # anything else is the failure this test looks for
                wrong.append(f"byte {position} = {byte:#x}: {type(exc).__name__}: {exc}")
    assert not wrong, "\n".join(wrong[:20])
    assert sum(outcomes.values()) == 5 * len(pkl)
    assert outcomes["read"] > 0 and outcomes["FormatError"] > 0 and outcomes["UnsafePickleError"] > 0, outcomes


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda n, d: b"not a pickle" if n.endswith("data.pkl") else d, "data.pkl|pickle|Unpickling"),
        (lambda n, d: d[:-4] if n.endswith("/data/0") else d, "bytes"),
        (lambda n, d: b"middle" if n.endswith("/byteorder") else d, "byteorder"),
    ],
    ids=["garbage-pickle", "short-storage", "bad-byteorder"],
)
def test_corrupt_zip_records(tmp_path: Path, edit: Callable[[str, bytes], bytes], message: str) -> None:
    path = _rewrite_fixture(PT / "files" / "p002_float32_plain.pt", tmp_path / "bad.pt", edit)
    with pytest.raises(FormatError, match=message):
        read_pt(path)


def test_missing_records(tmp_path: Path) -> None:
    body = finish(tensor_body(size=(1,), stride=(1,), numel=1))
    with pytest.raises(FormatError, match="missing"):
        read_pt(write_zip(tmp_path / "a.pt", body, {}))
    path = tmp_path / "b.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data/0", f32([1]))
    with pytest.raises(FormatError, match="data.pkl"):
        read_pt(path)


@pytest.mark.parametrize(
    "geometry",
    [dict(size=(5,), stride=(1,), numel=4), dict(size=(2, 2), stride=(2, 1), offset=1, numel=4),
     dict(size=(2, 3), stride=(1, 2), numel=5)],
    ids=["too-long", "offset-overrun", "stride-overrun"],
)
def test_view_outside_storage(tmp_path: Path, geometry: dict[str, Any]) -> None:
    path = simple_pt(tmp_path, tensor_body(**geometry), f32(np.zeros(geometry["numel"])))
    with pytest.raises(FormatError, match="reaches element"):
        read_pt(path)


@pytest.mark.parametrize(
    "geometry",
    [dict(size=(-1,), stride=(1,)), dict(size=(2,), stride=(-1,)), dict(size=(2,), stride=(1, 1)),
     dict(size=(1 << 40, 1 << 40), stride=(0, 0))],
    ids=["negative-size", "negative-stride", "rank-mismatch", "huge-broadcast"],
)
def test_bad_geometry(tmp_path: Path, geometry: dict[str, Any]) -> None:
    with pytest.raises(FormatError):
        read_pt(simple_pt(tmp_path, tensor_body(numel=2, **geometry), f32([1, 2])))


@pytest.mark.parametrize(
    "body",
    [val(7), tensor_body(size=(1,), stride=(1,), numel=1) * 2 + b"\x86", val({"a": 1})],
    ids=["int", "two-tensors", "dict-without-tensor"],
)
def test_top_level_without_exactly_one_tensor(tmp_path: Path, body: bytes) -> None:
    with pytest.raises(FormatError, match="exactly one tensor"):
        read_pt(simple_pt(tmp_path, body, f32([1])))


@pytest.mark.parametrize("content", [b"", b"\x00" * 64, b"PK\x03\x04garbage", json.dumps({"a": 1}).encode()],
                         ids=["empty", "zeros", "fake-zip", "json"])
def test_not_a_pt_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.pt"
    path.write_bytes(content)
    with pytest.raises(FormatError, match=re.escape(str(path))):
        read_pt(path)


def test_missing_paths_raise_report_not_found_like_the_public_api(tmp_path: Path) -> None:
    """A missing path, a folder and a symlink loop are "no tensor file here" for the reader and the public API
    alike: ReportNotFoundError, which is also a FileNotFoundError."""
    loop = tmp_path / "loop.pt"
    loop.symlink_to(loop)
    cases = {tmp_path / "absent.pt": "no such tensor file", tmp_path: "is a folder", loop: "symlink loop",
             tmp_path / "absent" / "x.pt": "no such tensor file"}
    for path, message in cases.items():
        for reader in (read_pt, reportdb.load_tensor_file):
            with pytest.raises(ReportNotFoundError, match=message) as info:
                reader(path)
            assert isinstance(info.value, FileNotFoundError) and str(path) in str(info.value)


@pytest.mark.process
def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    """Opening a FIFO for reading blocks until a writer comes: the reader refuses it without waiting."""
    fifo = tmp_path / "pipe.pt"
    os.mkfifo(fifo)
    [(kind, message)] = gen.read_under_limit([fifo], timeout=30)
    assert kind == "FormatError" and "not a regular file" in message, message


# ---------------------------------------------------------------- amplification: bounded by the file's size


def deflated_zeros(nbytes: int) -> tuple[bytes, int]:
    """A raw deflate stream of ``nbytes`` zero bytes (a multiple of 16 MiB) and its CRC-32, made in well under a
    second: one 16 MiB block compressed after a full flush is independent of what precedes it, so it repeats."""
    chunk = bytes(16 << 20)
    assert nbytes % len(chunk) == 0
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = compressor.compress(chunk) + compressor.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(nbytes // len(chunk)):
        crc = zlib.crc32(chunk, crc)
    return block * (nbytes // len(chunk)) + compressor.flush(), crc


def raw_zip(path: Path, members: list[tuple[str, bytes, int, int, int]]) -> Path:
    """A zip archive written field by field: (name, stored bytes, method, crc, uncompressed size) per member,
    so a member can be precompressed (zipfile cannot write a deflate stream it did not make)."""
    local, central = b"", b""
    for name, data, method, crc, size in members:
        encoded = name.encode()
        header = struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, method, 0, 0, crc, len(data), size, len(encoded), 0)
        central += struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0, method, 0, 0, crc, len(data), size,
                               len(encoded), 0, 0, 0, 0, 0, len(local)) + encoded
        local += header + encoded + data
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, len(members), len(members), len(central), len(local), 0)
    path.write_bytes(local + central + end)
    return path


def stored(name: str, data: bytes) -> tuple[str, bytes, int, int, int]:
    """An uncompressed member for ``raw_zip``."""
    return name, data, 0, zlib.crc32(data), len(data)


@pytest.mark.process
def test_zip_bomb_refused_before_inflating(tmp_path: Path) -> None:
    """A 1 MB archive whose storage record inflates to 1 GiB: the declared size is refused against the
    archive's size; the old reader inflated it (a MemoryError under the cap, 1 GiB of RAM without)."""
    numel = 1 << 28
    bomb, crc = deflated_zeros(4 * numel)
    pkl = finish(tensor_body(size=(numel,), stride=(1,), numel=numel))
    path = raw_zip(tmp_path / "bomb.pt", [stored("archive/data.pkl", pkl), stored("archive/byteorder", b"little"),
                                          ("archive/data/0", bomb, zipfile.ZIP_DEFLATED, crc, 4 * numel)])
    assert path.stat().st_size < 2 << 20
    [(kind, message)] = gen.read_under_limit([path])
    assert kind == "FormatError" and "zip bomb" in message, message


def test_compressed_record_within_the_bound_reads(tmp_path: Path) -> None:
    values = np.zeros(1 << 20, "<f4")  # 4 MiB of zeros deflate to 4 KB: within 16x the file + 16 MiB
    path = simple_pt(tmp_path, tensor_body(size=(1 << 20,), stride=(1,), numel=1 << 20), values.tobytes(),
                     compression=zipfile.ZIP_DEFLATED)
    np.testing.assert_array_equal(read_pt(path).array, values)


def test_byteorder_record_bomb_refused(tmp_path: Path) -> None:
    bomb, crc = deflated_zeros(16 << 20)
    pkl = finish(tensor_body(size=(1,), stride=(1,), numel=1))
    path = raw_zip(tmp_path / "b.pt", [stored("archive/data.pkl", pkl), ("archive/byteorder", bomb, 8, crc, 16 << 20),
                                       stored("archive/data/0", f32([1]))])
    with pytest.raises(FormatError, match="byteorder record is larger"):
        read_pt(path)


@pytest.mark.process
@pytest.mark.parametrize(
    "geometry",
    [dict(size=(1 << 16, 1 << 14), stride=(0, 0), numel=1),  # stride 0: one element becomes 4 GiB
     dict(size=(1 << 15, 1 << 15), stride=(1, 1), numel=1 << 16)],  # overlapping rows: 256 KiB becomes 4 GiB
    ids=["stride-0", "overlapping-strides"],
)
def test_view_larger_than_the_file_allows_refused(tmp_path: Path, geometry: dict[str, Any]) -> None:
    path = simple_pt(tmp_path, tensor_body(**geometry), bytes(4 * geometry["numel"]))
    assert path.stat().st_size < 300_000
    [(kind, message)] = gen.read_under_limit([path])
    assert kind == "FormatError" and "would need 4294967296 bytes, more than the" in message, message


def test_view_within_the_bound_reads(tmp_path: Path) -> None:
    """A 4 MiB broadcast of a 4 KiB row is within the slack; the limit scales with the file's size."""
    body = tensor_body(size=(1024, 1024), stride=(0, 1), numel=1024)
    array = read_pt(simple_pt(tmp_path, body, f32(range(1024)))).array
    assert array.shape == (1024, 1024) and (array == np.arange(1024, dtype="f4")).all()
    assert budget(10 << 20) == 16 * (10 << 20) + EXPANSION_SLACK and MAX_EXPANSION == 16


@pytest.mark.process
@pytest.mark.parametrize(
    "memo",
    [b"r" + struct.pack("<I", 1 << 28), b"p268435456\n", b"r" + struct.pack("<I", 0xFFFFFFFF)],
    ids=["LONG_BINPUT-2^28", "PUT-2^28", "LONG_BINPUT-2^32-1"],
)
@pytest.mark.parametrize("container", ["zip", "legacy"])
def test_huge_memo_index_allocates_nothing(tmp_path: Path, memo: bytes, container: str) -> None:
    """A ~200-byte pickle that memoizes its tensor at index 2**28: the C unpickler sized a 2 GiB memo table
    from it (a MemoryError under the cap, gigabytes of RAM without); the dict memo stores one entry."""
    pkl = finish(tensor_body(size=(2,), stride=(1,), numel=2, legacy_view="zip" if container == "zip" else None)
                 + memo)
    path = tmp_path / "memo.pt"
    if container == "zip":
        write_zip(path, pkl, {"0": f32([3, 4])})
    else:
        path.write_bytes(legacy_stream(pkl, [("0", f32([3, 4]), 4)]))
    assert path.stat().st_size < 2000
    [(kind, message)] = gen.read_under_limit([path])
    assert kind == "ok", message
    np.testing.assert_array_equal(read_pt(path).array, [3, 4])


def test_memo_get_of_an_unset_index_is_a_format_error(tmp_path: Path) -> None:
    body = tensor_body(size=(1,), stride=(1,), numel=1) + b"0j" + struct.pack("<I", 1 << 28)  # POP, LONG_BINGET
    with pytest.raises(FormatError, match=re.escape(str(tmp_path))):
        read_pt(simple_pt(tmp_path, body, f32([1])))


@pytest.mark.process
def test_oversized_pickles_refused(tmp_path: Path) -> None:
    """A pickle over MAX_PICKLE_BYTES is refused unread; this one, a million nested tuples used as a dict key,
    crashed the old reader (hashing it overflows the C stack: the process died with SIGSEGV)."""
    deep = b"}" + b"N" + b"\x85" * 1_000_000 + b"N" + b"s"
    zip_path = simple_pt(tmp_path, deep, f32([1]), name="deep.pt")
    legacy_path = tmp_path / "deep-legacy.pt"
    legacy_path.write_bytes(legacy_stream(finish(deep), [("0", f32([1]), 4)]))
    outcomes = gen.read_under_limit([zip_path, legacy_path])
    assert outcomes[0][0] == "FormatError" and f"larger than {MAX_PICKLE_BYTES} bytes" in outcomes[0][1], outcomes
    assert outcomes[1][0] == "FormatError" and f"do not end within the first {MAX_PICKLE_BYTES}" in outcomes[1][1]


@pytest.mark.parametrize("record", ["archive/data/0", "archive/data.pkl", "archive/byteorder"])
def test_encrypted_records_refused(tmp_path: Path, record: str) -> None:
    """An encrypted record (flag bit 0) is a FormatError, not zipfile's RuntimeError asking for a password."""
    path = simple_pt(tmp_path, tensor_body(size=(1,), stride=(1,), numel=1), f32([1]))
    data = bytearray(path.read_bytes())
    for signature, flag_at, name_at in ((b"PK\x03\x04", 6, 30), (b"PK\x01\x02", 8, 46)):
        start = 0
        while (start := data.find(signature, start)) >= 0:
            if data[start + name_at : start + name_at + len(record)] == record.encode():
                data[start + flag_at] |= 1
            start += 4
    path.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=f"record {record!r} is encrypted"):
        read_pt(path)


@pytest.mark.parametrize("case", ["global", "module", "storage key", "shape", "view", "legacy global"])
def test_long_untrusted_strings_are_quoted_in_part(tmp_path: Path, case: str) -> None:
    """A .pt whose pickle names a 60,000-character global made a one-line error of 60 KB (as a long module, storage
    key, or a tensor of 10,001 dimensions did): every string or value of the file quoted in a message is cut to a
    bounded excerpt."""
    long = "x" * 60_000
    if case == "global":
        path = write_zip(tmp_path / "t.pt", finish(op_global("os", long) + b")R"), {"0": f32([1])})
    elif case == "module":
        path = write_zip(tmp_path / "t.pt", finish(op_global(long, "system") + b")R"), {"0": f32([1])})
    elif case == "storage key":
        path = simple_pt(tmp_path, tensor_body(size=(1,), stride=(1,), numel=1, key=long), f32([1]))
    elif case == "shape":  # 10,001 dimensions, 4 GB: more than the file may produce
        path = simple_pt(tmp_path, tensor_body(size=(1,) * 10_000 + (10**9,), stride=(1,) * 10_001, numel=1), f32([1]))
    elif case == "view":  # 10,001 dimensions reaching past the storage
        path = simple_pt(tmp_path, tensor_body(size=(1,) * 10_000 + (2,), stride=(1,) * 10_000 + (5,), numel=1),
                         f32([1]))
    else:
        path = tmp_path / "t.pt"
        path.write_bytes(legacy_stream(finish(op_global("os", long) + b")R"), [("0", f32([1]), 4)]))
    with pytest.raises(ReportDBError) as refused:
        read_pt(path)
    assert len(str(refused.value)) < len(str(path)) + 1000, str(refused.value)[:300]
