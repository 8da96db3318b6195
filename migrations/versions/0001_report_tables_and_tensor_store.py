"""The chunked tensor store, and the newest report tables for a brand-new report.

A database that already holds report tables (a TTNN report of any age) keeps them exactly as they
are: ttnn-visualizer probes for tables and columns, so an added one would change its answers.
A new, empty database gets the newest TTNN report schema so a writer can fill it.
The DDL is frozen here on purpose; migrations never import the live models.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_R = "rank int NOT NULL DEFAULT 0"

# table -> [(column, declared type)], the newest report schema (graph_report 3.5, plus tensors.size).
REPORT_TABLES: dict[str, list[tuple[str, str]]] = {
    "devices": [(c, "int") for c in (
        "device_id", "num_y_cores", "num_x_cores", "num_y_compute_cores", "num_x_compute_cores",
        "worker_l1_size", "l1_num_banks", "l1_bank_size", "address_at_first_l1_bank",
        "address_at_first_l1_cb_buffer", "num_banks_per_storage_core", "num_compute_cores",
        "num_storage_cores", "total_l1_memory", "total_l1_for_tensors", "total_l1_for_interleaved_buffers",
        "total_l1_for_sharded_buffers", "cb_limit")] + [("rank", _R)],
    "operations": [("operation_id", "int"), ("name", "text"), ("duration", "float"), ("rank", _R)],
    "operation_arguments": [("operation_id", "int"), ("name", "text"), ("value", "text"), ("rank", _R)],
    "source_files": [("id", "INTEGER PRIMARY KEY"), ("path", "text UNIQUE NOT NULL"), ("contents", "text")],
    "stack_traces": [("operation_id", "int"), ("stack_trace", "text"),
                     ("source_file_id", "int REFERENCES source_files(id)"), ("rank", _R)],
    "errors": [("operation_id", "int"), ("operation_name", "text"), ("error_type", "text"),
               ("error_message", "text"), ("stack_trace", "text"), ("timestamp", "text"), ("rank", _R)],
    "tensors": [("tensor_id", "int"), ("shape", "text"), ("dtype", "text"), ("layout", "text"),
                ("memory_config", "text"), ("device_id", "int"), ("address", "int"), ("buffer_type", "int"),
                ("rank", _R), ("storage_type", "text"), ("size", "int")],
    "device_tensors": [("tensor_id", "int"), ("device_id", "int"), ("address", "int"), ("rank", _R)],
    "input_tensors": [("operation_id", "int"), ("input_index", "int"), ("tensor_id", "int"), ("rank", _R)],
    "output_tensors": [("operation_id", "int"), ("output_index", "int"), ("tensor_id", "int"), ("rank", _R)],
    "buffers": [("operation_id", "int"), ("device_id", "int"), ("address", "int"), ("max_size_per_bank", "int"),
                ("buffer_type", "int"), ("buffer_layout", "int"), ("rank", _R)],
    "buffer_chunks": [("operation_id", "int"), ("device_id", "int"), ("address", "int"), ("bank_id", "int"),
                      ("core_x", "int"), ("core_y", "int"), ("chunk_address", "int"), ("chunk_size", "int"),
                      ("page_size", "int"), ("num_pages", "int"), ("buffer_type", "int"), ("rank", _R)],
    "captured_graph": [("operation_id", "int"), ("captured_graph", "text"), ("rank", _R)],
    "nodes": [("operation_id", "int"), ("unique_id", "int"), ("node_operation_id", "int"), ("name", "text"),
              ("rank", _R)],
    "edges": [("operation_id", "int"), ("source_unique_id", "int"), ("sink_unique_id", "int"),
              ("source_output_index", "int"), ("sink_input_index", "int"), ("key", "int"), ("rank", _R)],
    "local_tensor_comparison_records": [("tensor_id", "int"), ("golden_tensor_id", "int"), ("matches", "int"),
                                        ("desired_pcc", "float"), ("actual_pcc", "float"), ("rank", _R)],
    "global_tensor_comparison_records": [("tensor_id", "int"), ("golden_tensor_id", "int"), ("matches", "int"),
                                         ("desired_pcc", "float"), ("actual_pcc", "float"), ("rank", _R)],
    "tensor_lifetime": [("tensor_id", "int"), ("producer_operation_id", "int"), ("last_use_operation_id", "int"),
                        ("deallocate_operation_id", "int"), ("producer_source_file", "text"),
                        ("producer_source_line", "int"), ("last_use_source_file", "text"),
                        ("last_use_source_line", "int"), ("rank", _R)],
    "tensor_consumers": [("tensor_id", "int"), ("operation_id", "int"), ("input_index", "int"), ("rank", _R)],
    "tensor_producers": [("tensor_id", "int"), ("operation_id", "int"), ("output_index", "int"), ("rank", _R)],
    "report_metadata": [("key", "text UNIQUE"), ("value", "text")],
    "sub_device_managers": [("device_id", "int"), ("sub_device_manager_id", "int"), ("rank", _R)],
    "sub_devices": [("device_id", "int"), ("sub_device_manager_id", "int"), ("sub_device_id", "int"),
                    ("worker_core_ranges", "text"), ("rank", _R)],
    "operation_executions": [("execution_id", "int"), ("operation_id", "int"), ("device_id", "int"),
                             ("physical_device_id", "int"), ("runtime_id", "int"), ("global_call_count", "int"),
                             ("command_queue_id", "int"), ("rank", _R)],
    "execution_sub_devices": [("execution_id", "int"), ("device_id", "int"), ("sub_device_manager_id", "int"),
                              ("sub_device_id", "int"), ("rank", _R)],
}

# Keys that new tables get, as the newest report schema declares them.
TABLE_KEYS: dict[str, str] = {
    "operations": "UNIQUE(operation_id, rank)",
    "tensors": "UNIQUE(tensor_id, rank)",
    "tensor_lifetime": "UNIQUE(tensor_id, rank)",
    "tensor_consumers": "UNIQUE(tensor_id, operation_id, input_index, rank)",
    "tensor_producers": "UNIQUE(tensor_id, operation_id, output_index, rank)",
    "local_tensor_comparison_records": "UNIQUE(tensor_id, rank)",
    "global_tensor_comparison_records": "UNIQUE(tensor_id, rank)",
    "sub_device_managers": "UNIQUE(device_id, sub_device_manager_id, rank)",
    "sub_devices": "UNIQUE(device_id, sub_device_manager_id, sub_device_id, rank)",
    "operation_executions": "UNIQUE(execution_id, rank)",
    "execution_sub_devices": "UNIQUE(execution_id, device_id, sub_device_manager_id, sub_device_id, rank)",
}

STORE_DDL = [
    """CREATE TABLE rdb_chunk (
        id INTEGER PRIMARY KEY,
        digest BLOB NOT NULL UNIQUE,
        nbytes INTEGER NOT NULL,
        crc32 INTEGER NOT NULL,
        data BLOB NOT NULL
    )""",
    """CREATE TABLE rdb_blob (
        id INTEGER PRIMARY KEY,
        digest BLOB NOT NULL UNIQUE,
        nbytes INTEGER NOT NULL,
        chunk_size INTEGER NOT NULL,
        n_chunks INTEGER NOT NULL
    )""",
    """CREATE TABLE rdb_blob_chunk (
        blob_id INTEGER NOT NULL REFERENCES rdb_blob(id),
        idx INTEGER NOT NULL,
        chunk_id INTEGER NOT NULL REFERENCES rdb_chunk(id),
        PRIMARY KEY (blob_id, idx)
    ) WITHOUT ROWID""",
    "CREATE INDEX ix_rdb_blob_chunk_chunk_id ON rdb_blob_chunk (chunk_id)",
    """CREATE TABLE rdb_tensor (
        id INTEGER PRIMARY KEY,
        tensor_id INTEGER NOT NULL,
        rank INTEGER NOT NULL DEFAULT 0,
        dtype TEXT NOT NULL,
        shape TEXT,
        nbytes INTEGER NOT NULL,
        n_shards INTEGER NOT NULL,
        ttnn_dtype TEXT,
        layout TEXT,
        tile_shape TEXT,
        transpose_tile INTEGER,
        padded_shape TEXT,
        storage_type TEXT,
        memory_config TEXT,
        distribution TEXT,
        source TEXT,
        created_at REAL,
        CONSTRAINT uq_rdb_tensor_tensor_id_rank UNIQUE (tensor_id, rank)
    )""",
    """CREATE TABLE rdb_shard (
        id INTEGER PRIMARY KEY,
        tensor_pk INTEGER NOT NULL REFERENCES rdb_tensor(id) ON DELETE CASCADE,
        shard_index INTEGER NOT NULL,
        mesh_coordinate TEXT,
        dtype TEXT NOT NULL,
        shape TEXT NOT NULL,
        blob_id INTEGER NOT NULL REFERENCES rdb_blob(id),
        CONSTRAINT uq_rdb_shard_tensor_pk_shard_index UNIQUE (tensor_pk, shard_index)
    )""",
    "CREATE INDEX ix_rdb_shard_blob_id ON rdb_shard (blob_id)",
    "CREATE TABLE rdb_meta (key TEXT PRIMARY KEY, value TEXT)",
]


def upgrade() -> None:
    conn = op.get_bind()
    existing = {row[0] for row in conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type='table'")}
    if not existing & REPORT_TABLES.keys():
        for table, columns in REPORT_TABLES.items():
            body = [f"{name} {decl}" for name, decl in columns]
            if table in TABLE_KEYS:
                body.append(TABLE_KEYS[table])
            conn.exec_driver_sql(f"CREATE TABLE {table} (\n    " + ",\n    ".join(body) + "\n)")
        conn.exec_driver_sql("CREATE INDEX idx_stack_traces_source_file_id ON stack_traces (source_file_id)")
    for ddl in STORE_DDL:
        conn.exec_driver_sql(ddl)


def downgrade() -> None:
    conn = op.get_bind()
    for table in ("rdb_shard", "rdb_tensor", "rdb_blob_chunk", "rdb_blob", "rdb_chunk", "rdb_meta"):
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
