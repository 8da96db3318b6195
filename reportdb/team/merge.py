"""``merge``: the per-rank reports of one multi-host run into one report with ``rank`` columns, as ttnn 0.81's
multi-host capture lays them out (ttnn-visualizer filters by rank).

Each input is one rank: ``ranks`` given, else the rank the report declares (``report_metadata``'s ``rank``, or the
one rank all its stored tensors carry), else its position. Every row of every report table gets its input's rank
(a table without a ``rank`` column gets one; a column the output lacks is added, so nothing is dropped); tensors are
stored again under that rank through the public write path, so identical content (weights replicated on every host)
is stored once. What cannot hold one value per rank is merged by its key and reported when the inputs disagree:
``source_files`` by path (stack traces' ``source_file_id`` follow the merged ids) and ``report_metadata`` by key.
The output is built in a temporary folder beside ``out`` and renamed into place only when complete.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..errors import CorruptionError, InvalidArgumentError, OutputPathError
from ..results import Result
from . import tables as tables_mod

#: reportdb's own tables that merge copies as rows of their rank (report facts, not the tensor store).
_OWN_COPIED = {"rdb_comparison", "rdb_migration_log"}


def _skipped(name: str) -> bool:
    """Whether table ``name`` is not copied as rows: reportdb's store and version tables (the tensors go through the
    write path, the rest belongs to the new file) and SQLite's own. SQLite's names are case-insensitive for ASCII
    letters, so the test is too: a rank's table named ``RDB_CHUNK`` is the chunk table, and copied as rows it would
    put that rank's bytes under content addresses the other ranks' tensors are stored by."""
    folded = name.translate(_ASCII_LOWER)
    return folded.startswith(("sqlite_", "reportdb_")) or folded.startswith("rdb_") and folded not in _OWN_COPIED


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


@dataclass
class MergeResult(Result):
    """What ``merge`` made: the output database, the rank of each input, rows per table, tensors stored, logical
    and stored bytes (deduplication: stored < logical when ranks share content), and the conflicts found."""

    output: str
    ranks: dict[str, int]
    rows: dict[str, int] = field(default_factory=dict)
    tensors: int = 0
    logical_bytes: int = 0
    stored_bytes: int = 0
    conflicts: list[str] = field(default_factory=list)


def _declared_rank(conn: sqlite3.Connection, names: set[str]) -> int | None:
    if "report_metadata" in names:
        try:
            row = conn.execute("SELECT value FROM report_metadata WHERE key = 'rank'").fetchone()
        except sqlite3.OperationalError:
            row = None
        if row is not None and str(row[0]).strip().lstrip("-").isdigit():
            return int(str(row[0]).strip())
    if "rdb_tensor" in names:
        found = conn.execute("SELECT DISTINCT rank FROM rdb_tensor LIMIT 2").fetchall()
        if len(found) == 1 and type(found[0][0]) is int:
            return int(found[0][0])
    return None


def _columns(conn: sqlite3.Connection, table: str) -> list[tuple[str, str]]:
    return [(str(r[1]), str(r[2] or "")) for r in conn.execute(f"PRAGMA table_info({tables_mod.quoted(table)})")]


def merge(reports: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], *,
          ranks: Sequence[int] | None = None) -> MergeResult:
    """Merge the report databases (or folders) ``reports``, one per rank, into the new report folder ``out``."""
    from ..report import Report, copy_tensor, resolve_path

    paths = [resolve_path(r) for r in reports]
    if len(paths) < 2:
        raise InvalidArgumentError("merge takes two or more per-rank reports")
    if ranks is not None and (len(ranks) != len(paths) or not all(type(r) is int and r >= 0 for r in ranks)):
        raise InvalidArgumentError(f"ranks must give one rank (0 or more) per report, not {ranks!r}")
    target = Path(out)
    if target.exists():
        raise OutputPathError(f"{target}: already exists; merge into a new folder (nothing was changed)")
    if not target.parent.is_dir():
        raise OutputPathError(f"{target.parent}: no such folder")
    inputs = [Report(p, "r") for p in paths]
    building = target.with_name(f".{target.name}.merge-{os.getpid()}")
    try:
        chosen: list[int] = []
        for i, report in enumerate(inputs):
            with report.connection() as conn:
                names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                declared = _declared_rank(conn, names)
            chosen.append(ranks[i] if ranks is not None else declared if declared is not None else i)
        if len(set(chosen)) != len(chosen):
            raise InvalidArgumentError(
                f"the reports claim ranks {chosen}: two of them are the same rank; give ranks= (--rank) one per report"
            )
        building.mkdir()
        result = MergeResult(str(target / "db.sqlite"), {str(p): r for p, r in zip(paths, chosen)})
        with Report(building, "a") as merged:
            with merged.batch(), merged.connection() as dst:
                _merge_tables(dst, inputs, chosen, result)
            for report, rank in zip(inputs, chosen):
                proven: set[int] = set()
                for tensor_id, stored_rank in report.tensor_keys():
                    _prove(report, tensor_id, stored_rank, proven)
                    copy_tensor(report, merged, tensor_id, stored_rank, to_rank=rank)
                    result.tensors += 1
            summary = merged.summary()
            result.logical_bytes, result.stored_bytes = summary.logical_bytes, summary.stored_bytes
        os.rename(building, target)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    finally:
        for report in inputs:
            report.close()
    return result


def _prove(report: Any, tensor_id: int, rank: int, proven: set[int]) -> None:
    """Re-hash a tensor of a rank's report before it is copied (``Report.verify_tensor``: every chunk against its
    content address and crc32): a rank report is someone else's file, and one whose chunks are not what their
    addresses say is refused, naming it, rather than merged (blob ids in ``proven`` were checked already)."""
    try:
        report.verify_tensor(tensor_id, rank, skip=proven)
    except CorruptionError as exc:
        raise CorruptionError(
            f"{report.path}: this rank's report is damaged or forged, merge refused (nothing was written): {exc}"
        ) from None


def _merge_tables(dst: sqlite3.Connection, inputs: Sequence[Any], ranks: Sequence[int], result: MergeResult) -> None:
    """Every report table of every input into ``dst`` with its input's rank (see the module's docstring)."""
    source_ids: dict[str, int] = {}  # path -> merged source_files.id
    source_text: dict[str, Any] = {}
    metadata: dict[str, tuple[Any, int]] = {}
    for report, rank in zip(inputs, ranks):
        with report.connection() as src:
            layout = tables_mod.read_layout(src, report.path)
            remap: dict[int, int] = {}
            for table in layout.tables:
                if table.kind != "table" or _skipped(table.name):
                    continue
                name = table.name
                existing = {c for c, _ in _columns(dst, name)}
                if not existing:
                    tables_mod.create_table(dst, table, str(report.path))
                    existing = {c for c, _ in _columns(dst, name)}
                for column, declared in _columns(src, name):
                    if column not in existing:
                        dst.execute(f"ALTER TABLE {tables_mod.quoted(name)} ADD COLUMN {tables_mod.quoted(column)}"
                                    f" {declared if declared.replace(' ', '').isalnum() else ''}")
                        existing.add(column)
                if "rank" not in existing:
                    dst.execute(f"ALTER TABLE {tables_mod.quoted(name)} ADD COLUMN rank INTEGER DEFAULT 0")
                cols = [c for c in table.columns if c != "rank"]
                rows = src.execute(f"SELECT {', '.join(tables_mod.quoted(c) for c in cols)} FROM {tables_mod.quoted(name)}"
                                   + (" ORDER BY rowid" if table.has_rowid else "")).fetchall()
                if name == "source_files":
                    _merge_sources(dst, cols, rows, remap, source_ids, source_text, rank, result)
                    continue
                if name == "report_metadata" and {"key", "value"} <= set(cols):
                    _merge_metadata(dst, cols, rows, metadata, rank, result)
                    continue
                if "id" in cols and name.translate(_ASCII_LOWER) in _OWN_COPIED:  # their row ids: the new file's
                    keep = [i for i, c in enumerate(cols) if c != "id"]
                    cols, rows = [cols[i] for i in keep], [tuple(r[i] for i in keep) for r in rows]
                if name == "stack_traces" and "source_file_id" in cols:
                    at = cols.index("source_file_id")
                    rows = [tuple(remap.get(v, v) if i == at else v for i, v in enumerate(r)) for r in rows]
                names = [tables_mod.quoted(c) for c in cols] + ["rank"]
                dst.executemany(f"INSERT INTO {tables_mod.quoted(name)} ({', '.join(names)})"
                                f" VALUES ({', '.join('?' * len(names))})", [(*r, rank) for r in rows])
                result.rows[name] = result.rows.get(name, 0) + len(rows)


def _merge_sources(dst: sqlite3.Connection, cols: list[str], rows: list[Any], remap: dict[int, int],
                   ids: dict[str, int], texts: dict[str, Any], rank: int, result: MergeResult) -> None:
    """source_files merged by path; a path whose contents differ between ranks keeps the first and is reported."""
    for row in rows:
        values = dict(zip(cols, row))
        path, old_id = values.get("path"), values.get("id")
        if not isinstance(path, str):
            continue
        if path in ids:
            if values.get("contents") != texts[path]:
                result.conflicts.append(f"source_files: {path!r} differs on rank {rank}; the first rank's contents kept")
        else:
            keep = [c for c in cols if c != "id"]
            cursor = dst.execute(f"INSERT INTO source_files ({', '.join(tables_mod.quoted(c) for c in keep)})"
                                 f" VALUES ({', '.join('?' * len(keep))})", [values[c] for c in keep])
            ids[path], texts[path] = int(cursor.lastrowid or 0), values.get("contents")
            result.rows["source_files"] = result.rows.get("source_files", 0) + 1
        if type(old_id) is int:
            remap[old_id] = ids[path]


def _merge_metadata(dst: sqlite3.Connection, cols: list[str], rows: list[Any], seen: dict[Any, tuple[Any, int]],
                    rank: int, result: MergeResult) -> None:
    """report_metadata merged by key; a key whose value differs between ranks keeps the first and is reported."""
    for row in rows:
        values = dict(zip(cols, row))
        key = values.get("key")
        if key in seen:
            if seen[key][0] != values.get("value"):
                result.conflicts.append(f"report_metadata: {key!r} is {values.get('value')!r} on rank {rank}, "
                                        f"{seen[key][0]!r} on rank {seen[key][1]}; the first kept")
            continue
        seen[key] = (values.get("value"), rank)
        names = [tables_mod.quoted(c) for c in cols] + ["rank"]
        dst.execute(f"INSERT INTO report_metadata ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                    (*row, rank))
        result.rows["report_metadata"] = result.rows.get("report_metadata", 0) + 1
