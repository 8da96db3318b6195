"""Backpressure: a model that produces tensors faster than the Writer commits them waits in ``put_tensor`` once the
queue holds twice ``batch_bytes``, instead of growing memory without limit; nothing queued is lost meanwhile.

The writer is made slower than the producer for real: another connection holds the database's write lock, so every
commit waits (and retries) until it is released. Memory is measured with tracemalloc, which numpy reports its array
buffers to.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import reportdb
from reportdb.writer import Writer

TENSOR = 256 << 10  # bytes per produced tensor
BATCH = 1 << 20  # batch_bytes of the writer under test
COUNT = 64  # tensors produced: 16 MiB, far beyond the bound


def _wait_until_stalled(progress: list[int], done: threading.Event, *, quiet: float = 1.0, limit: float = 20.0) -> None:
    """Return once ``progress[0]`` has not moved for ``quiet`` seconds (or ``done`` is set); fail after ``limit``."""
    deadline = time.monotonic() + limit
    last, since = -1, time.monotonic()
    while not done.is_set():
        now = time.monotonic()
        if progress[0] != last:
            last, since = progress[0], now
        elif now - since >= quiet:
            return
        if now > deadline:
            pytest.fail(f"the producer never stalled: {progress[0]} puts in {limit:.0f} s")
        time.sleep(0.02)


def test_a_producer_faster_than_the_writer_blocks_within_the_bound(tmp_path: Path) -> None:
    writer = Writer(tmp_path, batch_bytes=BATCH, batch_items=100_000, batch_seconds=0.05, durable=False,
                    lock_timeout=60)
    holder = sqlite3.connect(tmp_path / "db.sqlite", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the writer's commits now wait: it is slower than any producer
    progress = [0]
    done = threading.Event()
    errors: list[BaseException] = []
    rng = np.random.default_rng(0)
    values = [rng.standard_normal(TENSOR // 4).astype(np.float32) for _ in range(4)]

    def produce() -> None:
        try:
            for tensor_id in range(COUNT):
                # A fresh buffer per tensor, as a device read-back gives; dropped once put_tensor returns.
                writer.put_tensor(tensor_id, values[tensor_id % 4] + np.float32(tensor_id))
                progress[0] += 1
        except BaseException as exc:  # surfaced by the assertions below
            errors.append(exc)
        finally:
            done.set()

    tracemalloc.start()
    try:
        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        _wait_until_stalled(progress, done)
        current, peak = tracemalloc.get_traced_memory()
        stalled_at = progress[0]
        assert not done.is_set(), "the producer finished while no commit could land: the queue did not bound it"
        # Queued: at most 2 batch_bytes plus the tensor that crossed it; the batch the background thread is trying to
        # commit: at most as much again; the producer's own fresh array: one tensor.
        bound = 2 * (2 * BATCH + TENSOR) + TENSOR
        assert stalled_at * TENSOR <= bound
        assert peak <= bound + (1 << 20), f"traced memory peaked at {peak} bytes, beyond the bound of {bound}"
    finally:
        tracemalloc.stop()
        holder.execute("ROLLBACK")  # the writer catches up: the producer goes on
        holder.close()
    producer.join(timeout=30)
    assert done.is_set() and not producer.is_alive(), "the producer stayed blocked after the lock was released"
    assert not errors, errors
    writer.close()
    with reportdb.open(tmp_path) as report:
        assert sorted(report.tensor_ids()) == list(range(COUNT))
        for tensor_id in (0, stalled_at, COUNT - 1):
            np.testing.assert_array_equal(report.tensor(tensor_id), values[tensor_id % 4] + np.float32(tensor_id))


def test_without_a_background_thread_the_caller_writes_each_full_batch(tmp_path: Path) -> None:
    """``batch_seconds=0``: no thread; a put that fills a batch commits it before returning, so nothing beyond one
    batch (plus the tensor that filled it) is ever queued."""
    db = tmp_path / "db.sqlite"
    with Writer(tmp_path, batch_bytes=BATCH, batch_items=100_000, batch_seconds=0, durable=False) as writer:
        per_batch = -(-BATCH // TENSOR)
        for tensor_id in range(3 * per_batch):
            writer.put_tensor(tensor_id, np.full(TENSOR // 4, tensor_id, np.float32))
            conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
            try:
                committed = conn.execute("SELECT COUNT(*) FROM rdb_tensor").fetchone()[0]
            finally:
                conn.close()
            assert (tensor_id + 1) - committed < per_batch
