"""The team store's own tables, defined once in SQLAlchemy Core: PostgreSQL gets ``bytea``/``jsonb``/``bigint``
identity, SQLite (where the tests check the definitions compile and create) ``BLOB``/``JSON``/``INTEGER``.

The layout follows what is shared and what is not:

- ``team_chunk``: the bytes, content-addressed and shared by every report. The key is the content address of the raw
  bytes (BLAKE3 or sha256, as its report addresses them), the codec ('' raw, 'zstd') and the crc32 of the stored
  bytes, so two pushes of one content store it once while a
  chunk is always given back with the very stored bytes and crc32 its report's ``rdb_chunk`` row names. Its data
  column is ``STORAGE EXTERNAL``: tensor bytes do not compress under pglz, and trying costs time on every push.
- ``team_report``: one row per report, published (``state='ready'``) by the push's last transaction.
- ``team_report_chunk``: a report's ``rdb_chunk`` rows (its own chunk ids) as references into ``team_chunk``. A push
  writes them before it uploads the bytes, so garbage collection (``delete``) always sees the chunks in use.
- ``team_table`` + ``team_rows``: every other table of the report (its ``CREATE`` text as SQLite stored it, and
  its rows in exact form, see ``tables.py``), kept per report. A generic rows table rather than one PostgreSQL
  schema per report: report tables of every age hold values SQLite keeps dynamically typed (a 2024 ``bool`` column
  holding floats, text in an integer column), with rowids, declared types and collations that a typed PostgreSQL
  table would change, so ``pull`` could not give the file back exactly; and ttnn-visualizer's queries are SQLite
  SQL. A remote report is read through a private SQLite copy of these rows (``remote.py``).
- ``team_object``: in a store that keeps chunk bytes in object storage (``objects.py``), one row per object
  uploaded and confirmed, with the chunk key and the object's size; ``team_chunk`` then stays empty. The row is
  written in the transaction after the upload is confirmed, so a row always names an object that was there.
- ``team_history``: each report's operation outputs with their golden comparisons, extracted at push time, so the
  metrics of one operation across a thousand runs are one indexed query.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON, BigInteger, Boolean, Column, DateTime, Float, ForeignKey, Index, Integer, LargeBinary, MetaData,
    PrimaryKeyConstraint, Table, Text, func,
)
from sqlalchemy.dialects.postgresql import BYTEA, JSONB

#: The newest version of the tables below this code reads; a store made by a newer reportdb is refused (see
#: ``server.ensure_schema``). A store keeping its chunks in PostgreSQL is marked BASE_VERSION (every reportdb with a
#: team store reads it); one keeping them in object storage is marked 2, which older versions refuse.
SCHEMA_VERSION = 2
BASE_VERSION = 1

metadata = MetaData()

_ID = BigInteger().with_variant(Integer, "sqlite")  # SQLite's INTEGER PRIMARY KEY is its rowid, bigint on PostgreSQL
_BYTES = LargeBinary().with_variant(BYTEA(), "postgresql")
_JSON = JSON().with_variant(JSONB(), "postgresql")


def _report_fk() -> Column[int]:
    return Column("report_id", _ID, ForeignKey("team_report.id", ondelete="CASCADE"), nullable=False)


meta = Table(
    "team_meta", metadata,
    Column("key", Text, primary_key=True),
    Column("value", Text),
)

report = Table(
    "team_report", metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("name", Text, nullable=False, unique=True),
    Column("digest", _BYTES, nullable=False),  # sha256 over the report's tables, rows and chunk addresses
    Column("state", Text, nullable=False),  # 'staging' while a push uploads, 'ready' once published
    Column("ttnn_version", Text),
    Column("captured_at", DateTime(timezone=True)),
    Column("pushed_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("n_operations", BigInteger),
    Column("n_tensors", BigInteger),
    Column("logical_bytes", BigInteger),
    Column("stored_bytes", BigInteger),
    Column("tags", _JSON),  # a JSON list of strings
    Column("info", _JSON),  # page size, user_version, schema revision, what the push left out
)

table = Table(
    "team_table", metadata,
    _report_fk(),
    Column("ord", Integer, nullable=False),
    Column("name", Text, nullable=False),
    Column("kind", Text, nullable=False),  # 'table' or 'index'
    Column("ddl", Text),  # the CREATE statement as the report's sqlite_master holds it
    Column("columns", _JSON),  # the column names its rows carry, in order (rowid first when it has one)
    Column("has_rowid", Boolean),
    Column("n_rows", BigInteger),
    PrimaryKeyConstraint("report_id", "ord"),
)

rows = Table(
    "team_rows", metadata,
    _report_fk(),
    Column("table_ord", Integer, nullable=False),
    Column("part", Integer, nullable=False),
    Column("data", _BYTES, nullable=False),
    PrimaryKeyConstraint("report_id", "table_ord", "part"),
)

chunk = Table(
    "team_chunk", metadata,
    Column("digest", _BYTES, nullable=False),
    Column("codec", Text, nullable=False),
    Column("crc32", BigInteger, nullable=False),
    Column("nbytes", BigInteger, nullable=False),
    Column("data", _BYTES, nullable=False),
    PrimaryKeyConstraint("digest", "codec", "crc32"),
)

report_chunk = Table(
    "team_report_chunk", metadata,
    _report_fk(),
    Column("chunk_id", BigInteger, nullable=False),  # the id in the report's own rdb_chunk
    Column("digest", _BYTES, nullable=False),
    Column("codec", Text, nullable=False),
    Column("crc32", BigInteger, nullable=False),
    Column("nbytes", BigInteger, nullable=False),
    PrimaryKeyConstraint("report_id", "chunk_id"),
    Index("ix_team_report_chunk_key", "digest", "codec", "crc32"),
)

object_ = Table(
    "team_object", metadata,
    Column("digest", _BYTES, nullable=False),
    Column("codec", Text, nullable=False),
    Column("crc32", BigInteger, nullable=False),
    Column("nbytes", BigInteger, nullable=False),  # the chunk's raw size
    Column("stored", BigInteger, nullable=False),  # the object's size (the chunk's stored bytes)
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("digest", "codec", "crc32"),
)

history = Table(
    "team_history", metadata,
    _report_fk(),
    Column("op_name", Text, nullable=False),
    Column("operation_id", BigInteger),
    Column("output_index", BigInteger),
    Column("tensor_id", BigInteger),
    Column("rank", BigInteger),
    Column("kind", Text),  # 'local' or 'global' comparison record
    Column("golden_tensor_id", BigInteger),
    Column("desired_pcc", Float),
    Column("actual_pcc", Float),
    Column("matches", BigInteger),
    Column("pcc", Float),  # recomputed by `reportdb compare --golden --store`, when the report has it
    Column("passed", Boolean),
    Column("metrics", _JSON),
    Index("ix_team_history_op", "op_name", "report_id"),
)

#: Statements run once after the tables are created on PostgreSQL.
POSTGRES_AFTER_CREATE = ("ALTER TABLE team_chunk ALTER COLUMN data SET STORAGE EXTERNAL",)
