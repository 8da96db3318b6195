"""Storing decoded tensor files in the partial database: group commits, each file's metadata merged from its
``tensors`` row, golden links, and a log row per file (or its error, which ``strict`` makes fatal)."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path
from typing import Any

from .. import report as report_mod
from ..formats.memconfig import parse_dtype, parse_layout, parse_memory_config, parse_shape
from ..spec import TensorSpec
from .common import MigrationLog, Progress, UnreadableTensorFileError, kept, rel_path, user_tables
from .decode import DecodedFile, decoded_files
from .inventory import TensorFile, golden_links


def import_tensors(
    report: report_mod.Report,
    conn: sqlite3.Connection,
    log: MigrationLog,
    src_dir: Path,
    files: list[TensorFile],
    jobs: int,
    strict: bool,
    stats: bool,
    problems: dict[str, list[dict[str, Any]]],
    progress: Progress | None,
) -> dict[str, int]:
    """Store every file not stored yet; log each tensor, and each unreadable file (which ``strict`` makes fatal).
    ``conn`` is the report's connection (``report.connection()``), for the source rows it reads."""
    todo = [f for f in files if not report.has_tensor(f.tensor_id, f.rank)]
    total_bytes = sum(f.nbytes for f in files)
    done_bytes = total_bytes - sum(f.nbytes for f in todo)
    done_files = len(files) - len(todo)
    counts = {"files": len(files), "already_stored": done_files, "imported": 0, "unreadable": 0, "golden_linked": 0}
    goldens = golden_links(conn)
    rows = _TensorRows(conn)
    if progress is not None:
        progress(done_files, len(files), done_bytes, total_bytes)
    with _Commits(report) as commits:
        for f, decoded in decoded_files(todo, jobs, stats, report.chunk_size, report._address_kind(),
                                        Path(f"{report.path}-spool")):
            rel = rel_path(src_dir, f.path)
            commits.open()
            if decoded.loaded is None:
                error = decoded.error
                if strict:
                    commits.commit()  # the files imported so far stay imported
                    raise UnreadableTensorFileError(
                        f"{f.path}: {error}; stopped there (strict; without it the file would be logged and skipped). "
                        + kept(Path(report.path), f"fix or remove the tensor file {f.path.name}")
                    )
                problems["unreadable_files"].append({"path": rel, "tensor_id": f.tensor_id, "rank": f.rank, "error": error})
                log.add("unreadable_file", tensor_id=f.tensor_id, rank=f.rank, path=rel, message=error)
                counts["unreadable"] += 1
            else:
                links = goldens.get((f.tensor_id, f.rank), [])
                _store(report, log, f, rel, decoded, rows.get(f), links, stats)
                counts["imported"] += 1
                counts["golden_linked"] += bool(links)
            done_files += 1
            done_bytes += f.nbytes
            commits.step(f.nbytes)
            if progress is not None:
                progress(done_files, len(files), done_bytes, total_bytes)
    return counts


class _Commits:
    """One transaction for many tensors, committed every ``FILES`` files, ``BYTES`` bytes or ``SECONDS`` seconds.

    A commit of a 64 KiB-page file rewrites every page it touched (indexes, table leaves) in the journal and the
    file, so one per small tensor cost more than the tensor (4 KiB tensors: ~570/s); grouped, a crash loses at
    most the last group, which the next run imports again (the committed ones it skips).
    """

    FILES = 256
    BYTES = 64 << 20
    SECONDS = 0.5

    def __init__(self, report: report_mod.Report) -> None:
        self.report = report
        self.batch: contextlib.AbstractContextManager[None] | None = None
        self.files = self.nbytes = 0
        self.since = 0.0

    def __enter__(self) -> _Commits:
        return self

    def open(self) -> None:
        """Start a group's transaction (before the writes it holds; put_tensor's own batches nest in it)."""
        if self.batch is None:
            self.batch = self.report.batch()
            self.batch.__enter__()
            self.files = self.nbytes = 0
            self.since = time.monotonic()

    def step(self, nbytes: int) -> None:
        """Count one file done (its writes are in the open transaction); commit when the group is full or old."""
        self.files += 1
        self.nbytes += nbytes
        if self.files >= self.FILES or self.nbytes >= self.BYTES or time.monotonic() - self.since >= self.SECONDS:
            self.commit()

    def commit(self) -> None:
        """Commit the open group now (before a strict failure, say); a no-op when none is open."""
        self.__exit__(None, None, None)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        batch, self.batch = self.batch, None
        if batch is not None:
            batch.__exit__(exc_type, exc, tb)  # COMMIT, or ROLLBACK of the unfinished group on an error


class _TensorRows:
    """The source ``tensors`` rows by (tensor id, rank), looked up with one prepared query shape."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.present = "tensors" in user_tables(conn)
        self.ranked = self.present and "rank" in [r[1] for r in conn.execute("PRAGMA table_info(tensors)")]

    def get(self, f: TensorFile) -> dict[str, Any] | None:
        """The file's ``tensors`` row as ``{column: value}``, or None."""
        if not self.present:
            return None
        if self.ranked:
            cursor = self.conn.execute("SELECT * FROM tensors WHERE tensor_id=? AND rank=? LIMIT 1", (f.tensor_id, f.rank))
        else:
            cursor = self.conn.execute("SELECT * FROM tensors WHERE tensor_id=? LIMIT 1", (f.tensor_id,))
        row = cursor.fetchone()
        return None if row is None else dict(zip([d[0] for d in cursor.description], row))


def _store(
    report: report_mod.Report,
    log: MigrationLog,
    f: TensorFile,
    rel: str,
    decoded: DecodedFile,
    row: dict[str, Any] | None,
    golden_of: list[dict[str, Any]],
    stats: bool,
) -> None:
    """Store one decoded file (digests and statistics already computed) with its merged metadata, and log it,
    in one transaction."""
    loaded = decoded.loaded
    assert loaded is not None
    metadata = merge_metadata(loaded.spec, row)
    source = dict(loaded.source, path=rel, legacy_row=row)
    if golden_of:
        source["golden_of"] = golden_of
    with report.batch():
        report.put_tensor(
            f.tensor_id, rank=f.rank, shards=loaded.shards, if_exists="skip", stats=stats, source=source,
            _prepared=decoded.prepared, **metadata.as_metadata(),
        )
        detail = {"format": loaded.source.get("format"), "nbytes": f.nbytes, "golden_of": golden_of or None}
        log.add("tensor", tensor_id=f.tensor_id, rank=f.rank, path=rel, message="imported", detail=detail)


def merge_metadata(spec: TensorSpec, row: dict[str, Any] | None) -> TensorSpec:
    """The file's spec, with gaps filled from its ``tensors`` row (ttnn dtype, layout, shapes, memory config).

    Torch rows (``torch.float32``, ``torch.strided``) describe no ttnn dtype or layout and fill nothing.
    """
    if row is None:
        return spec
    fill: dict[str, Any] = {}
    dtype_text = str(row.get("dtype") or "")
    layout_text = str(row.get("layout") or "")
    if spec.ttnn_dtype is None and dtype_text.startswith("DataType"):
        fill["ttnn_dtype"] = parse_dtype(dtype_text)
    if spec.layout is None and layout_text.startswith("Layout"):
        fill["layout"] = parse_layout(layout_text)
    shape = parse_shape(row.get("shape")) if isinstance(row.get("shape"), str) else None
    if shape is not None:
        if spec.logical_shape is None:
            fill["logical_shape"] = tuple(shape["shape"])
        if spec.padded_shape is None and shape["padded_shape"] is not None:
            fill["padded_shape"] = tuple(shape["padded_shape"])
    if spec.memory_config is None and isinstance(row.get("memory_config"), str):
        fill["memory_config"] = parse_memory_config(row["memory_config"])
    return TensorSpec.from_json(dict(spec.as_metadata(), **{k: v for k, v in fill.items() if v is not None}))
