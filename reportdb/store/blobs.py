"""Chunked, content-addressed, immutable blob storage on a raw sqlite3 connection.

An array's bytes are cut into fixed-size chunks. Each chunk is stored once per content (sha256
address) with a crc32 that every read checks, since SQLite pages carry no checksum. A blob is the
ordered list of its chunks. Large chunks go in through ``zeroblob`` + ``blobopen`` and never become
a Python ``bytes`` object on the write path.
"""

from __future__ import annotations

import hashlib
import sqlite3
import zlib
from dataclasses import dataclass

import numpy as np

from ..errors import CorruptionError

DEFAULT_CHUNK_SIZE = 4 << 20
_BLOBOPEN_MIN = 256 << 10  # below this a bound parameter is as fast and simpler


@dataclass(frozen=True)
class BlobRef:
    id: int
    nbytes: int
    created: bool  # False when identical content was already stored


def _as_bytes(array: np.ndarray) -> np.ndarray:
    """A flat uint8 view of a C-contiguous array (any dtype, 0-d and empty included)."""
    return array.reshape(-1).view(np.uint8)


def put_blob(conn: sqlite3.Connection, array: np.ndarray, chunk_size: int = DEFAULT_CHUNK_SIZE) -> BlobRef:
    """Store the bytes of a canonical (little-endian, C-contiguous) array; the caller holds the transaction."""
    data = _as_bytes(array)
    nbytes = int(data.nbytes)
    chunk_ids: list[int] = []
    blob_hash = hashlib.sha256(f"{nbytes}:{chunk_size}:".encode())
    for start in range(0, nbytes, chunk_size):
        piece = data[start : start + chunk_size]
        digest = hashlib.sha256(piece).digest()
        blob_hash.update(digest)
        chunk_ids.append(_put_chunk(conn, piece, digest))
    blob_digest = blob_hash.digest()
    cursor = conn.execute(
        "INSERT OR IGNORE INTO rdb_blob(digest, nbytes, chunk_size, n_chunks) VALUES (?, ?, ?, ?)",
        (blob_digest, nbytes, chunk_size, len(chunk_ids)),
    )
    if cursor.rowcount == 0:  # identical content is already stored
        return BlobRef(conn.execute("SELECT id FROM rdb_blob WHERE digest=?", (blob_digest,)).fetchone()[0], nbytes, False)
    blob_id = cursor.lastrowid
    assert blob_id is not None
    conn.executemany(
        "INSERT INTO rdb_blob_chunk(blob_id, idx, chunk_id) VALUES (?, ?, ?)",
        [(blob_id, idx, chunk_id) for idx, chunk_id in enumerate(chunk_ids)],
    )
    return BlobRef(blob_id, nbytes, True)


def _put_chunk(conn: sqlite3.Connection, piece: np.ndarray, digest: bytes) -> int:
    """Insert a chunk unless its content is already stored; return its row id either way."""
    n = int(piece.nbytes)
    streamed = n >= _BLOBOPEN_MIN and hasattr(conn, "blobopen")
    cursor = conn.execute(
        "INSERT OR IGNORE INTO rdb_chunk(digest, nbytes, crc32, data) VALUES (?, ?, ?, "
        + ("zeroblob(?))" if streamed else "?)"),
        (digest, n, zlib.crc32(piece), n if streamed else memoryview(piece)),
    )
    if cursor.rowcount == 0:
        return int(conn.execute("SELECT id FROM rdb_chunk WHERE digest=?", (digest,)).fetchone()[0])
    rowid = cursor.lastrowid
    assert rowid is not None
    if streamed:
        with conn.blobopen("rdb_chunk", "data", rowid) as blob:
            blob.write(memoryview(piece))
    return rowid


def read_blob_into(
    conn: sqlite3.Connection, blob_id: int, out: np.ndarray, *, offset: int = 0, what: str = "blob"
) -> None:
    """Fill ``out`` (a flat uint8 array) with the blob's bytes from ``offset``, reading only the chunks that hold them.

    Every chunk read is checked against its crc32; a mismatch raises CorruptionError naming ``what``.
    """
    length = int(out.nbytes)
    if length == 0:
        return
    chunk_size, total = conn.execute("SELECT chunk_size, nbytes FROM rdb_blob WHERE id=?", (blob_id,)).fetchone()
    if offset + length > total:
        raise CorruptionError(f"{what}: asked for bytes {offset}..{offset + length} of a {total}-byte blob")
    first, last = offset // chunk_size, (offset + length - 1) // chunk_size
    rows = conn.execute(
        "SELECT bc.idx, c.id, c.nbytes, c.crc32 FROM rdb_blob_chunk bc JOIN rdb_chunk c ON c.id = bc.chunk_id "
        "WHERE bc.blob_id=? AND bc.idx BETWEEN ? AND ? ORDER BY bc.idx",
        (blob_id, first, last),
    ).fetchall()
    expected_idx = first
    for idx, chunk_id, nbytes, crc in rows:
        data = _chunk_bytes(conn, chunk_id)
        if idx != expected_idx or len(data) != nbytes or zlib.crc32(data) != crc:
            raise CorruptionError(
                f"{what}: chunk {idx} failed its integrity check (stored bytes were changed or lost); "
                "the database file is damaged"
            )
        chunk_start = idx * chunk_size
        lo = max(offset, chunk_start)
        hi = min(offset + length, chunk_start + nbytes)
        out[lo - offset : hi - offset] = np.frombuffer(data, dtype=np.uint8, count=hi - lo, offset=lo - chunk_start)
        expected_idx += 1
    if expected_idx != last + 1:
        raise CorruptionError(f"{what}: chunks {expected_idx}..{last} are missing; the database file is damaged")


def _chunk_bytes(conn: sqlite3.Connection, chunk_id: int) -> bytes:
    """A chunk's bytes; incremental blob I/O reads them several times faster than a SELECT of the value."""
    if hasattr(conn, "blobopen"):
        with conn.blobopen("rdb_chunk", "data", chunk_id, readonly=True) as blob:
            return blob.read()
    return conn.execute("SELECT data FROM rdb_chunk WHERE id=?", (chunk_id,)).fetchone()[0]


def verify_blob(conn: sqlite3.Connection, blob_id: int, *, what: str = "blob") -> int:
    """Re-hash every chunk of a blob with sha256 (its content address); return the bytes checked."""
    checked = 0
    for idx, digest, data in conn.execute(
        "SELECT bc.idx, c.digest, c.data FROM rdb_blob_chunk bc JOIN rdb_chunk c ON c.id = bc.chunk_id "
        "WHERE bc.blob_id=? ORDER BY bc.idx",
        (blob_id,),
    ):
        if hashlib.sha256(data).digest() != digest:
            raise CorruptionError(f"{what}: chunk {idx} does not match its sha256 digest; the database file is damaged")
        checked += len(data)
    return checked
