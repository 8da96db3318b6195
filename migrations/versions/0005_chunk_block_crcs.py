"""Block checksums: ``rdb_chunk_crc`` holds the crc32 of each ``block_size``-byte block of a raw chunk.

A window of a large tensor then reads and checks only the blocks it touches instead of a whole 4 MiB chunk.
``crcs`` is the little-endian uint32 crc32 of each block of the chunk's stored bytes, in order (the last block
possibly shorter). Only raw chunks larger than one block get a row; the others, and every chunk of a file written
before this revision, are checked whole against ``rdb_chunk.crc32`` as before. A table of its own rather than a
column of ``rdb_chunk``: a column added to ``rdb_chunk`` sits behind the chunk's bytes in the row, so reading it
would walk all of the chunk's overflow pages, and the chunk table's schema never changes. Creating a table is
instant on a report of any size; existing chunks are not back-filled (an upgrade stays instant).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.get_bind().exec_driver_sql(
        """CREATE TABLE rdb_chunk_crc (
        chunk_id INTEGER PRIMARY KEY REFERENCES rdb_chunk(id),
        block_size INTEGER NOT NULL,
        crcs BLOB NOT NULL
    )"""
    )


def downgrade() -> None:
    op.get_bind().exec_driver_sql("DROP TABLE rdb_chunk_crc")
