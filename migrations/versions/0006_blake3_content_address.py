"""Content addresses by BLAKE3: ``rdb_meta.chunk_address`` names the hash of a file's chunk and blob addresses.

A file that holds no blob yet gets ``'blake3'`` (its first blob is addressed by BLAKE3); a file that holds blobs keeps
``'sha256'``, the hash they were addressed by, so an upgrade rewrites no chunk and stays instant. BLAKE3 is a
cryptographic hash like sha256 (dedupe stays safe against crafted collisions) at half its CPU cost per byte here.
The revision itself is what matters to older reportdb: it refuses the file as too new instead of checking BLAKE3
addresses as sha256 ones, or writing sha256 addresses into a BLAKE3 file.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.get_bind().exec_driver_sql(
        "INSERT INTO rdb_meta(key, value) SELECT 'chunk_address',"
        " CASE WHEN EXISTS (SELECT 1 FROM rdb_blob) THEN 'sha256' ELSE 'blake3' END"
        " WHERE NOT EXISTS (SELECT 1 FROM rdb_meta WHERE key = 'chunk_address')"
    )


def downgrade() -> None:
    conn = op.get_bind()
    kind = conn.exec_driver_sql("SELECT value FROM rdb_meta WHERE key = 'chunk_address'").scalar()
    if kind not in (None, "sha256") and conn.exec_driver_sql("SELECT EXISTS (SELECT 1 FROM rdb_blob)").scalar():
        raise RuntimeError(f"the blobs are addressed by {kind}; schema 0005 checks only sha256 addresses")
    conn.exec_driver_sql("DELETE FROM rdb_meta WHERE key = 'chunk_address'")
