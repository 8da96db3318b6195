"""Checking a report and what it says of itself: proof that a tensor is complete and intact, dangling references
in the tensor tables, a tensor's stored statistics, the summary of the whole report and its notebook view.

:class:`Checks` is that part of ``reportdb.report.Report``, built on its tensor reads (:mod:`reportdb.tensor_reads`);
where the chunks are kept outside the file, its chunk source checks and counts them (:mod:`reportdb.chunk_source`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ._lazy import lazy_module
from .errors import CorruptionError, ReportDBError, SchemaError, TensorNotFoundError
from .results import MAX_HTML_ROWS, ReportSummary, html_table
from .store import blobs, engine as engine_mod, rows as rows_mod, schema
from .tensor_reads import TensorReads

if TYPE_CHECKING:  # pragma: no cover
    from concurrent.futures import Executor

    import reportdb.numeric.stats as stats_mod
    from .numeric.stats import TensorStats
else:  # statistics are imported when first asked for: opening a report and reading its summary need none
    stats_mod = lazy_module("reportdb.numeric.stats", globals(), "stats_mod")


class Checks(TensorReads):
    """A Report's checks and statistics: ``verify_tensor``, ``check_store``, ``tensor_stats``, ``summary``."""

    def verify_tensor(
        self, tensor_id: int, rank: int = 0, *, pool: Executor | None = None, skip: set[int] | None = None
    ) -> int:
        """Prove a tensor complete and intact; raise CorruptionError (naming the tensor and the table) otherwise,
        return the bytes checked.

        Checks that all its ``n_shards`` shard rows are there, each shard's blob is, with its chunks all present and of
        consistent sizes (shape x itemsize = blob nbytes = the chunks' sizes), the blob's address is that of its
        chunks, and every chunk re-read (decompressed) matches its content address (BLAKE3 or sha256, the file's
        kind: a deeper check than the crc32 every read makes). ``pool`` hashes in its threads; blob ids in ``skip`` are not checked again, and the ones
        checked here are added to it."""
        if not self._complete:
            self._fetch(tensor_id, rank, skip=skip)
        info, blob_ids = self._info(tensor_id, rank)
        what = f"tensor {tensor_id} (rank {rank})"
        checked = 0
        address = self._address_kind()
        with self._reading(what) as conn:
            for shard, blob_id in zip(info.shards, blob_ids):
                if skip is None or blob_id not in skip:
                    checked += blobs.verify_blob(conn, blob_id, shard.nbytes, what=what, pool=pool, has_codec=self._has_codec,
                                                 has_block_crc=self._has_block_crc, address=address)
                    if skip is not None:
                        skip.add(blob_id)
        return checked

    def check_store(self) -> list[str]:
        """Find dangling references in the tensor tables without reading any tensor bytes (a few aggregate queries):
        tensors missing shard rows, shards whose blob is missing, blobs whose chunk list is incomplete or points at
        missing chunks, chunk sizes that do not add up. Returns one sentence per problem found (empty: none).

        Unreferenced blobs and chunks are not problems: a replaced tensor leaves its blob behind by design."""
        source = self._source  # a source that keeps chunks elsewhere checks their sizes there
        with self._reading("the tensor tables") as conn:
            problems = rows_mod.store_problems(conn, self.path, self._tables, has_codec=self._has_codec,
                                               chunk_sizes=source.complete)
        return problems + source.store_problems()

    def tensor_stats(self, tensor_id: int, rank: int = 0) -> TensorStats:
        """Statistics stored when the tensor was written, one set per shard beside its mesh coordinate (a tensor of
        one shard reads them directly: ``tensor_stats(7).mean``); reads no tensor bytes."""
        info, blob_ids = self._info(tensor_id, rank)
        if "rdb_stats" not in self._tables:
            raise SchemaError(f"{self.path} has no statistics table; run `reportdb upgrade {self.path}`")
        what = f"tensor {tensor_id} (rank {rank})"
        stored = rows_mod.Stored(self.path, what)
        per_shard = []
        with self._reading(what) as conn:
            for shard, blob_id in zip(info.shards, blob_ids):
                found = rows_mod.read_stats(conn, stored, blob_id, shard.dtype)
                if found is None:
                    raise TensorNotFoundError(f"tensor {tensor_id} (rank {rank}) was stored without statistics")
                per_shard.append(stats_mod.ShardStats.from_dict(found))
        return stats_mod.TensorStats(tensor_id, rank, tuple(per_shard), tuple(tuple(s.mesh_coordinate) for s in info.shards))

    def summary(self) -> ReportSummary:
        """Schema version, row counts of the report tables, tensors and bytes stored (compressed chunks at their
        stored size; SQLite's ``length()`` of a blob reads no overflow page) against logical bytes."""
        with self._reading("summary") as conn:
            tables = sorted(self._table_names())
            counts = {t: conn.execute(f"SELECT COUNT(*) FROM {engine_mod.quoted(t)}").fetchone()[0] for t in tables}
            result = ReportSummary(
                path=str(self.path), schema_revision=self.schema_revision, schema_head=schema.head_revision(),
                report_schema_version=None, tables=counts, tensors=0, shards=0, logical_bytes=0, stored_bytes=0,
            )
            if "report_metadata" in tables:
                found = conn.execute("SELECT value FROM report_metadata WHERE key='schema_version'").fetchone()
                result = replace(result, report_schema_version=found[0] if found else None)
            if "rdb_tensor" in tables:
                logical = conn.execute("SELECT COALESCE(SUM(nbytes), 0) FROM rdb_tensor").fetchone()[0]
                stored = 0
                if "rdb_chunk" in tables:
                    stored = conn.execute("SELECT COALESCE(SUM(length(data)), 0) FROM rdb_chunk").fetchone()[0]
                try:
                    kind = blobs.address_kind(conn)
                except CorruptionError:  # a kind reportdb does not know: named as such, never as stored
                    kind = "unknown"
                result = replace(
                    result, tensors=counts["rdb_tensor"], shards=counts.get("rdb_shard", 0), logical_bytes=logical,
                    stored_bytes=stored, content_address=kind,
                )
        return self._source.summary(result)

    def _repr_html_(self) -> str:
        """The summary and the first tensors as small HTML tables for Jupyter, every cell escaped (a report's table
        names and metadata are someone else's); a tensor whose rows are damaged shows its error in its row."""
        summary = self.summary()
        rows: list[tuple[Any, ...]] = []
        keys = self.tensor_keys()
        for tensor_id, rank in keys[:MAX_HTML_ROWS]:
            try:
                i = self.tensor_info(tensor_id, rank)
                rows.append((tensor_id, rank, i.shape, i.dtype, i.spec.ttnn_dtype, i.spec.layout, len(i.shards), i.nbytes))
            except ReportDBError as exc:
                rows.append((tensor_id, rank, str(exc), None, None, None, None, None))
        header = ("id", "rank", "shape", "dtype", "ttnn dtype", "layout", "shards", "bytes")
        more = len(keys) - len(rows)
        caption = f"{len(keys)} tensors" + (f" (the first {len(rows)} shown)" if more else "")
        return summary._repr_html_() + html_table(header, rows, caption=caption)
