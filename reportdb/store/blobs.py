"""Chunked, content-addressed, immutable blob storage on a raw sqlite3 connection.

An array's bytes are cut into fixed-size chunks. Each chunk is stored once per content (sha256
address) with a crc32 that every read checks, since SQLite pages carry no checksum. A blob is the
ordered list of its chunks. Large chunks go in through ``zeroblob`` + ``blobopen`` and never become
a Python ``bytes`` object on the write path.

A chunk may be stored zstd-compressed (``codec``, see ``codec.py``; schema 0004 on): ``nbytes`` and the
sha256 address are those of the raw bytes, so identical content dedupes whatever the codec, while the
crc32 is that of the stored bytes and is checked before anything is decompressed. Callers reading a file
of an older schema (opened read-only, not upgraded) pass ``has_codec=False``.
"""

from __future__ import annotations

import collections
import hashlib
import sqlite3
import zlib
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..errors import CorruptionError, ReportDBError
from . import codec as codec_mod, pools

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


@dataclass(frozen=True)
class Digests:
    """The content addresses and checksums of an array's chunks, computed once wherever convenient (a decoding
    worker process, say) and handed to :func:`put_blob`, so the writing process does not hash the bytes again."""

    chunk_size: int
    nbytes: int
    chunks: tuple[tuple[bytes, int], ...]  # (sha256, crc32) per chunk, in order
    blob: bytes  # the blob's address: sha256 over the size, the chunk size and the chunk addresses


def digest(array: np.ndarray, chunk_size: int = DEFAULT_CHUNK_SIZE) -> Digests:
    """The :class:`Digests` of a canonical (little-endian, C-contiguous) array cut into ``chunk_size`` chunks."""
    data = _as_bytes(array)
    nbytes = int(data.nbytes)
    blob_hash = hashlib.sha256(f"{nbytes}:{chunk_size}:".encode())
    chunks = []
    for start in range(0, nbytes, chunk_size):
        piece = data[start : start + chunk_size]
        sha = hashlib.sha256(piece.data).digest()
        blob_hash.update(sha)
        chunks.append((sha, zlib.crc32(piece.data)))
    return Digests(chunk_size, nbytes, tuple(chunks), blob_hash.digest())


def put_blob(
    conn: sqlite3.Connection,
    array: np.ndarray,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    digests: Digests | None = None,
    codec: str | None = None,
) -> BlobRef:
    """Store the bytes of a canonical (little-endian, C-contiguous) array; the caller holds the transaction.

    ``digests``, when given, must be :func:`digest` of this very array and chunk size (it is trusted: a
    mismatch would store bytes under the wrong address, which ``verify_blob`` reports). ``codec="zstd"``
    compresses the chunks of a new blob whose sample shows a gain, each chunk only if it shrinks enough.
    """
    codec_mod.check_codec(codec)
    data = _as_bytes(array)
    if digests is None:
        digests = digest(array, chunk_size)
    elif digests.chunk_size != chunk_size or digests.nbytes != data.nbytes:
        raise ReportDBError(f"digests of {digests.nbytes} bytes in {digests.chunk_size}-byte chunks given for "
                            f"{data.nbytes} bytes in {chunk_size}-byte chunks")
    nbytes = digests.nbytes
    cursor = conn.execute(
        "INSERT OR IGNORE INTO rdb_blob(digest, nbytes, chunk_size, n_chunks) VALUES (?, ?, ?, ?)",
        (digests.blob, nbytes, chunk_size, len(digests.chunks)),
    )
    if cursor.rowcount == 0:  # identical content is already stored: its chunks are too
        return BlobRef(conn.execute("SELECT id FROM rdb_blob WHERE digest=?", (digests.blob,)).fetchone()[0], nbytes, False)
    blob_id = cursor.lastrowid
    assert blob_id is not None
    compress = codec is not None and codec_mod.worth_compressing(data)
    for idx, (sha, crc) in enumerate(digests.chunks):
        piece = data[idx * chunk_size : (idx + 1) * chunk_size]
        chunk_id = (_put_compressed_chunk if compress else _put_chunk)(conn, piece, sha, crc)
        conn.execute("INSERT INTO rdb_blob_chunk(blob_id, idx, chunk_id) VALUES (?, ?, ?)", (blob_id, idx, chunk_id))
    return BlobRef(blob_id, nbytes, True)


def _put_chunk(conn: sqlite3.Connection, piece: np.ndarray, sha: bytes, crc: int) -> int:
    """Insert a raw chunk unless its content is already stored; return its row id either way."""
    n = int(piece.nbytes)
    streamed = n >= _BLOBOPEN_MIN and hasattr(conn, "blobopen")
    cursor = conn.execute(
        "INSERT OR IGNORE INTO rdb_chunk(digest, nbytes, crc32, data) VALUES (?, ?, ?, "
        + ("zeroblob(?))" if streamed else "?)"),
        (sha, n, crc, n if streamed else piece.data),
    )
    if cursor.rowcount == 0:
        return int(conn.execute("SELECT id FROM rdb_chunk WHERE digest=?", (sha,)).fetchone()[0])
    rowid = cursor.lastrowid
    assert rowid is not None
    if streamed:
        with conn.blobopen("rdb_chunk", "data", rowid) as blob:
            blob.write(piece.data)
    return rowid


def _put_compressed_chunk(conn: sqlite3.Connection, piece: np.ndarray, sha: bytes, crc: int) -> int:
    """Insert a chunk zstd-compressed (its crc32 then over the compressed bytes), or raw when that does not pay;
    content already stored is looked up first, so it is not compressed again."""
    found = conn.execute("SELECT id FROM rdb_chunk WHERE digest=?", (sha,)).fetchone()
    if found is not None:
        return int(found[0])
    frame = codec_mod.compress(piece)
    if frame is None:
        return _put_chunk(conn, piece, sha, crc)
    rowid = conn.execute(
        "INSERT INTO rdb_chunk(digest, nbytes, crc32, codec, data) VALUES (?, ?, ?, ?, ?)",
        (sha, int(piece.nbytes), zlib.crc32(frame), codec_mod.ZSTD, frame),
    ).lastrowid
    assert rowid is not None
    return rowid


def read_blob_into(
    conn: sqlite3.Connection,
    blob_id: int,
    out: np.ndarray,
    *,
    offset: int = 0,
    what: str = "blob",
    has_codec: bool = True,
) -> None:
    """Fill ``out`` (a flat uint8 array) with the blob's bytes from ``offset``, reading only the chunks that hold them.

    Every chunk read is checked against its crc32 (of the stored bytes, before any decompression); a mismatch
    raises CorruptionError naming ``what``.
    """
    length = int(out.nbytes)
    if length == 0:
        return
    chunk_size, total = conn.execute("SELECT chunk_size, nbytes FROM rdb_blob WHERE id=?", (blob_id,)).fetchone()
    if offset + length > total:
        raise CorruptionError(f"{what}: asked for bytes {offset}..{offset + length} of a {total}-byte blob")
    first, last = offset // chunk_size, (offset + length - 1) // chunk_size
    rows = conn.execute(
        f"SELECT bc.idx, c.id, c.nbytes, c.crc32, {'c.codec' if has_codec else 'NULL'} FROM rdb_blob_chunk bc"
        " JOIN rdb_chunk c ON c.id = bc.chunk_id WHERE bc.blob_id=? AND bc.idx BETWEEN ? AND ? ORDER BY bc.idx",
        (blob_id, first, last),
    ).fetchall()
    if [r[0] for r in rows] != list(range(first, last + 1)):
        raise CorruptionError(f"{what}: chunks of bytes {offset}..{offset + length} are missing; the database file is damaged")
    # The crc32 of a large chunk (and the decompression of a compressed one) runs in a helper thread while the
    # next chunk is read (both release the GIL), so it costs little wall time; ``out`` is the caller's and is
    # discarded if a check fails.
    with _ChecksBehind(pools.pool("check", 2)) as checks:
        for idx, chunk_id, nbytes, crc, codec in rows:
            data = _chunk_bytes(conn, chunk_id)
            chunk_start = idx * chunk_size
            lo = max(offset, chunk_start)
            hi = min(offset + length, chunk_start + nbytes)
            target = out[lo - offset : hi - offset]
            inline = nbytes < _THREADED_CRC_MIN
            if codec is not None:
                checks.run(_decode_into, target, lo - chunk_start, idx, crc, codec, data, nbytes, what, inline=inline)
                continue
            if len(data) != nbytes:
                raise CorruptionError(f"{what}: chunk {idx} holds {len(data)} bytes, not {nbytes}; the database file is damaged")
            checks.run(_check_crc, idx, crc, data, what, inline=inline)
            target[:] = np.frombuffer(data, dtype=np.uint8, count=hi - lo, offset=lo - chunk_start)


def _decode_into(
    target: np.ndarray, start: int, idx: int, crc: int, codec: str, data: bytes, nbytes: int, what: str
) -> None:
    """Check a compressed chunk's crc32, decompress it and copy its bytes from ``start`` into ``target``."""
    _check_crc(idx, crc, data, what)
    raw = codec_mod.decompress(codec, data, nbytes, f"{what}: chunk {idx}")
    target[:] = np.frombuffer(raw, dtype=np.uint8, count=target.nbytes, offset=start)


# Two threads: zstd decodes ~350 MB/s per thread on a 2-core VM, so compressed reads nearly double with the
# second one (measured 350 -> 600 MB/s); raw reads, bound by the copy, are unchanged.
_THREADED_CRC_MIN = 1 << 20  # below this a thread hand-off costs more than the check itself


def _check_crc(idx: int, crc: int, data: bytes, what: str) -> None:
    if zlib.crc32(data) != crc:
        raise CorruptionError(
            f"{what}: chunk {idx} failed its integrity check (stored bytes were changed or lost); "
            "the database file is damaged"
        )


class _ChecksBehind:
    """Integrity checks run in ``pool`` while the caller reads the next chunks, at most two chunks behind so
    memory stays bounded; leaving the block waits for them all (after an error, the rest are cancelled)."""

    def __init__(self, pool: Executor | None) -> None:
        self.pool = pool
        self.ahead: collections.deque[Future[None]] = collections.deque()

    def run(self, check: Callable[..., None], *args: Any, inline: bool = False) -> None:
        if self.pool is None or inline:
            check(*args)
            return
        self.ahead.append(self.pool.submit(check, *args))
        if len(self.ahead) > 2:
            self.ahead.popleft().result()

    def __enter__(self) -> "_ChecksBehind":
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        try:
            while exc_type is None and self.ahead:
                self.ahead.popleft().result()
        finally:
            for future in self.ahead:
                future.cancel()


def _chunk_bytes(conn: sqlite3.Connection, chunk_id: int) -> bytes:
    """A chunk's bytes; incremental blob I/O reads them several times faster than a SELECT of the value."""
    if hasattr(conn, "blobopen"):
        with conn.blobopen("rdb_chunk", "data", chunk_id, readonly=True) as blob:
            return blob.read()
    return conn.execute("SELECT data FROM rdb_chunk WHERE id=?", (chunk_id,)).fetchone()[0]


def verify_blob(
    conn: sqlite3.Connection, blob_id: int, *, what: str = "blob", pool: Executor | None = None, has_codec: bool = True
) -> int:
    """Re-read every chunk of a blob, decompress it if stored compressed and re-hash it with sha256 (its content
    address); return the raw bytes checked.

    With ``pool``, chunks are decoded and hashed in its threads while the next ones are read (zstd, hashlib and
    blob reads release the GIL), at most a few chunks ahead, so memory stays bounded whatever the blob size.
    """
    rows = conn.execute(
        f"SELECT bc.idx, c.id, c.digest, c.nbytes, {'c.codec' if has_codec else 'NULL'} FROM rdb_blob_chunk bc"
        " JOIN rdb_chunk c ON c.id = bc.chunk_id WHERE bc.blob_id=? ORDER BY bc.idx",
        (blob_id,),
    ).fetchall()

    def check(idx: int, digest: bytes, data: bytes, nbytes: int, codec: str | None) -> None:
        if codec is not None:
            data = codec_mod.decompress(codec, data, nbytes, f"{what}: chunk {idx}")
        if hashlib.sha256(data).digest() != digest:
            raise CorruptionError(f"{what}: chunk {idx} does not match its sha256 digest; the database file is damaged")

    checked = 0
    with _ChecksBehind(pool) as checks:
        for idx, chunk_id, digest, nbytes, codec in rows:
            checks.run(check, idx, digest, _chunk_bytes(conn, chunk_id), nbytes, codec)
            checked += nbytes
    return checked
