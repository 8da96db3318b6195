"""Typed SQLAlchemy ORM models of every report table, and of reportdb's own tensor tables.

Report tables keep their legacy names and columns (the union of every report age, from the 2024
``ttnn/database.py`` schema to ``graph_report`` 3.5), so ttnn-visualizer's own queries keep working.
They have no primary key of their own, so the models map SQLite's implicit ``rowid``. reportdb never
adds columns to a legacy table, so a column that only newer reports have (``rank``, ``size``,
``buffer_layout``...) is *deferred*: it is loaded only when used, and using it on an older report
raises, while everything else still works there.

The models describe exactly what the migrations create in a new file (columns, types, NOT NULL, defaults,
keys, indexes, foreign keys; ``tests/test_schema_models.py`` compares them with alembic), plus
``buffer_pages``, a legacy table that the newest schema dropped and the Writer creates from its model when a
legacy run writes pages. Alembic migrations never import this module: they carry their own frozen DDL.
"""

from __future__ import annotations

from typing import Any, Optional

from sqlalchemy import REAL, Float, ForeignKey, Index, Integer, LargeBinary, MetaData, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class Base(DeclarativeBase):
    """Declarative base. Indexes get the names the migrations give them; UNIQUE constraints are named only where
    the migrations name them (``name=`` on the constraint), since the report tables' UNIQUE keys and the
    column-level ones (``digest``, ``path``, ``key``) are unnamed in every file, and a conventional name here would
    describe a constraint no file has."""

    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(table_name)s_%(column_0_N_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class _RowidTable(Base):
    """A legacy report table: no declared key, rows identified by SQLite's rowid."""

    __abstract__ = True
    rowid: Mapped[int] = mapped_column("rowid", Integer, primary_key=True)


def _newer(type_: type[Integer] | type[Text] | type[Float]) -> Any:
    """A column that older reports lack: loaded on access, and left to the table's default on insert."""
    return mapped_column(type_, deferred=True)


class _Ranked(_RowidTable):
    __abstract__ = True
    rank: Mapped[int] = mapped_column(Integer, deferred=True, server_default="0")


# --- report tables (legacy names and columns) -------------------------------------------------


class Device(_Ranked):
    __tablename__ = "devices"
    device_id: Mapped[Optional[int]] = mapped_column(Integer)
    num_y_cores: Mapped[Optional[int]] = mapped_column(Integer)
    num_x_cores: Mapped[Optional[int]] = mapped_column(Integer)
    num_y_compute_cores: Mapped[Optional[int]] = mapped_column(Integer)
    num_x_compute_cores: Mapped[Optional[int]] = mapped_column(Integer)
    worker_l1_size: Mapped[Optional[int]] = mapped_column(Integer)
    l1_num_banks: Mapped[Optional[int]] = mapped_column(Integer)
    l1_bank_size: Mapped[Optional[int]] = mapped_column(Integer)
    address_at_first_l1_bank: Mapped[Optional[int]] = mapped_column(Integer)
    address_at_first_l1_cb_buffer: Mapped[Optional[int]] = mapped_column(Integer)
    num_banks_per_storage_core: Mapped[Optional[int]] = mapped_column(Integer)
    num_compute_cores: Mapped[Optional[int]] = mapped_column(Integer)
    num_storage_cores: Mapped[Optional[int]] = mapped_column(Integer)
    total_l1_memory: Mapped[Optional[int]] = mapped_column(Integer)
    total_l1_for_tensors: Mapped[Optional[int]] = mapped_column(Integer)
    total_l1_for_interleaved_buffers: Mapped[Optional[int]] = mapped_column(Integer)
    total_l1_for_sharded_buffers: Mapped[Optional[int]] = mapped_column(Integer)
    cb_limit: Mapped[Optional[int]] = mapped_column(Integer)


class Operation(_Ranked):
    __tablename__ = "operations"
    __table_args__ = (UniqueConstraint("operation_id", "rank"),)
    operation_id: Mapped[Optional[int]] = mapped_column(Integer)
    name: Mapped[Optional[str]] = mapped_column(Text)
    duration: Mapped[Optional[float]] = mapped_column(Float)


class OperationArgument(_Ranked):
    __tablename__ = "operation_arguments"
    operation_id: Mapped[Optional[int]] = mapped_column(Integer)
    name: Mapped[Optional[str]] = mapped_column(Text)
    value: Mapped[Optional[str]] = mapped_column(Text)


class SourceFile(Base):
    __tablename__ = "source_files"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    path: Mapped[str] = mapped_column(Text, unique=True)
    contents: Mapped[Optional[str]] = mapped_column(Text)


class StackTrace(_Ranked):
    __tablename__ = "stack_traces"
    __table_args__ = (Index("idx_stack_traces_source_file_id", "source_file_id"),)
    operation_id: Mapped[Optional[int]] = mapped_column(Integer)
    stack_trace: Mapped[Optional[str]] = mapped_column(Text)
    source_file_id: Mapped[Optional[int]] = mapped_column(ForeignKey("source_files.id"), deferred=True)


class Error(_Ranked):
    __tablename__ = "errors"
    operation_id: Mapped[Optional[int]] = mapped_column(Integer)
    operation_name: Mapped[Optional[str]] = _newer(Text)
    error_type: Mapped[Optional[str]] = mapped_column(Text)
    error_message: Mapped[Optional[str]] = mapped_column(Text)
    stack_trace: Mapped[Optional[str]] = _newer(Text)
    timestamp: Mapped[Optional[str]] = _newer(Text)


class Tensor(_Ranked):
    __tablename__ = "tensors"
    __table_args__ = (UniqueConstraint("tensor_id", "rank"),)
    tensor_id: Mapped[Optional[int]] = mapped_column(Integer)
    shape: Mapped[Optional[str]] = mapped_column(Text)
    dtype: Mapped[Optional[str]] = mapped_column(Text)
    layout: Mapped[Optional[str]] = mapped_column(Text)
    memory_config: Mapped[Optional[str]] = mapped_column(Text)
    device_id: Mapped[Optional[int]] = mapped_column(Integer)
    address: Mapped[Optional[int]] = mapped_column(Integer)
    buffer_type: Mapped[Optional[int]] = mapped_column(Integer)
    storage_type: Mapped[Optional[str]] = _newer(Text)
    size: Mapped[Optional[int]] = _newer(Integer)


class DeviceTensor(_Ranked):
    __tablename__ = "device_tensors"
    tensor_id: Mapped[Optional[int]] = mapped_column(Integer)
    device_id: Mapped[Optional[int]] = mapped_column(Integer)
    address: Mapped[Optional[int]] = mapped_column(Integer)


class InputTensor(_Ranked):
    __tablename__ = "input_tensors"
    operation_id: Mapped[Optional[int]] = mapped_column(Integer)
    input_index: Mapped[Optional[int]] = mapped_column(Integer)
    tensor_id: Mapped[Optional[int]] = mapped_column(Integer)


class OutputTensor(_Ranked):
    __tablename__ = "output_tensors"
    operation_id: Mapped[Optional[int]] = mapped_column(Integer)
    output_index: Mapped[Optional[int]] = mapped_column(Integer)
    tensor_id: Mapped[Optional[int]] = mapped_column(Integer)


class Buffer(_Ranked):
    __tablename__ = "buffers"
    operation_id: Mapped[Optional[int]] = mapped_column(Integer)
    device_id: Mapped[Optional[int]] = mapped_column(Integer)
    address: Mapped[Optional[int]] = mapped_column(Integer)
    max_size_per_bank: Mapped[Optional[int]] = mapped_column(Integer)
    buffer_type: Mapped[Optional[int]] = mapped_column(Integer)
    buffer_layout: Mapped[Optional[int]] = _newer(Integer)


class BufferPage(_Ranked):
    __tablename__ = "buffer_pages"
    operation_id: Mapped[Optional[int]] = mapped_column(Integer)
    device_id: Mapped[Optional[int]] = mapped_column(Integer)
    address: Mapped[Optional[int]] = mapped_column(Integer)
    core_y: Mapped[Optional[int]] = mapped_column(Integer)
    core_x: Mapped[Optional[int]] = mapped_column(Integer)
    bank_id: Mapped[Optional[int]] = mapped_column(Integer)
    page_index: Mapped[Optional[int]] = mapped_column(Integer)
    page_address: Mapped[Optional[int]] = mapped_column(Integer)
    page_size: Mapped[Optional[int]] = mapped_column(Integer)
    buffer_type: Mapped[Optional[int]] = mapped_column(Integer)


class BufferChunk(_Ranked):
    __tablename__ = "buffer_chunks"
    operation_id: Mapped[Optional[int]] = mapped_column(Integer)
    device_id: Mapped[Optional[int]] = mapped_column(Integer)
    address: Mapped[Optional[int]] = mapped_column(Integer)
    bank_id: Mapped[Optional[int]] = mapped_column(Integer)
    core_x: Mapped[Optional[int]] = mapped_column(Integer)
    core_y: Mapped[Optional[int]] = mapped_column(Integer)
    chunk_address: Mapped[Optional[int]] = mapped_column(Integer)
    chunk_size: Mapped[Optional[int]] = mapped_column(Integer)
    page_size: Mapped[Optional[int]] = mapped_column(Integer)
    num_pages: Mapped[Optional[int]] = mapped_column(Integer)
    buffer_type: Mapped[Optional[int]] = mapped_column(Integer)


class CapturedGraph(_Ranked):
    __tablename__ = "captured_graph"
    operation_id: Mapped[Optional[int]] = mapped_column(Integer)
    captured_graph: Mapped[Optional[str]] = mapped_column(Text)


class Node(_Ranked):
    __tablename__ = "nodes"
    operation_id: Mapped[Optional[int]] = mapped_column(Integer)
    unique_id: Mapped[Optional[int]] = mapped_column(Integer)
    node_operation_id: Mapped[Optional[int]] = mapped_column(Integer)
    name: Mapped[Optional[str]] = mapped_column(Text)


class Edge(_Ranked):
    __tablename__ = "edges"
    operation_id: Mapped[Optional[int]] = mapped_column(Integer)
    source_unique_id: Mapped[Optional[int]] = mapped_column(Integer)
    sink_unique_id: Mapped[Optional[int]] = mapped_column(Integer)
    source_output_index: Mapped[Optional[int]] = mapped_column(Integer)
    sink_input_index: Mapped[Optional[int]] = mapped_column(Integer)
    key: Mapped[Optional[int]] = mapped_column(Integer)


class _ComparisonRecord(_Ranked):
    __abstract__ = True
    tensor_id: Mapped[Optional[int]] = mapped_column(Integer)
    golden_tensor_id: Mapped[Optional[int]] = mapped_column(Integer)
    matches: Mapped[Optional[int]] = mapped_column(Integer)
    desired_pcc: Mapped[Optional[float]] = mapped_column(Float)  # declared "bool" in 2024, holds floats
    actual_pcc: Mapped[Optional[float]] = mapped_column(Float)


class LocalTensorComparisonRecord(_ComparisonRecord):
    __tablename__ = "local_tensor_comparison_records"
    __table_args__ = (UniqueConstraint("tensor_id", "rank"),)


class GlobalTensorComparisonRecord(_ComparisonRecord):
    __tablename__ = "global_tensor_comparison_records"
    __table_args__ = (UniqueConstraint("tensor_id", "rank"),)


class TensorLifetime(_Ranked):
    __tablename__ = "tensor_lifetime"
    __table_args__ = (UniqueConstraint("tensor_id", "rank"),)
    tensor_id: Mapped[Optional[int]] = mapped_column(Integer)
    producer_operation_id: Mapped[Optional[int]] = mapped_column(Integer)
    last_use_operation_id: Mapped[Optional[int]] = mapped_column(Integer)
    deallocate_operation_id: Mapped[Optional[int]] = mapped_column(Integer)
    producer_source_file: Mapped[Optional[str]] = mapped_column(Text)
    producer_source_line: Mapped[Optional[int]] = mapped_column(Integer)
    last_use_source_file: Mapped[Optional[str]] = mapped_column(Text)
    last_use_source_line: Mapped[Optional[int]] = mapped_column(Integer)


class TensorConsumer(_Ranked):
    __tablename__ = "tensor_consumers"
    __table_args__ = (UniqueConstraint("tensor_id", "operation_id", "input_index", "rank"),)
    tensor_id: Mapped[Optional[int]] = mapped_column(Integer)
    operation_id: Mapped[Optional[int]] = mapped_column(Integer)
    input_index: Mapped[Optional[int]] = mapped_column(Integer)


class TensorProducer(_Ranked):
    __tablename__ = "tensor_producers"
    __table_args__ = (UniqueConstraint("tensor_id", "operation_id", "output_index", "rank"),)
    tensor_id: Mapped[Optional[int]] = mapped_column(Integer)
    operation_id: Mapped[Optional[int]] = mapped_column(Integer)
    output_index: Mapped[Optional[int]] = mapped_column(Integer)


class ReportMetadata(_RowidTable):
    __tablename__ = "report_metadata"
    key: Mapped[Optional[str]] = mapped_column(Text, unique=True)
    value: Mapped[Optional[str]] = mapped_column(Text)


class SubDeviceManager(_Ranked):
    __tablename__ = "sub_device_managers"
    __table_args__ = (UniqueConstraint("device_id", "sub_device_manager_id", "rank"),)
    device_id: Mapped[Optional[int]] = mapped_column(Integer)
    sub_device_manager_id: Mapped[Optional[int]] = mapped_column(Integer)


class SubDevice(_Ranked):
    __tablename__ = "sub_devices"
    __table_args__ = (UniqueConstraint("device_id", "sub_device_manager_id", "sub_device_id", "rank"),)
    device_id: Mapped[Optional[int]] = mapped_column(Integer)
    sub_device_manager_id: Mapped[Optional[int]] = mapped_column(Integer)
    sub_device_id: Mapped[Optional[int]] = mapped_column(Integer)
    worker_core_ranges: Mapped[Optional[str]] = mapped_column(Text)


class OperationExecution(_Ranked):
    __tablename__ = "operation_executions"
    __table_args__ = (UniqueConstraint("execution_id", "rank"),)
    execution_id: Mapped[Optional[int]] = mapped_column(Integer)
    operation_id: Mapped[Optional[int]] = mapped_column(Integer)
    device_id: Mapped[Optional[int]] = mapped_column(Integer)
    physical_device_id: Mapped[Optional[int]] = mapped_column(Integer)
    runtime_id: Mapped[Optional[int]] = mapped_column(Integer)
    global_call_count: Mapped[Optional[int]] = mapped_column(Integer)
    command_queue_id: Mapped[Optional[int]] = mapped_column(Integer)


class ExecutionSubDevice(_Ranked):
    __tablename__ = "execution_sub_devices"
    __table_args__ = (UniqueConstraint("execution_id", "device_id", "sub_device_manager_id", "sub_device_id", "rank"),)
    execution_id: Mapped[Optional[int]] = mapped_column(Integer)
    device_id: Mapped[Optional[int]] = mapped_column(Integer)
    sub_device_manager_id: Mapped[Optional[int]] = mapped_column(Integer)
    sub_device_id: Mapped[Optional[int]] = mapped_column(Integer)


# --- reportdb tables ------------------------------------------------------------------------------


class Chunk(Base):
    """Content-addressed, immutable bytes, stored raw or compressed (``codec``)."""

    __tablename__ = "rdb_chunk"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    digest: Mapped[bytes] = mapped_column(LargeBinary, unique=True)  # sha256 of the raw bytes: the content address
    nbytes: Mapped[int] = mapped_column(Integer)  # raw (decoded) length
    crc32: Mapped[int] = mapped_column(Integer)  # of the stored bytes, checked on every read before decoding
    data: Mapped[bytes] = mapped_column(LargeBinary, deferred=True)
    codec: Mapped[Optional[str]] = mapped_column(Text)  # NULL: raw bytes; 'zstd': one zstd frame (schema 0004 on)


class ChunkCrc(Base):
    """The crc32 of each block of a raw chunk (schema 0005), so a window checks only the blocks it reads."""

    __tablename__ = "rdb_chunk_crc"
    chunk_id: Mapped[int] = mapped_column(ForeignKey("rdb_chunk.id"), primary_key=True)
    block_size: Mapped[int] = mapped_column(Integer)
    crcs: Mapped[bytes] = mapped_column(LargeBinary)

class Blob(Base):
    """The bytes of one array: an ordered list of chunks, identified by the digest of that list."""

    __tablename__ = "rdb_blob"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    digest: Mapped[bytes] = mapped_column(LargeBinary, unique=True)
    nbytes: Mapped[int] = mapped_column(Integer)
    chunk_size: Mapped[int] = mapped_column(Integer)
    n_chunks: Mapped[int] = mapped_column(Integer)


class BlobChunk(Base):
    __tablename__ = "rdb_blob_chunk"
    blob_id: Mapped[int] = mapped_column(ForeignKey("rdb_blob.id"), primary_key=True)
    idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    chunk_id: Mapped[int] = mapped_column(ForeignKey("rdb_chunk.id"), index=True)


class StoredTensor(Base):
    """One stored tensor (by report tensor id and rank) and the metadata its source gave."""

    __tablename__ = "rdb_tensor"
    __table_args__ = (UniqueConstraint("tensor_id", "rank", name="uq_rdb_tensor_tensor_id_rank"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tensor_id: Mapped[int] = mapped_column(Integer)
    rank: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    dtype: Mapped[str] = mapped_column(Text)
    shape: Mapped[Optional[str]] = mapped_column(Text)  # JSON list; NULL when shards cannot be assembled
    nbytes: Mapped[int] = mapped_column(Integer)  # logical bytes, replicated shards counted once each
    n_shards: Mapped[int] = mapped_column(Integer)
    ttnn_dtype: Mapped[Optional[str]] = mapped_column(Text)
    layout: Mapped[Optional[str]] = mapped_column(Text)
    tile_shape: Mapped[Optional[str]] = mapped_column(Text)
    transpose_tile: Mapped[Optional[int]] = mapped_column(Integer)
    padded_shape: Mapped[Optional[str]] = mapped_column(Text)
    storage_type: Mapped[Optional[str]] = mapped_column(Text)
    memory_config: Mapped[Optional[str]] = mapped_column(Text)
    distribution: Mapped[Optional[str]] = mapped_column(Text)
    source: Mapped[Optional[str]] = mapped_column(Text)
    created_at: Mapped[Optional[float]] = mapped_column(REAL)
    shards: Mapped[list["TensorShard"]] = relationship(back_populates="tensor", order_by="TensorShard.shard_index")


class TensorShard(Base):
    """One device shard of a stored tensor (a single-device tensor has exactly one)."""

    __tablename__ = "rdb_shard"
    __table_args__ = (UniqueConstraint("tensor_pk", "shard_index", name="uq_rdb_shard_tensor_pk_shard_index"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tensor_pk: Mapped[int] = mapped_column(ForeignKey("rdb_tensor.id", ondelete="CASCADE"))
    shard_index: Mapped[int] = mapped_column(Integer)
    mesh_coordinate: Mapped[Optional[str]] = mapped_column(Text)  # JSON list
    dtype: Mapped[str] = mapped_column(Text)
    shape: Mapped[str] = mapped_column(Text)
    blob_id: Mapped[int] = mapped_column(ForeignKey("rdb_blob.id"), index=True)
    tensor: Mapped[StoredTensor] = relationship(back_populates="shards")


class Meta(Base):
    """reportdb's own key/value facts: which library version wrote the schema."""

    __tablename__ = "rdb_meta"
    key: Mapped[str] = mapped_column(Text, primary_key=True)
    value: Mapped[Optional[str]] = mapped_column(Text)


class BlobStats(Base):
    """Statistics of a blob's values read as ``dtype``; content-addressed, so replicas cost nothing."""

    __tablename__ = "rdb_stats"
    blob_id: Mapped[int] = mapped_column(ForeignKey("rdb_blob.id"), primary_key=True)
    dtype: Mapped[str] = mapped_column(Text, primary_key=True)
    count: Mapped[int] = mapped_column(Integer)
    min: Mapped[Optional[float]] = mapped_column(REAL)
    max: Mapped[Optional[float]] = mapped_column(REAL)
    mean: Mapped[Optional[float]] = mapped_column(REAL)
    std: Mapped[Optional[float]] = mapped_column(REAL)
    absmax: Mapped[Optional[float]] = mapped_column(REAL)
    nan_count: Mapped[int] = mapped_column(Integer)
    inf_count: Mapped[int] = mapped_column(Integer)
    zero_count: Mapped[int] = mapped_column(Integer)
    histogram: Mapped[Optional[str]] = mapped_column(Text)  # JSON {"counts": [...]}; edges follow from min/max


REPORT_MODELS = (
    Device, Operation, OperationArgument, SourceFile, StackTrace, Error, Tensor, DeviceTensor,
    InputTensor, OutputTensor, Buffer, BufferPage, BufferChunk, CapturedGraph, Node, Edge,
    LocalTensorComparisonRecord, GlobalTensorComparisonRecord, TensorLifetime, TensorConsumer,
    TensorProducer, ReportMetadata, SubDeviceManager, SubDevice, OperationExecution, ExecutionSubDevice,
)


class MigrationLogEntry(Base):
    """What a legacy-folder migration did or found: tables copied, tensors imported, files it could not use."""

    __tablename__ = "rdb_migration_log"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(Text, index=True)
    created_at: Mapped[float] = mapped_column(REAL)
    kind: Mapped[str] = mapped_column(Text)
    tensor_id: Mapped[Optional[int]] = mapped_column(Integer)
    rank: Mapped[Optional[int]] = mapped_column(Integer)
    path: Mapped[Optional[str]] = mapped_column(Text)
    message: Mapped[Optional[str]] = mapped_column(Text)
    detail: Mapped[Optional[str]] = mapped_column(Text)  # JSON


class Comparison(Base):
    """A recomputed comparison of a tensor with its golden (``local``/``global``) or another run (``run``)."""

    __tablename__ = "rdb_comparison"
    __table_args__ = (UniqueConstraint("kind", "tensor_id", "rank", name="uq_rdb_comparison_kind_tensor_id_rank"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(Text)
    tensor_id: Mapped[int] = mapped_column(Integer)
    rank: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    golden_tensor_id: Mapped[Optional[int]] = mapped_column(Integer)
    desired_pcc: Mapped[Optional[float]] = mapped_column(REAL)
    recorded_pcc: Mapped[Optional[float]] = mapped_column(REAL)
    pcc: Mapped[Optional[float]] = mapped_column(REAL)
    passed: Mapped[Optional[int]] = mapped_column(Integer)
    metrics: Mapped[str] = mapped_column(Text)  # JSON of reportdb.compare()
    created_at: Mapped[float] = mapped_column(REAL)
