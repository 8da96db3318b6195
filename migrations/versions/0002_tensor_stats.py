"""Per-blob statistics (min, max, mean, std, NaN/Inf/zero counts, histogram) for preflight views.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.get_bind().exec_driver_sql(
        """CREATE TABLE rdb_stats (
            blob_id INTEGER NOT NULL REFERENCES rdb_blob(id),
            dtype TEXT NOT NULL,
            count INTEGER NOT NULL,
            min REAL,
            max REAL,
            mean REAL,
            std REAL,
            absmax REAL,
            nan_count INTEGER NOT NULL,
            inf_count INTEGER NOT NULL,
            zero_count INTEGER NOT NULL,
            histogram TEXT,
            PRIMARY KEY (blob_id, dtype)
        )"""
    )


def downgrade() -> None:
    op.get_bind().exec_driver_sql("DROP TABLE rdb_stats")
