"""Chunks may be stored compressed: ``rdb_chunk.codec`` (NULL: raw bytes; ``'zstd'``: one zstd frame).

``nbytes`` and ``digest`` stay those of the raw bytes, so content addresses do not change; ``crc32`` is that
of the stored bytes. Adding a nullable column only rewrites the schema entry, not the table: instant on a
report of any size, and every existing chunk reads as raw.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.get_bind().exec_driver_sql("ALTER TABLE rdb_chunk ADD COLUMN codec TEXT")


def downgrade() -> None:
    conn = op.get_bind()
    compressed = conn.exec_driver_sql("SELECT COUNT(*) FROM rdb_chunk WHERE codec IS NOT NULL").scalar()
    if compressed:
        raise RuntimeError(f"{compressed} chunks are stored compressed; schema 0003 cannot read them")
    conn.exec_driver_sql("ALTER TABLE rdb_chunk DROP COLUMN codec")
