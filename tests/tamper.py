"""Helpers of the tests that tamper with reports and team stores as an attacker would: bytes changed with their crc32
kept (crc32 is linear, so four chosen bytes make any change keep it), and rows of a team store edited in PostgreSQL."""

from __future__ import annotations

import json
import zlib
from typing import Any


def keep_crc(data: bytearray, at: int, crc: int) -> None:
    """Set the 4 bytes of ``data`` at ``at`` so that its crc32 is ``crc`` (solved over GF(2): each of their 32 bits
    changes the crc32 by a fixed pattern, and those patterns span all 32 bits)."""
    data[at : at + 4] = bytes(4)
    base = zlib.crc32(data)
    pivots: dict[int, tuple[int, int]] = {}  # highest bit -> (pattern, the bits that make it)
    for bit in range(32):
        data[at + bit // 8] ^= 1 << (bit % 8)
        pattern, made = zlib.crc32(data) ^ base, 1 << bit
        data[at + bit // 8] ^= 1 << (bit % 8)
        while pattern:
            high = pattern.bit_length() - 1
            if high not in pivots:
                pivots[high] = (pattern, made)
                break
            pattern, made = pattern ^ pivots[high][0], made ^ pivots[high][1]
    want, chosen = base ^ crc, 0
    while want:
        pattern, made = pivots[want.bit_length() - 1]
        want, chosen = want ^ pattern, chosen ^ made
    for bit in range(32):
        if chosen >> bit & 1:
            data[at + bit // 8] ^= 1 << (bit % 8)
    assert zlib.crc32(data) == crc


def forge_stored_chunk(url: str, value: bytes = b"\x00\x00\x80\x44", *, keep: bool = True) -> bytes:
    """Change the first bytes of one chunk of the store to ``value`` (1024.0 as float32), with its crc32 kept when
    ``keep``, else just one byte flipped; returns the chunk's address."""
    import psycopg  # here, not at import: only PostgreSQL tests need it (collection stays quick)
    with psycopg.connect(url) as conn:
        digest, data, crc = conn.execute("SELECT digest, data, crc32 FROM team_chunk ORDER BY digest LIMIT 1").fetchone()
        changed = bytearray(data)
        if keep:
            changed[: len(value)] = value
            keep_crc(changed, len(value), crc)
        else:
            changed[0] ^= 0xFF
        assert conn.execute("UPDATE team_chunk SET data = %s WHERE digest = %s", (bytes(changed), digest)).rowcount == 1
    return bytes(digest)


def edit_stored_rows(url: str, table: str, edit: Any) -> None:
    """Rewrite every stored row of ``table`` (all reports) through ``edit(row) -> row``, as encoded by a push."""
    import psycopg
    with psycopg.connect(url) as conn:
        parts = conn.execute(
            "SELECT r.report_id, r.table_ord, r.part, r.data FROM team_rows r JOIN team_table t ON t.report_id ="
            " r.report_id AND t.ord = r.table_ord WHERE t.name = %s", (table,)).fetchall()
        assert parts, f"no stored rows of {table}"
        for report_id, ord_, part, data in parts:
            rows = [edit(list(r)) for r in json.loads(bytes(data))]
            conn.execute("UPDATE team_rows SET data = %s WHERE (report_id, table_ord, part) = (%s, %s, %s)",
                         (json.dumps(rows, separators=(",", ":")).encode(), report_id, ord_, part))
