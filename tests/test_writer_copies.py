"""The Writer's copies of queued tensors live in buffers it reuses once their batch is committed (a fresh large
buffer costs as much again as the copy, in page faults); a reused buffer never changes what was stored."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import reportdb
from reportdb.errors import ReportLockedError
from reportdb.writer import Writer
from reportdb.writer.copies import POOLED_MIN, CopyBuffers


def count_reuses(writer: Writer) -> list[int]:
    """Count, in the returned list's one item, the copies ``writer`` made into a buffer it had used before."""
    copies = writer._copies
    reused = [0]
    take = copies._take

    def counting(nbytes: int) -> np.ndarray | None:
        buffer = take(nbytes)
        reused[0] += buffer is not None
        return buffer

    copies._take = counting  # type: ignore[method-assign]
    return reused


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_a_caller_reusing_its_array_stores_every_value(tmp_path: Path, dtype: type) -> None:
    """The model overwrites one array between puts (a reused device read-back buffer); every tensor keeps the values it
    had when put, while the Writer's own copies go round a few reused buffers."""
    shape = (512, 1024)  # 2 MiB of float32, 1 MiB of bfloat16: pooled copies
    rng = np.random.default_rng(1)
    expected = [rng.standard_normal(shape).astype(dtype) for _ in range(12)]
    scratch = np.empty(shape, dtype)
    with Writer(tmp_path / "r", batch_bytes=4 << 20, durable=False) as w:
        reused = count_reuses(w)
        for i, values in enumerate(expected):
            scratch[...] = values
            w.put_tensor(i, scratch)
            scratch[...] = 0  # the caller's next use, maybe before the background thread has written tensor i
            if i % 3 == 2:
                w.flush()  # committed: their buffers serve the next copies
        assert reused[0] > 0
    with reportdb.open(tmp_path / "r") as report:
        for i, values in enumerate(expected):
            assert np.array_equal(report.tensor(i), values)


def test_a_failed_batch_gives_its_buffers_back(tmp_path: Path) -> None:
    """A batch that cannot be written (the file stays locked) still returns its copies' buffers for later copies."""
    path = tmp_path / "r.sqlite"
    with Writer(path, durable=False):
        pass
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        w = Writer(path, batch_seconds=0, batch_bytes=POOLED_MIN, lock_timeout=0.2, durable=False)
        blocker.execute("BEGIN IMMEDIATE")
        with pytest.raises(ReportLockedError):
            w.put_tensor(1, np.ones(POOLED_MIN // 4, np.float32))  # a full batch: written (and refused) here
        assert w._copies._free_bytes == POOLED_MIN
        blocker.execute("ROLLBACK")
        w.close()
    finally:
        blocker.close()
    assert w._copies._free_bytes == 0  # closing drops them


def test_copy_buffers_fit_and_bound() -> None:
    """Copies are equal, C-contiguous and private; a kept buffer serves a copy of at most its size and at least half
    of it; at most ``limit`` bytes are kept, the largest first."""
    mib = 1 << 20
    pool = CopyBuffers(limit=5 * mib)
    source = np.arange(3 * mib // 2, dtype=np.uint16).view(ml_dtypes.bfloat16).reshape(3, -1)[:, ::2]
    borrowed: list[np.ndarray] = []
    copy = pool.copy(source, borrowed)
    assert np.array_equal(copy.view(np.uint16), source.view(np.uint16)) and copy.flags.c_contiguous
    assert copy.dtype == source.dtype and not np.shares_memory(copy, source) and len(borrowed) == 1
    small: list[np.ndarray] = []
    pool.copy(np.zeros(POOLED_MIN // 2, np.uint8), small)
    assert small == []  # below POOLED_MIN: an ordinary copy
    sizes = [1 * mib, 2 * mib, 4 * mib]
    pool.give_back([np.empty(n, np.uint8) for n in sizes])
    assert pool._free_bytes == 4 * mib  # 7 MiB given back, the smallest dropped beyond 5 MiB
    assert pool._take(5 * mib) is None  # none large enough
    assert pool._take(1 * mib) is None  # 4 MiB is more than twice 1 MiB: kept for a larger copy
    taken = pool._take(3 * mib)
    assert taken is not None and taken.nbytes == 4 * mib and pool._free_bytes == 0
    pool.give_back([taken])
    pool.clear()
    assert pool._free_bytes == 0 and pool._take(3 * mib) is None


def _rss() -> int:
    """This process's resident memory in bytes (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc/self/statm")
@pytest.mark.parametrize("start", ["new file", "small report written again"])
def test_the_page_cache_stays_within_its_size_across_commits(tmp_path: Path, start: str) -> None:
    """A new file's 64 KiB pages are set after the connection's 64 MiB cache size, and a small finished report (4 KiB
    pages) is rewritten with 64 KiB pages at its first write: counted in 4 KiB pages, that cache would keep every page
    written (16x its size, each commit faulting in fresh memory). 320 MiB committed in 20 transactions must leave the
    process within the cache's 64 MiB and the copies' buffers of its own size."""
    values = np.random.default_rng(2).standard_normal(4 << 20).astype(np.float32)  # 16 MiB
    if start != "new file":
        with Writer(tmp_path / "r") as w:
            w.put_tensor(100, np.arange(1024, dtype=np.float32))
        con = sqlite3.connect(tmp_path / "r" / "db.sqlite")
        assert con.execute("PRAGMA page_size").fetchone()[0] == 4096
        con.close()
    with Writer(tmp_path / "r", batch_bytes=16 << 20, stats=False, durable=False, append=True) as w:
        w.put_tensor(0, values)
        w.flush()
        before = _rss()
        for i in range(1, 21):
            values[:: 1 << 18] = i  # every 1 MiB differs: no chunk is stored twice
            w.put_tensor(i, values)
            w.flush()
        grown = _rss() - before
    assert grown < 160 << 20, f"{grown >> 20} MiB more resident memory after 320 MiB written"


def test_a_quiet_writer_drops_its_copy_buffers(tmp_path: Path) -> None:
    """Buffers given back after a commit are kept while tensors keep coming, and dropped once the queue has been
    empty for half of ``batch_seconds``, so a run between bursts does not hold them; the next copy still works."""
    import time

    value = np.arange(POOLED_MIN, dtype=np.float32)  # 4 MiB: a pooled copy
    # 1 s of quiet before the drop: the look right after flush() must come first, even on a loaded machine (at 0.2 s
    # a test thread descheduled for 0.1 s once saw the buffers dropped already)
    with Writer(tmp_path, batch_seconds=2.0) as w:
        w.put_tensor(1, value)
        w.flush()
        assert w._copies._free_bytes >= value.nbytes  # given back by the commit
        deadline = time.monotonic() + 20
        while w._copies._free_bytes and time.monotonic() < deadline:
            time.sleep(0.02)
        assert w._copies._free_bytes == 0
        w.put_tensor(2, value + 1)
    with reportdb.open(tmp_path) as r:
        np.testing.assert_array_equal(r.tensor(2), value + 1)
