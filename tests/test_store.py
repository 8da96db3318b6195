"""Storage core: round trips of every dtype, chunking, dedupe, integrity checks, partial reads."""

from __future__ import annotations

import ast
import multiprocessing
import sqlite3
import zlib
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from conftest import parsed
import reportdb
from reportdb.dtypes import DTYPES
from reportdb.errors import CorruptionError, ReportDBError, TensorNotFoundError
from reportdb.store import tensors as store_tensors
from reportdb.store.tensors import TensorExistsError
from reportdb.spec import Distribution, Placement

RNG = np.random.default_rng(7)


def _values(name: str, shape: tuple[int, ...]) -> np.ndarray:
    dt = DTYPES[name]
    if name == "bool":
        return RNG.integers(0, 2, size=shape).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return RNG.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    return RNG.standard_normal(shape).astype(np.float32).astype(dt)


@pytest.fixture
def report(tmp_path: Path):
    with reportdb.open(tmp_path / "r.sqlite", "a") as r:
        yield r


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_every_dtype_round_trips_bit_exact(report, name: str) -> None:
    arr = _values(name, (3, 5, 7))
    report.put_tensor(1, arr)
    back = report.tensor(1)
    assert back.dtype == DTYPES[name] and back.shape == arr.shape
    assert back.tobytes() == np.ascontiguousarray(arr).tobytes()
    assert report.tensor_info(1).dtype == name


@pytest.mark.parametrize("name", [n for n in sorted(DTYPES) if DTYPES[n].itemsize > 1 and DTYPES[n].kind != "V"])
def test_big_endian_and_strided_inputs_store_the_same_bytes(report, name: str) -> None:
    arr = _values(name, (6, 8))
    report.put_tensor(1, arr)
    report.put_tensor(2, arr.astype(arr.dtype.newbyteorder(">")))
    report.put_tensor(3, np.asfortranarray(arr))
    wide = np.zeros((6, 16), arr.dtype)
    wide[:, ::2] = arr
    report.put_tensor(4, wide[:, ::2])
    for tid in (2, 3, 4):
        assert report.tensor(tid).tobytes() == report.tensor(1).tobytes()
    # identical content is stored once
    assert report.summary().tables["rdb_chunk"] == 1


def test_bfloat16_strided_view(report) -> None:
    arr = _values("bfloat16", (8, 8))[::2, 1::3]
    report.put_tensor(5, arr)
    back = report.tensor(5)
    assert back.dtype == np.dtype(ml_dtypes.bfloat16)
    assert np.array_equal(back.view(np.uint16), np.ascontiguousarray(arr).view(np.uint16))


def test_zero_dim_and_empty(report) -> None:
    report.put_tensor(1, np.array(3.5, dtype=np.float64))
    report.put_tensor(2, np.zeros((0, 4), dtype=np.int16))
    assert report.tensor(1).shape == () and report.tensor(1)[()] == 3.5
    empty = report.tensor(2)
    assert empty.shape == (0, 4) and empty.dtype == np.int16
    assert report.tensor_info(2).nbytes == 0


def test_multi_chunk_tensor_and_partial_reads(tmp_path: Path) -> None:
    arr = np.arange(10_000 * 33, dtype=np.int32).reshape(10_000, 33)
    with reportdb.Report(tmp_path / "r.sqlite", "a", chunk_size=4096) as report:
        report.put_tensor(9, arr)
        n_chunks = report.summary().tables["rdb_chunk"]
        assert n_chunks == -(-arr.nbytes // 4096)
        assert np.array_equal(report.tensor(9), arr)
        for rows in (slice(0, 1), slice(123, 4567), slice(9_990, None), slice(-5, None), slice(50, 50)):
            assert np.array_equal(report.tensor(9, rows=rows), arr[rows])


def test_partial_read_touches_only_its_chunks(tmp_path: Path) -> None:
    """A range read succeeds although another chunk of the same tensor is damaged."""
    path = tmp_path / "r.sqlite"
    arr = RNG.integers(0, 256, size=(16, 1024), dtype=np.uint8)  # 4 chunks of 4 KiB
    with reportdb.Report(path, "a", chunk_size=4096) as report:
        report.put_tensor(1, arr, stats=False)
    _corrupt_chunk(path, chunk_index=3)
    with reportdb.open(path) as report:
        assert np.array_equal(report.tensor(1, rows=slice(0, 8)), arr[:8])
        with pytest.raises(CorruptionError, match="tensor 1"):
            report.tensor(1)


def _corrupt_chunk(path: Path, chunk_index: int) -> None:
    """Flip one byte of a chunk's data inside the database file itself, below SQLite."""
    con = sqlite3.connect(path)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    blob_id, = con.execute("SELECT id FROM rdb_blob").fetchone()
    chunk_id, = con.execute("SELECT chunk_id FROM rdb_blob_chunk WHERE blob_id=? AND idx=?", (blob_id, chunk_index)).fetchone()
    data, = con.execute("SELECT data FROM rdb_chunk WHERE id=?", (chunk_id,)).fetchone()
    con.close()
    raw = bytearray(path.read_bytes())
    at = raw.find(data[:64])
    assert at >= 0 and raw.find(data[:64], at + 1) < 0
    raw[at + 10] ^= 0x40
    path.write_bytes(bytes(raw))


def test_flipped_byte_in_file_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    arr = RNG.standard_normal((64, 64)).astype(np.float32)
    with reportdb.open(path, "a") as report:
        report.put_tensor(42, arr)
    _corrupt_chunk(path, chunk_index=0)
    with reportdb.open(path) as report:
        assert report.tensor_info(42).shape == (64, 64)  # metadata still readable
        with pytest.raises(CorruptionError, match="tensor 42"):
            report.tensor(42)


def test_verify_tensor_rehashes_what_the_crc_cannot_catch(tmp_path: Path) -> None:
    """A chunk changed together with its crc32 (a bug, not bit rot) still reads; its content address exposes it."""
    path = tmp_path / "r.sqlite"
    arr = RNG.standard_normal((64, 64)).astype(np.float32)
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, arr)
        report.put_tensor(2, arr)  # the same blob
        seen: set[int] = set()
        assert report.verify_tensor(1, skip=seen) == arr.nbytes
        assert report.verify_tensor(2, skip=seen) == 0  # checked once
        altered = arr.copy()
        altered[0, 0] += 1
        with report.batch(), report.connection() as conn:
            conn.execute("UPDATE rdb_chunk SET data=?, crc32=?", (altered.tobytes(), zlib.crc32(altered.tobytes())))
        np.testing.assert_array_equal(report.tensor(1), altered)
        with pytest.raises(CorruptionError, match="tensor 1 .*blake3 content address"):
            report.verify_tensor(1)


def test_dedupe_across_tensors_and_replicated_shards(report) -> None:
    arr = RNG.standard_normal((128, 128)).astype(np.float32)
    report.put_tensor(1, arr)
    report.put_tensor(2, arr.copy())
    dist = Distribution((4,), (Placement("replicate"),))
    report.put_tensor(3, shards=[((0, i), arr) for i in range(4)], distribution=dist)
    s = report.summary()
    assert s.stored_bytes == arr.nbytes
    assert s.tables["rdb_blob"] == 1
    assert np.array_equal(report.tensor(3), arr)
    assert len(report.shards(3)) == 4


def test_multi_device_assembly_and_unassemblable(report) -> None:
    parts = [((0, i), np.full((2, 3), i, np.int32)) for i in range(4)]
    report.put_tensor(1, shards=parts, distribution=Distribution((4,), (Placement("shard", 1),), device_coords=tuple(c for c, _ in parts)))
    assert report.tensor_info(1).shape == (2, 12)
    assert np.array_equal(report.tensor(1), np.concatenate([p for _, p in parts], axis=1))
    report.put_tensor(2, shards=parts, distribution=Distribution((2, 2), None, strategy="shard2d"))
    assert report.tensor_info(2).shape is None
    with pytest.raises(ReportDBError, match="shards"):
        report.tensor(2)
    assert [c for c, _ in report.shards(2)] == [c for c, _ in parts]


def test_metadata_round_trips_without_reading_bytes(report) -> None:
    mc = {"memory_layout": "HEIGHT_SHARDED", "buffer_type": "L1",
          "shard_spec": {"grid": [[[0, 0], [3, 7]]], "shape": [32, 128], "orientation": "ROW_MAJOR"}}
    report.put_tensor(7, np.ones((32, 32), ml_dtypes.bfloat16), ttnn_dtype="BFLOAT8_B", layout="TILE",
                      tile_shape=(32, 32), padded_shape=(32, 32), storage_type="HOST", memory_config=mc,
                      source={"format": "bin", "version": 5})
    info = report.tensor_info(7)
    assert info.spec.ttnn_dtype == "BFLOAT8_B" and info.spec.tile_shape == (32, 32)
    assert info.spec.memory_config == mc and info.source == {"format": "bin", "version": 5}


def test_put_tensor_errors(report, tmp_path: Path) -> None:
    report.put_tensor(1, np.zeros(3))
    with pytest.raises(TensorExistsError):
        report.put_tensor(1, np.zeros(3))
    assert report.put_tensor(1, np.ones(3), if_exists="skip") is False
    report.put_tensor(1, np.ones(3), if_exists="replace")
    assert report.tensor(1).tolist() == [1, 1, 1]
    with pytest.raises(ReportDBError, match="unknown tensor metadata"):
        report.put_tensor(2, np.zeros(3), colour="red")
    with pytest.raises(ReportDBError, match="cannot be stored"):
        report.put_tensor(3, np.zeros(3, dtype=np.complex64))
    with pytest.raises(TensorNotFoundError):
        report.tensor(99)
    assert report.tensor_ids() == [1]
    with reportdb.open(report.path, "r") as ro, pytest.raises(ReportDBError, match="read-only"):
        ro.put_tensor(5, np.zeros(1))


def test_failed_batch_leaves_nothing(report) -> None:
    with pytest.raises(RuntimeError):
        with report.batch():
            report.put_tensor(1, np.zeros(10))
            raise RuntimeError("boom")
    assert report.tensor_ids() == []
    assert report.summary().tables["rdb_chunk"] == 0


def test_stats_are_stored_with_the_tensor(report) -> None:
    arr = np.array([[1.0, -2.0, np.nan], [np.inf, 0.0, 4.0]], np.float32)
    report.put_tensor(1, arr)
    s = report.tensor_stats(1)
    finite = arr[np.isfinite(arr)].astype(np.float64)
    assert s.count == 6 and s.nan_count == 1 and s.inf_count == 1 and s.zero_count == 1
    assert s.min == finite.min() and s.max == finite.max()
    assert s.mean == pytest.approx(finite.mean()) and s.std == pytest.approx(finite.std())
    assert sum(s.hist_counts or ()) == finite.size


@pytest.mark.slow
def test_tensor_over_one_gigabyte(tmp_path: Path) -> None:
    n = (1 << 30) + 12_345
    arr = np.arange(n, dtype=np.uint8)
    with reportdb.open(tmp_path / "big.sqlite", "a") as report:
        report.put_tensor(1, arr, stats=False)
        del arr
        back = report.tensor(1)
        assert back.shape == (n,)
        assert back[0] == 0 and back[-1] == (n - 1) % 256
        assert np.array_equal(back[::65_537], (np.arange(0, n, 65_537) % 256).astype(np.uint8))
        tail = report.tensor(1, rows=slice(n - 10, None))
        assert np.array_equal(tail, (np.arange(n - 10, n) % 256).astype(np.uint8))


def test_prepared_digests_and_stats_store_the_same_rows(tmp_path: Path) -> None:
    """put_tensor(_prepared=...) (digests and statistics computed elsewhere, as migrate's workers do) stores
    exactly what computing them in place stores."""
    from reportdb.store.prepared import prepare_shard

    arrays = [RNG.standard_normal((300, 700)).astype(np.float32), RNG.standard_normal(5).astype(ml_dtypes.bfloat16)]
    dumps = []
    for name, prepared in (("plain", False), ("prepared", True)):
        with reportdb.open(tmp_path / f"{name}.sqlite", "a") as r:
            r.chunk_size = 1 << 18  # several chunks for the first array
            for tid, arr in enumerate(arrays):
                extra = {"_prepared": [prepare_shard(arr, chunk_size=r.chunk_size)]} if prepared else {}
                r.put_tensor(tid, arr, **extra)
            for tid, arr in enumerate(arrays):
                assert r.tensor(tid).tobytes() == arr.tobytes()
            dumps.append([
                r._conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()
                for t in ("rdb_chunk", "rdb_blob", "rdb_blob_chunk", "rdb_stats")
            ])
    assert dumps[0] == dumps[1]
    with reportdb.open(tmp_path / "plain.sqlite", "a") as r:
        wrong = prepare_shard(arrays[0][:10], chunk_size=r.chunk_size)
        with pytest.raises(ReportDBError):
            r.put_tensor(9, arrays[0], _prepared=[wrong])
        assert not r.has_tensor(9)


def test_stored_histogram_edges_equal_numpy(report) -> None:
    arr = RNG.standard_normal(5000).astype(np.float32) * 3 + 1
    report.put_tensor(1, arr)
    report.put_tensor(2, np.full(7, 2.5, np.float32))
    for tensor_id, values in ((1, arr), (2, np.full(7, 2.5))):
        s = report.tensor_stats(tensor_id)
        lo, hi = float(values.min()), float(values.max())
        counts, edges = np.histogram(values.astype(np.float64), 64, range=(lo, hi) if lo < hi else (lo - 0.5, hi + 0.5))
        assert s.hist_counts == tuple(counts.tolist()) and s.hist_edges == tuple(edges.tolist())


def _put_tensors_cases() -> list[dict]:
    """Small and large single arrays, shards, metadata, identical contents, a big-endian and a strided array."""
    small = RNG.standard_normal((4, 8)).astype(np.float32)
    dist = Distribution(mesh_shape=(2,), placements=(Placement("shard", 0),))
    return [
        {"tensor_id": 1, "array": small, "ttnn_dtype": "FLOAT32", "layout": "TILE", "tile_shape": (32, 32),
         "memory_config": {"buffer_type": "DRAM"}, "source": {"file": "1.bin"}},
        {"tensor_id": 2, "array": small.copy()},  # same bytes as tensor 1: one blob
        {"tensor_id": 2, "rank": 3, "array": small.view(np.int32)},  # same bytes, another dtype: its own statistics
        {"tensor_id": 3, "array": np.arange(12, dtype=">i4").reshape(3, 4)},
        {"tensor_id": 4, "array": RNG.standard_normal((40, 50))[:, ::2]},
        {"tensor_id": 5, "array": np.array([], np.float32)},
        {"tensor_id": 6, "array": np.array(1.5, ml_dtypes.bfloat16)},
        {"tensor_id": 7, "array": np.array([np.nan, np.inf, 0.0], np.float32)},
        {"tensor_id": 8, "array": RNG.standard_normal(70_000).astype(np.float32)},  # several chunks
        {"tensor_id": 9, "shards": [((0,), small[:2]), ((1,), small[2:])], "distribution": dist},
        # one shard, as a single-device ttnn tensor converts: set-based too
        {"tensor_id": 10, "shards": [((0, 0), small * 2)],
         "distribution": Distribution((1,), (Placement("replicate"),), device_coords=((0, 0),))},
        {"tensor_id": 11, "shards": [((0,), RNG.standard_normal(70_000).astype(np.float32))],  # over a chunk
         "distribution": Distribution((1,), (Placement("replicate"),))},
        {"tensor_id": 12, "array": small + 3, "distribution": Distribution((1,), (Placement("replicate"),))},
    ]


def test_put_tensors_stores_what_put_tensor_stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The set-based path for small tensors writes the same rows as put_tensor, one tensor at a time; so it does
    with the statistics of its larger arrays computed in a helper thread ("beside": every array here)."""
    dumps = []
    cases = _put_tensors_cases()
    for name, together in (("one", False), ("many", True), ("beside", True)):
        monkeypatch.setattr(store_tensors, "_STATS_BESIDE_SMALL_MIN", 0 if name == "beside" else 256 << 10)
        with reportdb.open(tmp_path / f"{name}.sqlite", "a") as r:
            r.chunk_size = 1 << 16
            if together:
                assert r.put_tensors(cases) == [True] * len(cases)
            else:
                for case in cases:
                    assert r.put_tensor(**case)
            for case in cases:
                key = (case["tensor_id"], case.get("rank", 0))
                expected = case["array"] if "array" in case else np.concatenate([a for _, a in case["shards"]])
                assert r.tensor(*key).tobytes() == np.ascontiguousarray(expected).astype(expected.dtype.newbyteorder("<")).tobytes()
            dumps.append([  # by content: the row ids differ (put_tensors stores large tensors first)
                sorted(r._conn.execute(sql).fetchall(), key=repr)
                for sql in (
                    "SELECT tensor_id, rank, dtype, shape, nbytes, n_shards, ttnn_dtype, layout, tile_shape, transpose_tile,"
                    " padded_shape, storage_type, memory_config, distribution, source FROM rdb_tensor",
                    "SELECT t.tensor_id, t.rank, s.shard_index, s.mesh_coordinate, s.dtype, s.shape, b.digest"
                    " FROM rdb_shard s JOIN rdb_tensor t ON t.id = s.tensor_pk JOIN rdb_blob b ON b.id = s.blob_id",
                    "SELECT digest, nbytes, crc32, data FROM rdb_chunk",
                    "SELECT digest, nbytes, chunk_size, n_chunks FROM rdb_blob",
                    "SELECT b.digest, bc.idx, c.digest FROM rdb_blob_chunk bc JOIN rdb_blob b ON b.id = bc.blob_id"
                    " JOIN rdb_chunk c ON c.id = bc.chunk_id",
                    "SELECT b.digest, st.dtype, st.count, st.min, st.max, st.mean, st.std, st.absmax, st.nan_count,"
                    " st.inf_count, st.zero_count, st.histogram FROM rdb_stats st JOIN rdb_blob b ON b.id = st.blob_id",
                )
            ])
    *same_one, stats_one = dumps[0]
    *same_many, stats_many = dumps[1]
    assert same_one == same_many
    for a, b in zip(stats_one, stats_many, strict=True):  # mean and std: another summation order, same to ~1 ulp
        assert a[:5] + a[7:] == b[:5] + b[7:]
        assert (b[5:7] == a[5:7]) if None in a[5:7] else (b[5:7] == pytest.approx(a[5:7], rel=1e-12, abs=1e-300))
    assert dumps[2] == dumps[0] != dumps[1]  # compute_stats beside, as put_tensor computes it
    assert reportdb.verify(tmp_path / "many.sqlite").ok


def test_put_tensors_existing_ids(report) -> None:
    a = np.arange(6, dtype=np.float32)
    report.put_tensor(1, a)
    assert report.put_tensors([{"tensor_id": 1, "array": a + 1}, {"tensor_id": 2, "array": a},
                               {"tensor_id": 2, "array": a + 5}], if_exists="skip") == [False, True, False]
    np.testing.assert_array_equal(report.tensor(1), a)
    np.testing.assert_array_equal(report.tensor(2), a)
    with pytest.raises(TensorExistsError):  # all or nothing: tensor 3 is not kept either
        report.put_tensors([{"tensor_id": 3, "array": a}, {"tensor_id": 1, "array": a}])
    assert not report.has_tensor(3)
    assert report.put_tensors([{"tensor_id": 1, "array": a * 2}], if_exists="replace") == [True]
    np.testing.assert_array_equal(report.tensor(1), a * 2)
    with pytest.raises(ReportDBError, match="unknown tensor metadata"):
        report.put_tensors([{"tensor_id": 4, "array": a, "colour": "red"}])
    assert not report.has_tensor(4)
    assert report.put_tensors([]) == []


def _reportdb_imports(path: Path) -> list[str]:
    """The reportdb modules a module of ``reportdb.store`` imports, named from the package: "store.blobs", "errors"."""
    names = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = ["store"][: 2 - node.level]  # level 1: a sibling in store, level 2: the reportdb package
            names += [".".join(base + [node.module])] if node.module else [".".join(base + [a.name]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("reportdb."):
            names.append(str(node.module).removeprefix("reportdb."))
        elif isinstance(node, ast.Import):
            names += [a.name.removeprefix("reportdb.") for a in node.names if a.name.startswith("reportdb.")]
    return names


def test_store_modules_import_each_other_without_a_cycle() -> None:
    """The modules of ``reportdb.store`` form no import cycle, counting every import (in functions, under
    TYPE_CHECKING): ``blobs`` and ``windows`` imported each other (``blobs`` now declares what it asks of
    ``windows.VerifiedBlocks`` as a protocol)."""
    folder = Path(reportdb.__file__).parent / "store"
    graph = {path.stem: {name.split(".")[1] for name in _reportdb_imports(path) if name.startswith("store.")}
             for path in folder.glob("*.py")}
    assert "windows" not in graph["blobs"] and "blobs" in graph["windows"]
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        assert module not in path, f"import cycle: {' -> '.join(path[path.index(module):] + [module])}"
        if module in done:
            return
        for imported in graph.get(module, ()):
            visit(imported, path + [module])
        done.add(module)

    for module in graph:
        visit(module, [])


def test_every_sqlite_connection_comes_from_the_engine(tmp_path: Path) -> None:
    """One connection factory: ``sqlite3.connect`` is called only in ``store/engine.py`` (five calls bypassed it and
    only one set ``trusted_schema=OFF``), and the plain connections it makes for reportdb's own long steps are
    hardened like the others."""
    from reportdb.store import engine

    calls = []
    for path in sorted(Path(reportdb.__file__).parent.rglob("*.py")):
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "connect" and (
                isinstance(node.func.value, ast.Name) and node.func.value.id == "sqlite3"
            ):
                calls.append(f"{path.relative_to(Path(reportdb.__file__).parent)}:{node.lineno}")
    assert calls and all(call.startswith("store/engine.py:") for call in calls), calls
    conn = engine.connect_plain(tmp_path / "x.sqlite")
    try:
        assert conn.execute("PRAGMA trusted_schema").fetchone() == (0,)
        assert conn.execute("PRAGMA busy_timeout").fetchone() == (engine.BUSY_TIMEOUT_MS,)
    finally:
        conn.close()


def _sum_in_child(path: str) -> float:
    with reportdb.open(path) as r:
        return float(r.tensor(1).astype(np.float64).sum())


@pytest.mark.process
@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")  # forking is the point
def test_forked_child_reads_large_tensors(tmp_path: Path) -> None:
    """Chunk checks run in helper threads; a child forked after the parent used them gets threads of its own
    (a pool inherited across fork has none and would never run the checks: the read would hang)."""
    values = np.arange(3 << 20, dtype=np.float32)  # three 4 MiB chunks: checks in the helper threads
    with reportdb.open(tmp_path, "a") as r:
        r.put_tensor(1, values)
    with reportdb.open(tmp_path) as r:
        r.tensor(1)
    with multiprocessing.get_context("fork").Pool(1) as workers:
        assert workers.apply_async(_sum_in_child, (str(tmp_path),)).get(timeout=60) == float(values.astype(np.float64).sum())
