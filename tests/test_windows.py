"""N-d windows of stored shards (``store/windows.py``) in real SQLite files: random windows of random shapes and
dtypes equal numpy's indexing, a window reads only the chunks that hold it (a damaged chunk elsewhere does not
matter, a damaged one inside is caught, also after the chunk was checked once and changed by another connection),
zstd-compressed chunks, and windows numpy would refuse."""

from __future__ import annotations

import sqlite3
import tracemalloc
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from conftest import flip_stored_byte
import reportdb
from reportdb.errors import CorruptionError, InvalidArgumentError
from reportdb.store import blobs, rows, windows


def read(report: reportdb.Report, tensor_id: int, window: Any, verified: windows.VerifiedBlocks | None = None) -> np.ndarray:
    """``window`` of a single-device tensor through ``rows.read_shard`` on the report's own connection (``verified``
    synced first, as a Report does at the start of each read)."""
    with report.connection() as conn:
        if verified is not None:
            verified.sync(conn)
        info, blob_ids = rows.read_info(conn, report.path, tensor_id, 0)
        return rows.read_shard(conn, blob_ids[0], info.shards[0], f"tensor {tensor_id}", window=window, verified=verified)


def random_index(rng: np.random.Generator, n: int) -> Any:
    """An int (maybe negative) or a slice (maybe negative, out of range, empty or strided) for an axis of size n."""
    kind = rng.integers(0, 6)
    if kind == 0 and n > 0:
        return int(rng.integers(-n, n))
    if kind == 1:
        return slice(None)
    bound = n + 3
    start = None if rng.random() < 0.2 else int(rng.integers(-bound, bound))
    stop = None if rng.random() < 0.2 else int(rng.integers(-bound, bound))
    step = None if rng.random() < 0.6 else int(rng.integers(1, 4))
    return slice(start, stop, step)


def random_window(rng: np.random.Generator, shape: tuple[int, ...]) -> Any:
    """A tuple of indices, trailing axes sometimes omitted, sometimes with an Ellipsis; or a bare index."""
    items = [random_index(rng, n) for n in shape]
    cut = int(rng.integers(0, len(shape) + 1))
    if rng.random() < 0.3:
        items = items[:cut]
    elif rng.random() < 0.3:
        items = items[:cut] + [Ellipsis] + items[cut + (1 if cut < len(items) else 0) :]
    if len(items) == 1 and rng.random() < 0.5:
        return items[0]
    return tuple(items)


def random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    if np.dtype(dtype) == np.int8:
        return rng.integers(-128, 128, size=shape, dtype=np.int8)
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("chunk_size", [1000, pytest.param(4096, marks=pytest.mark.slow), pytest.param(4 << 20, marks=pytest.mark.slow)])
def test_random_windows_equal_numpy(tmp_path: Path, chunk_size: int) -> None:
    rng = np.random.default_rng(chunk_size)
    path = tmp_path / "w.rdb"
    arrays = {}
    with reportdb.open(path, "a", chunk_size=chunk_size) as report:
        for tensor_id in range(36):
            ndim = tensor_id % 6
            dtype = (np.float32, ml_dtypes.bfloat16, np.int8)[tensor_id % 3]
            shape = tuple(int(rng.integers(0 if ndim and tensor_id % 7 == 0 else 1, 12 if ndim > 2 else 90))
                          for _ in range(ndim))
            arrays[tensor_id] = random_array(rng, shape, dtype)
            report.put_tensor(tensor_id, arrays[tensor_id])
    with reportdb.open(path) as report:
        verified = windows.VerifiedBlocks()
        for tensor_id, array in arrays.items():
            for _ in range(25):
                window = random_window(rng, array.shape)
                expected = array[window]
                for cache in (None, verified, verified):  # the second time through the cache reads only the bytes
                    got = read(report, tensor_id, window, cache)
                    assert got.dtype == array.dtype and got.flags.c_contiguous and got.shape == np.shape(expected), window
                    assert got.tobytes() == np.ascontiguousarray(expected).tobytes(), (tensor_id, array.shape, window)


def test_window_spanning_many_chunks_and_crossing_their_edges(tmp_path: Path) -> None:
    array = np.arange(6 * 7 * 50 * 33, dtype=np.float32).reshape(6, 7, 50, 33)
    path = tmp_path / "w.rdb"
    with reportdb.open(path, "a", chunk_size=4096) as report:  # 4096 is no multiple of a row: rows straddle chunks
        report.put_tensor(1, array)
    windows_ = [
        (slice(1, 5), slice(None), slice(3, 47), slice(2, 31)),
        (..., slice(10, 40), slice(None)),
        (slice(None), 3),
        (-1, -2, slice(None, None, 7), slice(1, None, 4)),
        (slice(None), slice(None), slice(None), 0),
        (slice(2, 3), slice(1, 2), slice(5, 6)),
        (),
    ]
    with reportdb.open(path) as report:
        verified = windows.VerifiedBlocks()
        for window in windows_:
            for cache in (None, verified, verified):
                np.testing.assert_array_equal(read(report, 1, window, cache), array[window])


def test_zero_d_and_empty(tmp_path: Path) -> None:
    scalar, empty = np.array(2.5, dtype=ml_dtypes.bfloat16), np.zeros((3, 0, 4), dtype=np.int8)
    with reportdb.open(tmp_path / "w.rdb", "a") as report:
        report.put_tensor(1, scalar)
        report.put_tensor(2, empty)
        assert read(report, 1, ()).shape == () and read(report, 1, ()) == scalar
        assert read(report, 1, ...) == scalar
        assert read(report, 2, (slice(1, 2), ...)).shape == (1, 0, 4)
        assert read(report, 2, (0, slice(None), 2)).shape == (0,)


def chunk_ids(path: Path) -> list[int]:
    with sqlite3.connect(path) as conn:
        return [r[0] for r in conn.execute("SELECT chunk_id FROM rdb_blob_chunk ORDER BY idx")]


def test_a_window_reads_only_the_chunks_that_hold_it(tmp_path: Path) -> None:
    array = np.arange(64 * 256, dtype=np.float32).reshape(1, 64, 256)  # a row is 1 KiB; 4 rows a chunk
    path = tmp_path / "w.rdb"
    with reportdb.open(path, "a", chunk_size=4096) as report:
        report.put_tensor(1, array)
    ids = chunk_ids(path)
    assert len(ids) == 16
    flip_stored_byte(path, ids[5], 100)  # rows 20..23
    with sqlite3.connect(path) as conn:  # and chunk 9's row is gone from the chunk list
        conn.execute("DELETE FROM rdb_blob_chunk WHERE idx = 9")
    with reportdb.open(path) as report:
        for window in [(0, slice(4, 8)), (..., slice(0, 4), slice(3, 9)), (0, 63), (slice(None), slice(24, 36), 7)]:
            np.testing.assert_array_equal(read(report, 1, window), array[window])
        with pytest.raises(CorruptionError, match="chunk 5 failed its integrity check"):
            read(report, 1, (0, 21, slice(0, 2)))
        with pytest.raises(CorruptionError, match=r"lists chunks \[10\] of blob 1, which needs chunks 9..9 of its 0..15"):
            read(report, 1, (0, slice(37, 38)))
        with pytest.raises(CorruptionError):
            report.tensor(1)


def test_a_checked_chunk_changed_by_another_connection_is_checked_again(tmp_path: Path) -> None:
    array = np.arange(4 * 4096, dtype=np.float32).reshape(4, 4096)  # one 16 KiB row per 16 KiB chunk
    path = tmp_path / "w.rdb"
    with reportdb.open(path, "a", chunk_size=16 << 10) as report:
        report.put_tensor(1, array)
    ids = chunk_ids(path)
    with reportdb.open(path) as report:
        verified = windows.VerifiedBlocks()
        np.testing.assert_array_equal(read(report, 1, (2, slice(10, 20)), verified), array[2, 10:20])  # checks chunk 2
        np.testing.assert_array_equal(read(report, 1, (2, slice(10, 20)), verified), array[2, 10:20])
        flip_stored_byte(path, ids[2], 4 * 12)  # element 12 of row 2, inside the window
        with pytest.raises(CorruptionError, match="chunk 2 failed its integrity check"):
            read(report, 1, (2, slice(10, 20)), verified)


def test_sizes_are_checked_before_a_window_allocates(tmp_path: Path) -> None:
    path = tmp_path / "w.rdb"
    with reportdb.open(path, "a", chunk_size=4096) as report:
        report.put_tensor(1, np.zeros((16, 256), dtype=np.float32))
    with sqlite3.connect(path) as conn:  # the shard claims 64 GiB; its blob holds 16 KiB
        conn.execute("UPDATE rdb_shard SET shape = '[65536, 262144]'")
    with reportdb.open(path) as report:
        tracemalloc.start()
        try:
            with pytest.raises(CorruptionError, match="holds 16384 bytes; the shard's shape and dtype need 68719476736"):
                read(report, 1, (slice(None), slice(0, 262144)))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 4 << 20


def test_compressed_chunks(tmp_path: Path) -> None:
    pytest.importorskip("zstandard")
    rng = np.random.default_rng(3)
    array = rng.integers(0, 4, size=(3, 40, 300)).astype(ml_dtypes.bfloat16)
    path = tmp_path / "w.rdb"
    with reportdb.open(path, "a", chunk_size=8192, compression="zstd") as report:
        report.put_tensor(1, array)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM rdb_chunk WHERE codec = 'zstd'").fetchone()[0] > 1
    with reportdb.open(path) as report:
        verified = windows.VerifiedBlocks()
        for _ in range(40):
            window = random_window(rng, array.shape)
            for cache in (None, verified):
                assert read(report, 1, window, cache).tobytes() == np.ascontiguousarray(array[window]).tobytes()


@pytest.mark.parametrize(
    "window, message",
    [
        ((0, 0, 0, 0), "window of 4 indices"),
        ((3,), "index 3 is out of range for axis 0"),
        ((slice(None), -6), "index -6 is out of range for axis 1"),
        ((slice(None, None, -1),), "steps must be positive"),
        ((slice(None, None, 0),), "steps must be positive"),
        ((slice(0.5, 2),), "must hold ints or None"),
        ((..., 0, ...), "one Ellipsis"),
        ((1.0,), "takes ints, slices and one Ellipsis"),
        ((True,), "takes ints, slices and one Ellipsis"),
        ((None, 0), "takes ints, slices and one Ellipsis"),
        (([0, 1],), "takes ints, slices and one Ellipsis"),
    ],
)
def test_bad_windows(tmp_path: Path, window: Any, message: str) -> None:
    with reportdb.open(tmp_path / "w.rdb", "a") as report:
        report.put_tensor(1, np.zeros((3, 5, 2), dtype=np.float32))
        with pytest.raises(InvalidArgumentError, match=message):
            read(report, 1, window)


def test_plan_merges_trailing_whole_axes_into_one_run() -> None:
    plan = windows.plan_window((2, 3, 8192, 8192), 4, (1, 2, slice(0, 64), slice(0, 64)))
    assert plan.shape == (64, 64) and plan.counts == (64, 256) and plan.steps == (32768, 1)
    assert plan.span == ((3 + 2) * 8192 * 8192 * 4, (3 + 2) * 8192 * 8192 * 4 + 63 * 32768 + 256)
    whole_rows = windows.plan_window((100, 16, 16), 2, slice(10, 20))
    assert whole_rows.counts == (10 * 16 * 16 * 2,) and whole_rows.base == 10 * 16 * 16 * 2


def test_windows_with_wide_gaps_read_in_pieces(tmp_path: Path) -> None:
    """Windows whose rows lie far apart in a checked chunk: read row by row (joined) or box by box, same values."""
    rng = np.random.default_rng(5)
    wide = rng.standard_normal((1, 1, 512, 4096)).astype(np.float32)  # 16 KiB rows
    deep = rng.standard_normal((64, 8, 2048)).astype(np.float32)  # 8 KiB rows, 64 KiB per first index
    with reportdb.open(tmp_path / "w.rdb", "a") as report:
        report.put_tensor(1, wide)
        report.put_tensor(2, deep)
        verified = windows.VerifiedBlocks()
        for tensor_id, array, window in [
            (1, wide, (0, 0, slice(0, 64), slice(100, 164))),
            (1, wide, (..., slice(7, 500, 9), slice(4000, None))),
            (2, deep, (slice(None), slice(0, 8, 3), slice(0, 16))),
            (2, deep, (slice(3, 60, 5), slice(None), slice(1000, 1003))),
        ]:
            for cache in (verified, verified):
                np.testing.assert_array_equal(read(report, tensor_id, window, cache), array[window])


def test_report_tensor_window_is_the_public_path(tmp_path: Path) -> None:
    """``Report.tensor(window=...)`` for one device and for an assembled multi-device tensor; ``rows=`` is
    ``window=(rows,)`` (a step is allowed now); both together, or a window numpy refuses, is an InvalidArgumentError."""
    rng = np.random.default_rng(5)
    one = rng.standard_normal((1, 1, 96, 80)).astype(np.float32)
    halves = [rng.standard_normal((6, 10)).astype(np.float32) for _ in range(2)]
    with reportdb.open(tmp_path, "a", chunk_size=4096) as report:
        report.put_tensor(1, one)
        report.put_tensor(2, shards=[((0, 0), halves[0]), ((0, 1), halves[1])],
                          distribution={"mesh_shape": [1, 2], "placements": [{"kind": "replicate"}, {"kind": "shard", "dim": 1}]})
    whole = np.concatenate(halves, axis=1)
    with reportdb.open(tmp_path) as report:
        for window in [(0, 0, slice(32, 64), slice(16, 80)), np.s_[..., 5], np.s_[0, 0, -3:], (0,)]:
            got = report.tensor(1, window=window)
            assert got.flags.c_contiguous and np.array_equal(got, one[window])
        assert np.array_equal(report.tensor(2), whole)
        assert np.array_equal(report.tensor(2, window=np.s_[1:4, 3:15]), whole[1:4, 3:15])
        assert np.array_equal(report.tensor(1, rows=slice(0, 1)), one[0:1])
        assert np.array_equal(report.tensor(2, rows=slice(0, 6, 2)), whole[0:6:2])
        with pytest.raises(InvalidArgumentError):
            report.tensor(1, window=(0,), rows=slice(0, 1))
        for bad in [(0, 0, 0, 0, 0), (7,), np.s_[::-1]]:
            with pytest.raises(InvalidArgumentError):
                report.tensor(1, window=bad)
            with pytest.raises(InvalidArgumentError):
                report.tensor(2, window=bad)


@pytest.mark.parametrize("cols, rows_step", [(slice(1000, 1064), 1), (slice(1020, 1030), 3), (slice(4090, 4096), 2),
                                              (slice(3000, 3064), 1)])
def test_rows_of_a_window_in_one_block_or_across_a_block_edge(tmp_path: Path, cols: slice, rows_step: int) -> None:
    """Row ranges of a window in 16 KiB rows (four 4 KiB blocks each): in one block (the rows read as a slice of
    blocks), or across a block edge (two blocks a row); equal to numpy read first and again (then from what was
    checked), and a byte changed in any block a row needs is caught, one in a block it does not need is not read."""
    array = np.random.default_rng(16).standard_normal((32, 4096)).astype(np.float32)
    path = tmp_path / "w.rdb"
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, array)
    window = (slice(2, 30, rows_step), cols)
    with reportdb.open(path) as report:
        for _ in range(2):
            np.testing.assert_array_equal(report.tensor(1, window=window), array[window])
    row, first, last = 2 + rows_step, cols.start * 4 // 4096, (cols.stop * 4 - 1) // 4096
    (chunk,) = chunk_ids(path)
    flip_stored_byte(path, chunk, row * 16384 + (first + 3) % 4 * 4096 + 7)  # a block of that row the window skips
    with reportdb.open(path) as report:
        np.testing.assert_array_equal(report.tensor(1, window=window), array[window])
    flip_stored_byte(path, chunk, row * 16384 + last * 4096 + 1)  # the last block the row's range needs
    with reportdb.open(path) as report, pytest.raises(CorruptionError, match=f"in block {row * 4 + last} "):
        report.tensor(1, window=window)


def test_checked_blocks_by_a_slice_with_a_step() -> None:
    """Rows of a matrix are every k-th block of a chunk: ``VerifiedBlocks`` takes them as a slice with a step."""
    verified = windows.VerifiedBlocks()
    chunk = blobs.ChunkRow(0, 1, 64 << 10, 5, None, b"d" * 32, 4096, bytes(64))
    verified.add(chunk, slice(1, 14, 4))  # blocks 1, 5, 9, 13
    assert verified.checked(chunk, slice(1, 14, 4)) and verified.checked(chunk, slice(5, 10, 4))
    assert verified.checked(chunk, [1, 13]) and not verified.checked(chunk, slice(1, 14, 2))
    assert not verified.checked(chunk, slice(1, 3)) and not verified.whole(chunk)
    verified.add(chunk, slice(0, 16))
    assert verified.whole(chunk)


def _wide_report(path: Path) -> np.ndarray:
    """A 1 MiB float32 matrix of 16 KiB rows in 64 KiB chunks (4 rows, 16 blocks a chunk), stored at ``path``."""
    array = np.random.default_rng(21).standard_normal((64, 4096)).astype(np.float32)
    with reportdb.open(path, "a", chunk_size=64 << 10) as report:
        report.put_tensor(1, array)
    return array


@pytest.mark.skipif(not hasattr(sqlite3.Connection, "blobopen"),
                    reason="Python 3.10's sqlite3 has no blobopen: windows read through substr(), no handle to keep")
def test_chunk_handles_are_kept_for_a_snapshot_bounded_and_closed_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within one held snapshot a chunk read again reuses its blob handle (counted by a spy on ``blobopen``), at most
    ``BlobHandles.LIMIT`` stay open (the oldest closed), every window equals numpy's, and ending the snapshot (the
    caller's own SQL) closes them all: a writer then gets in at once."""
    import reportdb.report as report_mod
    from reportdb.store import engine

    monkeypatch.setattr(report_mod, "SNAPSHOT_SECONDS", 60.0)
    monkeypatch.setattr(windows.BlobHandles, "LIMIT", 4)
    path = tmp_path / "w.rdb"
    array = _wide_report(path)
    opened: list[int] = []
    real = engine.Connection.blobopen

    def spy(self: sqlite3.Connection, table: str, column: str, row: int, /, *, readonly: bool = False,
            name: str = "main") -> sqlite3.Blob:
        opened.append(row)
        return real(self, table, column, row, readonly=readonly, name=name)

    monkeypatch.setattr(engine.Connection, "blobopen", spy)
    window = (slice(2, 6), slice(1000, 1064))  # rows 2..5: chunks 0 and 1
    with reportdb.open(path) as report:
        for _ in range(3):
            np.testing.assert_array_equal(report.tensor(1, window=window), array[window])
        assert len(opened) == 2  # once per chunk, then kept
        column = (slice(None), slice(7, 9))  # every row: all 16 chunks, through at most 4 handles
        for _ in range(2):
            np.testing.assert_array_equal(report.tensor(1, window=column), array[column])
        assert len(opened) == 2 + 14 + 16  # chunks 0 and 1 were kept; then each pass evicts what the next needs
        with report.connection():  # the caller's own SQL ends the snapshot and closes the handles with it
            conn = sqlite3.connect(path, timeout=0, isolation_level=None)
            try:
                conn.execute("UPDATE rdb_tensor SET memory_config = '{}' WHERE tensor_id = 1")
            finally:
                conn.close()
        np.testing.assert_array_equal(report.tensor(1, window=window), array[window])


def test_a_window_after_kept_handles_sees_another_connections_commit_and_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Handles kept across reads hold no lock past their snapshot: a writer held back while it lasts gets in once it
    ends, the next window sees the new values, and a byte then changed in a block the window had checked is caught."""
    import reportdb.report as report_mod

    monkeypatch.setattr(report_mod, "SNAPSHOT_SECONDS", 0.5)
    path = tmp_path / "w.rdb"
    array = _wide_report(path)
    window = (slice(2, 6), slice(1000, 1064))
    with reportdb.open(path) as report:
        for _ in range(2):
            np.testing.assert_array_equal(report.tensor(1, window=window), array[window])
        blocked = sqlite3.connect(path, timeout=0, isolation_level=None)
        try:
            with pytest.raises(sqlite3.OperationalError, match="locked"):  # the snapshot (and its handles) is held
                blocked.execute("UPDATE rdb_tensor SET memory_config = '{}' WHERE tensor_id = 1")
        finally:
            blocked.close()
        with reportdb.open(path, "a", chunk_size=64 << 10) as writer:  # waits for the reaper to end the snapshot
            writer.put_tensor(1, array * 2, if_exists="replace")
        for _ in range(2):
            np.testing.assert_array_equal(report.tensor(1, window=window), array[window] * 2)
        with sqlite3.connect(path) as conn:  # chunk 1 of the tensor's new blob
            (chunk,) = conn.execute("SELECT bc.chunk_id FROM rdb_blob_chunk bc JOIN rdb_shard s ON s.blob_id = bc.blob_id"
                                    " JOIN rdb_tensor t ON t.id = s.tensor_pk WHERE t.tensor_id = 1 AND bc.idx = 1").fetchone()
        flip_stored_byte(path, chunk, (5 - 4) * 16384 + 1010 * 4 + 1)  # row 5, element 1010: inside the window
        with pytest.raises(CorruptionError, match="chunk 1 failed its integrity check in block 4 "):
            report.tensor(1, window=window)


def test_windows_at_new_places_list_chunks_by_groups(tmp_path: Path) -> None:
    """A Report lists a span's chunk rows by aligned groups of ``rows.LAYOUT_GROUP`` chunks (one statement per group,
    counted by a trace of the report's connection): windows panning down a 16-chunk matrix, each in a chunk not read
    before, run two listings, and every window equals numpy's; a damaged block in a chunk listed ahead of its read is
    still found when a window reaches it."""
    path = tmp_path / "w.rdb"
    array = _wide_report(path)  # 16 chunks of 4 rows
    assert rows.LAYOUT_GROUP == 8
    listings: list[str] = []
    with reportdb.open(path) as report:
        report._conn.set_trace_callback(lambda sql: listings.append(sql) if "rdb_blob_chunk" in sql else None)
        for first in range(0, 64, 4):  # one window per chunk, top to bottom
            window = (slice(first, first + 4), slice(100, 164))
            np.testing.assert_array_equal(report.tensor(1, window=window), array[window])
        assert len(listings) == 2
    with sqlite3.connect(path) as conn:
        (chunk_15,) = conn.execute("SELECT chunk_id FROM rdb_blob_chunk WHERE idx = 15").fetchone()
    flip_stored_byte(path, chunk_15, 120 * 4)  # row 60 (the chunk's first), column 120
    with reportdb.open(path) as report:
        np.testing.assert_array_equal(report.tensor(1, window=(slice(32, 36), slice(100, 164))), array[32:36, 100:164])
        with pytest.raises(CorruptionError, match="integrity check"):
            report.tensor(1, window=(slice(60, 61), slice(100, 164)))
