"""The writer for profiling runs: operations, their links and tensor values, written while a model runs.

The package reads in the order data flows through it: ``config`` (the settings and their ``REPORTDB_*`` variables),
``values`` (numpy, torch, ttnn and legacy tensors as canonical shards, specs and rows; row values as SQLite binds
them), ``copies`` (the reused buffers queued copies of large tensors live in), ``ahead`` (a large queued tensor's
statistics and digests, started as it is queued), ``tables`` (the file's report tables: row checks, the batch's SQL, ``CREATE TABLE`` from the models),
``batches`` (the queue, the background thread that commits it, one batch's transaction, retries while locked) and
``writer`` (the :class:`Writer`: the public API, opening, flush and close).
"""

from __future__ import annotations

from .config import StorePolicy, WriterConfig
from .tables import create_table_sql
from .writer import Role, RowsRefusedError, Writer

__all__ = ["Writer", "WriterConfig", "RowsRefusedError", "Role", "StorePolicy", "create_table_sql"]
