"""Block crcs (schema 0005, ``rdb_chunk_crc``): every write path stores the crc32 of each 4 KiB block of a raw chunk,
the chunk's own crc32 is derived from them and equals zlib's, a window reads and checks only the blocks it touches (a
flipped byte inside it is caught, one elsewhere in the chunk does not stop it, and ``verify_tensor`` still finds it),
files without block crcs fall back to whole-chunk checks, hostile crc rows are CorruptionErrors, and reads by device
and windows of multi-device tensors read only the shards they need. What a Report remembers between reads (checked
blocks, checked rows) saves crcs and statements on repeats, is forgotten whenever the file changes through SQLite or a
write transaction may roll back, stays bounded, and leaves no transaction open."""

from __future__ import annotations

import sqlite3
import zlib
from pathlib import Path

import numpy as np
import pytest

from conftest import flip_stored_byte
import reportdb
from reportdb.errors import CorruptionError, TensorNotFoundError
from reportdb.spec import Distribution, Placement
from reportdb.store import blobs, rows, schema, windows
from reportdb.store.engine import connect, engine_for

RNG = np.random.default_rng(16)


def crc_rows(path: Path) -> dict[int, tuple[int, bytes]]:
    conn = sqlite3.connect(path)
    try:
        return {r[0]: (r[1], r[2]) for r in conn.execute("SELECT chunk_id, block_size, crcs FROM rdb_chunk_crc")}
    finally:
        conn.close()


def chunk_ids(report: reportdb.Report, tensor_id: int) -> list[int]:
    with report.connection() as conn:
        return [r[0] for r in conn.execute(
            "SELECT bc.chunk_id FROM rdb_tensor t JOIN rdb_shard s ON s.tensor_pk = t.id JOIN rdb_blob_chunk bc"
            " ON bc.blob_id = s.blob_id WHERE t.tensor_id=? ORDER BY s.shard_index, bc.idx", (tensor_id,))]


@pytest.mark.parametrize("nbytes", [0, 1, 4095, 4096, 4097, 12288, 100_003, 1 << 20, (1 << 20) + 5])
@pytest.mark.parametrize("block", [512, 4096, 65536])
def test_combined_block_crcs_equal_zlib(nbytes: int, block: int) -> None:
    data = RNG.integers(0, 256, nbytes, dtype=np.uint8)
    crcs = blobs.block_crcs(data, block)
    assert len(crcs) == -(-nbytes // block)
    assert [int(c) for c in crcs] == [zlib.crc32(data[i : i + block].tobytes()) for i in range(0, nbytes, block)]
    assert blobs.combine_crcs(crcs, nbytes, block) == zlib.crc32(data.tobytes())


def test_every_write_path_stores_block_crcs(tmp_path: Path) -> None:
    """put_tensor (large, streamed chunks and small ones), put_tensors (set-based) and the Writer store the same crc
    rows: one per raw chunk of more than one block, none for one-block chunks; the chunk's crc32 is zlib's."""
    big = RNG.standard_normal((300, 1000)).astype(np.float32)  # 1.2 MB: one chunk of 1 MiB chunks plus a tail
    mid = RNG.standard_normal(5000).astype(np.float32)  # 20000 bytes: one chunk of 5 blocks, the last short
    tiny = RNG.standard_normal(100).astype(np.float32)  # one block: no row
    for how in ("put_tensor", "put_tensors", "writer"):
        path = tmp_path / f"{how}.sqlite"
        if how == "writer":
            with reportdb.Writer(path) as w:
                for tid, arr in ((1, big), (2, mid), (3, tiny)):
                    w.put_tensor(tid, arr)
        else:
            with reportdb.open(path, "a", chunk_size=1 << 20) as report:
                if how == "put_tensor":
                    for tid, arr in ((1, big), (2, mid), (3, tiny)):
                        report.put_tensor(tid, arr)
                else:
                    report.put_tensors([{"tensor_id": t, "array": a} for t, a in ((1, big), (2, mid), (3, tiny))])
        conn = sqlite3.connect(path)
        chunks = {r[0]: r[1:] for r in conn.execute("SELECT id, data, crc32, codec FROM rdb_chunk")}
        conn.close()
        stored = crc_rows(path)
        assert stored and set(stored) == {cid for cid, (data, _, _) in chunks.items() if len(data) > blobs.CRC_BLOCK}
        for cid, (data, crc, codec) in chunks.items():
            assert codec is None and crc == zlib.crc32(data)
            if cid in stored:
                size, crcs = stored[cid]
                assert size == blobs.CRC_BLOCK
                assert crcs == blobs.block_crcs(np.frombuffer(data, np.uint8)).astype("<u4").tobytes()
        with reportdb.open(path) as report:
            for tid, arr in ((1, big), (2, mid), (3, tiny)):
                np.testing.assert_array_equal(report.tensor(tid), arr)
                np.testing.assert_array_equal(report.tensor(tid, window=np.s_[3:40]), arr[3:40])
                assert report.verify_tensor(tid) == arr.nbytes


def test_compressed_chunks_have_no_block_crcs(tmp_path: Path) -> None:
    pytest.importorskip("zstandard")
    path = tmp_path / "z.sqlite"
    arr = np.repeat(np.arange(64, dtype=np.float32), 1024).reshape(64, 1024)
    with reportdb.open(path, "a", compression="zstd") as report:
        report.put_tensor(1, arr)
        assert report.tensor(1, window=np.s_[5, 10:20]).tolist() == arr[5, 10:20].tolist()
    assert crc_rows(path) == {}


def test_a_window_checks_the_blocks_it_reads(tmp_path: Path) -> None:
    """A byte flipped in a block the window touches is caught, also by a window read before the flip on the same
    Report; one flipped in another block of the same chunk does not stop the window, but whole reads, verify_tensor
    and a window over it do."""
    path = tmp_path / "r.sqlite"
    arr = RNG.standard_normal((256, 1024)).astype(np.float32)  # 1 MiB: one chunk, rows of one block each
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, arr)
        [chunk] = chunk_ids(report, 1)
    with reportdb.open(path) as report:
        np.testing.assert_array_equal(report.tensor(1, window=np.s_[10, 5:9]), arr[10, 5:9])
        flip_stored_byte(path, chunk, 10 * 4096 + 2000)  # row 10, outside columns 5:9 but in their block
        flip_stored_byte(path, chunk, 200 * 4096 + 7)  # row 200
        with pytest.raises(CorruptionError, match=r"tensor 1 \(rank 0\).*chunk 0 failed its integrity check in block 10"):
            report.tensor(1, window=np.s_[10, 5:9])
    with reportdb.open(path) as report:
        np.testing.assert_array_equal(report.tensor(1, window=np.s_[20:30, 100:200]), arr[20:30, 100:200])
        np.testing.assert_array_equal(report.tensor(1, window=np.s_[:180:7, 3]), arr[:180:7, 3])  # gathers rows
        with pytest.raises(CorruptionError, match="block 200"):
            report.tensor(1, window=np.s_[150:250, 3])
        with pytest.raises(CorruptionError, match="tensor 1"):
            report.tensor(1)
        with pytest.raises(CorruptionError, match="tensor 1"):
            report.verify_tensor(1)


def test_window_reader_without_blobopen_reads_through_substr(tmp_path: Path) -> None:
    """The Python 3.10 path (no ``blobopen``): ranges come from ``substr()`` and are checked alike."""
    path = tmp_path / "r.sqlite"
    arr = RNG.standard_normal((64, 1000)).astype(np.float32)
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, arr)
        [chunk_id] = chunk_ids(report, 1)
    flat = arr.reshape(-1).view(np.uint8)
    with reportdb.open(path) as report, report.connection() as conn:
        layout = blobs.blob_layout(conn, chunk_id_blob(conn), arr.nbytes, block_crcs=True)
        chunk = layout.chunk(0)
        for streamed in (True, False) if hasattr(conn, "blobopen") else (False,):
            reader = windows.BlockReader(conn, chunk, 0, "tensor 1", streamed)
            try:
                assert reader.read(5000, 300) == flat[5000:5300].tobytes()
                assert reader.gather(100, 4000, 60, 16) == b"".join(flat[s : s + 16].tobytes() for s in range(100, 240100, 4000))
            finally:
                reader.close()
    flip_stored_byte(path, chunk_id, 9000)
    with reportdb.open(path) as report, report.connection() as conn:
        layout = blobs.blob_layout(conn, chunk_id_blob(conn), arr.nbytes, block_crcs=True)
        reader = windows.BlockReader(conn, layout.chunk(0), 0, "tensor 1", False)
        assert reader.read(100, 50) == flat[100:150].tobytes()
        with pytest.raises(CorruptionError, match="block 2"):
            reader.read(8200, 10)


def chunk_id_blob(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT blob_id FROM rdb_shard").fetchone()[0])


@pytest.mark.parametrize("tamper, message", [
    ("UPDATE rdb_chunk_crc SET block_size = 0", "rdb_chunk_crc row of chunk 0"),
    ("UPDATE rdb_chunk_crc SET block_size = 'x'", "rdb_chunk_crc row of chunk 0"),
    ("UPDATE rdb_chunk_crc SET crcs = substr(crcs, 1, 8)", "rdb_chunk_crc row of chunk 0"),
    pytest.param("UPDATE rdb_chunk_crc SET crcs = zeroblob(400000000)", "rdb_chunk_crc row of chunk 0", marks=pytest.mark.slow),  # 400 MB
    ("UPDATE rdb_chunk_crc SET crcs = 'text'", "rdb_chunk_crc row of chunk 0"),
    ("UPDATE rdb_chunk_crc SET crcs = zeroblob(length(crcs))", "failed its integrity check in block 1"),
])
def test_hostile_crc_rows_are_corruption(tmp_path: Path, tamper: str, message: str) -> None:
    path = tmp_path / "r.sqlite"
    arr = RNG.standard_normal((16, 1024)).astype(np.float32)
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, arr)
    conn = sqlite3.connect(path)
    conn.execute(tamper)
    conn.commit()
    conn.close()
    with reportdb.open(path) as report:
        np.testing.assert_array_equal(report.tensor(1), arr)  # whole reads check the chunk's own crc32
        with pytest.raises(CorruptionError, match=message):
            report.tensor(1, window=np.s_[1, :8])
        with pytest.raises(CorruptionError, match="tensor 1"):
            report.verify_tensor(1)
        if "integrity" not in message:
            assert any("rdb_chunk_crc" in p for p in report.check_store())


def test_a_crc_row_of_a_missing_chunk_is_a_store_problem(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, np.zeros(5000, np.float32))
        assert report.check_store() == []
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO rdb_chunk_crc(chunk_id, block_size, crcs) VALUES (999, 4096, zeroblob(4))")
    conn.commit()
    conn.close()
    with reportdb.open(path) as report:
        assert any("rdb_chunk_crc" in p and "999" in p for p in report.check_store())


def test_a_file_without_block_crcs_reads_and_upgrades(tmp_path: Path) -> None:
    """A schema-0004 file (no rdb_chunk_crc) reads read-only as it is, windows checked against whole chunks; mode "a"
    adds the table (chunks stored before keep no block crcs and read alike) and new tensors get block crcs."""
    path = tmp_path / "old.sqlite"
    conn = connect(path, readonly=False)
    schema.upgrade(engine_for(conn, readonly=False), target="0004")
    arr = RNG.standard_normal((64, 1024)).astype(np.float32)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO rdb_tensor(id, tensor_id, rank, dtype, shape, nbytes, n_shards) VALUES (1, 1, 0, 'float32',"
                 " '[64, 1024]', ?, 1)", (arr.nbytes,))
    ref = blobs.put_blob(conn, arr, block_crcs=False)
    conn.execute("INSERT INTO rdb_shard(tensor_pk, shard_index, mesh_coordinate, dtype, shape, blob_id) VALUES"
                 " (1, 0, '[]', 'float32', '[64, 1024]', ?)", (ref.id,))
    conn.execute("COMMIT")
    conn.close()
    with reportdb.open(path) as report:
        assert report.schema_revision == "0004"
        for _ in range(2):  # the second time through VerifiedBlocks
            np.testing.assert_array_equal(report.tensor(1, window=np.s_[7, 9:99]), arr[7, 9:99])
        assert report.verify_tensor(1) == arr.nbytes
    with reportdb.open(path, "a") as report:
        assert report.schema_revision == schema.head_revision() == "0006"
        np.testing.assert_array_equal(report.tensor(1, window=np.s_[7, 9:99]), arr[7, 9:99])
        report.put_tensor(2, arr + 1)
        [new_chunk] = chunk_ids(report, 2)
    assert set(crc_rows(path)) == {new_chunk}
    [old_chunk] = chunk_ids(reportdb.open(path), 1)
    flip_stored_byte(path, old_chunk, 3 * 4096 + 5)
    with reportdb.open(path) as report:
        with pytest.raises(CorruptionError, match="tensor 1 .*chunk 0 failed its integrity check"):
            report.tensor(1, window=np.s_[60, :4])  # no block crcs: the whole chunk is checked


def _mesh_tensor(report: reportdb.Report) -> tuple[np.ndarray, list[tuple[tuple[int, int], np.ndarray]]]:
    """A [64, 96] tensor on a 2x3 mesh: rows sharded over mesh axis 0, columns over axis 1."""
    full = RNG.standard_normal((64, 96)).astype(np.float32)
    parts = [((r, c), np.ascontiguousarray(full[r * 32 : (r + 1) * 32, c * 32 : (c + 1) * 32])) for r in range(2) for c in range(3)]
    report.put_tensor(1, shards=parts, distribution=Distribution((2, 3), (Placement("shard", 0), Placement("shard", 1))))
    return full, parts


def test_device_reads_one_shard(tmp_path: Path) -> None:
    with reportdb.open(tmp_path / "r.sqlite", "a") as report:
        full, parts = _mesh_tensor(report)
        for coord, part in parts:
            np.testing.assert_array_equal(report.tensor(1, device=coord), part)
            np.testing.assert_array_equal(report.tensor(1, device=list(coord), window=np.s_[3:9, ::5]), part[3:9, ::5])
        with pytest.raises(TensorNotFoundError, match=r"no shard at mesh coordinate \[2, 0\].*\[\[0, 0\], \[0, 1\]"):
            report.tensor(1, device=(2, 0))
        report.put_tensor(2, full)
        with pytest.raises(TensorNotFoundError, match=r"mesh coordinate \[0, 0\]; its 1 shard\(s\) are at \[\[\]\]"):
            report.tensor(2, device=(0, 0))


def test_windows_of_a_multi_device_tensor_read_only_the_shards_they_overlap(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    with reportdb.open(path, "a") as report:
        full, parts = _mesh_tensor(report)
        replicated = RNG.standard_normal((8, 40)).astype(np.float32)
        report.put_tensor(2, shards=[((i,), replicated) for i in range(4)],
                          distribution=Distribution((4,), (Placement("replicate"),)))
        ids = chunk_ids(report, 1)
    rng = np.random.default_rng(3)
    with reportdb.open(path) as report:
        for _ in range(200):
            window = (slice(int(rng.integers(-70, 70)), int(rng.integers(-70, 70)), int(rng.integers(1, 4))),
                      int(rng.integers(-96, 96)) if rng.random() < 0.3 else slice(int(rng.integers(0, 100)), None))
            np.testing.assert_array_equal(report.tensor(1, window=window), full[window])
        np.testing.assert_array_equal(report.tensor(2, window=np.s_[2:5, 7]), replicated[2:5, 7])
    # the shard at (1, 2) (rows 32.., columns 64..) damaged: windows that miss it still read
    flip_stored_byte(path, ids[5], 100)
    with reportdb.open(path) as report:
        np.testing.assert_array_equal(report.tensor(1, window=np.s_[:40, :64]), full[:40, :64])
        np.testing.assert_array_equal(report.tensor(1, window=np.s_[:32]), full[:32])
        with pytest.raises(CorruptionError, match="tensor 1"):
            report.tensor(1, window=np.s_[33:, 70])


def test_shard_boxes_tile_the_assembled_tensor(tmp_path: Path) -> None:
    with reportdb.open(tmp_path / "r.sqlite", "a") as report:
        _mesh_tensor(report)
        info = report.tensor_info(1)
    boxes = rows.shard_boxes(info)
    assert boxes is not None
    assert sorted((o, s) for _, o, s in boxes) == [((r * 32, c * 32), (32, 32)) for r in range(2) for c in range(3)]


# --- what a Report remembers between reads (VerifiedBlocks, ReadMemo) ---------------------------------------------


def test_verified_blocks_remember_blocks_and_chunks_and_stay_bounded() -> None:
    """Blocks by slice or index array, whole chunks, a chunk known by its content (another crc is another chunk), and
    the bounds: past LIMIT chunks or FLAGS block flags everything is forgotten."""
    chunk = blobs.ChunkRow(0, 7, 1 << 20, 123, None, b"d" * 32, 4096, b"\0" * 1024)
    verified = windows.VerifiedBlocks()
    assert not verified.checked(chunk, slice(3, 5)) and not verified.whole(chunk)
    verified.add(chunk, slice(3, 5))
    verified.add(chunk, np.array([10, 200]))
    assert verified.checked(chunk, slice(3, 5)) and verified.checked(chunk, slice(4, 5))
    assert not verified.checked(chunk, slice(2, 5)) and not verified.checked(chunk, slice(5, 6))
    assert verified.checked(chunk, np.array([3, 10, 200])) and not verified.checked(chunk, np.array([3, 11]))
    assert not verified.checked(chunk._replace(crc32=124), slice(3, 5))  # other content: not known
    verified.add(chunk)
    assert verified.whole(chunk) and verified.checked(chunk, np.arange(256))
    small = windows.VerifiedBlocks()
    small.LIMIT, small.FLAGS = 4, 300  # type: ignore[misc]
    for i in range(4):
        small.add(chunk._replace(id=i), slice(0, 1))
    assert small._flags == 256 and len(small._chunks) == 1  # 256 flags a chunk: each new one cleared the one before
    for i in range(6):
        small.add(chunk._replace(id=100 + i))
    assert len(small._chunks) <= 4 and small.whole(chunk._replace(id=105))


def test_a_repeated_window_computes_no_crc_and_reads_only_its_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second read of a window whose blocks this Report checked computes no crc32 (counted by a spy on
    ``blobs.crc32``, through which every crc of chunk bytes goes) and equals the first; a window that adds one unchecked
    block computes crcs again."""
    path = tmp_path / "r.sqlite"
    arr = RNG.standard_normal((1, 1, 512, 2048)).astype(np.float32)  # 8 KiB rows: 2 blocks a row, 4 MiB
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, arr)
    calls: list[int] = []
    real = blobs.crc32

    def spy(data: object, *rest: int) -> int:
        calls.append(len(memoryview(data)))  # type: ignore[arg-type]
        return real(data, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(blobs, "crc32", spy)
    with reportdb.open(path) as report:
        window = np.s_[0, 0, 100:164, 1100:1164]  # bytes 4400..4656 of each row: its second block
        np.testing.assert_array_equal(report.tensor(1, window=window), arr[window])
        assert len(calls) == 64  # one 4 KiB block of each row
        calls.clear()
        for _ in range(2):
            np.testing.assert_array_equal(report.tensor(1, window=window), arr[window])
        assert calls == []
        np.testing.assert_array_equal(report.tensor(1, window=np.s_[0, 0, 100:165, 1100:1164]), arr[0, 0, 100:165, 1100:1164])
        assert calls  # row 164 is new
        calls.clear()
        np.testing.assert_array_equal(report.tensor(1, rows=slice(0, 1)), arr[0:1])  # the whole tensor: its crc32
        assert sum(calls) == arr.nbytes
        calls.clear()
        np.testing.assert_array_equal(report.tensor(1), arr)  # checked whole before: no crc
        np.testing.assert_array_equal(report.tensor(1, window=np.s_[0, 0, 400:401, 7:9]), arr[0, 0, 400:401, 7:9])
        assert calls == []


def test_a_byte_changed_through_sqlite_after_a_check_is_caught_by_the_next_read(tmp_path: Path) -> None:
    """What this Report remembers is forgotten when another connection commits: a byte changed then is caught by a
    repeated whole read and a repeated window on the same Report."""
    path = tmp_path / "r.sqlite"
    arr = RNG.standard_normal((1024, 1024)).astype(np.float32)  # one 4 MiB chunk
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, arr)
        [chunk] = chunk_ids(report, 1)
    with reportdb.open(path) as report:
        for _ in range(2):
            np.testing.assert_array_equal(report.tensor(1), arr)
            np.testing.assert_array_equal(report.tensor(1, window=np.s_[500:520, 3]), arr[500:520, 3])
        flip_stored_byte(path, chunk, 510 * 4096 + 12)
        with pytest.raises(CorruptionError, match="chunk 0 failed its integrity check"):
            report.tensor(1)
        with pytest.raises(CorruptionError, match="block 510"):
            report.tensor(1, window=np.s_[500:520, 3])


def test_a_byte_flipped_on_disk_is_found_by_verify_and_a_new_report(tmp_path: Path) -> None:
    """The trade-off of remembering: a byte flipped in the file behind SQLite's back, after this Report checked its
    block, is found by a new Report: its windows, whole reads and ``verify_tensor``. (The Report that checked it may
    not even see the flip: without a memory map SQLite serves the page from its own cache.)"""
    path = tmp_path / "r.sqlite"
    arr = np.arange(1 << 20, dtype=np.uint32).reshape(1024, 1024)  # distinctive bytes to find in the file
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, arr)
    with reportdb.open(path) as report:
        np.testing.assert_array_equal(report.tensor(1, window=np.s_[700, :16]), arr[700, :16])
        raw = path.read_bytes()
        at = raw.find(arr[700, :16].tobytes())
        assert at > 0
        with path.open("r+b") as f:  # element [700, 5], not through SQLite
            f.seek(at + 5 * 4)
            f.write(b"\xff")
    with reportdb.open(path) as report:
        with pytest.raises(CorruptionError, match="block 700"):
            report.tensor(1, window=np.s_[700, :16])
        with pytest.raises(CorruptionError, match="chunk 0 failed its integrity check"):
            report.tensor(1)
        with pytest.raises(CorruptionError, match="tensor 1"):
            report.verify_tensor(1)


def test_remembered_rows_follow_replacements_by_this_and_other_connections(tmp_path: Path) -> None:
    """A tensor replaced by another connection, or by this Report itself, reads as its new values (and a window of
    them), never from the rows remembered of the old one."""
    path = tmp_path / "r.sqlite"
    old, new, newer = (RNG.standard_normal((300, 1024)).astype(np.float32) for _ in range(3))
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, old)
    with reportdb.open(path) as reader:
        for _ in range(2):
            np.testing.assert_array_equal(reader.tensor(1, window=np.s_[7:9, 5]), old[7:9, 5])
            np.testing.assert_array_equal(reader.tensor(1), old)
        with reportdb.open(path, "a") as writer:
            writer.put_tensor(1, new, if_exists="replace")
        np.testing.assert_array_equal(reader.tensor(1, window=np.s_[7:9, 5]), new[7:9, 5])
        np.testing.assert_array_equal(reader.tensor(1), new)
    with reportdb.open(path, "a") as report:
        np.testing.assert_array_equal(report.tensor(1, window=np.s_[7:9, 5]), new[7:9, 5])
        report.put_tensor(1, newer, if_exists="replace")
        np.testing.assert_array_equal(report.tensor(1, window=np.s_[7:9, 5]), newer[7:9, 5])
        np.testing.assert_array_equal(report.tensor(1), newer)
        with report.batch():  # inside a write transaction: read through it, no transaction of its own
            report.put_tensor(2, old)
            np.testing.assert_array_equal(report.tensor(2, window=np.s_[3]), old[3])


def test_reads_leave_no_transaction_open(tmp_path: Path) -> None:
    """Each read runs in one read transaction that ends with it, also when it fails, so writers are never held."""
    path = tmp_path / "r.sqlite"
    arr = RNG.standard_normal((64, 1024)).astype(np.float32)
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, arr)
        [chunk] = chunk_ids(report, 1)
    flip_stored_byte(path, chunk, 40 * 4096)
    with reportdb.open(path) as report:
        np.testing.assert_array_equal(report.tensor(1, window=np.s_[3:5]), arr[3:5])
        with pytest.raises(CorruptionError):
            report.tensor(1, window=np.s_[40])
        with pytest.raises(TensorNotFoundError):
            report.tensor(9, window=np.s_[1])
        with report.connection() as conn:
            assert not conn.in_transaction
        with reportdb.open(path, "a") as writer:  # a writer commits while the reader is open
            writer.put_tensor(2, arr)
        np.testing.assert_array_equal(report.tensor(2, window=np.s_[3:5]), arr[3:5])


def test_rows_read_inside_a_rolled_back_batch_are_not_remembered(tmp_path: Path) -> None:
    """Reads inside a write transaction see its rows, and nothing read there outlives a rollback: after it the
    tensor reads as committed (whole and windowed)."""
    path = tmp_path / "r.sqlite"
    old, new = (RNG.standard_normal((300, 1024)).astype(np.float32) for _ in range(2))
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, old)
        np.testing.assert_array_equal(report.tensor(1, window=np.s_[7:9, 5]), old[7:9, 5])
        with pytest.raises(RuntimeError), report.batch():
            report.put_tensor(1, new, if_exists="replace")
            np.testing.assert_array_equal(report.tensor(1, window=np.s_[7:9, 5]), new[7:9, 5])
            np.testing.assert_array_equal(report.tensor(1), new)
            raise RuntimeError("undo")
        np.testing.assert_array_equal(report.tensor(1, window=np.s_[7:9, 5]), old[7:9, 5])
        np.testing.assert_array_equal(report.tensor(1), old)


def test_the_read_memo_is_bounded_in_entries_and_bytes(tmp_path: Path) -> None:
    """Layouts count their block crcs: past BYTES (or LIMIT entries) everything is forgotten, and a layout larger
    than BYTES is not kept at all; reads stay right throughout."""
    path = tmp_path / "r.sqlite"
    arr = RNG.standard_normal((4096, 1024)).astype(np.float32)  # 16 MiB: four chunks with 4 KiB of crcs each
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, arr)
    with reportdb.open(path) as report:
        memo = report._memo
        memo.group = 1  # one chunk listed at a time (grouped listing: test_windows)
        memo.BYTES = 3 * (4096 + memo.ENTRY)  # type: ignore[misc]  # three one-chunk layouts
        for i in range(4):  # windows in chunk 0..3 in turn: the fourth layout clears the three before
            np.testing.assert_array_equal(report.tensor(1, window=np.s_[i * 1024 + 5, :9]), arr[i * 1024 + 5, :9])
            assert memo._bytes <= memo.BYTES
        layouts = [k[-1] for k in memo._items if k[0] == "layout"]
        assert layouts == [(2, 2), (3, 3)]  # the third one cleared the first two (and the metadata, read again)
        np.testing.assert_array_equal(report.tensor(1, window=np.s_[:, 3]), arr[:, 3])  # four chunks: too large to keep
        assert memo._bytes <= memo.BYTES and all(k[0] != "layout" or k[-1] != (0, 3) for k in memo._items)
        memo.LIMIT = 1  # type: ignore[misc]
        np.testing.assert_array_equal(report.tensor(1, window=np.s_[7, :9]), arr[7, :9])
        assert len(memo._items) == 1
