"""Tensor values recorded by ``capture()`` attached to the report ttnn 0.81+ wrote itself, as one report.

Current ttnn writes its own ``db.sqlite`` (operations, tensors, graph; no values) while ``capture(writer)`` writes the
values into a reportdb file of its own, because two writers of one SQLite file would fight over its lock and
operation ids during the run. ``attach`` joins them afterwards: the values of the tensors whose ids the report knows
are stored into the report's database, so ttnn-visualizer opens one folder that holds everything.

The report file is changed atomically and in place. The work happens on a copy beside it (taken under SQLite's shared
lock, so no commit is half in it), checked tensor by tensor; the copy is then written back into the report file
itself with SQLite's backup, one transaction under the report's exclusive lock, and only if the report is still as it
was when copied (its header, size and modification time): a process that commits to it meanwhile (the ttnn run, still
going) makes attach try again, then refuse, and never loses a row. The file is never replaced by another one: a process
that holds it open (ttnn's writer between two commits) goes on writing the same file, which now holds the values too.
An interrupted or failed attach leaves the report as it was (a kill during the write-back leaves SQLite's journal,
which the next writable open rolls back).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from ..errors import InvalidArgumentError, NotAReportFolderError, ReportLockedError, TensorExistsError
from ..legacy.sidecars import Sidecar, SidecarImport, find_sidecars, import_sidecars, read_sidecars
from ..report import Report, copy_tensor, open as open_report, resolve_path
from ..store import engine as engine_mod, journal

#: Tries of the copy-and-write-back before a report that keeps changing is refused.
ATTEMPTS = 3
#: Bytes read per call when the report is copied aside.
COPY_BLOCK = 1 << 20
#: Bytes copied back per backup step; the first step takes the report's lock before the check (see _write_back).
STEP_BYTES = 16 << 20
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6


@dataclass(frozen=True)
class AttachResult:
    """What ``attach`` did: tensors stored into the report, found there already, and values the report has no row for."""

    report: str
    values: str
    attached: int
    already_attached: int
    unmatched: tuple[tuple[int, int], ...]  # (tensor_id, rank) of values whose tensor the report does not list
    bytes_attached: int
    sidecars: Mapping[str, Any] | None = None  # ttnn's JSON sidecars read into the tables (SidecarImport.to_dict())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``reportdb attach --json``)."""
        return {
            "report": self.report, "values": self.values, "attached": self.attached,
            "already_attached": self.already_attached, "unmatched": [list(k) for k in self.unmatched],
            "bytes_attached": self.bytes_attached, "sidecars": self.sidecars,
        }


def attach(
    values: str | os.PathLike[str], report: str | os.PathLike[str], *, unmatched: bool = False,
    sidecars: Iterable[str | os.PathLike[str]] | None = None,
) -> AttachResult:
    """Store the tensors of the reportdb file ``values`` into the ttnn report ``report`` (a folder or its db.sqlite).

    Tensors are matched by ``(tensor_id, rank)`` against the report's ``tensors`` table; values of tensors the report
    does not list are counted and left out, unless ``unmatched`` asks to store them too. A tensor the report already
    holds with the same values is skipped (attach can be run again); with other values it is a TensorExistsError.

    ttnn 0.81's comparison-records and tensor-lifetime sidecars (``sidecars``, by default those in the report's
    folder) are read into the report's tables in the same write (``reportdb.legacy.sidecars``); a malformed one, or
    one that contradicts the tables, is a SidecarError and the report is left as it was.
    """
    target = resolve_path(report)
    cars = read_sidecars(find_sidecars(target.parent) if sidecars is None else sidecars)
    if Path(values).exists() and target.exists() and os.path.samefile(resolve_path(values), target):
        raise InvalidArgumentError(f"{target} is both the values and the report: give the file capture() wrote first")
    with open_report(values) as source:  # checked as untrusted, read-only, like the report
        with open_report(target) as before:
            _report_tensors(before)  # a file that is no ttnn report is refused before anything is copied
        keys = source.tensor_keys()
        for _ in range(ATTEMPTS):
            _check_quiet(target)
            done = _attach_once(source, keys, target, unmatched, cars)
            if done is not None:
                known, (attached, already, nbytes), rows = done
                return AttachResult(
                    report=str(target), values=str(resolve_path(values)), attached=attached, already_attached=already,
                    unmatched=tuple(k for k in keys if k not in known), bytes_attached=nbytes,
                    sidecars=rows.to_dict() if cars else None,
                )
    raise ReportLockedError(
        f"{target} was written by another process each of the {ATTEMPTS} times attach copied it (is the run that "
        "writes it still going?); nothing was changed: let it finish, then attach again"
    )


def _attach_once(
    source: Report, keys: list[tuple[int, int]], target: Path, unmatched: bool, cars: list[Sidecar]
) -> tuple[set[tuple[int, int]], tuple[int, int, int], SidecarImport] | None:
    """One try: copy the report, store the values and the sidecars' rows into the copy and check them, write the copy
    back into the report (see the module's docstring). Returns the report's tensors, (attached, already attached,
    bytes) and the sidecar rows, or None when another process changed the report meanwhile (it was left as that
    process made it)."""
    work = target.with_name(f".{target.name}.reportdb-attach")
    _remove(work)  # what a killed attach left: a stale journal would otherwise be "recovered" into the fresh copy
    fd = os.open(target, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        state = _copy_quietly(target, fd, work)
        attached = already = nbytes = 0
        with open_report(work, "a") as dest:
            with dest.batch(), dest.connection() as conn:  # first: the golden tensors' rows match values too
                rows = import_sidecars(conn, cars)
            known = _report_tensors(dest)
            wanted = [k for k in keys if unmatched or k in known]
            for tensor_id, rank in wanted:
                if dest.has_tensor(tensor_id, rank):
                    _check_same(source, dest, tensor_id, rank)
                    already += 1
                else:
                    nbytes += copy_tensor(source, dest, tensor_id, rank).nbytes
                    attached += 1
            for tensor_id, rank in wanted:
                dest.verify_tensor(tensor_id, rank)
        if not _write_back(work, target, fd, state):
            return None
    finally:
        _remove(work)
        os.close(fd)  # only now: this process holds no SQLite lock on the report any more (see _file_state)
    return known, (attached, already, nbytes), rows


def _file_state(path: Path, fd: int) -> tuple[int, ...]:
    """What changes whenever a process commits to the file: its identity, size, modification time and SQLite header
    (whose change counter every rollback-journal commit increments), and the size of its ``-wal`` (-1: none).

    The header is read through ``fd``, a descriptor of the report kept open for the whole try: closing any descriptor
    of a file drops every POSIX lock this process holds on it, SQLite's included, so opening and closing the report
    here, under the backup's exclusive lock, let a live writer commit in the middle of the write-back (its journal
    was then deleted under it: SQLITE_IOERR_DELETE_NOENT)."""
    st = path.stat()
    header = os.pread(fd, 100, 0)
    wal = path.with_name(path.name + "-wal")
    wal_size = wal.stat().st_size if wal.exists() else -1
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, wal_size, *header)


def _copy_quietly(target: Path, fd: int, work: Path) -> tuple[int, ...]:
    """Copy the report to ``work`` under SQLite's shared lock (no commit can be half in the copy), reading it through
    ``fd`` (see :func:`_file_state`); return the report's state as copied."""
    guard = engine_mod.connect(target, readonly=True)
    try:
        guard.execute("BEGIN")
        guard.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # takes the shared lock until the rollback
        state = _file_state(target, fd)
        with open(work, "wb") as out:
            offset = 0
            while block := os.pread(fd, COPY_BLOCK, offset):
                out.write(block)
                offset += len(block)
        guard.execute("ROLLBACK")
    finally:
        guard.close()
    return state


def _write_back(work: Path, target: Path, fd: int, state: tuple[int, ...]) -> bool:
    """Write ``work`` into the report file in place: one SQLite backup, a single transaction on the report under its
    exclusive lock, taken by the first step; before any page of it can reach the file, the report is checked to be
    as it was copied (``state``), else the backup is rolled back and False returned. Other connections to the report
    (a writer that keeps it open) see the new content at their next transaction."""
    with open(work, "rb+") as f:
        os.fsync(f.fileno())
    src = engine_mod.connect(work, readonly=True)
    dst = engine_mod.connect(target, readonly=False)
    try:
        if journal.journal_mode(dst) == "wal":  # a finished report is in rollback-journal mode, as reportdb leaves it
            with contextlib.suppress(sqlite3.OperationalError), journal.not_waiting(dst):
                dst.execute("PRAGMA journal_mode=DELETE")  # refused while another process has it open in WAL mode
            return False  # the file changed (or is in use): copy it again
        page_size, pages = (int(src.execute(f"PRAGMA {p}").fetchone()[0]) for p in ("page_size", "page_count"))
        step = max(1, min(STEP_BYTES // page_size, pages - 1))  # never all in the first step: the check comes after it
        checked: list[bool] = []

        def check(status: int, remaining: int, total: int) -> None:
            if checked:
                return
            if status in (_SQLITE_BUSY, _SQLITE_LOCKED):
                raise ReportLockedError(
                    f"{target}: another process held its lock for longer than {engine_mod.BUSY_TIMEOUT_MS // 1000} s; "
                    "nothing was changed: attach again once it is done"
                )
            checked.append(True)  # the first step holds the exclusive lock; its pages are in SQLite's cache, not the file
            if _file_state(target, fd) != state:
                raise _Changed

        try:
            src.backup(dst, pages=step, progress=check)
        except _Changed:
            return False
        return True
    except sqlite3.Error as exc:
        mapped = engine_mod.translate(exc, target, what="writing the attached values into the report")
        if mapped is None:
            raise
        raise mapped from exc
    finally:
        src.close()
        dst.close()


class _Changed(Exception):
    """The report changed between its copy and the write-back (internal: the try is repeated)."""


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
    """Refuse a report whose WAL still holds writes (a run writes it in WAL mode): a copy of the main file alone
    would miss them."""
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
