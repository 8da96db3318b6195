"""Chunked, content-addressed, immutable blob storage on a raw sqlite3 connection.

An array's bytes are cut into fixed-size chunks. Each chunk is stored once per content (its cryptographic content
address, see below) with a crc32 that every read checks, since SQLite pages carry no checksum. A blob is the
ordered list of its chunks. Large chunks go in through ``zeroblob`` + ``blobopen`` and never become
a Python ``bytes`` object on the write path.

A chunk may be stored zstd-compressed (``codec``, see ``codec.py``; schema 0004 on): ``nbytes`` and the
content address are those of the raw bytes, so identical content dedupes whatever the codec, while the
crc32 is that of the stored bytes and is checked before anything is decompressed. Callers reading a file
of an older schema (opened read-only, not upgraded) pass ``has_codec=False``.

Block checksums (schema 0005 on): a raw chunk larger than :data:`CRC_BLOCK` also gets a row in ``rdb_chunk_crc``, the
crc32 of each :data:`CRC_BLOCK`-byte block of it, so a window reads and checks only the blocks it touches (see
``windows.py``). A table of its own, not a column of ``rdb_chunk``: a column added there sits behind the chunk's
bytes in the row, so reading it walks every overflow page of the chunk, and the chunk table's schema never changes.
The whole-chunk crc32 stays: whole reads check it in one call, and files and chunks without block crcs (older
schema, compressed or small chunks) rely on it. Writing computes only the block crcs and derives the chunk's crc32
from them (:func:`combine_crcs`, GF(2) arithmetic vectorized over the blocks), so the finer grain costs the writer
one pass over the bytes, as before. Callers reading a schema without the table pass ``has_block_crc=False``.

Content addresses (schema 0006 on): a file's chunks and blobs are addressed by one hash, named in ``rdb_meta`` under
``chunk_address`` (:func:`address_kind`): BLAKE3 for a file whose first blob is written at schema 0006 or later,
sha256 for a file that held blobs before (its addresses stay as they were written, readable and verifiable; a
file without the key is sha256). Both are cryptographic, so dedupe stays safe against crafted collisions when reports of
different people share chunks (the team store); BLAKE3 measured 23 against 48 CPU-ms per 64 MiB here (one thread
each, the other core loaded; 2.6 against 3.7 us per 4 KiB), the largest single cost a writer saves per byte. A file
has one kind: digests computed for another (``Digests.address``) are computed again before they are stored.
"""

from __future__ import annotations

import collections
import functools
import importlib
import itertools
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, NamedTuple, Protocol

from zlib_ng import zlib_ng

from .._lazy import lazy_module
from ..errors import CorruptionError, InvalidArgumentError
from .. import pools
from . import codec as codec_mod

if TYPE_CHECKING:  # pragma: no cover
    from concurrent.futures import Executor, Future

    import numpy as np
else:  # numpy is imported on first use: opening a report and reading its metadata need none
    np = lazy_module("numpy", globals(), "np")

DEFAULT_CHUNK_SIZE = 4 << 20
_BLOBOPEN_MIN = 256 << 10  # below this a bound parameter is as fast and simpler
#: The grain of block crcs. 4 KiB: a 64x64 float32 window of an 8192-wide matrix touches 64 blocks, 256 KiB to check
#: (~75 us with CPython's zlib, ~8 us with :data:`crc32`; 64 KiB blocks would be 2 MiB), while writing pays the per-call
#: cost of 1024 crcs per 4 MiB chunk (~0.24 ms against 0.07 ms for one crc of it), and the crcs take 0.1% of the chunk.
CRC_BLOCK = 4 << 10
#: The smallest block size a stored ``rdb_chunk_crc`` row may declare: bounds the crcs a read fetches per chunk.
MIN_CRC_BLOCK = 512

# --- crc32 arithmetic ------------------------------------------------------------------------------------------
# zlib's crc32 is linear over GF(2): crc(A + B) = crc(A) * x^(8 len(B)) mod P  xor  crc(B), in zlib's reflected bit
# order (bit 31 is x^0). These helpers compute the product, vectorized over numpy uint32 arrays, so the crc32 of a
# chunk follows from the crcs of its blocks without a second pass over its bytes (zlib's crc32_combine, which Python
# does not expose).
_POLY = 0xEDB88320

#: zlib's crc32 (its polynomial and results, a running value as the second argument) from zlib-ng, whose folding with
#: carry-less multiplies (PCLMULQDQ/VPCLMULQDQ on x86-64, PMULL on arm64) measured 14x CPython's zlib here: a 4 KiB
#: block 0.17 against 1.1 us, 4 MiB 75 against 1,080 us, most of a first window read's time. Every crc32 of chunk
#: bytes goes through it; it releases the GIL on large buffers as zlib does (the threaded checks rely on that).
crc32 = zlib_ng.crc32

class _Hashes(dict[str, Callable[..., Any]]):
    """Hash constructors by content address kind, each imported when first asked for (hashlib loads OpenSSL, which
    opening a report and reading its metadata need not pay for); later lookups are plain dict ones."""

    def __missing__(self, kind: str) -> Callable[..., Any]:
        if kind not in ADDRESS_KINDS:
            raise KeyError(kind)
        found = importlib.import_module("hashlib").sha256 if kind == "sha256" else importlib.import_module("blake3").blake3
        self[kind] = found
        return found


#: The content address kinds a file may use (``rdb_meta.chunk_address``) and their hash constructors (each call
#: makes a new hash object).
ADDRESS_KINDS = ("sha256", "blake3")
ADDRESS_HASHES: dict[str, Callable[..., Any]] = _Hashes()
#: The kind a file gets when its first blob is written (schema 0006 on).
NEW_ADDRESS = "blake3"
#: The kind of every file written before schema 0006 (and of a file whose ``rdb_meta`` names none).
OLD_ADDRESS = "sha256"


def address_kind(conn: sqlite3.Connection) -> str:
    """The content address kind of the report database on ``conn`` (``rdb_meta.chunk_address``; sha256 when the file
    predates schema 0006). An unknown kind is a CorruptionError: its addresses cannot be checked or extended."""
    try:
        row = conn.execute("SELECT value FROM rdb_meta WHERE key = 'chunk_address'").fetchone()
    except sqlite3.OperationalError:  # no rdb_meta: a legacy file, which holds no chunks
        return OLD_ADDRESS
    kind = OLD_ADDRESS if row is None else row[0]
    if kind not in ADDRESS_KINDS:
        raise CorruptionError(f"the report names an unknown content address kind {str(kind)[:40]!r} (rdb_meta.chunk_address);"
                              " it was changed by another tool or written by a newer reportdb: upgrade reportdb")
    return str(kind)


def content_address(kind: str, data: Any) -> bytes:
    """The content address of ``data`` (a buffer) of kind ``kind`` (a key of :data:`ADDRESS_HASHES`)."""
    return bytes(ADDRESS_HASHES[kind](data).digest())


def _mulmod(a: Any, b: Any) -> np.ndarray:
    """``a * b mod P`` elementwise (uint32 arrays or scalars, broadcast), zlib's ``multmodp``."""
    a = np.asarray(a, dtype=np.uint32)
    b = np.array(b, dtype=np.uint32, copy=True)
    a, b = np.broadcast_arrays(a, b)
    b = b.copy()
    product = np.zeros(b.shape, dtype=np.uint32)
    for bit in range(31, -1, -1):  # bit 31 of ``a`` is x^0: add b, then b *= x for the next power
        product ^= np.where((a >> np.uint32(bit)) & np.uint32(1), b, np.uint32(0))
        b = (b >> np.uint32(1)) ^ np.where(b & np.uint32(1), np.uint32(_POLY), np.uint32(0))
    return product


@functools.lru_cache(maxsize=64)
def _x8n(nbytes: int) -> int:
    """``x^(8 nbytes) mod P``: what a crc is multiplied by when ``nbytes`` bytes follow it."""
    result, power, n = 1 << 31, 1 << 23, nbytes  # x^0; x^8 (a byte)
    while n:
        if n & 1:
            result = int(_mulmod(power, result)[()])
        power = int(_mulmod(power, power)[()])
        n >>= 1
    return result


@functools.lru_cache(maxsize=32)
def _shift_columns(block: int, count: int) -> np.ndarray:
    """For ``count`` equal blocks, ``[k, j] = x^(8 block (count-1-k)) * x^(31-j) mod P``: the crc32 of the blocks
    together is the xor of ``[k, j]`` over the set bits ``j`` of each block's crc ``k`` (read-only, cached per block
    size and count: 128 KiB for 1024 blocks)."""
    powers = np.empty(count, dtype=np.uint32)
    powers[0] = 1 << 31
    have, step = 1, _x8n(block)
    while have < count:  # double: powers[have:2 have] = powers[:have] * x^(8 block have)
        n = min(have, count - have)
        powers[have : have + n] = _mulmod(step, powers[:n])
        step = int(_mulmod(step, step)[()])
        have += n
    columns = _mulmod(powers[::-1, None], np.uint32(1) << np.arange(32, dtype=np.uint32)[None, :])
    columns.flags.writeable = False
    return columns



def _shift_rows(block: int, count: int) -> np.ndarray:
    """``_shift_columns(block, count)``, as the last ``count`` rows of the table for the next power of two: row ``k``
    of a table depends only on ``count - 1 - k``, so a handful of cached tables serve every count (a writer's tensors
    of many sizes each asked for a table of their own, and rebuilding one costs ~3 ms: 1.7 s of a 300 MiB trace)."""
    size = 1 << max(0, count - 1).bit_length()
    return _shift_columns(block, size)[size - count :]


def combine_crcs(crcs: np.ndarray, nbytes: int, block: int) -> int:
    """The crc32 of ``nbytes`` bytes from the crc32s of their ``block``-byte blocks (the last one possibly shorter)."""
    full, tail = divmod(nbytes, block)
    crc = 0
    if full:
        bits = ((crcs[:full, None] >> np.arange(32, dtype=np.uint32)) & np.uint32(1)).astype(bool)
        crc = int(np.bitwise_xor.reduce(_shift_rows(block, full)[bits]))
    if tail:
        crc = (int(_mulmod(_x8n(tail), crc)[()]) if full else 0) ^ int(crcs[full])
    return crc


def block_crcs(data: np.ndarray | bytes, block: int = CRC_BLOCK) -> np.ndarray:
    """The crc32 of each ``block``-byte block of ``data`` (the last one possibly shorter), as uint32."""
    view = memoryview(data).cast("B")  # type: ignore[arg-type]  # an ndarray is a buffer
    return np.fromiter((crc32(view[i : i + block]) for i in range(0, len(view), block)), dtype=np.uint32,
                       count=-(-len(view) // block))


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
    chunks: tuple[tuple[bytes, int], ...]  # (content address, crc32) per chunk, in order
    blob: bytes  # the blob's address: the hash over the size, the chunk size and the chunk addresses
    #: Per chunk, the little-endian uint32 crc32s of its :data:`CRC_BLOCK`-byte blocks (``rdb_chunk_crc.crcs``), or
    #: None for a chunk of one block, whose crc32 is its one block's.
    blocks: tuple[bytes | None, ...] = ()
    address: str = NEW_ADDRESS  # the hash of the addresses (a key of ADDRESS_HASHES)


#: Chunks from this size on are hashed (hashlib and blake3 release the GIL) in a helper thread while this one computes
#: their block crcs.
_HASH_BESIDE_MIN = 1 << 20


def digest(array: np.ndarray, chunk_size: int = DEFAULT_CHUNK_SIZE, address: str = NEW_ADDRESS) -> Digests:
    """The :class:`Digests` of a canonical (little-endian, C-contiguous) array cut into ``chunk_size`` chunks, addressed
    by the hash ``address`` (the kind of the file they are for, :func:`address_kind`).

    A chunk's crc32 is combined from its block crcs (:func:`combine_crcs`): one pass over the bytes for both."""
    data = _as_bytes(array)
    nbytes = int(data.nbytes)
    blob_hash = ADDRESS_HASHES[address](f"{nbytes}:{chunk_size}:".encode())
    pieces = [data[start : start + chunk_size] for start in range(0, nbytes, chunk_size)]
    beside = pools.pool("digest", 1) if min(chunk_size, nbytes) >= _HASH_BESIDE_MIN else None
    hashed: list[Future[bytes]] | None = None
    if beside is not None:
        hashed = [beside.submit(content_address, address, piece.data) for piece in pieces]
    chunks: list[tuple[bytes, int]] = []
    blocks: list[bytes | None] = []
    for i, piece in enumerate(pieces):
        if piece.nbytes > CRC_BLOCK:
            crcs = block_crcs(piece)
            # The full blocks combined, then zlib continues over the short tail's bytes: the GF(2) shift past a tail
            # is computed per tail length (~3 ms each), which a run of tensors of many sizes would pay every time.
            full = int(piece.nbytes) // CRC_BLOCK * CRC_BLOCK
            crc = combine_crcs(crcs, full, CRC_BLOCK)
            if full < piece.nbytes:
                crc = crc32(piece[full:].data, crc)
            blocks.append(crcs.astype("<u4").tobytes())
        else:
            crc = crc32(piece.data)
            blocks.append(None)
        chunk_address = hashed[i].result() if hashed is not None else content_address(address, piece.data)
        blob_hash.update(chunk_address)
        chunks.append((chunk_address, crc))
    return Digests(chunk_size, nbytes, tuple(chunks), bytes(blob_hash.digest()), tuple(blocks), address)


def put_blob(
    conn: sqlite3.Connection, array: np.ndarray, chunk_size: int = DEFAULT_CHUNK_SIZE, digests: Digests | None = None,
    codec: str | None = None, *, block_crcs: bool = True, address: str | None = None,
) -> BlobRef:
    """Store the bytes of a canonical (little-endian, C-contiguous) array; the caller holds the transaction.

    ``address`` is the file's content address kind (:func:`address_kind`, asked when None). ``digests``, when given, must be
    :func:`digest` of this very array and chunk size (it is trusted: a mismatch would store bytes under the wrong
    address, which ``verify_blob`` reports); digests of another kind are computed again. ``codec="zstd"``
    compresses the chunks of a new blob whose sample shows a gain, each chunk only if it shrinks enough.
    ``block_crcs=False`` writes no ``rdb_chunk_crc`` rows (a file of a schema older than 0005).
    """
    codec_mod.check_codec(codec)
    data = _as_bytes(array)
    if address is None:
        address = address_kind(conn)
    if digests is None or digests.address != address:
        digests = digest(array, chunk_size, address)
    elif digests.chunk_size != chunk_size or digests.nbytes != data.nbytes:
        raise InvalidArgumentError(f"digests of {digests.nbytes} bytes in {digests.chunk_size}-byte chunks given for "
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
    for idx, (key, crc) in enumerate(digests.chunks):
        piece = data[idx * chunk_size : (idx + 1) * chunk_size]
        crcs = digests.blocks[idx] if digests.blocks and block_crcs else None
        chunk_id = (_put_compressed_chunk if compress else _put_chunk)(conn, piece, key, crc, crcs)
        conn.execute("INSERT INTO rdb_blob_chunk(blob_id, idx, chunk_id) VALUES (?, ?, ?)", (blob_id, idx, chunk_id))
    return BlobRef(blob_id, nbytes, True)


def _put_chunk(conn: sqlite3.Connection, piece: np.ndarray, key: bytes, crc: int, crcs: bytes | None) -> int:
    """Insert a raw chunk unless its content is already stored, with its block crcs ``crcs`` (None for a chunk of one
    block); return its row id either way."""
    n = int(piece.nbytes)
    streamed = n >= _BLOBOPEN_MIN and hasattr(conn, "blobopen")
    cursor = conn.execute(
        "INSERT OR IGNORE INTO rdb_chunk(digest, nbytes, crc32, data) VALUES (?, ?, ?, "
        + ("zeroblob(?))" if streamed else "?)"),
        (key, n, crc, n if streamed else piece.data),
    )
    if cursor.rowcount == 0:
        return int(conn.execute("SELECT id FROM rdb_chunk WHERE digest=?", (key,)).fetchone()[0])
    rowid = cursor.lastrowid
    assert rowid is not None
    if streamed:
        with conn.blobopen("rdb_chunk", "data", rowid) as blob:
            blob.write(piece.data)
    if crcs is not None:
        conn.execute(INSERT_CRCS, (rowid, CRC_BLOCK, crcs))
    return rowid


INSERT_CRCS = "INSERT INTO rdb_chunk_crc(chunk_id, block_size, crcs) VALUES (?, ?, ?)"


def _put_compressed_chunk(conn: sqlite3.Connection, piece: np.ndarray, key: bytes, crc: int, crcs: bytes | None) -> int:
    """Insert a chunk zstd-compressed (its crc32 then over the compressed bytes, and no block crcs: a compressed chunk
    is always read whole), or raw when that does not pay; content already stored is looked up first, so it is not
    compressed again."""
    found = conn.execute("SELECT id FROM rdb_chunk WHERE digest=?", (key,)).fetchone()
    if found is not None:
        return int(found[0])
    frame = codec_mod.compress(piece)
    if frame is None:
        return _put_chunk(conn, piece, key, crc, crcs)
    rowid = conn.execute(
        "INSERT INTO rdb_chunk(digest, nbytes, crc32, codec, data) VALUES (?, ?, ?, ?, ?)",
        (key, int(piece.nbytes), crc32(frame), codec_mod.ZSTD, frame),
    ).lastrowid
    assert rowid is not None
    return rowid


#: The largest chunk size a blob may declare (SQLite stores no value over 1e9 bytes): bounds what one chunk can make
#: a read allocate.
MAX_CHUNK_SIZE = 1 << 30
_DAMAGED = "the database file is damaged; restore it from a copy or migrate the report again"


class ChunkRow(NamedTuple):
    """One chunk of a blob as its rows describe it, checked against the blob's layout (a tuple: a layout of a
    large blob makes hundreds, and a frozen dataclass costs several times more to build)."""

    idx: int
    id: int
    nbytes: int  # raw size
    crc32: int  # of the stored bytes
    codec: str | None
    digest: bytes  # content address of the raw bytes
    block_size: int = 0  # of ``crcs``
    crcs: bytes | None = None  # little-endian uint32 crc32 per block of a raw chunk (rdb_chunk_crc), when read

    def block_crc(self, block: int) -> int:
        """The stored crc32 of block ``block`` (``crcs`` must be there)."""
        assert self.crcs is not None
        return int.from_bytes(self.crcs[4 * block : 4 * block + 4], "little")


@dataclass(frozen=True)
class BlobLayout:
    """A blob whose rows were checked to describe ``nbytes`` bytes in complete ``chunk_size`` chunks; ``chunks``
    holds chunks ``first..first + len(chunks) - 1`` (all of them unless the layout was made for a byte span)."""

    id: int
    nbytes: int
    chunk_size: int
    chunks: tuple[ChunkRow, ...]
    digest: bytes  # the blob's content address as stored
    first: int = 0

    def expected(self, idx: int) -> int:
        """The raw size chunk ``idx`` must have: ``chunk_size``, the last one the remainder."""
        return min(self.chunk_size, self.nbytes - idx * self.chunk_size)

    def chunk(self, idx: int) -> ChunkRow:
        """Chunk ``idx`` of the blob, which this layout must hold."""
        if not self.first <= idx < self.first + len(self.chunks):
            raise IndexError(f"chunk {idx} is outside this layout of chunks {self.first}..{self.first + len(self.chunks) - 1}")
        return self.chunks[idx - self.first]


def corrupt(what: str, problem: str) -> CorruptionError:
    """A CorruptionError naming ``what`` and its ``problem``, saying the file is damaged and what to do."""
    return CorruptionError(f"{what}: {problem}; {_DAMAGED}")


#: The columns of a chunk's ``rdb_chunk_crc`` row that :func:`checked_layout` takes after the chunk's own: whether the
#: row is there, its block size, and its crcs only when their length fits the chunk's size in blocks of that size
#: (so a hostile row cannot make a read fetch more than 4 bytes per :data:`MIN_CRC_BLOCK` of the chunk).
CRC_COLUMNS = (
    "cc.chunk_id, cc.block_size, CASE WHEN typeof(cc.block_size) = 'integer' AND cc.block_size >= "
    f"{MIN_CRC_BLOCK} AND typeof(c.nbytes) = 'integer' AND typeof(cc.crcs) = 'blob' AND length(cc.crcs) = "
    "4 * ((c.nbytes + cc.block_size - 1) / cc.block_size) THEN cc.crcs END"
)


def blob_layout(
    conn: sqlite3.Connection, blob_id: int, nbytes: int, *, what: str = "blob", has_codec: bool = True,
    span: tuple[int, int] | None = None, block_crcs: bool = False, found: tuple[Any, ...] | None = None,
) -> BlobLayout:
    """Check, before anything is allocated, that the rows of blob ``blob_id`` describe ``nbytes`` bytes (what the
    shard's shape and dtype need): a sane chunk size, a chunk count that fits, the index list complete, every chunk
    present with a raw size in (0, chunk size] and a stored size that fits it. Raise CorruptionError naming ``what``
    otherwise. Raw chunks are also checked to be exactly their expected size here; a compressed chunk's size is
    checked once its frame has been (see :func:`read_blob_into`).

    ``span=(lo, hi)``, a non-empty byte range of the blob, lists and checks only the chunks that hold those bytes: a
    small window of a large blob then costs one or two chunk rows, not hundreds. ``block_crcs`` (a file of schema
    0005 on) also reads each raw chunk's block crcs (``rdb_chunk_crc``), checked to fit the chunk. ``found``: the
    blob's row ``(nbytes, chunk_size, n_chunks, digest)`` when the caller has read it already (it is checked here)."""
    if found is None:
        found = conn.execute("SELECT nbytes, chunk_size, n_chunks, digest FROM rdb_blob WHERE id=?", (blob_id,)).fetchone()
    if found is None:
        raise corrupt(what, f"its blob {blob_id} is missing from table rdb_blob")
    chunk_size, n_chunks = check_blob_row(blob_id, nbytes, found, what)
    first, last = 0, n_chunks - 1
    if span is not None:
        if not 0 <= span[0] < span[1] <= nbytes:
            raise InvalidArgumentError(f"bytes {span[0]}..{span[1]} are not a non-empty range of a {nbytes}-byte blob")
        first, last = span[0] // chunk_size, (span[1] - 1) // chunk_size
    rows = conn.execute(
        f"SELECT bc.idx, c.id, c.nbytes, c.crc32, {'c.codec' if has_codec else 'NULL'}, c.digest, length(c.data),"
        f" typeof(c.data){', ' + CRC_COLUMNS if block_crcs else ''} FROM rdb_blob_chunk bc LEFT JOIN rdb_chunk c"
        f" ON c.id = bc.chunk_id{' LEFT JOIN rdb_chunk_crc cc ON cc.chunk_id = c.id' if block_crcs else ''}"
        " WHERE bc.blob_id=? AND bc.idx >= ? ORDER BY bc.idx LIMIT ?",
        (blob_id, first, last - first + 1 + (span is None)),  # the whole list: one more row shows an extra one
    ).fetchall()
    if [r[0] for r in rows] != list(range(first, last + 1)):
        have = [r[0] for r in rows]
        part = "" if span is None else f" of its 0..{n_chunks - 1} for bytes {span[0]}..{span[1]}"
        raise corrupt(what, f"table rdb_blob_chunk lists chunks {_brief(have)} of blob {blob_id}, which needs chunks "
                            f"{first}..{last}{part}")
    return checked_layout(blob_id, nbytes, found, rows, what, first)


def check_blob_row(blob_id: int, nbytes: int, found: tuple[Any, ...], what: str) -> tuple[int, int]:
    """Check a blob's ``rdb_blob`` row ``(nbytes, chunk_size, n_chunks, ...)`` describes ``nbytes`` bytes in a sane
    number of sane chunks (CorruptionError naming ``what`` otherwise); return its chunk size and chunk count."""
    stored_nbytes, chunk_size, n_chunks = found[:3]
    if type(stored_nbytes) is not int or type(chunk_size) is not int or type(n_chunks) is not int or not (
        0 < chunk_size <= MAX_CHUNK_SIZE
    ) or stored_nbytes < 0:
        raise corrupt(what, f"table rdb_blob gives blob {blob_id} impossible sizes (nbytes {stored_nbytes!r}, chunk_size "
                             f"{chunk_size!r}, at most {MAX_CHUNK_SIZE})")
    if stored_nbytes != nbytes:
        raise corrupt(what, f"table rdb_blob says blob {blob_id} holds {stored_nbytes} bytes; the shard's shape and dtype "
                             f"need {nbytes}")
    if n_chunks != -(-nbytes // chunk_size):
        raise corrupt(what, f"table rdb_blob says blob {blob_id} has {n_chunks!r} chunks; {nbytes} bytes in "
                             f"{chunk_size}-byte chunks need {-(-nbytes // chunk_size)}")
    return chunk_size, n_chunks


def checked_layout(
    blob_id: int, nbytes: int, found: tuple[Any, ...], rows: list[tuple[Any, ...]], what: str, first: int = 0
) -> BlobLayout:
    """The layout of a blob from its checked ``rdb_blob`` row ``found`` (:func:`check_blob_row`) and its chunk rows
    ``(idx, chunk id, raw size, crc32, codec, digest, stored size, typeof(data))`` (consecutive from ``first``), each
    chunk row checked: present, a raw size in (0, chunk size], a stored size that fits it; CorruptionError otherwise.
    Rows may go on with :data:`CRC_COLUMNS`: a raw chunk's block crcs, which must then be well-formed.
    Shared by :func:`blob_layout` and the one-query read of a small tensor, so both check alike."""
    chunk_size = found[1]
    chunks = []
    for idx, chunk_id, raw, crc, codec, digest_, stored, kind, *crc_row in rows:
        if chunk_id is None:
            raise corrupt(what, f"chunk {idx} of blob {blob_id} is missing from table rdb_chunk")
        if type(raw) is not int or not 0 < raw <= chunk_size or type(crc) is not int or kind != "blob":
            raise corrupt(what, f"table rdb_chunk row {chunk_id} (chunk {idx}) claims {raw!r} bytes of {kind} data in "
                                 f"{chunk_size}-byte chunks")
        if codec is None:
            if stored != raw:
                raise corrupt(what, f"chunk {idx} holds {stored} bytes, not {raw}")
            if raw != min(chunk_size, nbytes - idx * chunk_size):  # BlobLayout.expected, without making one
                check_size(BlobLayout(blob_id, nbytes, chunk_size, (), b""), idx, raw, what)
        elif stored > raw:  # reportdb stores a frame only where it saves 10%
            raise corrupt(what, f"chunk {idx} is a {stored}-byte frame for {raw} bytes")
        block_size, crcs = 0, None
        if crc_row and crc_row[0] is not None and codec is None:  # compressed chunks are read whole: no use for them
            if crc_row[2] is None:
                raise corrupt(what, f"table rdb_chunk_crc row of chunk {idx} (rdb_chunk row {chunk_id}) holds block "
                                    f"size {crc_row[1]!r} and crcs that do not fit a {raw}-byte chunk")
            block_size, crcs = crc_row[1], crc_row[2]
        chunks.append(ChunkRow(idx, chunk_id, raw, crc, codec, digest_ if isinstance(digest_, bytes) else b"",
                               block_size, crcs))
    return BlobLayout(blob_id, nbytes, chunk_size, tuple(chunks), found[3] if isinstance(found[3], bytes) else b"", first)


def _brief(values: list[int]) -> str:
    return "[" + ", ".join(map(str, values[:8])) + (", ...]" if len(values) > 8 else "]")


def check_size(layout: BlobLayout, idx: int, nbytes: int, what: str) -> None:
    if nbytes != layout.expected(idx):
        raise corrupt(what, f"chunk {idx} of blob {layout.id} holds {nbytes} bytes; a {layout.nbytes}-byte blob in "
                             f"{layout.chunk_size}-byte chunks needs {layout.expected(idx)} there")


class CheckedChunks(Protocol):
    """What :func:`read_blob_into` asks of a Report's memory of the chunks it has checked (``windows.VerifiedBlocks``),
    declared here so this module needs nothing of ``windows``, which builds on it."""

    def whole(self, chunk: ChunkRow) -> bool: ...

    def add(self, chunk: ChunkRow) -> None: ...


def read_blob_into(
    conn: sqlite3.Connection, layout: BlobLayout, out: np.ndarray, *, what: str = "blob", first_data: bytes | None = None,
    verified: CheckedChunks | None = None,
) -> None:
    """Fill ``out`` (a flat uint8 array of the blob's size) with the bytes of a checked blob (windows of it are
    ``windows.read_window``'s). ``first_data``: the stored bytes of chunk 0 when the caller already selected them
    (a small tensor's one query), checked exactly like bytes read here.

    Every chunk read is checked against its crc32 (of the stored bytes, before any decompression); a mismatch
    raises CorruptionError naming ``what``. With ``verified`` (one per Report, ``windows.VerifiedBlocks``, synced by the
    caller in this read transaction), a raw chunk of at least :data:`THREADED_CRC_MIN` bytes that it holds as checked
    whole is copied without a crc, and those checked here are added to it once every check has passed.
    """
    if out.nbytes != layout.nbytes or layout.first != 0 or len(layout.chunks) != -(-layout.nbytes // layout.chunk_size):
        raise InvalidArgumentError(f"{what}: {out.nbytes} bytes asked of a {layout.nbytes}-byte blob whose layout holds "
                                   f"{len(layout.chunks)} chunks from chunk {layout.first}")
    if first_data is not None and len(layout.chunks) == 1 and layout.nbytes < THREADED_CRC_MIN:
        _fill_chunk(layout, layout.chunks[0], first_data, out, what)  # a small tensor's one chunk: no thread, no pool
        return
    # The crc32 of a large chunk (or the decompression of a compressed one) runs in a helper thread while this one
    # copies the chunk into ``out`` and reads the next one (all release the GIL); ``out`` is the caller's and is
    # discarded if a check fails. At most four chunks behind. Copying here rather than in the pool measured faster
    # on a busy 2-core VM (64 MiB: 40 against 48 ms with crcs, 17 against 27 ms without); splitting a chunk's crc
    # into two halves for the two threads did not pay (44 ms).
    if layout.chunk_size < THREADED_CRC_MIN or layout.nbytes < THREADED_CRC_MIN:
        verified = None  # small chunks: a crc costs less than looking it up
    checked: list[ChunkRow] = []
    with ChecksBehind(pools.pool("check", 2), ahead=4) as checks:
        for chunk in layout.chunks:
            idx, nbytes = chunk.idx, chunk.nbytes
            data = first_data if first_data is not None and idx == 0 else chunk_bytes(conn, chunk.id)
            target = out[idx * layout.chunk_size : idx * layout.chunk_size + layout.expected(idx)]
            if nbytes < THREADED_CRC_MIN:
                _fill_chunk(layout, chunk, data, target, what)
            elif chunk.codec is not None:
                checks.run(_decode_into, layout, target, chunk, data, what)
            else:
                _check_length(chunk, data, what)
                if verified is None or not verified.whole(chunk):
                    checks.run(check_crc, idx, chunk.crc32, data, what)
                    checked.append(chunk)
                target[:] = np.frombuffer(data, dtype=np.uint8)
    if verified is not None:
        for chunk in checked:
            verified.add(chunk)


def raw_array(chunk: ChunkRow, data: bytes, dtype: np.dtype, shape: tuple[int, ...], what: str) -> np.ndarray:
    """A new array of ``dtype`` and ``shape`` (``chunk.nbytes`` in all, as the layout checked) holding the stored
    bytes ``data`` of raw chunk ``chunk``, their size and crc32 checked first: a small tensor's one chunk in one copy."""
    _check_length(chunk, data, what)
    check_crc(chunk.idx, chunk.crc32, data, what)
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


def _fill_chunk(layout: BlobLayout, chunk: ChunkRow, data: bytes, target: np.ndarray, what: str) -> None:
    """Check a chunk's stored bytes here and now (size and crc32; a compressed one decompressed to its size) and copy
    its raw bytes into ``target``."""
    if chunk.codec is not None:
        _decode_into(layout, target, chunk, data, what)
        return
    _check_length(chunk, data, what)
    check_crc(chunk.idx, chunk.crc32, data, what)
    target[:] = np.frombuffer(data, dtype=np.uint8)


def _check_length(chunk: ChunkRow, data: bytes, what: str) -> None:
    if len(data) != chunk.nbytes:
        raise corrupt(what, f"chunk {chunk.idx} holds {len(data)} bytes, not {chunk.nbytes}")


def _decode_into(layout: BlobLayout, target: np.ndarray, chunk: ChunkRow, data: bytes, what: str) -> None:
    """Check a compressed chunk's crc32 and size, and decompress it into ``target`` a piece at a time (never the whole
    chunk in memory besides ``target``: ``codec.pieces``)."""
    for at, piece in decoded_pieces(layout, chunk, data, what):
        target[at : at + len(piece)] = np.frombuffer(piece, dtype=np.uint8)


def decoded_pieces(layout: BlobLayout, chunk: ChunkRow, data: bytes, what: str) -> Iterator[tuple[int, bytes]]:
    """The raw bytes of a compressed chunk as ``(offset in the chunk, piece)``, a piece (``codec.PIECE``) at a time,
    after its crc32, the size its frame declares (``codec.pieces``) and the size the layout needs are checked."""
    check_crc(chunk.idx, chunk.crc32, data, what)
    assert chunk.codec is not None
    stream = codec_mod.pieces(chunk.codec, data, chunk.nbytes, f"{what}: chunk {chunk.idx}")
    first = next(stream, b"")  # the frame's declared size is checked before the first piece
    check_size(layout, chunk.idx, chunk.nbytes, what)
    at = 0
    for piece in itertools.chain((first,), stream):
        yield at, piece
        at += len(piece)


def decoded(layout: BlobLayout, chunk: ChunkRow, data: bytes, what: str, *, crc: bool) -> bytes:
    """The raw bytes of a compressed chunk (its crc32 checked first when ``crc``), of the size the layout needs."""
    if crc:
        check_crc(chunk.idx, chunk.crc32, data, what)
    assert chunk.codec is not None
    raw = codec_mod.decompress(chunk.codec, data, chunk.nbytes, f"{what}: chunk {chunk.idx}")
    check_size(layout, chunk.idx, chunk.nbytes, what)
    return raw


# Two threads: zstd decodes ~350 MB/s per thread on a 2-core VM, so compressed reads nearly double with the
# second one (measured 350 -> 600 MB/s); raw reads, bound by the copy, are unchanged.
THREADED_CRC_MIN = 1 << 20  # below this a thread hand-off costs more than the check itself


def check_crc(idx: int, crc: int, data: bytes, what: str) -> None:
    if crc32(data) != crc:
        raise CorruptionError(
            f"{what}: chunk {idx} failed its integrity check (stored bytes were changed or lost); "
            "the database file is damaged"
        )


class ChecksBehind:
    """Integrity checks (and copies) run in ``pool`` while the caller reads the next chunks, at most ``ahead`` tasks
    behind so memory stays bounded; leaving the block waits for them all (after an error, the rest are cancelled)."""

    def __init__(self, pool: Executor | None, ahead: int = 2) -> None:
        self.pool = pool
        self.limit = ahead
        self.ahead: collections.deque[Future[None]] = collections.deque()

    def run(self, check: Callable[..., None], *args: Any, inline: bool = False) -> None:
        if self.pool is None or inline:
            check(*args)
            return
        self.ahead.append(self.pool.submit(check, *args))
        if len(self.ahead) > self.limit:
            self.ahead.popleft().result()

    def __enter__(self) -> "ChecksBehind":
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        try:
            while exc_type is None and self.ahead:
                self.ahead.popleft().result()
        finally:
            for future in self.ahead:
                future.cancel()


def chunk_bytes(conn: sqlite3.Connection, chunk_id: int) -> bytes:
    """A chunk's bytes; incremental blob I/O reads them several times faster than a SELECT of the value."""
    if hasattr(conn, "blobopen"):
        with conn.blobopen("rdb_chunk", "data", chunk_id, readonly=True) as blob:
            return blob.read()
    return conn.execute("SELECT data FROM rdb_chunk WHERE id=?", (chunk_id,)).fetchone()[0]


def verify_blob(
    conn: sqlite3.Connection, blob_id: int, nbytes: int, *, what: str = "blob", pool: Executor | None = None,
    has_codec: bool = True, has_block_crc: bool = True, address: str | None = None,
) -> int:
    """Prove blob ``blob_id`` complete and intact: its rows describe ``nbytes`` bytes in complete chunks of consistent
    sizes (:func:`blob_layout`), its address is that of its chunks (as :func:`digest` computes it), and every chunk,
    re-read, matches the crc32 its reads check and, decompressed if stored compressed, its content address (of the
    file's kind ``address``, asked when None) and its block crcs where it has them. Return the raw bytes checked;
    raise CorruptionError naming ``what``. ``has_block_crc``: the file has ``rdb_chunk_crc`` (schema 0005 on).

    With ``pool``, chunks are decoded and hashed in its threads while the next ones are read (zstd, hashlib and
    blob reads release the GIL), at most a few chunks ahead, so memory stays bounded whatever the blob size.
    """
    layout = blob_layout(conn, blob_id, nbytes, what=what, has_codec=has_codec, block_crcs=has_block_crc)
    kind = address_kind(conn) if address is None else address
    blob_hash = ADDRESS_HASHES[kind](f"{nbytes}:{layout.chunk_size}:".encode())
    for chunk in layout.chunks:
        blob_hash.update(chunk.digest)
    if blob_hash.digest() != layout.digest:  # identical content is found by this address: it must be the chunks' own
        raise CorruptionError(f"{what}: blob {blob_id}'s address does not match its chunks; {_DAMAGED}")

    def check(chunk: ChunkRow, data: bytes) -> None:
        check_crc(chunk.idx, chunk.crc32, data, what)  # every read checks it: a wrong one makes the tensor unreadable
        if chunk.codec is not None:
            data = decoded(layout, chunk, data, what, crc=False)
        elif len(data) != chunk.nbytes:
            raise corrupt(what, f"chunk {chunk.idx} holds {len(data)} bytes, not {chunk.nbytes}")
        if content_address(kind, data) != chunk.digest:
            raise CorruptionError(f"{what}: chunk {chunk.idx} does not match its {kind} content address; {_DAMAGED}")
        if chunk.crcs is not None and block_crcs(data, chunk.block_size).astype("<u4").tobytes() != chunk.crcs:
            raise corrupt(what, f"chunk {chunk.idx} does not match its block crcs (table rdb_chunk_crc)")

    with ChecksBehind(pool) as checks:
        for chunk in layout.chunks:
            checks.run(check, chunk, chunk_bytes(conn, chunk.id))
    return nbytes
