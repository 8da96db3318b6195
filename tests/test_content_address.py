"""Content addresses (schema 0006): a new file addresses its chunks and blobs by BLAKE3, a file that held blobs before
keeps sha256; both verify, dedupe within their kind, survive a push and pull, and an unknown kind is refused."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import zlib
from pathlib import Path

import blake3
import numpy as np
import pytest

import reportdb
from reportdb.errors import CorruptionError
from reportdb.store import blobs, schema
from reportdb.store.engine import connect, engine_for
from reportdb.store.prepared import prepare_shard

RNG = np.random.default_rng(6)
HASHES = {"blake3": lambda b: blake3.blake3(b).digest(), "sha256": lambda b: hashlib.sha256(b).digest()}


def _kind(path: Path) -> str | None:
    with sqlite3.connect(path) as conn:
        row = conn.execute("SELECT value FROM rdb_meta WHERE key = 'chunk_address'").fetchone()
    return None if row is None else row[0]


def _assert_addressed_by(path: Path, kind: str) -> None:
    """Every chunk's digest is ``kind`` of its bytes, and every blob's that of its size, chunk size and chunks."""
    h = HASHES[kind]
    with sqlite3.connect(path) as conn:
        chunks = conn.execute("SELECT id, digest, data FROM rdb_chunk WHERE codec IS NULL").fetchall()
        assert chunks
        for _, digest, data in chunks:
            assert digest == h(data)
        by_id = {cid: digest for cid, digest, _ in chunks}
        for blob_id, digest, nbytes, chunk_size in conn.execute("SELECT id, digest, nbytes, chunk_size FROM rdb_blob"):
            ids = [r[0] for r in conn.execute("SELECT chunk_id FROM rdb_blob_chunk WHERE blob_id = ? ORDER BY idx", (blob_id,))]
            assert digest == h(f"{nbytes}:{chunk_size}:".encode() + b"".join(by_id[i] for i in ids))


def _old_report(path: Path, arrays: dict[int, np.ndarray], revision: str = "0005") -> None:
    """A report database at an older schema holding ``arrays``, written as that reportdb wrote it (sha256)."""
    conn = connect(path, readonly=False)
    schema.upgrade(engine_for(conn, readonly=False), target=revision)
    conn.execute("BEGIN IMMEDIATE")
    for pk, (tid, arr) in enumerate(arrays.items(), start=1):
        conn.execute("INSERT INTO rdb_tensor(id, tensor_id, rank, dtype, shape, nbytes, n_shards) VALUES (?, ?, 0, ?, ?, ?, 1)",
                     (pk, tid, arr.dtype.name, json.dumps(arr.shape), arr.nbytes))
        ref = blobs.put_blob(conn, arr)
        conn.execute("INSERT INTO rdb_shard(tensor_pk, shard_index, mesh_coordinate, dtype, shape, blob_id)"
                     " VALUES (?, 0, '[]', ?, ?, ?)", (pk, arr.dtype.name, json.dumps(arr.shape), ref.id))
    conn.execute("COMMIT")
    conn.close()


def test_a_new_report_is_addressed_by_blake3(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    big = RNG.standard_normal((300, 1000)).astype(np.float32)  # 1.2 MB: one chunk, past the small-tensor path
    small = [RNG.standard_normal(256).astype(np.float32) for _ in range(5)]  # the set-based small-tensor path
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, big)
        report.put_tensor(2, big)  # the same content: one blob
        report.put_tensors([{"tensor_id": 10 + i, "array": a} for i, a in enumerate(small)]
                           + [{"tensor_id": 20, "array": small[0]}])
        assert report.schema_revision == "0006"
    assert _kind(path) == "blake3"
    _assert_addressed_by(path, "blake3")
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM rdb_blob").fetchone()[0] == 6
    assert reportdb.verify(path).ok


def test_large_tensors_are_addressed_chunk_by_chunk(tmp_path: Path) -> None:
    """Several chunks per blob (hashed beside the crcs in a helper thread) and a short last chunk."""
    path = tmp_path / "r.sqlite"
    arr = RNG.standard_normal(3 * (1 << 20) + 1234).astype(np.float32)  # 3 chunks of 4 MiB and a short one
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, arr)
        np.testing.assert_array_equal(report.tensor(1), arr)
        assert report.verify_tensor(1) == arr.nbytes
    _assert_addressed_by(path, "blake3")


def test_an_upgraded_report_keeps_sha256_and_dedupes_with_its_old_blobs(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    arr = RNG.standard_normal((64, 256)).astype(np.float32)
    _old_report(path, {1: arr})
    with reportdb.open(path, "a") as report:
        assert report.schema_revision == "0006"
        report.put_tensor(2, arr)  # identical content: the old blob, found by its sha256 address
        report.put_tensor(3, arr + 1)
        # digests prepared elsewhere for a new (BLAKE3) file are computed again for this one
        report.put_tensor(4, arr + 2, _prepared=[prepare_shard(arr + 2, chunk_size=report.chunk_size)])
        assert report.verify_tensor(4) == arr.nbytes
    assert _kind(path) == "sha256"
    _assert_addressed_by(path, "sha256")
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT COUNT(DISTINCT blob_id) FROM rdb_shard").fetchone()[0] == 3
    assert reportdb.verify(path).ok


def test_an_upgraded_report_without_blobs_takes_blake3(tmp_path: Path) -> None:
    path = tmp_path / "empty.sqlite"
    _old_report(path, {})
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, np.arange(10, dtype=np.int32))
    assert _kind(path) == "blake3"
    _assert_addressed_by(path, "blake3")


def test_a_file_older_than_0006_read_as_it_is_verifies_as_sha256(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    arr = RNG.standard_normal(5000).astype(np.float32)
    _old_report(path, {1: arr})
    before = path.read_bytes()
    with reportdb.open(path) as report:
        assert report.schema_revision == "0005"
        assert report.verify_tensor(1) == arr.nbytes
    assert path.read_bytes() == before


def test_a_chunk_that_does_not_match_its_blake3_address_fails_verify(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    arr = RNG.standard_normal(1000).astype(np.float32)
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, arr)
    altered = arr.copy()
    altered[5] += 1
    with sqlite3.connect(path) as conn:  # the crc32 made to match: only the address tells
        conn.execute("UPDATE rdb_chunk SET data = ?, crc32 = ?", (altered.tobytes(), zlib.crc32(altered.tobytes())))
        conn.execute("DELETE FROM rdb_chunk_crc")
    with reportdb.open(path) as report:
        with pytest.raises(CorruptionError, match="blake3 content address"):
            report.verify_tensor(1)
    assert not reportdb.verify(path).ok


@pytest.mark.parametrize("value", ["md5", "", "x" * 500])
def test_an_unknown_address_kind_is_refused_for_writing_and_verifying(tmp_path: Path, value: str) -> None:
    path = tmp_path / "r.sqlite"
    arr = RNG.standard_normal(100).astype(np.float32)
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, arr)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE rdb_meta SET value = ? WHERE key = 'chunk_address'", (value,))
    with reportdb.open(path) as report:
        np.testing.assert_array_equal(report.tensor(1), arr)  # reading values needs no address
        with pytest.raises(CorruptionError, match="unknown content address kind") as err:
            report.verify_tensor(1)
        assert len(str(err.value)) < 300
    with reportdb.open(path, "a") as report, pytest.raises(CorruptionError, match="unknown content address kind"):
        report.put_tensor(2, arr + 1)
    with reportdb.open(path) as report:
        assert report.tensor_ids() == [1]


def test_digests_of_one_kind_never_pass_for_another() -> None:
    arr = RNG.standard_normal(2000).astype(np.float32)
    b3, sha = blobs.digest(arr, 4096, "blake3"), blobs.digest(arr, 4096, "sha256")
    assert b3.address == "blake3" and sha.address == "sha256"
    assert [c for _, c in b3.chunks] == [c for _, c in sha.chunks]  # the crcs are the same
    assert not {d for d, _ in b3.chunks} & {d for d, _ in sha.chunks} and b3.blob != sha.blob


@pytest.mark.process
@pytest.mark.service
def test_reports_of_both_kinds_push_and_pull_as_they_were(team_url: str, tmp_path: Path) -> None:
    """A sha256 report and a BLAKE3 one with the same tensor: both push (each chunk checked by its own kind), come
    back byte for byte with their kind, and verify; the store keeps the content once per kind."""
    from pg_server import dump, store_count
    from reportdb import team

    arr = RNG.standard_normal((256, 512)).astype(np.float32)
    old, new = tmp_path / "old" / "db.sqlite", tmp_path / "new" / "db.sqlite"
    old.parent.mkdir()
    new.parent.mkdir()
    _old_report(old, {1: arr})
    with reportdb.open(old, "a") as report:
        report.put_tensor(2, arr * 2)
    with reportdb.open(new, "a") as report:
        report.put_tensor(1, arr)
    for src, kind in ((old, "sha256"), (new, "blake3")):
        team.push(src, team_url)
        back = Path(team.pull(team_url, src.parent.name, tmp_path / f"{kind}-back").path)
        assert dump(back) == dump(src) and _kind(back) == kind
        assert reportdb.verify(back).ok
        with reportdb.open(team.report_url(team_url, src.parent.name)) as remote:
            np.testing.assert_array_equal(remote.tensor(1), arr)
            assert remote.verify_tensor(1) == arr.nbytes
    assert store_count(team_url, "SELECT COUNT(*) FROM team_chunk") == 3
