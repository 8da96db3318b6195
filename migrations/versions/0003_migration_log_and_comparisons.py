"""A log of what a legacy-folder migration did, and stored tensor comparison results.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    conn = op.get_bind()
    conn.exec_driver_sql(
        """CREATE TABLE rdb_migration_log (
            id INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL,
            created_at REAL NOT NULL,
            kind TEXT NOT NULL,
            tensor_id INTEGER,
            rank INTEGER,
            path TEXT,
            message TEXT,
            detail TEXT
        )"""
    )
    conn.exec_driver_sql("CREATE INDEX ix_rdb_migration_log_run_id ON rdb_migration_log (run_id)")
    conn.exec_driver_sql(
        """CREATE TABLE rdb_comparison (
            id INTEGER PRIMARY KEY,
            kind TEXT NOT NULL,
            tensor_id INTEGER NOT NULL,
            rank INTEGER NOT NULL DEFAULT 0,
            golden_tensor_id INTEGER,
            desired_pcc REAL,
            recorded_pcc REAL,
            pcc REAL,
            passed INTEGER,
            metrics TEXT NOT NULL,
            created_at REAL NOT NULL,
            CONSTRAINT uq_rdb_comparison_kind_tensor_id_rank UNIQUE (kind, tensor_id, rank)
        )"""
    )


def downgrade() -> None:
    conn = op.get_bind()
    conn.exec_driver_sql("DROP TABLE rdb_comparison")
    conn.exec_driver_sql("DROP TABLE rdb_migration_log")
