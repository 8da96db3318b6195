"""zstd-compressed chunks in real SQLite files: round trips, the per-blob and per-chunk decisions, partial
reads, damage detection, verify, migrate, upgrade of an older schema, and a missing zstd library."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import zlib
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from click.testing import CliRunner

import reportdb
from conftest import FIXTURES
from test_migrate import assert_report_values
from reportdb.cli import cli
from reportdb.errors import CorruptionError, ReportDBError
from reportdb.store import blobs, schema
from reportdb.store.engine import connect, engine_for

RNG = np.random.default_rng(11)
FIXTURE = "ttnn-0.62.2-bin"
BLOCK_ZSTD = "import sys; sys.modules['zstandard'] = None; sys.modules['compression.zstd'] = None; "


def _compressible() -> dict[str, np.ndarray]:
    relu = np.maximum(RNG.standard_normal((256, 512)), 0).astype(ml_dtypes.bfloat16)
    return {
        "zeros": np.zeros((64, 1024), np.float32),
        "bfloat16 ramp": np.linspace(-4, 4, 128 * 1024, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(128, 1024),
        "int8 few values": RNG.integers(-2, 3, size=(300, 700), dtype=np.int8),
        "bfloat16 relu": relu,
    }


def _chunks(path: Path) -> list[tuple[str | None, int, int]]:
    """(codec, raw nbytes, stored bytes) of every chunk."""
    con = sqlite3.connect(path)
    try:
        return con.execute("SELECT codec, nbytes, length(data) FROM rdb_chunk ORDER BY id").fetchall()
    finally:
        con.close()


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def test_compressible_tensors_round_trip_compressed(tmp_path: Path) -> None:
    arrays = _compressible()
    path = tmp_path / "r.sqlite"
    with reportdb.open(path, "a", compression="zstd") as report:
        for tid, arr in enumerate(arrays.values()):
            report.put_tensor(tid, arr)
        summary = report.summary()
    assert summary.stored_bytes < summary.logical_bytes / 2
    chunks = _chunks(path)
    assert [c[0] for c in chunks] == ["zstd"] * len(arrays)
    assert summary.stored_bytes == sum(stored for _, _, stored in chunks)
    with reportdb.open(path) as report:
        for tid, (name, arr) in enumerate(arrays.items()):
            back = report.tensor(tid)
            assert back.dtype == arr.dtype and _bits(back) == _bits(arr), name
            assert report.tensor_stats(tid).count == arr.size


def test_multi_chunk_tensor_partial_reads_across_compressed_chunks(tmp_path: Path) -> None:
    arr = (np.arange(2000 * 48, dtype=np.int32) // 7).reshape(2000, 48)  # 384,000 bytes
    path = tmp_path / "r.sqlite"
    with reportdb.Report(path, "a", chunk_size=16 << 10, compression="zstd") as report:
        report.put_tensor(3, arr)
        assert np.array_equal(report.tensor(3), arr)
        for rows in (slice(0, 1), slice(80, 90), slice(85, 1500), slice(1999, None), slice(-300, None), slice(7, 7)):
            assert np.array_equal(report.tensor(3, rows=rows), arr[rows])
    chunks = _chunks(path)
    assert len(chunks) == -(-arr.nbytes // (16 << 10)) and {c[0] for c in chunks} == {"zstd"}
    assert sum(c[1] for c in chunks) == arr.nbytes and sum(c[2] for c in chunks) < arr.nbytes / 3


def test_incompressible_data_stays_raw(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    big = RNG.standard_normal((512, 1024)).astype(np.float32)  # 2 MiB: decided by the sample
    small = RNG.standard_normal(1000).astype(np.float32)  # its own sample: decided per chunk
    tiny = np.arange(3, dtype=np.float32)  # a zstd frame would not be smaller
    with reportdb.open(path, "a", compression="zstd") as report:
        for tid, arr in enumerate((big, small, tiny)):
            report.put_tensor(tid, arr)
        assert report.summary().stored_bytes == big.nbytes + small.nbytes + tiny.nbytes
        for tid, arr in enumerate((big, small, tiny)):
            assert np.array_equal(report.tensor(tid), arr)
    assert {c[0] for c in _chunks(path)} == {None}


def test_each_chunk_keeps_the_smaller_form(tmp_path: Path) -> None:
    """A blob whose sample shows a gain still stores its incompressible chunks raw; reads span both kinds."""
    arr = np.zeros((64, 1024), np.float32)  # 16 chunks of 16 KiB; one window of the sample is random
    arr[:4] = RNG.standard_normal((4, 1024))
    path = tmp_path / "r.sqlite"
    with reportdb.Report(path, "a", chunk_size=16 << 10, compression="zstd") as report:
        report.put_tensor(1, arr)
        assert np.array_equal(report.tensor(1), arr)
        assert np.array_equal(report.tensor(1, rows=slice(2, 9)), arr[2:9])
    codecs = [c[0] for c in _chunks(path)]
    assert codecs[0] is None and codecs[1] == "zstd"  # the zero chunks dedupe to one row
    assert len(codecs) == 2


def test_identical_content_dedupes_whatever_the_codec(tmp_path: Path) -> None:
    arr = _compressible()["int8 few values"]
    path = tmp_path / "r.sqlite"
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, arr)
    with reportdb.open(path, "a", compression="zstd") as report:
        report.put_tensor(2, arr)  # the blob exists: stored once, raw
        report.put_tensor(3, arr[:100])  # new content: compressed
        assert _bits(report.tensor(2)) == _bits(arr) and _bits(report.tensor(3)) == _bits(arr[:100])
        assert report.summary().tables["rdb_blob"] == 2
    assert [c[0] for c in _chunks(path)] == [None, "zstd"]


def _corrupt_compressed_chunk(path: Path) -> None:
    """Flip one byte of the (only) compressed chunk's entropy-coded data inside the database file itself."""
    con = sqlite3.connect(path)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data, = con.execute("SELECT data FROM rdb_chunk WHERE codec='zstd'").fetchone()
    con.close()
    raw = bytearray(path.read_bytes())
    at = raw.find(data[:64])
    assert at >= 0 and raw.find(data[:64], at + 1) < 0
    raw[at + 40] ^= 0x40  # inside the first 64 bytes, which sit together (the rest may span overflow pages)
    path.write_bytes(bytes(raw))


def test_flipped_byte_in_a_compressed_chunk_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    arr = _compressible()["int8 few values"]
    with reportdb.open(path, "a", compression="zstd") as report:
        report.put_tensor(42, arr)
    _corrupt_compressed_chunk(path)
    with reportdb.open(path) as report:
        with pytest.raises(CorruptionError, match="tensor 42.*integrity check"):
            report.tensor(42)
    result = reportdb.verify(path)
    assert not result.ok and result.problems[0].error.startswith("CorruptionError: tensor 42")


def _truncate_frame(con: sqlite3.Connection) -> None:
    """Keep a frame's header (its declared size) but cut its data, with a matching crc32."""
    data, = con.execute("SELECT data FROM rdb_chunk").fetchone()
    cut = data[: len(data) // 2]
    con.execute("UPDATE rdb_chunk SET data = ?, crc32 = ?", (cut, zlib.crc32(cut)))


def test_damaged_frames_lengths_and_codecs_are_corruption(tmp_path: Path) -> None:
    """Stored bytes that pass their crc32 but do not decode to ``nbytes`` bytes are refused, never misread."""
    arr = _compressible()["int8 few values"]
    cases = {
        "decompresses to 210000 bytes, not 209999": lambda con: con.execute("UPDATE rdb_chunk SET nbytes = nbytes - 1"),
        "cannot be decompressed": _truncate_frame,
        "unknown codec 'lz4'": lambda con: con.execute("UPDATE rdb_chunk SET codec = 'lz4'"),
    }
    for n, (message, tamper) in enumerate(cases.items()):
        path = tmp_path / f"{n}.sqlite"
        with reportdb.open(path, "a", compression="zstd") as report:
            report.put_tensor(5, arr, stats=False)
        with sqlite3.connect(path) as con:
            tamper(con)
        with reportdb.open(path) as report, pytest.raises(CorruptionError, match=f"tensor 5.*{message}"):
            report.tensor(5)
        assert not reportdb.verify(path).ok, message


def test_verify_api_and_cli_pass_on_a_compressed_report(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    arrays = _compressible()
    with reportdb.Report(path, "a", chunk_size=64 << 10, compression="zstd") as report:
        for tid, arr in enumerate(arrays.values()):
            report.put_tensor(tid, arr)
    result = reportdb.verify(path)
    assert result.ok and result.bytes_checked == sum(a.nbytes for a in arrays.values())
    cli_result = CliRunner().invoke(cli, ["verify", str(path), "--json"])
    assert cli_result.exit_code == 0, cli_result.output
    assert json.loads(cli_result.output)["ok"]


@pytest.mark.process
def test_migrate_a_real_report_with_compression(tmp_path: Path) -> None:
    src = FIXTURES / FIXTURE / "report"
    summary = reportdb.migrate(src, tmp_path / "out", compression="zstd", jobs=2)
    db = tmp_path / "out" / "db.sqlite"
    assert summary.verified.ok
    codecs = {c[0] for c in _chunks(db)}
    assert codecs == {None, "zstd"}
    with reportdb.open(db) as report:
        assert report.summary().stored_bytes < sum(c[1] for c in _chunks(db))
    assert_report_values(db, FIXTURE)
    files = len(list((src / "tensors").iterdir()))
    assert reportdb.verify(db, against=src).compared == files
    out = CliRunner().invoke(cli, ["migrate", str(src), "-o", str(tmp_path / "cli"), "--compression", "zstd", "--json"])
    assert out.exit_code == 0, out.output
    assert "zstd" in {c[0] for c in _chunks(tmp_path / "cli" / "db.sqlite")}


def test_an_older_schema_reads_as_is_and_upgrades(tmp_path: Path) -> None:
    """A report at schema 0003 (no codec column) reads read-only as it is, and mode "a" upgrades it."""
    path = tmp_path / "old.sqlite"
    conn = connect(path, readonly=False)
    schema.upgrade(engine_for(conn, readonly=False), target="0003")
    arrays = {5: np.arange(6000, dtype=np.float32).reshape(60, 100), 6: RNG.standard_normal(77).astype(np.float64)}
    conn.execute("BEGIN IMMEDIATE")
    for pk, (tid, arr) in enumerate(arrays.items(), start=1):
        conn.execute(
            "INSERT INTO rdb_tensor(id, tensor_id, rank, dtype, shape, nbytes, n_shards) VALUES (?, ?, 0, ?, ?, ?, 1)",
            (pk, tid, arr.dtype.name, json.dumps(arr.shape), arr.nbytes),
        )
        ref = blobs.put_blob(conn, arr, chunk_size=8192, block_crcs=False)
        conn.execute(
            "INSERT INTO rdb_shard(tensor_pk, shard_index, mesh_coordinate, dtype, shape, blob_id) VALUES (?, 0, '[]', ?, ?, ?)",
            (pk, arr.dtype.name, json.dumps(arr.shape), ref.id),
        )
    conn.execute("COMMIT")
    conn.close()
    with reportdb.open(path) as report:
        assert report.schema_revision == "0003"
        for tid, arr in arrays.items():
            assert np.array_equal(report.tensor(tid), arr)
        assert np.array_equal(report.tensor(5, rows=slice(10, 50)), arrays[5][10:50])
    assert reportdb.verify(path).ok
    with reportdb.open(path, "a", compression="zstd") as report:
        assert report.schema_revision == schema.head_revision() == "0006"
        for tid, arr in arrays.items():
            assert np.array_equal(report.tensor(tid), arr)
        report.put_tensor(7, np.zeros((100, 100), np.float32))
        assert np.array_equal(report.tensor(7), np.zeros((100, 100), np.float32))
    assert [c[0] for c in _chunks(path)][-1] == "zstd"
    assert reportdb.verify(path).ok


def test_invalid_compression_is_refused_before_touching_anything(tmp_path: Path) -> None:
    for call in (
        lambda: reportdb.open(tmp_path / "x.sqlite", "a", compression="gzip"),  # type: ignore[arg-type]
        lambda: reportdb.Report(tmp_path / "x.sqlite", "a", compression="ZSTD"),  # type: ignore[arg-type]
        lambda: reportdb.migrate(FIXTURES / FIXTURE / "report", tmp_path / "out", compression="lz4"),  # type: ignore[arg-type]
    ):
        with pytest.raises(ReportDBError, match="compression must be one of 'none', 'zstd'"):
            call()
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ReportDBError, match="unknown chunk codec"):
        blobs.put_blob(sqlite3.connect(":memory:"), np.zeros(4), codec="lz4")
    out = CliRunner().invoke(cli, ["migrate", str(FIXTURES / FIXTURE / "report"), "-o", str(tmp_path / "o"), "--compression", "xz"])
    assert out.exit_code == 2 and "xz" in out.output


def _run_without_zstd(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCK_ZSTD + code], capture_output=True, text=True, timeout=300)


@pytest.mark.process
def test_missing_zstd_library_gives_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    with reportdb.open(path, "a", compression="zstd") as report:
        report.put_tensor(1, np.zeros((64, 64), np.float32))
        report.put_tensor(2, RNG.standard_normal(64).astype(np.float32))  # raw
    read = _run_without_zstd(
        "import reportdb\n"
        f"r = reportdb.open({str(path)!r})\n"
        "print(r.tensor(2).size)\n"
        "try:\n"
        "    r.tensor(1)\n"
        "except reportdb.ReportDBError as exc:\n"
        "    print(f'{type(exc).__name__}: {exc}')\n"
    )
    assert read.returncode == 0, read.stderr
    lines = read.stdout.splitlines()
    assert lines[0] == "64"
    assert lines[1].startswith("CompressionUnavailableError: tensor 1 (rank 0): chunk 0 is zstd-compressed")
    assert "install reportdb[zstd] (pip install zstandard)" in lines[1]
    write = _run_without_zstd(
        f"import reportdb\nreportdb.open({str(tmp_path / 'new.sqlite')!r}, 'a', compression='zstd')\n"
    )
    assert write.returncode != 0 and "CompressionUnavailableError" in write.stderr
    assert "install reportdb[zstd] (pip install zstandard)" in write.stderr
    assert not (tmp_path / "new.sqlite").exists()
    for args in (["verify", str(path)], ["migrate", str(FIXTURES / FIXTURE / "report"), "-o", str(tmp_path / "o"), "--compression", "zstd"]):
        cli_run = _run_without_zstd(f"from reportdb.cli import main; sys.argv = ['reportdb', *{args!r}]; main()")
        assert cli_run.returncode != 0
        err = cli_run.stderr.strip().splitlines()
        assert len(err) == 1 and "Traceback" not in cli_run.stderr, cli_run.stderr
        assert "install reportdb[zstd] (pip install zstandard)" in err[0]
    assert not (tmp_path / "o").exists()
