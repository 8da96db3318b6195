"""Proving a report database complete: every stored tensor re-hashed and its store references checked, and with a
legacy folder to compare against, every legacy tensor file stored with equal values."""

from __future__ import annotations

import concurrent.futures
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Collection

import numpy as np

from .. import report as report_mod
from ..dtypes import canonical, dtype_name
from ..results import Result
from .common import DB_NAME, VerificationError, rel_path, user_tables
from .inventory import legacy_folder_of, pending_legacy_files, report_folder, scan_tensor_files


@dataclass(frozen=True)
class VerifyProblem(Result):
    """One thing :func:`verify` found wrong: the tensor it concerns (``tensor_id`` and ``rank`` None for the store
    as a whole), the legacy file (``path``, relative to the folder; None unless a legacy file is not stored) and
    what is wrong (``error``)."""

    tensor_id: int | None
    rank: int | None
    path: str | None
    error: str


@dataclass(frozen=True)
class VerifyResult(Result):
    """What :func:`verify` proved of a report database (``path``): ``ok`` when nothing is wrong; the tensors and
    distinct blobs checked and the bytes re-hashed; the legacy folder compared ``against`` (None: none) and the
    tensors whose values were compared with it; every problem found."""

    path: str
    ok: bool
    tensors: int
    blobs: int
    bytes_checked: int
    against: str | None
    compared: int
    problems: tuple[VerifyProblem, ...]

    def problems_text(self, limit: int = 5) -> str:
        """The first ``limit`` problems as one line, for an error message."""
        return "; ".join(
            p.error if p.tensor_id is None else f"tensor {p.tensor_id} (rank {p.rank}): {p.error}" for p in self.problems[:limit]
        ) + ("; ..." if len(self.problems) > limit else "")


def verify(path: str | os.PathLike[str], *, against: str | os.PathLike[str] | None = None) -> VerifyResult:
    """Prove every stored tensor complete and re-hash its chunks (``Report.verify_tensor``), check the store's
    references (``Report.check_store``); with ``against`` (a legacy report folder) compare values too, and
    require every legacy tensor file there to be stored.

    Never raises for a bad tensor, so one damaged tensor does not hide the others: each is a problem of the
    result. A legacy report folder that was never migrated (tensor files beside a database that stores none) is
    not "0 tensors, ok": it raises :class:`VerificationError` pointing to ``reportdb migrate``.
    """
    return verify_report(path, against)


def verify_report(
    path: str | os.PathLike[str], against: str | os.PathLike[str] | None, excused: Collection[str] = ()
) -> VerifyResult:
    """:func:`verify`; legacy files whose relative paths are in ``excused`` (the unreadable ones a migration
    logged and kept) may be missing from the database."""
    problems: list[VerifyProblem] = []
    seen_blobs: set[int] = set()
    checked = compared = 0
    pending = pending_legacy_files(path)
    src_dir = report_folder(against) if against is not None else None
    legacy = scan_tensor_files(src_dir)[0] if src_dir is not None else []
    by_key = {(f.tensor_id, f.rank): f.path for f in legacy}
    with report_mod.open(path, "r") as report, concurrent.futures.ThreadPoolExecutor(2) as hashers:
        keys = report.tensor_keys()
        if pending and not keys and not _has_migration_log(report):
            folder = legacy_folder_of(path)
            names = ", ".join(pending[:3]) + (", ..." if len(pending) > 3 else "")
            raise VerificationError(
                f"{folder}: {len(pending)} legacy tensor files ({names})"
                f" and no tensor stored in {DB_NAME}: this report folder was never migrated; run "
                f"`reportdb migrate {folder} -o NEW_FOLDER` (or without -o to convert it in place), then verify that"
            )
        for tensor_id, rank in keys:
            try:
                checked += report.verify_tensor(tensor_id, rank, pool=hashers, skip=seen_blobs)
                if (tensor_id, rank) in by_key:
                    _compare_with_file(report, tensor_id, rank, by_key[tensor_id, rank])
                    compared += 1
            except Exception as exc:  # every failure is reported, none stops the rest
                problems.append(VerifyProblem(tensor_id, rank, None, f"{type(exc).__name__}: {exc}"))
        problems += [VerifyProblem(None, None, None, text) for text in report.check_store()]
        stored = set(keys)
    if src_dir is not None:
        for f in legacy:
            rel = rel_path(src_dir, f.path)
            if (f.tensor_id, f.rank) not in stored and rel not in excused:
                problems.append(VerifyProblem(
                    f.tensor_id, f.rank, rel,
                    f"{rel} is not stored in the database (unreadable or not migrated: see rdb_migration_log)",
                ))
    return VerifyResult(
        path=str(report_mod.resolve_path(path)), ok=not problems, tensors=len(keys), blobs=len(seen_blobs),
        bytes_checked=checked, against=None if against is None else str(against), compared=compared,
        problems=tuple(problems),
    )


def _has_migration_log(report: report_mod.Report) -> bool:
    """Whether a migration made this database (one whose every tensor file was unreadable stores none)."""
    with report.connection() as conn:
        return "rdb_migration_log" in user_tables(conn)


def _compare_with_file(report: report_mod.Report, tensor_id: int, rank: int, path: Path) -> None:
    """Raise unless the stored shards equal the legacy file's shards, byte for byte in canonical form."""
    from ..formats import load_tensor_file

    stored = report.shards(tensor_id, rank)
    legacy = load_tensor_file(path).shards
    if len(stored) != len(legacy):
        raise VerificationError(f"{len(stored)} shards stored, {len(legacy)} in {path}")
    for (coord_a, a), (coord_b, b) in zip(stored, legacy):
        b = canonical(b)
        if tuple(coord_a) != tuple(coord_b) or a.shape != b.shape or dtype_name(a.dtype) != dtype_name(b.dtype):
            raise VerificationError(
                f"shard at {list(coord_a)} is {dtype_name(a.dtype)}{list(a.shape)}, "
                f"{path} has {dtype_name(b.dtype)}{list(b.shape)} at {list(coord_b)}"
            )
        if not np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)):
            raise VerificationError(f"shard at {list(coord_a)} differs from {path}")

