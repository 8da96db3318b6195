"""What :func:`reportdb.migrate` returns: a :class:`MigrationSummary` of what each step counted, also logged in
the new database's ``rdb_migration_log`` and read back from there when a folder migrated in place is migrated
again (:meth:`MigrationSummary.from_json`: that row is in a report from someone else, so every value is checked).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping, TypeVar

from ..errors import CorruptionError
from ..results import Result
from .verification import VerifyProblem, VerifyResult

T = TypeVar("T")

#: Longest summary text read back from a migration log (a real one is a few KiB, a large report's some MiB).
MAX_SUMMARY_CHARS = 64 << 20


@dataclass(frozen=True)
class TensorCounts(Result):
    """The legacy tensor files of a migration: found, stored by an earlier run, imported now, unreadable, linked to
    the golden records that name them, carried over with the tables (a source that was a reportdb database); the
    tensors the new database stores, in all and by file format."""

    files: int
    already_stored: int
    imported: int
    unreadable: int
    golden_linked: int
    carried_over: int
    stored: int
    by_format: Mapping[str, int]


@dataclass(frozen=True)
class ByteCounts(Result):
    """Sizes before (database and tensor files) and after (the new database; None until it is in place)."""

    before: int
    before_db: int
    before_tensors: int
    after: int | None


@dataclass(frozen=True)
class Skipped(Result):
    """Something a migration left out on purpose: a link or special file (never followed), or a schema object
    (a trigger, a view) not copied; ``name`` is its path in the folder or its name in the schema."""

    kind: str
    name: str
    reason: str


@dataclass(frozen=True)
class MigrationSummary(Result):
    """What a migration did: source and destination folders, the run, the tables and rows copied, the tensor
    counts, the problems found in the folder (``orphan_files``, ``missing_files``, ``unreadable_files``,
    ``golden_without_file``: lists of ``{"tensor_id", "rank", "path", "error"}`` entries, as each applies) and how
    many count against it, the verification of the new database (and against the legacy files, before they were
    removed), the sizes, what was skipped and which triggers were copied. ``already_migrated``: a rerun that found
    the work done and returns its logged summary. ``sidecars``: the comparison-records and tensor-lifetime sidecars
    read into the report's tables, with the rows added and found present per table."""

    source: str
    destination: str
    in_place: bool
    run_id: str
    resumed: bool
    tables_copied: int
    rows_copied: int
    tables: Mapping[str, int]
    tensors: TensorCounts
    problems: Mapping[str, tuple[Mapping[str, Any], ...]]
    problem_count: int
    verified: VerifyResult
    bytes: ByteCounts
    legacy_files_removed: int = 0
    skipped: tuple[Skipped, ...] = ()
    triggers_copied: tuple[str, ...] = ()
    verified_against_legacy: VerifyResult | None = None
    already_migrated: bool = False
    seconds: float | None = None
    sidecars: Mapping[str, Any] | None = None  # ttnn's JSON sidecars read into the tables (SidecarImport.to_dict())

    def _html_fields(self) -> list[tuple[str, Any]]:
        """The scalar fields, then the headline counts of the nested ones."""
        t, v = self.tensors, self.verified
        return [
            (k, val) for k, val in super()._html_fields() if k not in ("tensors", "verified", "bytes", "problems")
        ] + [
            ("tensors stored", t.stored), ("tensors imported", t.imported), ("unreadable files", t.unreadable),
            ("verified", f"{v.ok}: {v.tensors} tensors, {v.bytes_checked} bytes re-hashed"),
            ("bytes before", self.bytes.before), ("bytes after", self.bytes.after),
        ]

    @classmethod
    def from_json(cls, text: Any, where: str) -> MigrationSummary:
        """The summary a migration logged (``where`` names the log row), every value checked: a malformed one is a
        CorruptionError. Summaries logged by older reportdb versions lack some fields; they take their defaults."""
        if not isinstance(text, str) or len(text) > MAX_SUMMARY_CHARS:
            raise _damaged(where, f"it holds {type(text).__name__}, not JSON text of a sane size")
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise _damaged(where, f"it is not valid JSON ({type(exc).__name__})") from None
        d = _Fields(data, where)
        tensors, size = _Fields(d.get("tensors", dict), where), _Fields(d.get("bytes", dict), where)
        problems = _Fields(d.get("problems", dict, {}), where)
        return cls(
            source=d.get("source", str), destination=d.get("destination", str), in_place=d.get("in_place", bool),
            run_id=d.get("run_id", str, ""), resumed=d.get("resumed", bool, False),
            tables_copied=d.get("tables_copied", int, 0), rows_copied=d.get("rows_copied", int, 0),
            tables=d.mapping("tables", int),
            tensors=TensorCounts(**{k: tensors.get(k, int, 0) for k in _COUNTS}, by_format=tensors.mapping("by_format", int)),
            problems={k: tuple(problems.items(k, dict, dict)) for k in problems.data},
            problem_count=d.get("problem_count", int, 0),
            verified=_verify_result(d.get("verified", dict), where),
            bytes=ByteCounts(
                before=size.get("before", int, 0), before_db=size.get("before_db", int, 0),
                before_tensors=size.get("before_tensors", int, 0), after=size.get("after", (int, type(None)), None),
            ),
            legacy_files_removed=d.get("legacy_files_removed", int, 0),
            skipped=tuple(d.items("skipped", dict, lambda e: Skipped(**{k: _Fields(e, where).get(k, str) for k in ("kind", "name", "reason")}))),
            triggers_copied=tuple(d.items("triggers_copied", str, str)),
            verified_against_legacy=None if data.get("verified_against_legacy") is None
            else _verify_result(d.get("verified_against_legacy", dict), where),
            already_migrated=d.get("already_migrated", bool, False), seconds=d.get("seconds", (int, float, type(None)), None),
            sidecars=d.get("sidecars", (dict, type(None)), None),
        )


#: The integer fields of :class:`TensorCounts`.
_COUNTS = ("files", "already_stored", "imported", "unreadable", "golden_linked", "carried_over", "stored")

_REQUIRED: Any = object()


def _damaged(where: str, problem: str) -> CorruptionError:
    return CorruptionError(
        f"{where}: the logged migration summary is malformed: {problem}; the database was changed by another tool. "
        "Migrate the report again with -o to a new folder"
    )


class _Fields:
    """Typed reads of one decoded JSON object from a migration log; a value of the wrong type is a CorruptionError
    naming its key."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise _damaged(where, f"{type(data).__name__} where an object belongs")
        self.data: dict[str, Any] = data
        self.where = where

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = _REQUIRED) -> Any:
        """The value of ``key`` if it has type ``kind`` (bool is not an int here); ``default`` when absent."""
        if key not in self.data and default is not _REQUIRED:
            return default
        value = self.data.get(key)
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise _damaged(self.where, f"{key} is {type(value).__name__} {str(value)[:40]!r}")
        return value

    def items(self, key: str, kind: type, convert: Callable[[Any], T]) -> list[T]:
        """Each element of the list at ``key`` (empty when absent), checked to have type ``kind`` and converted."""
        values = self.get(key, list, [])
        bad = next((v for v in values if not isinstance(v, kind) or isinstance(v, bool)), None)
        if bad is not None:
            raise _damaged(self.where, f"{key} holds {type(bad).__name__} {str(bad)[:40]!r}")
        return [convert(v) for v in values]

    def mapping(self, key: str, kind: type) -> dict[str, Any]:
        """The object at ``key`` (empty when absent), every value checked to have type ``kind``."""
        values = _Fields(self.get(key, dict, {}), self.where)
        return {k: values.get(k, kind) for k in values.data}


def _verify_result(data: dict[str, Any], where: str) -> VerifyResult:
    """A logged :class:`VerifyResult`; ``path`` and ``against`` are absent from older logs."""
    d = _Fields(data, where)

    def problem(p: dict[str, Any]) -> VerifyProblem:
        f = _Fields(p, where)
        return VerifyProblem(
            f.get("tensor_id", (int, type(None)), None), f.get("rank", (int, type(None)), None),
            f.get("path", (str, type(None)), None), f.get("error", str),
        )

    return VerifyResult(
        path=d.get("path", str, ""), ok=d.get("ok", bool), tensors=d.get("tensors", int, 0), blobs=d.get("blobs", int, 0),
        bytes_checked=d.get("bytes_checked", int, 0), against=d.get("against", (str, type(None)), None),
        compared=d.get("compared", int, 0), problems=tuple(d.items("problems", dict, problem)),
    )
