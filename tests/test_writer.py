"""The profiling-run writer in one process: what it records, batching, threads, fork, configuration."""

from __future__ import annotations

import multiprocessing
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import reportdb
from reportdb.errors import ReportDBError
from reportdb.spec import Distribution, LoadedTensor, Placement
from reportdb.writer import RowsRefusedError, Writer, WriterConfig

from conftest import FIXTURES, ROOT

NASTY = [
    "it's",
    'say "hi"',
    "'); DROP TABLE operations; --",
    "line one\nline two\r\nline three\ttab",
    "ünïcødé ✓ 漢字 🚀",
    "back\\slash and NUL\x00inside",
    "",
    "MemoryConfig(memory_layout=TensorMemoryLayout::INTERLEAVED,buffer_type=BufferType::DRAM)",
]


def _rows(db: Path, sql: str, params: tuple = ()) -> list[tuple]:
    """Read through an independent connection: what any other process would see (committed data only)."""
    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def _wait_for(predicate, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"never happened: {what}")
        time.sleep(0.01)


def test_tensors_round_trip_with_stats_and_report_rows(tmp_path: Path) -> None:
    arrays = {
        1: np.arange(12, dtype=np.float32).reshape(3, 4),
        2: np.arange(6, dtype=">i4").reshape(2, 3),  # big-endian in, little-endian stored
        3: np.linspace(-2, 2, 64).astype(ml_dtypes.bfloat16).reshape(8, 8),
        4: np.array(7, dtype=np.uint8),
        5: np.arange(20, dtype=np.float64)[::2],  # not contiguous
    }
    with Writer(tmp_path) as w:
        for tid, a in arrays.items():
            assert w.put_tensor(tid, a) is True
        w.put_tensor(6, np.ones((32, 64), np.float32), ttnn_dtype="BFLOAT8_B", layout="TILE",
                     memory_config="MemoryConfig(memory_layout=TensorMemoryLayout::INTERLEAVED,"
                     "buffer_type=BufferType::DRAM,shard_spec=std::nullopt)", device_id=0, address=1024, buffer_type=0)
    with reportdb.open(tmp_path) as r:
        for tid, a in arrays.items():
            back = r.tensor(tid)
            assert back.dtype == a.dtype.newbyteorder("<") or back.dtype == a.dtype
            np.testing.assert_array_equal(back, a)
        assert r.tensor_stats(1).mean == pytest.approx(5.5)
        info = r.tensor_info(6)
        assert info.spec.ttnn_dtype == "BFLOAT8_B" and info.spec.layout == "TILE"
        assert info.spec.memory_config["memory_layout"] == "INTERLEAVED"
    row = _rows(tmp_path / "db.sqlite", "SELECT shape, dtype, layout, memory_config, device_id, address, buffer_type"
                " FROM tensors WHERE tensor_id=6")[0]
    assert row[:3] == ("Shape([32, 64])", "DataType.BFLOAT8_B", "Layout.TILE")
    assert row[3].startswith("MemoryConfig(") and row[4:] == (0, 1024, 0)
    assert _rows(tmp_path / "db.sqlite", "SELECT shape, dtype FROM tensors WHERE tensor_id=1") == [("Shape([3, 4])", "float32")]


def test_operation_text_is_stored_verbatim(tmp_path: Path) -> None:
    trace = 'File "model.py", line 3, in forward\n    x = ttnn.add(a, b, name="it\'s")\nünï ✓'
    with Writer(tmp_path) as w:
        w.add_operation(1, "ttnn.add", arguments={f"arg{i}": v for i, v in enumerate(NASTY)}, stack_trace=trace)
        w.add_operation(2, "we'ird \"name\"\n✓", arguments=[("0", 3), ("1", None), ("shape", (1, 2))],
                        stack_trace=["a 'x'", 'b "y"'])
    db = tmp_path / "db.sqlite"
    values = _rows(db, "SELECT value FROM operation_arguments WHERE operation_id=1 ORDER BY rowid")
    assert [v for (v,) in values] == NASTY
    assert _rows(db, "SELECT value FROM operation_arguments WHERE operation_id=2 ORDER BY rowid") == [
        ("3",), ("None",), ("(1, 2)",)
    ]
    assert _rows(db, "SELECT stack_trace FROM stack_traces ORDER BY operation_id") == [(trace,), ("a 'x'\nb \"y\"",)]
    assert _rows(db, "SELECT name FROM operations WHERE operation_id=2") == [("we'ird \"name\"\n✓",)]


def test_operation_links_and_second_call_sets_duration(tmp_path: Path) -> None:
    with Writer(tmp_path, rank=3) as w:
        w.add_operation(7, "ttnn.matmul", inputs=[10, 11])
        w.put_tensor(10, np.zeros(4, np.float32))
        w.put_tensor(11, np.ones(4, np.float32))
        w.put_tensor(12, np.full(4, 2, np.float32), role="output")
        w.add_operation(7, "ttnn.matmul", duration=0.25, outputs=[12])
        w.add_device(0, num_x_cores=8, num_y_cores=8, l1_bank_size=1 << 20)
    db = tmp_path / "db.sqlite"
    assert _rows(db, "SELECT operation_id, name, duration, rank FROM operations") == [(7, "ttnn.matmul", 0.25, 3)]
    assert _rows(db, "SELECT input_index, tensor_id, rank FROM input_tensors ORDER BY input_index") == [(0, 10, 3), (1, 11, 3)]
    assert _rows(db, "SELECT output_index, tensor_id, rank FROM output_tensors") == [(0, 12, 3)]
    assert _rows(db, "SELECT device_id, num_x_cores, l1_bank_size, rank FROM devices") == [(0, 8, 1 << 20, 3)]
    with reportdb.open(tmp_path) as r:
        assert r.tensor_keys() == [(10, 3), (11, 3), (12, 3)]


def test_add_rows_checks_tables_and_columns(tmp_path: Path) -> None:
    with Writer(tmp_path) as w:
        w.add_rows("buffers", [{"operation_id": 1, "device_id": 0, "address": 64, "max_size_per_bank": 2048, "buffer_type": 1}])
        w.add_rows("captured_graph", [{"operation_id": 1, "captured_graph": '[{"node_type": "capture_start"}]'}])
        with pytest.raises(ReportDBError, match="unknown report table"):
            w.add_rows("nope", [{"a": 1}])
        with pytest.raises(ReportDBError, match="has no columns"):
            w.add_rows("buffers", [{"operation_id": 1, "bogus": 2}])
    db = tmp_path / "db.sqlite"
    assert _rows(db, "SELECT address, max_size_per_bank, rank FROM buffers") == [(64, 2048, 0)]
    assert _rows(db, "SELECT captured_graph FROM captured_graph") == [('[{"node_type": "capture_start"}]',)]


def test_a_known_table_the_file_lacks_is_created_with_its_rows(tmp_path: Path) -> None:
    """A new report has the newest schema (buffer_chunks, no buffer_pages); legacy ttnn's page rows still land."""
    page = {"operation_id": 3, "device_id": 0, "address": 64, "core_y": 1, "core_x": 2, "bank_id": 5, "page_index": 0,
            "page_address": 4160, "page_size": 32, "buffer_type": 1}
    with Writer(tmp_path, batch_seconds=0) as w:
        w.add_rows("operations", [{"operation_id": 3, "name": "ttnn.add"}])
        w.flush()
    db = tmp_path / "db.sqlite"
    assert not _rows(db, "SELECT name FROM sqlite_master WHERE name='buffer_pages'")  # not created before it is needed
    with Writer(tmp_path, batch_seconds=0, append=True) as w, Writer(tmp_path, batch_seconds=0) as other:
        w.add_rows("buffer_pages", [page])
        other.add_rows("buffer_pages", [{**page, "page_index": 1}])  # its own view of the tables is out of date
    assert _rows(db, "SELECT page_index, page_address, rank FROM buffer_pages ORDER BY page_index") == [(0, 4160, 0), (1, 4160, 0)]
    assert reportdb.verify(tmp_path).ok


def test_checkpoints_run_beside_the_writer(tmp_path: Path) -> None:
    """Committed pages reach the database file while the writer is open, copied there by its checkpoint thread (the
    committing thread no longer waits for it); close leaves one file, no WAL."""
    db = tmp_path / "db.sqlite"
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(2 << 20).astype(np.float32) for _ in range(3)]  # 8 MiB each
    with Writer(tmp_path, batch_seconds=0) as w:
        w.put_tensor(0, np.zeros(1))
        w.flush()
        empty = db.stat().st_size
        for i, a in enumerate(arrays, 1):
            w.put_tensor(i, a)
            w.flush()  # 16 MiB committed after the second: the checkpoint thread is poked
        deadline = time.monotonic() + 30
        while db.stat().st_size < empty + 16 * 2**20 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert db.stat().st_size >= empty + 16 * 2**20
    assert not Path(f"{db}-wal").exists()
    with reportdb.open(db) as r:
        for i, a in enumerate(arrays, 1):
            np.testing.assert_array_equal(r.tensor(i), a)


def test_stored_ids_are_skipped_without_converting(tmp_path: Path) -> None:
    with Writer(tmp_path) as first:
        assert first.put_tensor(1, np.arange(3, dtype=np.int32))
        assert first.put_tensor(1, np.zeros(3, np.int32)) is False  # queued in this writer
        first.flush()
        with Writer(tmp_path) as w:  # opened while the first is: the same run
            # already in the database: an object nothing could convert proves no conversion is attempted
            assert w.put_tensor(1, object()) is False
            assert w.put_tensor(1, np.zeros(3, np.int32), rank=1) is True  # another rank is another tensor
    with reportdb.open(tmp_path) as r:
        np.testing.assert_array_equal(r.tensor(1), [0, 1, 2])
        assert r.tensor_keys() == [(1, 0), (1, 1)]


def test_id_stored_by_another_writer_after_open_is_skipped(tmp_path: Path) -> None:
    """A writer learns the stored ids of a rank once; an id another writer stores later is skipped when the
    batch is written (no error, the first value kept), and the legacy ``tensors`` row is not doubled."""
    first, second = Writer(tmp_path, batch_seconds=0), Writer(tmp_path, batch_seconds=0)
    try:
        assert second.put_tensor(1, np.arange(3, dtype=np.int32))  # rank 0's stored ids are now known to it
        assert first.put_tensor(5, np.arange(4, dtype=np.float32))
        first.flush()
        assert second.put_tensor(5, np.zeros(4, np.float32))  # it could not know: queued, then skipped
        second.flush()
    finally:
        first.close()
        second.close()
    with reportdb.open(tmp_path) as r:
        np.testing.assert_array_equal(r.tensor(5), np.arange(4, dtype=np.float32))
        assert r.tensor_keys() == [(1, 0), (5, 0)]
    assert _rows(tmp_path / "db.sqlite", "SELECT tensor_id, COUNT(*) FROM tensors GROUP BY tensor_id") == [(1, 1), (5, 1)]


def test_queued_tensor_is_a_copy(tmp_path: Path) -> None:
    a = np.arange(8, dtype=np.float32)
    with Writer(tmp_path, batch_seconds=0) as w:
        w.put_tensor(1, a)
        a[:] = -1  # the caller reuses its buffer before the commit
    with reportdb.open(tmp_path) as r:
        np.testing.assert_array_equal(r.tensor(1), np.arange(8, dtype=np.float32))


def test_large_tensor_is_committed_when_put_returns(tmp_path: Path) -> None:
    with Writer(tmp_path, sync_bytes=1024, batch_seconds=0) as w:
        w.put_tensor(1, np.zeros(4, np.float32))  # small: queued
        w.put_tensor(2, np.ones(1024, np.float32))  # large: written with the queue, at once
        assert _rows(tmp_path / "db.sqlite", "SELECT tensor_id FROM rdb_tensor ORDER BY tensor_id") == [(1,), (2,)]


def test_batches_commit_by_count_and_by_time(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    with Writer(tmp_path, batch_items=3, batch_seconds=0) as w:
        w.put_tensor(1, np.zeros(1))
        w.put_tensor(2, np.zeros(1))
        assert _rows(db, "SELECT COUNT(*) FROM rdb_tensor") == [(0,)]
        w.put_tensor(3, np.zeros(1))
        assert _rows(db, "SELECT COUNT(*) FROM rdb_tensor") == [(3,)]
    with Writer(tmp_path, batch_bytes=16, batch_seconds=0, append=True) as w:
        w.put_tensor(4, np.zeros(2, np.float64))
        assert _rows(db, "SELECT COUNT(*) FROM rdb_tensor") == [(4,)]
    with Writer(tmp_path, batch_seconds=0.05, append=True) as w:
        w.put_tensor(5, np.zeros(1))
        w.add_operation(1, "ttnn.relu")
        _wait_for(lambda: _rows(db, "SELECT COUNT(*) FROM rdb_tensor") == [(5,)], "background commit of tensor 5")
        _wait_for(lambda: _rows(db, "SELECT COUNT(*) FROM operations") == [(1,)], "background commit of operation 1")
    with Writer(tmp_path, batch_items=80, batch_seconds=600, append=True) as w:  # an eighth of a batch starts the thread
        for tid in range(10, 19):
            w.put_tensor(tid, np.zeros(1))
        assert _rows(db, "SELECT COUNT(*) FROM rdb_tensor WHERE tensor_id >= 10") == [(0,)]  # queued, not written
        w.put_tensor(19, np.zeros(1))
        _wait_for(lambda: _rows(db, "SELECT COUNT(*) FROM rdb_tensor WHERE tensor_id >= 10") == [(10,)],
                  "background commit of ten queued tensors, long before the batch is full or due")


def test_store_policies(tmp_path: Path) -> None:
    with Writer(tmp_path / "none", store="none") as w:
        w.put_tensor(1, np.zeros(3))
        w.add_operation(1, "op", outputs=[1])
    assert _rows(tmp_path / "none" / "db.sqlite", "SELECT COUNT(*) FROM rdb_tensor") == [(0,)]
    assert _rows(tmp_path / "none" / "db.sqlite", "SELECT tensor_id, shape FROM tensors") == [(1, "Shape([3])")]
    with Writer(tmp_path / "out", store="outputs") as w:
        w.put_tensor(1, np.zeros(3), role="input")
        w.put_tensor(2, np.zeros(3), role="output")
        w.add_operation(1, "op", inputs=[1], outputs=[2, 3])
        w.put_tensor(3, np.zeros(3))  # named as an output above
        w.put_tensor(4, np.zeros(3))
    with reportdb.open(tmp_path / "out") as r:
        assert r.tensor_ids() == [2, 3]
    assert len(_rows(tmp_path / "out" / "db.sqlite", "SELECT tensor_id FROM tensors")) == 4


def test_configuration_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("REPORTDB_STORE", "outputs")
    monkeypatch.setenv("REPORTDB_CHUNK_SIZE", "1MiB")
    monkeypatch.setenv("REPORTDB_STATS", "0")
    monkeypatch.setenv("REPORTDB_BATCH_ITEMS", "10")
    monkeypatch.setenv("REPORTDB_BATCH_BYTES", "8M")
    monkeypatch.setenv("REPORTDB_BATCH_SECONDS", "0.5")
    monkeypatch.setenv("REPORTDB_SYNC_BYTES", "2k")
    config = WriterConfig.from_env()
    assert config == WriterConfig(store="outputs", chunk_size=1 << 20, stats=False, batch_items=10,
                                  batch_bytes=8 << 20, batch_seconds=0.5, sync_bytes=2048)
    assert WriterConfig.from_env(store="all", stats=None).store == "all"  # arguments win, None means unset
    with Writer(tmp_path, store="all") as w:
        w.put_tensor(1, np.arange(4.0))
        assert w.config.chunk_size == 1 << 20 and w.config.stats is False
    with reportdb.open(tmp_path) as r:
        with pytest.raises(ReportDBError, match="without statistics"):
            r.tensor_stats(1)
    monkeypatch.setenv("REPORTDB_COMPRESSION", "lz4")
    with pytest.raises(ReportDBError, match="compression must be one of"):
        WriterConfig.from_env()
    monkeypatch.setenv("REPORTDB_COMPRESSION", "zstd")
    assert WriterConfig.from_env().compression == "zstd"
    monkeypatch.setenv("REPORTDB_COMPRESSION", "none")
    monkeypatch.setenv("REPORTDB_STORE", "some")
    with pytest.raises(ReportDBError, match="store must be"):
        Writer(tmp_path)
    monkeypatch.setenv("REPORTDB_STORE", "all")
    monkeypatch.setenv("REPORTDB_STATS", "maybe")
    with pytest.raises(ReportDBError, match="REPORTDB_STATS"):
        WriterConfig.from_env()


def test_zstd_compresses_where_it_pays(tmp_path: Path) -> None:
    """With compression="zstd", small (set-based path) and large (one-by-one path) compressible tensors are stored
    compressed and read back exactly; random float32, which saves under 10%, stays raw."""
    pytest.importorskip("zstandard")
    rng = np.random.default_rng(3)
    sparse = np.maximum(rng.standard_normal((64, 64)), 0).astype(ml_dtypes.bfloat16)  # ReLU'd: half zeros
    big = np.repeat(np.arange(300, dtype=np.float32), 1000)  # long runs, several chunks at 256 KiB
    noise = rng.standard_normal(4096).astype(np.float32)
    with Writer(tmp_path, compression="zstd", chunk_size=256 << 10, batch_seconds=0) as w:
        for tid, array in enumerate((sparse, big, noise)):
            w.put_tensor(tid, array)
    db = tmp_path / "db.sqlite"
    codecs = dict(_rows(db, "SELECT t.tensor_id, GROUP_CONCAT(DISTINCT COALESCE(c.codec, 'raw')) FROM rdb_tensor t"
                            " JOIN rdb_shard s ON s.tensor_pk = t.id JOIN rdb_blob_chunk bc ON bc.blob_id = s.blob_id"
                            " JOIN rdb_chunk c ON c.id = bc.chunk_id GROUP BY t.tensor_id"))
    assert codecs == {0: "zstd", 1: "zstd", 2: "raw"}
    with reportdb.open(tmp_path) as r:
        for tid, array in enumerate((sparse, big, noise)):
            assert r.tensor(tid).tobytes() == array.tobytes()
        assert r.tensor_stats(1).max == 299.0
    assert reportdb.verify(tmp_path).ok


def test_unknown_metadata_and_closed_writer(tmp_path: Path) -> None:
    w = Writer(tmp_path)
    with pytest.raises(ReportDBError, match="unknown tensor metadata"):
        w.put_tensor(1, np.zeros(2), colour="red")
    w.put_tensor(1, np.zeros(2))  # a rejected call leaves the id free
    w.close()
    w.close()
    with pytest.raises(ReportDBError, match="closed"):
        w.put_tensor(2, np.zeros(2))


def test_large_queued_tensors_are_prepared_while_queued(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tensors of 1 MiB and more get their statistics and digests computed in the prepare thread as they are queued;
    what is stored is what the batch itself would have computed (values, statistics, addresses), for one array,
    for shards, for a tensor stored again (deduplicated) and with statistics off."""
    from reportdb.numeric.stats import compute_stats
    from reportdb.writer import ahead

    threads: list[str] = []

    def spied(array: np.ndarray, **kwargs: object) -> object:
        threads.append(threading.current_thread().name)
        return real(array, **kwargs)

    real = ahead.prepare_shard
    monkeypatch.setattr(ahead, "prepare_shard", spied)
    rng = np.random.default_rng(4)
    big = rng.standard_normal((512, 1024)).astype(np.float32)  # 2 MiB
    parts = [((0, i), rng.standard_normal((256, 512)).astype(np.float32)) for i in range(2)]  # 1 MiB in all
    dist = Distribution(mesh_shape=(1, 2), placements=(Placement("replicate"), Placement("shard", 1)))
    with Writer(tmp_path, batch_seconds=0) as w:
        w.put_tensor(1, big)
        big[:] = 0  # the caller's buffer changes: the queued copy is what is prepared and stored
        w.put_tensor(2, LoadedTensor(shards=parts, spec=reportdb.TensorSpec(distribution=dist), source={}))
        w.put_tensor(3, np.zeros(16, np.float32))  # small: the batch's own path
        w.put_tensor(4, rng.standard_normal((512, 1024)).astype(np.float32) * 0 + 1)
        w.put_tensor(5, np.ones((512, 1024), np.float32))  # the same content as 4: one blob
    assert len(threads) == 5 and all(name.startswith("reportdb-prepare") for name in threads)
    with reportdb.open(tmp_path) as r:
        assert r.tensor(1).sum() != 0
        for tensor_id in (1, 2, 5):
            stored = r.tensor_stats(tensor_id).shards
            for (_, values), shard in zip(r.shards(tensor_id), stored, strict=True):
                expected = compute_stats(values)
                assert (shard.min, shard.max, shard.mean, shard.std, shard.count) == (
                    expected["min"], expected["max"], expected["mean"], expected["std"], expected["count"])
            assert r.verify_tensor(tensor_id) == r.tensor(tensor_id).nbytes
    assert _rows(tmp_path / "db.sqlite", "SELECT COUNT(DISTINCT blob_id) FROM rdb_shard") == [(5,)]
    threads.clear()
    with Writer(tmp_path / "nostats", batch_seconds=0, stats=False) as w:
        w.put_tensor(1, big)
    assert threads == ["reportdb-prepare_0"]
    with reportdb.open(tmp_path / "nostats") as r:
        assert r.verify_tensor(1) == big.nbytes
        assert _rows(tmp_path / "nostats" / "db.sqlite", "SELECT COUNT(*) FROM rdb_stats") == [(0,)]


def test_multi_device_shards(tmp_path: Path) -> None:
    shards = [((0, i), np.full((2, 3), i, np.float32)) for i in range(4)]
    dist = Distribution(mesh_shape=(1, 4), placements=(Placement("replicate"), Placement("shard", 1)))
    loaded = LoadedTensor(shards=shards, spec=reportdb.TensorSpec(ttnn_dtype="FLOAT32", distribution=dist),
                          source={"kind": "test"})
    with Writer(tmp_path) as w:
        w.put_tensor(1, loaded)
    with reportdb.open(tmp_path) as r:
        np.testing.assert_array_equal(r.tensor(1), np.concatenate([a for _, a in shards], axis=1))
        assert [c for c, _ in r.shards(1)] == [c for c, _ in shards]


def test_many_threads_one_writer(tmp_path: Path) -> None:
    errors: list[BaseException] = []

    def work(w: Writer, t: int) -> None:
        try:
            for i in range(40):
                tid = t * 1000 + i
                w.put_tensor(tid, np.full((4, 4), tid, np.int32))
                w.add_operation(tid, f"op{t}", arguments={"i": str(i)}, outputs=[tid])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    with Writer(tmp_path, batch_items=16, batch_seconds=0.01, sync_bytes=48, durable=False) as w:
        threads = [threading.Thread(target=work, args=(w, t)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    assert not errors
    with reportdb.open(tmp_path) as r:
        ids = r.tensor_ids()
        assert len(ids) == 320
        for tid in ids[::37]:
            assert r.tensor(tid)[0, 0] == tid
    assert _rows(tmp_path / "db.sqlite", "SELECT COUNT(*) FROM operation_arguments") == [(320,)]


def _child_writes(writer: Writer, tid: int) -> None:
    writer.put_tensor(tid, np.full(3, tid, np.int64))
    writer.add_operation(tid, "from-child")
    writer.flush()


@pytest.mark.process
@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")  # forking is the point
def test_fork_child_uses_its_own_connection(tmp_path: Path) -> None:
    with Writer(tmp_path, batch_seconds=0.05) as w:
        w.put_tensor(1, np.zeros(3, np.int64))  # queued in the parent: the child must not write it
        ctx = multiprocessing.get_context("fork")
        child = ctx.Process(target=_child_writes, args=(w, 2))
        child.start()
        child.join(60)
        assert child.exitcode == 0
        w.put_tensor(3, np.zeros(3, np.int64))
    with reportdb.open(tmp_path) as r:
        assert r.tensor_ids() == [1, 2, 3]
    assert _rows(tmp_path / "db.sqlite", "SELECT operation_id FROM operations") == [(2,)]


def test_torch_tensors(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3).to(torch.bfloat16)
    with Writer(tmp_path) as w:
        w.put_tensor(1, t)
        w.put_tensor(2, torch.arange(4, dtype=torch.int64))
    with reportdb.open(tmp_path) as r:
        back = r.tensor(1)
        assert back.dtype == ml_dtypes.bfloat16
        np.testing.assert_array_equal(back.astype(np.float32), t.float().numpy())
        np.testing.assert_array_equal(r.tensor(2), [0, 1, 2, 3])
    assert _rows(tmp_path / "db.sqlite", "SELECT shape, dtype FROM tensors WHERE tensor_id=1") == [
        ("torch.Size([2, 3])", "torch.bfloat16")
    ]


# --- reports of any age ---------------------------------------------------------------------------------------------


def _ddl(db: Path) -> dict[str, str]:
    return {name: sql for name, sql in _rows(db, "SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL")
            if not name.startswith(("rdb_", "reportdb_"))}


def test_writer_appends_to_a_migrated_ttnn_0_62_2_report(tmp_path: Path) -> None:
    """ttnn 0.62.2's tables have no rank, storage_type or size: the writer writes its own rows without them (the
    file's tables stay as ttnn made them), and refuses, when they are added, what the file cannot hold."""
    dst = tmp_path / "migrated"
    reportdb.migrate(FIXTURES / "ttnn-0.62.2-bin" / "report", dst)
    db = dst / "db.sqlite"
    ddl = _ddl(db)
    migrated = _rows(db, "SELECT COUNT(*) FROM tensors")[0][0]
    with reportdb.open(dst) as r:
        before = {tid: r.tensor(tid) for tid in r.tensor_ids()}
    assert before
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    with Writer(dst, batch_seconds=0, append=True) as w:
        assert "rank" not in w.columns("tensors") and "rank" not in w.columns("operations")
        assert w.put_tensor(1000, x, layout="TILE", storage_type="DEVICE", device_id=0, address=4096)
        w.add_operation(1000, "ttnn.relu", arguments={"input": "x"}, stack_trace="model.py:1", inputs=[1], outputs=[1000])
        w.add_operation(1000, "ttnn.relu", duration=0.5)  # the second call sets the duration, as ttnn does
        w.add_device(7, num_x_cores=8)
        with pytest.raises(ReportDBError, match=r"no columns \[.size.\].*older ttnn"):
            w.put_tensor(1001, x, size=48)  # asked for explicitly, and the file has no such column
        with pytest.raises(ReportDBError, match="no columns.*buffer_layout"):
            w.add_rows("buffers", [{"operation_id": 1000, "address": 64, "buffer_layout": 1}])
        with pytest.raises(ReportDBError, match="no rank column.*not rank 1"):
            w.put_tensor(1002, x, rank=1)
        with pytest.raises(ReportDBError, match="no rank column.*not rank 2"):
            w.add_operation(1001, "ttnn.add", rank=2)
        with pytest.raises(ReportDBError, match="no rank column.*not rank 3"):
            w.add_rows("buffers", [{"operation_id": 1000, "rank": 3}])
        w.add_rows("buffers", [{"operation_id": 1000, "address": 64, "buffer_type": 1, "rank": 0}])
        w.add_rows("errors", [{"operation_id": 1000, "error_type": "RuntimeError"}])  # a table 0.62.2 lacks
        # the queries reportdb.ttnn makes for a legacy run (latest operation of the rank) work on it too
        where, params = reportdb.ttnn.hooks._of_rank(w, "operations", 0)
        assert w.query(f"SELECT MAX(operation_id) FROM operations WHERE {where}", params) == [(1000,)]
    assert _rows(db, "SELECT tensor_id, shape, layout, device_id, address FROM tensors WHERE tensor_id IN (1000, 1001, 1002)") == [
        (1000, "Shape([3, 4])", "Layout.TILE", 0, 4096)
    ]
    assert _rows(db, "SELECT COUNT(*) FROM tensors")[0][0] == migrated + 1
    assert _rows(db, "SELECT * FROM operations WHERE operation_id=1000") == [(1000, "ttnn.relu", 0.5)]
    assert _rows(db, "SELECT * FROM operation_arguments WHERE operation_id=1000") == [(1000, "input", "x")]
    assert _rows(db, "SELECT * FROM input_tensors WHERE operation_id=1000") == [(1000, 0, 1)]
    assert _rows(db, "SELECT * FROM stack_traces WHERE operation_id=1000") == [(1000, "model.py:1")]
    assert _rows(db, "SELECT device_id, num_x_cores FROM devices WHERE device_id=7") == [(7, 8)]
    assert _rows(db, "SELECT operation_id, address, buffer_type FROM buffers WHERE operation_id=1000") == [(1000, 64, 1)]
    assert _rows(db, "SELECT operation_id, error_type, rank FROM errors") == [(1000, "RuntimeError", 0)]
    assert {k: v for k, v in _ddl(db).items() if k != "errors"} == ddl  # ttnn's tables as they were
    with reportdb.open(dst) as r:
        np.testing.assert_array_equal(r.tensor(1000), x)
        assert r.tensor_info(1000).spec.storage_type == "DEVICE"  # kept in reportdb's own metadata
        for tid, value in before.items():
            np.testing.assert_array_equal(r.tensor(tid), value)
    assert reportdb.verify(dst).ok


@pytest.mark.parametrize("schema_file", ["ttnn_0.81.1_schema_3.5.sqlite", "visualizer_empty_2024-09.sqlite"])
def test_writer_appends_to_the_newest_and_the_oldest_report_schema(tmp_path: Path, schema_file: str) -> None:
    db = tmp_path / "db.sqlite"
    shutil.copyfile(FIXTURES / "report-schemas" / schema_file, db)
    db.chmod(0o644)
    ranked = schema_file.startswith("ttnn")
    rank = 2 if ranked else 0
    t = 900_001  # ids no fixture uses
    with Writer(tmp_path, rank=rank, batch_seconds=0) as w:
        assert ("rank" in w.columns("operations")) is ranked
        assert "size" not in w.columns("tensors")  # neither schema has it (reportdb's new files do)
        w.put_tensor(t, np.ones(4, np.float32), storage_type="HOST")
        w.put_tensor(t, np.zeros(4, np.float32))  # a second put of an id: skipped
        w.add_operation(t, "ttnn.exp", duration=0.25, arguments={"x": 1}, stack_trace="a.py:3", inputs=[t], outputs=[t])
        w.add_rows("local_tensor_comparison_records",
                   [{"tensor_id": t, "golden_tensor_id": 2, "matches": 1, "desired_pcc": 0.99, "actual_pcc": 0.999}])
        w.add_rows("buffer_pages", [{"operation_id": t, "page_index": 0}])  # only the 2024 schema has it
        with pytest.raises(ReportDBError, match="size"):
            w.put_tensor(t + 1, np.ones(4, np.float32), size=16)
        if not ranked:
            with pytest.raises(ReportDBError, match="no rank column"):
                w.put_tensor(t + 2, np.ones(4, np.float32), rank=1)
    expect_rank = (rank,) if ranked else ()
    cols = "tensor_id, shape, dtype" + (", storage_type, rank" if ranked else "")
    assert _rows(db, f"SELECT {cols} FROM tensors WHERE tensor_id >= ?", (t,)) == [
        (t, "Shape([4])", "float32", *(("HOST",) if ranked else ()), *expect_rank)
    ]
    assert _rows(db, "SELECT * FROM operations WHERE operation_id=?", (t,)) == [(t, "ttnn.exp", 0.25, *expect_rank)]
    assert _rows(db, "SELECT * FROM operation_arguments WHERE operation_id=?", (t,)) == [(t, "x", "1", *expect_rank)]
    assert _rows(db, "SELECT * FROM local_tensor_comparison_records WHERE tensor_id=?", (t,)) == [
        (t, 2, 1, 0.99, 0.999, *expect_rank)
    ]
    assert _rows(db, "SELECT operation_id, page_index, rank FROM buffer_pages" if ranked else
                 "SELECT operation_id, page_index FROM buffer_pages WHERE operation_id=?", () if ranked else (t,)) == [
        (t, 0, *expect_rank)
    ]
    with reportdb.open(tmp_path) as r:
        np.testing.assert_array_equal(r.tensor(t, rank), np.ones(4, np.float32))


def test_a_bad_row_is_refused_when_added_and_never_costs_a_batch(tmp_path: Path) -> None:
    """Everything that can be checked is checked by the call that adds the row; what only the file's constraints
    can judge at COMMIT (a key another writer used first, a dangling reference) leaves out that row alone."""
    db = tmp_path / "db.sqlite"
    with Writer(tmp_path, batch_seconds=0, batch_items=1000) as w:
        w.put_tensor(1, np.arange(3, dtype=np.int32))
        w.add_operation(1, "ttnn.add", arguments={"a": "b"})
        for row, match in [
            ({"operation_id": 1, "no_such_column": 1}, "no columns"),
            ({"operation_id": {"a": 1}}, "cannot store a dict"),
            ({"operation_id": 1 << 70}, "64-bit"),
            ({"operation_id": 1, "captured_graph": "bad \ud800 surrogate"}, "not valid Unicode"),
            ({"operation_id": 1, "rank": "zero"}, "rank must be an integer"),
        ]:
            with pytest.raises(ReportDBError, match=match):
                w.add_rows("captured_graph", [{"operation_id": 1, "captured_graph": "fine"}, row])
        with pytest.raises(ReportDBError, match="unknown report table 'rdb_tensor'"):
            w.add_rows("rdb_tensor", [{"tensor_id": 9}])  # reportdb's own tables are not report tables
        with pytest.raises(ReportDBError, match="cannot store a list"):
            w.put_tensor(2, np.zeros(2), address=[1, 2])
        w.add_rows("captured_graph", [{"operation_id": np.int64(1), "captured_graph": "kept"}])
        w.flush()
        assert _rows(db, "SELECT operation_id, captured_graph FROM captured_graph") == [(1, "kept")]
        assert _rows(db, "SELECT name FROM operations") == [("ttnn.add",)]
        # Constraint failures: the rest of the batch commits, and the flush says which rows were left out.
        w.put_tensor(4, np.arange(2, dtype=np.int32))
        w.add_rows("operations", [{"operation_id": 1, "name": "duplicate key"}])
        w.add_rows("stack_traces", [{"operation_id": 1, "stack_trace": "x", "source_file_id": 99}])
        w.add_operation(2, "ttnn.mul", stack_trace="y")
        with pytest.raises(RowsRefusedError, match=r"2 row\(s\).*UNIQUE constraint failed.*FOREIGN KEY"):
            w.flush()
        w.add_operation(3, "ttnn.sub")
    assert _rows(db, "SELECT operation_id, name FROM operations ORDER BY operation_id") == [
        (1, "ttnn.add"), (2, "ttnn.mul"), (3, "ttnn.sub")
    ]
    assert _rows(db, "SELECT operation_id, stack_trace FROM stack_traces") == [(2, "y")]
    with reportdb.open(tmp_path) as r:
        assert r.tensor_ids() == [1, 4]


def test_a_tensors_table_without_tensor_ids_is_refused_before_anything_is_queued(tmp_path: Path) -> None:
    reportdb.open(tmp_path, "a").close()
    conn = sqlite3.connect(tmp_path / "db.sqlite")
    conn.execute("ALTER TABLE tensors RENAME COLUMN tensor_id TO tid")
    conn.commit()
    conn.close()
    with Writer(tmp_path, batch_seconds=0) as w:
        with pytest.raises(ReportDBError, match=r"'tensors' of this report has no columns \['tensor_id'\]"):
            w.put_tensor(1, np.zeros(2))
        w.add_operation(1, "ttnn.add")  # the rest of the report still takes rows
    assert _rows(tmp_path / "db.sqlite", "SELECT operation_id FROM operations") == [(1,)]


def test_refused_rows_of_a_background_batch_surface_on_the_next_call(tmp_path: Path) -> None:
    with Writer(tmp_path, batch_seconds=0.05) as w:
        w.add_operation(1, "ttnn.add")
        w.flush()
        w.add_rows("operations", [{"operation_id": 1, "name": "again"}])
        w.add_operation(2, "ttnn.mul")
        _wait_for(lambda: _rows(tmp_path / "db.sqlite", "SELECT COUNT(*) FROM operations") == [(2,)], "background commit")
        _wait_for(lambda: w._queue._error is not None, "the refusal recorded")  # just after the commit, in the same thread
        with pytest.raises(RowsRefusedError, match="everything else was committed"):
            w.add_operation(3, "ttnn.sub")
        w.add_operation(3, "ttnn.sub")
    assert _rows(tmp_path / "db.sqlite", "SELECT name FROM operations ORDER BY operation_id") == [
        ("ttnn.add",), ("ttnn.mul",), ("ttnn.sub",)
    ]


def test_identifiers_with_quotes_and_spaces(tmp_path: Path) -> None:
    """Every table, column and index name the file holds reaches SQL quoted (a ``"`` doubled)."""
    db = tmp_path / "db.sqlite"
    reportdb.open(tmp_path, "a").close()
    conn = sqlite3.connect(db)
    conn.execute('CREATE TABLE "odd ""quoted"" table" ("first col" int, "it""s" text, rank int NOT NULL DEFAULT 0)')
    conn.execute('ALTER TABLE errors ADD COLUMN "my col" text')
    conn.execute('CREATE UNIQUE INDEX "ix ""tensors""" ON tensors (tensor_id, rank)')
    conn.commit()
    conn.close()
    with Writer(tmp_path, rank=1) as w:
        assert w.columns('odd "quoted" table') == ("first col", 'it"s', "rank")
        w.add_rows('odd "quoted" table', [{"first col": 1, 'it"s': 'say "hi"'}])
        w.add_rows("errors", [{"operation_id": 5, "my col": "with a space"}])
        w.put_tensor(1, np.zeros(2, np.float32))
        w.put_tensor(1, np.ones(2, np.float32))
    assert _rows(db, 'SELECT "first col", "it""s", rank FROM "odd ""quoted"" table"') == [(1, 'say "hi"', 1)]
    assert _rows(db, 'SELECT operation_id, "my col", rank FROM errors') == [(5, "with a space", 1)]
    assert _rows(db, "SELECT tensor_id, rank FROM tensors") == [(1, 1)]


@pytest.mark.process
def test_reportdb_ttnn_is_an_attribute_loaded_on_first_use() -> None:
    code = (
        "import sys, reportdb\n"
        "assert 'reportdb.ttnn' not in sys.modules and 'reportdb.writer' not in sys.modules\n"
        "assert callable(reportdb.ttnn.capture) and callable(reportdb.ttnn.patch_database)\n"
        "assert 'ttnn' not in sys.modules and 'reportdb.writer' not in sys.modules, sorted(sys.modules)\n"
        "assert reportdb.models.Tensor.__tablename__ == 'tensors'\n"
        "try:\n    reportdb.no_such_thing\nexcept AttributeError:\n    print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


# --- a finished report is one file ---------------------------------------------------------------------------------


def _journal_mode_byte(db: Path) -> tuple[int, int]:
    with open(db, "rb") as f:
        header = f.read(20)
    return header[18], header[19]  # 1: rollback journal, 2: WAL


def test_a_closed_writer_leaves_one_self_contained_file(tmp_path: Path) -> None:
    """A closed writer leaves the file in rollback-journal mode: ``db.sqlite`` copied alone holds every row and
    tensor. Two writers that never write at the same moment never needed WAL: the one still open goes on in the
    rollback journal (WAL hand-over and its last-closer rule: tests/test_writer_journal.py)."""
    report = tmp_path / "report"
    rng = np.random.default_rng(1)
    arrays = {tid: rng.standard_normal(1000 * tid).astype(np.float32) for tid in range(1, 6)}
    first, second = Writer(report, batch_seconds=0), Writer(report, rank=1, batch_seconds=0)
    for tid, a in arrays.items():
        first.put_tensor(tid, a)
        first.add_operation(tid, "ttnn.op", outputs=[tid])
    first.close()
    db = report / "db.sqlite"
    assert _journal_mode_byte(db) == (1, 1)  # no WAL was needed: the other writer never wrote at the same time
    second.put_tensor(9, arrays[1])
    second.add_operation(9, "ttnn.last")
    second.close()
    assert not Path(f"{db}-wal").exists() and not Path(f"{db}-shm").exists()
    assert _journal_mode_byte(db) == (1, 1)
    alone = tmp_path / "copy" / "db.sqlite"
    alone.parent.mkdir()
    shutil.copyfile(db, alone)
    with reportdb.open(alone) as r:
        assert r.tensor_keys() == [*((tid, 0) for tid in arrays), (9, 1)]
        for tid, a in arrays.items():
            np.testing.assert_array_equal(r.tensor(tid), a)
        np.testing.assert_array_equal(r.tensor(9, 1), arrays[1])
    assert _rows(alone, "SELECT operation_id, rank FROM operations ORDER BY rank, operation_id") == [
        *((tid, 0) for tid in arrays), (9, 1)
    ]
    assert reportdb.verify(alone).ok


def test_tensors_of_many_sizes_reuse_the_crc_shift_tables(tmp_path: Path) -> None:
    """A run stores tensors of hundreds of sizes: the chunk crc32 combined from block crcs must not rebuild its GF(2)
    shift table per size (a few ms each, most of the writer's CPU on a mixed trace), and must still be zlib's."""
    import zlib

    from reportdb.store import blobs

    blobs._shift_columns.cache_clear()
    blobs._x8n.cache_clear()
    rng = np.random.default_rng(4)
    sizes = [int(n) for n in rng.choice(np.arange(4097, 1 << 20, 97), 150, replace=False)]
    with Writer(tmp_path, batch_seconds=0, stats=False) as w:
        for tensor_id, n in enumerate(sizes):
            w.put_tensor(tensor_id, rng.integers(0, 256, n, dtype=np.uint8))
    assert blobs._shift_columns.cache_info().misses <= 12  # one table per power of two of the block count
    assert blobs._x8n.cache_info().misses <= 16
    stored = _rows(tmp_path / "db.sqlite", "SELECT crc32, data FROM rdb_chunk WHERE codec IS NULL")
    assert len(stored) == len(sizes)
    assert all(crc == zlib.crc32(data) for crc, data in stored)


def test_storage_type_is_written_as_ttnn_writes_it(tmp_path: Path) -> None:
    """ttnn 0.81.1's report has 'HOST' in ``tensors.storage_type`` (tests/data/report-schemas), not the enum's text;
    the Writer writes the same, taking either form from its caller, and the spec keeps the bare name."""
    with Writer(tmp_path, batch_seconds=0) as w:
        w.put_tensor(1, np.ones(4, np.float32), storage_type="HOST")
        w.put_tensor(2, np.ones(4, np.float32), storage_type="StorageType.DEVICE")
    db = tmp_path / "db.sqlite"
    assert _rows(db, "SELECT tensor_id, storage_type FROM tensors ORDER BY tensor_id") == [(1, "HOST"), (2, "DEVICE")]
    with reportdb.open(db) as r:
        assert [r.tensor_info(t).spec.storage_type for t in (1, 2)] == ["HOST", "DEVICE"]
    shipped = ROOT / "tests" / "data" / "report-schemas" / "ttnn_0.81.1_schema_3.5.sqlite"
    assert _rows(shipped, "SELECT DISTINCT storage_type FROM tensors") == [("HOST",)]


def test_a_config_beside_option_arguments_is_refused_not_half_used(tmp_path: Path) -> None:
    """``Writer(config=..., stats=False)`` used to drop ``stats`` silently; now it names what it was given twice and
    writes nothing."""
    from reportdb.writer.config import WriterConfig

    with pytest.raises(reportdb.errors.InvalidArgumentError, match=r"config= and chunk_size, stats: give the options"):
        reportdb.Writer(tmp_path / "run", config=WriterConfig.from_env(), stats=False, chunk_size=1 << 20)
    assert not (tmp_path / "run").exists()
    with reportdb.Writer(tmp_path / "ok", config=WriterConfig.from_env(stats=False)) as w:
        assert w.config.stats is False
