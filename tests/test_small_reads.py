"""A small tensor (one shard in at most one chunk) is read with one query and its spec parsed once per report
(issue 16): the one-query path gives what the general one gives, checks every value it reads as strictly, and its
cache of decoded specs never serves a spec its row no longer holds. Also the store check of ``rows.store_problems`` for
a copy of the rows whose chunk bytes are kept elsewhere (``chunk_sizes=False``, a team store's report).

Each test builds its report, and any damage to it, in tmp_path with reportdb and plain sqlite3.
"""

from __future__ import annotations

import sqlite3
import zlib
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from conftest import built_once
import reportdb
from reportdb.errors import CorruptionError, TensorNotFoundError
from reportdb.store import rows

RNG = np.random.default_rng(16)
MEMORY_CONFIGS: list[dict[str, Any] | None] = [
    None,
    {"memory_layout": "INTERLEAVED", "buffer_type": "DRAM", "shard_spec": None},
    {"memory_layout": "HEIGHT_SHARDED", "buffer_type": "L1", "shard_spec": {
        "grid": [[[0, 0], [7, 7]]], "shape": [32, 64], "orientation": "ROW_MAJOR", "mode": "PHYSICAL"}},
]


def _arrays() -> list[np.ndarray]:
    """Small arrays of varied dtypes and shapes, 0-d and empty ones included."""
    found: list[np.ndarray] = []
    for dtype in (np.float32, np.float16, ml_dtypes.bfloat16, np.int32, np.uint8, np.int64, np.bool_, np.float64):
        for shape in ((), (0,), (3, 0, 2), (1,), (7, 5), (2, 3, 4), (1, 1, 32, 32)):
            found.append((RNG.standard_normal(shape) * 50).astype(dtype))
    return found


def _small_report(path: Path, **options: Any) -> list[np.ndarray]:
    """A report of many small tensors (ids 0..n-1) with varied specs; returns the arrays stored."""
    arrays = _arrays()
    with reportdb.open(path, "a", **options) as report, report.batch():
        for i, array in enumerate(arrays):
            report.put_tensor(
                i, array, stats=i % 2 == 0, memory_config=MEMORY_CONFIGS[i % 3], layout=("TILE", "ROW_MAJOR", None)[i % 3],
                tile_shape=(32, 32) if i % 4 == 0 else None, padded_shape=tuple(array.shape) if i % 5 == 0 else None,
                source={"file": f"{i}.bin"} if i % 2 else None,
                distribution={"mesh_shape": [1], "placements": [{"kind": "replicate"}]} if i % 7 == 0 else None,
            )
    return arrays


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_one_query_path_matches_the_general_path(tmp_path: Path, compression: str) -> None:
    if compression == "zstd":
        pytest.importorskip("zstandard")
    path = tmp_path / "db.sqlite"
    arrays = _small_report(path, compression=compression)
    arrays.append(np.zeros((64, 64), np.float32))  # compressible: a zstd chunk under that option
    with reportdb.open(path, "a", compression=compression) as report:  # type: ignore[arg-type]
        report.put_tensor(len(arrays) - 1, arrays[-1])
    with reportdb.open(path) as report, report.connection() as conn:
        for i, array in enumerate(arrays):
            small = rows.read_small(conn, report.path, i, 0, rows.ParsedCache())
            assert small is not None, f"tensor {i} of shape {array.shape} did not take the one-query path"
            info, blob_ids = rows.read_info(conn, report.path, i, 0)
            general = rows.read_shard(conn, blob_ids[0], info.shards[0], f"tensor {i}")
            assert small[0] == info
            assert small[1].dtype == general.dtype == array.dtype and small[1].shape == array.shape
            np.testing.assert_array_equal(small[1], general)
            np.testing.assert_array_equal(small[1], array)
            assert small[1].flags.writeable and small[1].flags.c_contiguous
        for i, array in enumerate(arrays):  # and through the public API, twice: the second time from the spec cache
            for _ in range(2):
                got = report.tensor(i)
                assert got.dtype == array.dtype
                np.testing.assert_array_equal(got, array)
                assert report.tensor_info(i) == rows.read_info(conn, report.path, i, 0)[0]


def test_tensors_of_several_chunks_or_shards_take_the_general_path(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    big = np.arange(3000, dtype=np.float32)
    parts = [np.full((2, 3), k, np.float32) for k in range(4)]
    with reportdb.open(path, "a", chunk_size=4096) as report:
        report.put_tensor(1, big)  # 3 chunks
        report.put_tensor(2, shards=[((0, k), p) for k, p in enumerate(parts)],
                          distribution={"mesh_shape": [1, 4], "placements": [{"kind": "replicate"}, {"kind": "shard", "dim": 1}]})
    with reportdb.open(path) as report:
        with report.connection() as conn:
            assert rows.read_small(conn, report.path, 1, 0) is None
            assert rows.read_small(conn, report.path, 2, 0) is None
            assert rows.read_small(conn, report.path, 3, 0) is None  # not stored: the general path says so
        np.testing.assert_array_equal(report.tensor(1), big)
        np.testing.assert_array_equal(report.tensor(2), np.concatenate(parts, axis=1))
        with pytest.raises(TensorNotFoundError, match="no tensor 3"):
            report.tensor(3)


ARRAY = np.arange(1024, dtype=np.float32).reshape(32, 32)  # 4 KiB, one chunk


def _one(path: Path) -> Path:
    """Two 4 KiB tensors (built once per process, copied to ``path``)."""

    def build(made: Path) -> None:
        with reportdb.open(made, "a") as report:
            report.put_tensor(1, ARRAY, ttnn_dtype="FLOAT32", layout="TILE", tile_shape=(32, 32),
                              memory_config=MEMORY_CONFIGS[1])
            report.put_tensor(2, ARRAY + 1)

    return built_once(path, build)


def _sql(path: Path, statement: str, params: tuple[Any, ...] = ()) -> None:
    con = sqlite3.connect(path, isolation_level=None)
    con.execute(statement, params)
    con.close()


# Damage to each column the one query reads; every one of them still takes the one-query path (it is read and
# reported there, not passed on) and is a CorruptionError naming the tensor and what is wrong.
ZERO_CRC = zlib.crc32(bytes(1))
T, S, B, C = ("WHERE tensor_id = 1", "WHERE tensor_pk = 1", "WHERE id = 1", "WHERE id = 1")
DAMAGE = [
    (f"UPDATE rdb_tensor SET shape = '[32, 32' {T}", "rdb_tensor: column shape is not valid JSON"),
    (f"UPDATE rdb_tensor SET tile_shape = '5' {T}", "tile_shape must be a list of integers"),
    (f"UPDATE rdb_tensor SET padded_shape = '{{' {T}", "column padded_shape is not valid JSON"),
    (f"UPDATE rdb_tensor SET memory_config = '7' {T}", "memory_config must be a mapping"),
    (f"UPDATE rdb_tensor SET distribution = '[]' {T}", "distribution must be a mapping"),
    (f"UPDATE rdb_tensor SET source = 'x' {T}", "column source is not valid JSON"),
    (f"UPDATE rdb_tensor SET layout = x'07' {T}", "layout must be a string"),
    (f"UPDATE rdb_tensor SET ttnn_dtype = x'07' {T}", "ttnn_dtype must be a string"),
    (f"UPDATE rdb_tensor SET storage_type = x'07' {T}", "storage_type must be a string"),
    (f"UPDATE rdb_shard SET shape = '[-32, 32]' {S}", "rdb_shard: column shape must not be negative"),
    (f"UPDATE rdb_shard SET shape = '[64, 32]' {S}", "rdb_blob says blob 1 holds 4096 bytes; .* need 8192"),
    (f"UPDATE rdb_shard SET mesh_coordinate = '[\"a\"]' {S}", "rdb_shard: column mesh_coordinate must be an integer"),
    (f"UPDATE rdb_shard SET dtype = 'complex256' {S}", "unknown stored dtype name 'complex256'"),
    (f"UPDATE rdb_blob SET nbytes = 8192 {B}", "rdb_blob says blob 1 holds 8192 bytes"),
    (f"UPDATE rdb_blob SET chunk_size = 0 {B}", "impossible sizes"),
    (f"UPDATE rdb_blob SET chunk_size = 8589934592 {B}", "impossible sizes"),
    ("DELETE FROM rdb_chunk WHERE id = 1", "chunk 0 of blob 1 is missing from table rdb_chunk"),
    (f"UPDATE rdb_chunk SET nbytes = 8589934592 {C}", "claims 8589934592 bytes"),
    (f"UPDATE rdb_chunk SET nbytes = 2048 {C}", "chunk 0 holds 4096 bytes, not 2048"),
    (f"UPDATE rdb_chunk SET crc32 = 'x' {C}", "claims 4096 bytes"),
    (f"UPDATE rdb_chunk SET crc32 = crc32 + 1 {C}", "chunk 0 failed its integrity check"),
    (f"UPDATE rdb_chunk SET data = CAST(data AS TEXT) {C}", "of text data"),
    (f"UPDATE rdb_chunk SET data = zeroblob(4096) {C}", "chunk 0 failed its integrity check"),
    (f"UPDATE rdb_chunk SET data = zeroblob(100000) {C}", "chunk 0 holds 100000 bytes, not 4096"),
    (f"UPDATE rdb_chunk SET codec = 'zstd', data = x'00', crc32 = {ZERO_CRC} {C}", "chunk 0"),
]


@pytest.mark.parametrize("tamper, message", DAMAGE)
def test_damage_in_any_column_of_the_one_query_is_corruption(tmp_path: Path, tamper: str, message: str) -> None:
    path = _one(tmp_path / "db.sqlite")
    with reportdb.open(path) as report:
        np.testing.assert_array_equal(report.tensor(1), ARRAY)  # read once healthy: the spec is cached now
        _sql(path, tamper)
        with report.connection() as conn, pytest.raises(CorruptionError, match=message):
            rows.read_small(conn, report.path, 1, 0, report._parsed)  # the one-query path itself finds it
        with pytest.raises(CorruptionError, match=f"tensor 1 \\(rank 0\\).*{message}") as caught:
            report.tensor(1)
        assert "damaged" in str(caught.value)
        np.testing.assert_array_equal(report.tensor(2), ARRAY + 1)  # the others still read


@pytest.mark.parametrize("tamper, message", [
    (f"UPDATE rdb_tensor SET n_shards = 2 {T}", r"has shards \[0\] of the 2"),
    (f"UPDATE rdb_tensor SET n_shards = 0 {T}", "n_shards is 0, not a count"),
    (f"UPDATE rdb_shard SET blob_id = 999 {S}", "points at blob 999, which is missing"),
    (f"UPDATE rdb_shard SET shard_index = 1 {S}", r"has shards \[1\] of the 1"),
    (f"UPDATE rdb_blob SET n_chunks = 2 {B}", "has 2 chunks; 4096 bytes in"),
    ("DELETE FROM rdb_blob_chunk WHERE blob_id = 1", r"lists chunks \[\] of blob 1"),
    ("INSERT INTO rdb_blob_chunk(blob_id, idx, chunk_id) VALUES (1, 1, 1)", r"lists chunks \[0, 1\]"),
])
def test_rows_that_do_not_join_as_one_chunk_are_reported_by_the_general_path(tmp_path: Path, tamper: str, message: str) -> None:
    path = _one(tmp_path / "db.sqlite")
    _sql(path, tamper)
    with reportdb.open(path) as report:
        with report.connection() as conn:
            found = rows.read_small(conn, report.path, 1, 0)
        with pytest.raises(CorruptionError, match=f"tensor 1 \\(rank 0\\).*{message}"):
            report.tensor(1)
        if found is not None:  # the one query read a row it could check whole: it must not have passed damage
            pytest.fail(f"the one-query path returned a tensor the general path refuses: {message}")


def test_the_spec_cache_follows_the_row_written_by_another_connection(tmp_path: Path) -> None:
    path = _one(tmp_path / "db.sqlite")
    with reportdb.open(path) as reader:
        first = reader.tensor_info(1)
        assert first.spec.memory_config == MEMORY_CONFIGS[1]
        reader.tensor(1)
        with reportdb.open(path, "a") as writer, writer.connection() as conn:
            conn.execute("UPDATE rdb_tensor SET memory_config = ? WHERE tensor_id = 1",
                         ('{"memory_layout": "WIDTH_SHARDED", "buffer_type": "L1", "shard_spec": null}',))
        assert reader.tensor_info(1).spec.memory_config == {"memory_layout": "WIDTH_SHARDED", "buffer_type": "L1",
                                                            "shard_spec": None}
        np.testing.assert_array_equal(reader.tensor(1), ARRAY)
        with reportdb.open(path, "a") as writer, writer.connection() as conn:  # and back: the first text again
            conn.execute("UPDATE rdb_tensor SET memory_config = '[' WHERE tensor_id = 1")
        with pytest.raises(CorruptionError, match="column memory_config is not valid JSON"):
            reader.tensor(1)
        with pytest.raises(CorruptionError, match="column memory_config is not valid JSON"):
            reader.tensor_info(1)


def test_a_repeated_small_read_still_reads_and_checks_its_bytes(tmp_path: Path) -> None:
    """Read again within one snapshot, a small tensor's rows come from what the Report remembers (one lookup of its
    chunk instead of the join), but its bytes are read and checked each time: a byte changed in the file behind
    SQLite's back is caught, never returned. (Where SQLite reads through its own page cache rather than a memory map,
    Python 3.10, it may still hold the bytes it read before: those, checked, are what it returns.)"""
    path = _one(tmp_path / "db.sqlite")
    head = ARRAY.tobytes()[:64]
    data = path.read_bytes()
    at = data.index(head)
    assert data.count(head) == 1
    with reportdb.open(path) as report:
        for _ in range(3):
            np.testing.assert_array_equal(report.tensor(1), ARRAY)
        assert report._memo.get_small(1, 0) is not None  # the rows are remembered: the next read takes that path
        with path.open("r+b") as f:
            f.seek(at + 33)
            f.write(bytes([data[at + 33] ^ 0x40]))
        if hasattr(sqlite3.Connection, "blobopen"):  # Python 3.11+: SQLite reads the file through a memory map
            with pytest.raises(CorruptionError, match="tensor 1 \\(rank 0\\).*chunk 0 failed its integrity check"):
                report.tensor(1)
        else:
            try:
                np.testing.assert_array_equal(report.tensor(1), ARRAY)
            except CorruptionError:
                pass


def test_tensors_with_the_same_spec_text_share_one_parse(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    with reportdb.open(path, "a") as report, report.batch():
        for i in range(20):
            report.put_tensor(i, np.full((4, 8), i, np.float32), memory_config=MEMORY_CONFIGS[2], layout="TILE")
        report.put_tensor(20, np.zeros((4, 8), np.float32), memory_config=MEMORY_CONFIGS[1], layout="TILE")
    with reportdb.open(path) as report:
        specs = [report.tensor_info(i).spec for i in range(21)]
        assert all(s is specs[0] for s in specs[:20]) and specs[20] is not specs[0]
        assert specs[20].memory_config == MEMORY_CONFIGS[1]
        assert 1 <= len(report._parsed) <= 5  # two specs, a shape or two and a shard, not one entry per tensor
        assert all(report.tensor_info(i).shards[0] is report.tensor_info(0).shards[0] for i in range(21))


def test_the_parsed_cache_is_bounded_and_keeps_the_recent() -> None:
    cache = rows.ParsedCache(size=3)
    for key in "abc":
        cache.put(key, key.upper())
    assert cache.get("a") == "A"  # used: now the most recent
    cache.put("d", "D")
    assert len(cache) == 3 and cache.get("b") is rows.MISSING and cache.get("a") == "A" and cache.get("d") == "D"


def test_the_store_check_without_chunk_sizes_still_checks_every_row(tmp_path: Path) -> None:
    """Chunk bytes held elsewhere (empty here, as in a team store's copy) are no problem with ``chunk_sizes=False``;
    impossible chunk sizes and broken references still are, and with the default the empty bytes are one."""
    path = _one(tmp_path / "db.sqlite")
    _sql(path, "UPDATE rdb_chunk SET data = x''")

    def problems(**options: Any) -> list[str]:
        with reportdb.open(path) as report, report.connection() as conn:
            return rows.store_problems(conn, report.path, report._tables, has_codec=True, **options)

    assert problems(chunk_sizes=False) == []
    found = problems()
    assert len(found) == 1 and "rdb_chunk rows whose stored bytes do not fit their size" in found[0]
    _sql(path, "UPDATE rdb_chunk SET nbytes = -5 WHERE id = 2")
    _sql(path, "DELETE FROM rdb_blob_chunk WHERE blob_id = 1")
    found = problems(chunk_sizes=False)
    assert len(found) == 2, found
    assert "rdb_blob rows whose chunk list (rdb_blob_chunk) is incomplete" in found[0]
    assert "rdb_chunk rows with impossible sizes: 2, -5, 0" in found[1]
