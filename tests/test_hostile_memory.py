"""Memory bombs in a report: what a read allocates follows what is asked, never what the file declares.

A self-consistent report whose tensor is 8 chunks of one zstd frame each declaring 1 GiB of zeros (a 32 KiB frame,
stored once and referenced 8 times: an 8 GiB tensor in a file of a few hundred KB). A window of it must cost memory in
proportion to the window (the chunk is decompressed a piece at a time, only up to the window), and a whole read that
cannot fit must fail with a ReportDBError that says to read a window. Each read runs in a child process whose address
space is capped (``RLIMIT_AS``), so an allocation from the declared size fails there instead of swapping the machine.
"""

from __future__ import annotations

import resource
import sqlite3
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pytest

import reportdb
from conftest import ROOT

zstandard = pytest.importorskip("zstandard")

CHUNK = 1 << 30  # what the hostile frame declares: blobs.MAX_CHUNK_SIZE
CHUNKS = 8
#: The child's address space: far below one declared chunk, enough for Python, numpy, SQLite and zstd.
ADDRESS_SPACE = 768 << 20


def _zeros_frame(nbytes: int) -> bytes:
    """One zstd frame of ``nbytes`` zeros that declares its size (as reportdb writes frames), built a MiB at a time."""
    compressor = zstandard.ZstdCompressor(level=1).compressobj(size=nbytes)
    zeros = bytes(1 << 20)
    parts = [compressor.compress(zeros) for _ in range(nbytes >> 20)]
    return b"".join(parts) + compressor.flush()


def bomb_report(path: Path, *, chunk: int = CHUNK, chunks: int = CHUNKS) -> Path:
    """A report whose tensor 4 is ``chunks`` x ``chunk`` bytes of float32 zeros, each chunk the same zstd frame: a
    report reportdb wrote (tensor 4 of 64 KiB chunks, compressed) with its rows rewritten to the large layout."""
    with reportdb.open(path, "a", chunk_size=64 << 10, compression="zstd") as report:
        report.put_tensor(4, np.zeros(2 * (64 << 10) // 4, np.float32))
    frame = _zeros_frame(chunk)
    total = chunk * chunks
    con = sqlite3.connect(path, isolation_level=None)
    (blob_id,) = con.execute("SELECT blob_id FROM rdb_shard").fetchone()
    con.execute("BEGIN")
    con.execute("DELETE FROM rdb_blob_chunk WHERE blob_id=?", (blob_id,))
    con.execute("UPDATE rdb_chunk SET nbytes=?, crc32=?, data=? WHERE id=(SELECT MIN(id) FROM rdb_chunk)",
                (chunk, zlib.crc32(frame), frame))
    (chunk_id,) = con.execute("SELECT MIN(id) FROM rdb_chunk").fetchone()
    con.executemany("INSERT INTO rdb_blob_chunk(blob_id, idx, chunk_id) VALUES (?, ?, ?)",
                    [(blob_id, i, chunk_id) for i in range(chunks)])
    con.execute("DELETE FROM rdb_chunk WHERE id != ?", (chunk_id,))
    con.execute("DELETE FROM rdb_chunk_crc")
    con.execute("UPDATE rdb_blob SET nbytes=?, chunk_size=?, n_chunks=? WHERE id=?", (total, chunk, chunks, blob_id))
    shape = f"[{total // 4}]"
    con.execute("UPDATE rdb_shard SET shape=?", (shape,))
    con.execute("UPDATE rdb_tensor SET shape=?, nbytes=?", (shape, total))
    con.execute("DELETE FROM rdb_stats")
    con.execute("COMMIT")
    con.close()
    return path


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _child(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                          preexec_fn=_limit, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"})


@pytest.fixture(scope="module")
def bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bomb_report(tmp_path_factory.mktemp("bomb") / "db.sqlite")


@pytest.mark.process
def test_a_window_of_a_declared_huge_chunk_costs_the_window(bomb: Path) -> None:
    """A 10-element window at the start, and one in the middle of the third chunk, under a 768 MiB address space: the
    old read decompressed the whole 1 GiB chunk (1.09 GB) for them."""
    result = _child(f"""
        import numpy as np, reportdb
        with reportdb.open({str(bomb)!r}) as report:
            print(report.tensor_info(4).nbytes)
            a = report.tensor(4, window=np.s_[:10])
            b = report.tensor(4, window=np.s_[{(2 * CHUNK + CHUNK // 2) // 4}:{(2 * CHUNK + CHUNK // 2) // 4 + 10}])
            print(a.shape, float(a.sum()), b.shape, float(b.sum()))
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == [str(CHUNK * CHUNKS), "(10,) 0.0 (10,) 0.0"]


@pytest.mark.process
def test_a_whole_read_that_cannot_fit_says_to_read_a_window(bomb: Path) -> None:
    result = _child(f"""
        import reportdb
        with reportdb.open({str(bomb)!r}) as report:
            try:
                report.tensor(4)
            except reportdb.ReportDBError as exc:
                print(type(exc).__name__, exc)
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("ResourceLimitError") and "window" in result.stdout, result.stdout


def test_a_compressed_chunk_is_decompressed_in_pieces_into_its_place(tmp_path: Path) -> None:
    """Small and fast: a tensor of several 1 MiB-piece compressed chunks reads back exactly, whole and in windows that
    cross pieces and chunks, and a frame that holds fewer bytes than it declares is corruption."""
    from reportdb.store import codec

    array = (np.arange(3 << 20, dtype=np.int32) // 1000).astype(np.float32).reshape(3, 1 << 20)  # compressible
    path = tmp_path / "db.sqlite"
    with reportdb.open(path, "a", chunk_size=4 << 20, compression="zstd") as report:
        report.put_tensor(1, array)
    with reportdb.open(path) as report:
        np.testing.assert_array_equal(report.tensor(1), array)
        for window in (np.s_[1, 262_000:262_300], np.s_[:, 1_048_000:], np.s_[0:2, 5:9], np.s_[2, ::4096]):
            np.testing.assert_array_equal(report.tensor(1, window=window), array[window])
    raw = array.tobytes()[: 3 << 20]
    frame = zstandard.ZstdCompressor(level=1).compress(raw)
    assert b"".join(codec.pieces("zstd", frame, len(raw), "chunk 0")) == raw
    for bad, nbytes in ((frame[: len(frame) // 2], len(raw)), (frame, len(raw) + 1)):  # cut short; another size
        with pytest.raises(reportdb.errors.CorruptionError, match="chunk 0"):
            b"".join(codec.pieces("zstd", bad, nbytes, "chunk 0"))
