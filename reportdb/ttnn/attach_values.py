"""Tensor values recorded by ``capture()`` attached to the report ttnn 0.81+ wrote itself, as one report.

Current ttnn writes its own ``db.sqlite`` (operations, tensors, graph; no values) while ``capture(writer)`` writes the
values into a reportdb file of its own, because two writers of one SQLite file would fight over its lock and
operation ids during the run. ``attach`` joins them afterwards: the values of the tensors whose ids the report knows
are stored into the report's database, so ttnn-visualizer opens one folder that holds everything. The report file is
changed atomically: the work happens on a copy beside it that replaces it only once every attached tensor has been
read back and checked, so an interrupted or failed attach leaves the report exactly as it was.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from ..errors import InvalidArgumentError, NotAReportFolderError, ReportLockedError, TensorExistsError
from ..report import Report, copy_tensor, open as open_report, resolve_path


@dataclass(frozen=True)
class AttachResult:
    """What ``attach`` did: tensors stored into the report, found there already, and values the report has no row for."""

    report: str
    values: str
    attached: int
    already_attached: int
    unmatched: tuple[tuple[int, int], ...]  # (tensor_id, rank) of values whose tensor the report does not list
    bytes_attached: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``reportdb attach --json``)."""
        return {
            "report": self.report, "values": self.values, "attached": self.attached,
            "already_attached": self.already_attached, "unmatched": [list(k) for k in self.unmatched],
            "bytes_attached": self.bytes_attached,
        }  # fmt: skip


def attach(values: str | os.PathLike[str], report: str | os.PathLike[str], *, unmatched: bool = False) -> AttachResult:
    """Store the tensors of the reportdb file ``values`` into the ttnn report ``report`` (a folder or its db.sqlite).

    Tensors are matched by ``(tensor_id, rank)`` against the report's ``tensors`` table; values of tensors the report
    does not list are counted and left out, unless ``unmatched`` asks to store them too. A tensor the report already
    holds with the same values is skipped (attach can be run again); with other values it is a TensorExistsError.
    """
    target = resolve_path(report)
    if Path(values).exists() and target.exists() and os.path.samefile(resolve_path(values), target):
        raise InvalidArgumentError(f"{target} is both the values and the report: give the file capture() wrote first")
    with open_report(values) as source:  # checked as untrusted, read-only, like the report
        with open_report(target) as before:
            known = _report_tensors(before)
        keys = source.tensor_keys()
        _check_quiet(target)
        wanted = [k for k in keys if unmatched or k in known]
        work = target.with_name(f".{target.name}.reportdb-attach")
        _remove(work)  # what a killed attach left: a stale journal would otherwise be "recovered" into the fresh copy
        shutil.copyfile(target, work)
        try:
            attached = already = nbytes = 0
            with open_report(work, "a") as dest:
                for tensor_id, rank in wanted:
                    if dest.has_tensor(tensor_id, rank):
                        _check_same(source, dest, tensor_id, rank)
                        already += 1
                    else:
                        nbytes += copy_tensor(source, dest, tensor_id, rank).nbytes
                        attached += 1
                for tensor_id, rank in wanted:
                    dest.verify_tensor(tensor_id, rank)
            with open(work, "rb+") as f:
                os.fsync(f.fileno())
            shutil.copymode(target, work)
            os.replace(work, target)
        finally:
            _remove(work)
    return AttachResult(
        report=str(target), values=str(resolve_path(values)), attached=attached, already_attached=already,
        unmatched=tuple(k for k in keys if k not in known), bytes_attached=nbytes,
    )  # fmt: skip


def _remove(work: Path) -> None:
    """Delete the work copy and its SQLite side files, where they exist."""
    for name in (work.name, *(work.name + s for s in ("-journal", "-wal", "-shm"))):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(work.with_name(name))


def _report_tensors(report: Report) -> set[tuple[int, int]]:
    """The ``(tensor_id, rank)`` of every tensor the report lists (rank 0 where its table has no rank column)."""
    with report.connection() as conn:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(tensors)")}
        if "tensor_id" not in columns:
            raise NotAReportFolderError(
                f"{report.path} has no 'tensors' table with a tensor_id: it is not a ttnn report; give the folder ttnn wrote"
            )
        rank = "rank" if "rank" in columns else "0"
        rows: Iterable[tuple[Any, Any]] = conn.execute(f"SELECT tensor_id, {rank} FROM tensors WHERE tensor_id IS NOT NULL")
        return {(int(t), int(r or 0)) for t, r in rows}


def _check_quiet(target: Path) -> None:
    """Refuse a report whose WAL still holds writes: a copy of the main file alone would miss them."""
    wal = target.with_name(target.name + "-wal")
    if wal.exists() and wal.stat().st_size > 0:
        raise ReportLockedError(
            f"{target} is still being written ({wal.name} holds uncommitted pages); let the run finish, then attach"
        )


def _check_same(source: Report, dest: Report, tensor_id: int, rank: int) -> None:
    """A tensor ``dest`` holds already must hold ``source``'s values (attach run again); other values are refused."""
    shards, theirs = source.shards(tensor_id, rank), dest.shards(tensor_id, rank)
    if len(theirs) != len(shards) or any(
        tuple(a) != tuple(b) or x.dtype != y.dtype or x.shape != y.shape
        or not np.array_equal(x.reshape(-1).view(np.uint8), y.reshape(-1).view(np.uint8))
        for (a, x), (b, y) in zip(shards, theirs)
    ):
        raise TensorExistsError(
            f"tensor {tensor_id} (rank {rank}) is already in {dest.path} with other values; "
            "attach the values of the run that wrote this report"
        )
