"""Many small blobs in a few statements: the writer's common case, hundreds of 4 KiB tensors per commit.

The rows are those :func:`reportdb.store.blobs.put_blob` writes (one chunk per blob, the same content
addresses, crc32 and block crcs), but they go in with ``executemany``, and the row ids come from each table's current
maximum, which is safe because the caller holds the write transaction (``BEGIN IMMEDIATE``). One blob at a
time, the five or so statements per blob cost more than hashing and storing its bytes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, TypeVar

from .._lazy import lazy_module

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
else:  # numpy is imported on first use: opening a report and reading its metadata need none
    np = lazy_module("numpy", globals(), "np")

from . import blobs, codec as codec_mod

T = TypeVar("T")

#: Values per ``IN (...)`` list, under the 999 bound parameters of SQLite builds older than 3.32.
IN_LIST = 400


def in_lists(values: Sequence[T]) -> Iterable[tuple[str, Sequence[T]]]:
    """``(placeholders, values)`` pieces of ``values`` for ``IN (...)`` lists of at most :data:`IN_LIST` items."""
    for start in range(0, len(values), IN_LIST):
        piece = values[start : start + IN_LIST]
        yield ", ".join("?" * len(piece)), piece


def next_id(conn: sqlite3.Connection, table: str) -> int:
    """The first unused INTEGER PRIMARY KEY of ``table`` (what SQLite itself would assign next)."""
    return int(conn.execute(f"SELECT COALESCE(MAX(id), 0) + 1 FROM {table}").fetchone()[0])


def _ids_by_digest(conn: sqlite3.Connection, table: str, digests: Sequence[bytes]) -> dict[bytes, int]:
    found: dict[bytes, int] = {}
    for marks, piece in in_lists(digests):
        found.update(conn.execute(f"SELECT digest, id FROM {table} WHERE digest IN ({marks})", piece).fetchall())
    return found


def put_small_blobs(
    conn: sqlite3.Connection, arrays: Sequence[np.ndarray], chunk_size: int, codec: str | None = None,
    address: str | None = None,
) -> list[tuple[int, bool]]:
    """Store canonical arrays of at most ``chunk_size`` bytes each; return ``(blob id, created)`` per array.

    ``created`` is True for the first array of each content not stored before (so its statistics are known to
    be missing); identical contents, within the call or already in the file, share one blob. ``codec="zstd"``
    compresses each new chunk whose sample and whole shrink enough, as ``blobs.put_blob`` does. ``address``: the file's
    content address kind (``blobs.address_kind``, asked when None).
    """
    codec_mod.check_codec(codec)
    if any(a.nbytes > chunk_size for a in arrays):
        raise ValueError("put_small_blobs takes arrays of one chunk at most")
    kind = blobs.address_kind(conn) if address is None else address
    prepared: list[tuple[np.ndarray, blobs.Digests]] = []
    for array in arrays:
        prepared.append((array.reshape(-1).view(np.uint8), blobs.digest(array, chunk_size, kind)))  # put_blob's addresses
    stored = _ids_by_digest(conn, "rdb_blob", list({d.blob: None for _, d in prepared}))
    new_blobs: dict[bytes, tuple[int, blobs.Digests]] = {}  # address -> (id, digests)
    chunk_data: dict[bytes, tuple[np.ndarray, int, bytes | None]] = {}  # key -> (bytes, crc32, block crcs)
    blob_id = next_id(conn, "rdb_blob")
    for data, digests in prepared:
        if digests.blob not in stored and digests.blob not in new_blobs:
            new_blobs[digests.blob] = (blob_id, digests)
            blob_id += 1
            for (key, crc), crcs in zip(digests.chunks, digests.blocks):  # an empty blob has no chunk
                chunk_data.setdefault(key, (data, crc, crcs))
    chunk_ids = _ids_by_digest(conn, "rdb_chunk", list(chunk_data))
    chunk_rows: list[tuple[int, bytes, int, int, str | None, memoryview | bytes]] = []
    crc_rows: list[tuple[int, int, bytes]] = []  # rdb_chunk_crc: raw chunks of more than one block
    chunk_id = next_id(conn, "rdb_chunk")
    for key, (data, crc, crcs) in chunk_data.items():
        if key not in chunk_ids:
            chunk_ids[key] = chunk_id
            frame = codec_mod.compress(data) if codec is not None and codec_mod.worth_compressing(data) else None
            if frame is None:
                chunk_rows.append((chunk_id, key, int(data.nbytes), crc, None, memoryview(data)))  # type: ignore[arg-type]
                if crcs is not None:
                    crc_rows.append((chunk_id, blobs.CRC_BLOCK, crcs))
            else:  # the crc32 covers the stored bytes, as for every compressed chunk
                chunk_rows.append((chunk_id, key, int(data.nbytes), blobs.crc32(frame), codec, frame))
            chunk_id += 1
    if codec is None:  # the codec column exists from schema 0004 on; raw rows leave it to its default
        conn.executemany(
            "INSERT INTO rdb_chunk(id, digest, nbytes, crc32, data) VALUES (?, ?, ?, ?, ?)",
            [(i, key, n, crc, data) for i, key, n, crc, _, data in chunk_rows],
        )
    else:
        conn.executemany("INSERT INTO rdb_chunk(id, digest, nbytes, crc32, codec, data) VALUES (?, ?, ?, ?, ?, ?)", chunk_rows)
    if crc_rows:
        conn.executemany(blobs.INSERT_CRCS, crc_rows)
    conn.executemany(
        "INSERT INTO rdb_blob(id, digest, nbytes, chunk_size, n_chunks) VALUES (?, ?, ?, ?, ?)",
        [(bid, address, d.nbytes, chunk_size, len(d.chunks)) for address, (bid, d) in new_blobs.items()],
    )
    conn.executemany(
        "INSERT INTO rdb_blob_chunk(blob_id, idx, chunk_id) VALUES (?, 0, ?)",
        [(bid, chunk_ids[d.chunks[0][0]]) for bid, d in new_blobs.values() if d.chunks],
    )
    out = []
    first_use = set(new_blobs)
    for _, digests in prepared:
        blob = digests.blob
        if blob in first_use:
            first_use.discard(blob)
            out.append((new_blobs[blob][0], True))
        else:
            out.append((stored[blob] if blob in stored else new_blobs[blob][0], False))
    return out
