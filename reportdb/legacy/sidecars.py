"""ttnn 0.81's JSON sidecars read into a report's tables: comparison mode's records and the tensor lifetimes.

Without a graph report, ttnn 0.81's comparison mode keeps its records in memory and writes them to
``<capture>.comparison_records.json`` beside the graph capture (``ttnn.graph.end_graph_capture_to_file``), or to
``comparison_records.json`` in the report folder (``flush_comparison_records_to_db``); ``ttnn.graph.import_report``
writes ``<capture>.tensor_lifetime.json`` beside the ``db.sqlite`` it makes. :func:`read_sidecar` checks one such file
(untrusted: size bounded before it is read, every key and type checked, an unknown field refused rather than dropped)
and :func:`import_sidecars` stores it the way ttnn's own importer (``ttnn.graph_report``) would: records into
``local_tensor_comparison_records`` / ``global_tensor_comparison_records``, golden tensors' rows into ``tensors``,
lifetimes into ``tensor_lifetime``, every field in a column. A row the report holds already with the same values is
kept (the normal case: ttnn imported the sidecar itself); one with other values is a :class:`SidecarError`, as is any
problem, raised before anything is written.
"""

from __future__ import annotations

import json
import math
import os
import re
import sqlite3
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from ..errors import SidecarError

COMPARISON_SUFFIX = ".comparison_records.json"
COMPARISON_FALLBACK = "comparison_records.json"
LIFETIME_SUFFIX = ".tensor_lifetime.json"
#: Largest sidecar read: ~700 bytes per output in a comparison sidecar (its local and global record, two golden tensor
#: rows) and ~360 per tensor in a lifetime file as ttnn writes them, so about 95,000 outputs or 180,000 tensors, more
#: than a model's capture holds (ttnn 0.81's own: 6 outputs, 4 KB). Read and made rows, a comparison sidecar takes about
#: 13 times its size in memory (a lifetime file less). A larger one is refused unread; one within it is parsed only once
#: :func:`_check_shape` found its shape bounds its memory.
MAX_SIDECAR_BYTES = 64 << 20
#: Fewest bytes per JSON object (``{``) a sidecar may average: ttnn writes a lifetime entry's eight fields in 195 bytes
#: at the least (about 360 indented); a comparison sidecar averages about 160 (a record takes 85 to 105, a golden
#: tensor's row about 200). Each object, parsed and made a row, takes about 2 KB: a file of empty or one-field objects
#: is refused before it is parsed.
_MIN_OBJECT_BYTES = {"lifetime": 160, "comparison": 100}
#: The JSON lists a sidecar has: the lifetime file is one; a comparison sidecar has its two record lists and ``tensors``.
_LISTS = {"lifetime": 1, "comparison": 3}
#: Files from this size on have their shape checked before they are parsed (:func:`_check_shape`); a smaller one,
#: parsed, takes at most some 30 MB, and its problems are best told by the checks of its parsed records.
_SHAPE_CHECKED_FROM = 1 << 20
#: The sidecar versions this code reads (``ttnn.graph._new_comparison_records_data``; the lifetime file has none).
COMPARISON_VERSIONS = (1,)

_INT, _FLOAT, _TEXT, _BOOL = "int", "float", "text", "bool"
RECORD_FIELDS = {"tensor_id": _INT, "golden_tensor_id": _INT, "matches": _BOOL, "desired_pcc": _FLOAT, "actual_pcc": _FLOAT}
TENSOR_FIELDS = {
    "tensor_id": _INT, "shape": _TEXT, "dtype": _TEXT, "layout": _TEXT, "memory_config": _TEXT, "device_id": _INT,
    "address": _INT, "buffer_type": _INT, "storage_type": _TEXT,
}
LIFETIME_FIELDS = {
    "tensor_id": _INT, "producer_operation_id": _INT, "last_use_operation_id": _INT, "deallocate_operation_id": _INT,
    "producer_source_file": _TEXT, "producer_source_line": _INT, "last_use_source_file": _TEXT,
    "last_use_source_line": _INT,
}
RECORD_TABLES = {"local": "local_tensor_comparison_records", "global": "global_tensor_comparison_records"}
#: ttnn 0.81.1's own DDL (``ttnn.graph_report.create_database_schema``), for a report that lacks a table.
_DDL = {
    "local_tensor_comparison_records": "tensor_id int, golden_tensor_id int, matches int, desired_pcc float, "
    "actual_pcc float, rank int NOT NULL DEFAULT 0, UNIQUE(tensor_id, rank)",
    "global_tensor_comparison_records": "tensor_id int, golden_tensor_id int, matches int, desired_pcc float, "
    "actual_pcc float, rank int NOT NULL DEFAULT 0, UNIQUE(tensor_id, rank)",
    "tensor_lifetime": "tensor_id int, producer_operation_id int, last_use_operation_id int, deallocate_operation_id int, "
    "producer_source_file text, producer_source_line int, last_use_source_file text, last_use_source_line int, "
    "rank int NOT NULL DEFAULT 0, UNIQUE(tensor_id, rank)",
    "tensors": "tensor_id int, shape text, dtype text, layout text, memory_config text, device_id int, address int, "
    "buffer_type int, rank int NOT NULL DEFAULT 0, storage_type text, UNIQUE(tensor_id, rank)",
}
_RANK_IN_NAME = re.compile(r"_(\d+)_of_(\d+)$")


@dataclass(frozen=True)
class Sidecar:
    """One sidecar as read: its path, kind (``comparison`` or ``lifetime``) and its rows, each a ``{column: value}``
    with the rank filled in, table by table (``local_tensor_comparison_records``, ..., ``tensors``,
    ``tensor_lifetime``)."""

    path: str
    kind: str
    rows: Mapping[str, tuple[dict[str, Any], ...]]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the path, the kind and the number of rows per table."""
        return {"path": self.path, "kind": self.kind, "rows": {t: len(r) for t, r in self.rows.items()}}


@dataclass(frozen=True)
class SidecarImport:
    """What :func:`import_sidecars` did: rows added and rows the report held already, per table, and the files."""

    files: tuple[str, ...] = ()
    added: dict[str, int] = field(default_factory=dict)
    already_present: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"files": list(self.files), "added": dict(self.added), "already_present": dict(self.already_present)}


def find_sidecars(folder: str | os.PathLike[str]) -> list[Path]:
    """The sidecars in a report folder (not below it): regular files only, symbolic links never followed."""
    found = []
    with os.scandir(folder) as entries:
        for entry in entries:
            name = entry.name
            if not (name.endswith((COMPARISON_SUFFIX, LIFETIME_SUFFIX)) or name == COMPARISON_FALLBACK):
                continue
            if entry.is_file(follow_symlinks=False):
                found.append(Path(folder) / name)
    return sorted(found)


def read_sidecar(path: str | os.PathLike[str], *, max_bytes: int = MAX_SIDECAR_BYTES) -> Sidecar:
    """Read and check one sidecar (its kind from its name); a SidecarError says what is wrong with it."""
    path = Path(path)
    name = path.name
    if name.endswith(LIFETIME_SUFFIX):
        kind, stem = "lifetime", name[: -len(LIFETIME_SUFFIX)]
    elif name.endswith(COMPARISON_SUFFIX) or name == COMPARISON_FALLBACK:
        kind, stem = "comparison", name[: -len(COMPARISON_SUFFIX)] if name.endswith(COMPARISON_SUFFIX) else ""
    else:
        raise SidecarError(f"{path}: not a ttnn sidecar (*{COMPARISON_SUFFIX}, {COMPARISON_FALLBACK} or *{LIFETIME_SUFFIX})")
    data = _load(path, max_bytes, kind)
    rank = _rank_of(stem)
    where = str(path)
    if kind == "lifetime":
        records = _list(data, where, "the file")
        rows = {"tensor_lifetime": _rows(records, lambda r, i: _row(r, LIFETIME_FIELDS, rank, f"{where}: lifetime {i}"))}
        return Sidecar(str(path), kind, rows)
    if not isinstance(data, dict):
        raise SidecarError(f"{where}: a comparison-records sidecar is a JSON object, not {type(data).__name__}")
    allowed = {"version", "tensors", *(f"{k}_tensor_comparison_records" for k in RECORD_TABLES)}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise SidecarError(f"{where}: unknown key(s) {unknown}: this reportdb cannot keep them; nothing was written")
    version = data.get("version", 1)
    if version not in COMPARISON_VERSIONS or isinstance(version, bool):
        raise SidecarError(f"{where}: sidecar version {version!r}; this reportdb reads version(s) {list(COMPARISON_VERSIONS)}")
    rows = {}
    for table in RECORD_TABLES.values():
        records = _list(data.get(table, []), where, table)
        rows[table] = _rows(records, lambda r, i: _row(r, RECORD_FIELDS, rank, f"{where}: {table}[{i}]"))
    tensors = _list(data.get("tensors", []), where, "tensors")
    rows["tensors"] = _rows(tensors, lambda t, i: _tensor_row(_row(t, TENSOR_FIELDS, rank, f"{where}: tensors[{i}]",
                                                                  optional=True)))
    return Sidecar(str(path), kind, rows)


def _load(path: Path, max_bytes: int, kind: str) -> Any:
    """The parsed JSON of a regular file of at most ``max_bytes`` bytes (size checked before reading), whose shape
    can be a sidecar of ``kind`` (:func:`_check_shape`, before it is parsed)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise SidecarError(f"{path}: cannot be opened ({exc.strerror or exc}); give a regular file") from exc
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise SidecarError(f"{path}: not a regular file")
        if st.st_size > max_bytes:
            raise SidecarError(f"{path}: {st.st_size} bytes, more than the {max_bytes} a sidecar may have; nothing was read")
        raw = f.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise SidecarError(f"{path}: grew beyond {max_bytes} bytes while it was read")
    if len(raw) >= _SHAPE_CHECKED_FROM:
        _check_shape(path, raw, kind)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SidecarError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    del raw  # not held while the parse builds its objects
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SidecarError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from exc
    except RecursionError as exc:
        raise SidecarError(f"{path}: JSON nested too deeply to be a sidecar") from exc


def _check_shape(path: Path, raw: bytes, kind: str) -> None:
    """Refuse, before it is parsed, JSON that cannot be a sidecar of ``kind`` and would take far more memory than its
    size: parsed, ``[]`` or ``{}`` takes about 30 times the 3 bytes it is written in (a 95 MB lifetime file of ``[]``
    entries took 2.5 GB and 22 s before its first entry was found wrong). Outside its strings, a sidecar has only its
    record lists (:data:`_LISTS`), holding objects whose members are scalars (the comparison sidecar's top object
    holds the lists): so no more ``[`` than that, no more commas than colons (a comma separates two members of an
    object, or two objects of a list, each of which has a member) and, records being long, at least
    :data:`_MIN_OBJECT_BYTES` per ``{``. Counted outside the file's strings (:func:`_count_outside_strings`)."""
    lists, objects, commas, colons = _count_outside_strings(raw, (b"[", b"{", b",", b":"))
    if lists > _LISTS[kind]:
        raise SidecarError(
            f"{path}: holds {lists} JSON lists where a {kind} sidecar has at most {_LISTS[kind]} (its record lists): "
            "not a sidecar ttnn wrote; nothing was read from it"
        )
    if commas > colons:
        raise SidecarError(
            f"{path}: a list in it holds values other than records (JSON objects): not a sidecar ttnn wrote; nothing "
            "was read from it"
        )
    if objects * _MIN_OBJECT_BYTES[kind] > len(raw):
        raise SidecarError(
            f"{path}: holds {objects} JSON objects in {len(raw)} bytes, under {_MIN_OBJECT_BYTES[kind]} bytes each, "
            f"shorter than the records of a {kind} sidecar: not a sidecar ttnn wrote; nothing was read from it"
        )


#: A JSON string, escapes included: blanked out before :func:`_check_shape` counts brackets, colons and commas.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
#: In a piece whose complete strings are blanked to ``""``: a string the piece's end cuts, from its opening quote (a
#: quote next to no other quote: a blanked string's are next to each other, an escaped one follows a backslash).
_CUT_STRING = re.compile(rb'(?<![\\"])"(?!")(?:[^"\\]|\\.)*\\?\Z')
#: Bytes of a sidecar blanked at a time by :func:`_count_outside_strings`.
_BLANKED_PIECE = 4 << 20


def _count_outside_strings(raw: bytes, chars: tuple[bytes, ...]) -> list[int]:
    """How often each of ``chars`` occurs in the JSON text ``raw`` outside its strings, blanking the strings a piece
    at a time: blanked whole, ``re.sub`` would hold two objects per string (a 59 MB sidecar's 2.5 million keys took
    560 MB). A string the piece's end cuts goes on into the next piece."""
    counts = [0] * len(chars)
    carry = b""
    for start in range(0, len(raw), _BLANKED_PIECE):
        piece = carry + raw[start:start + _BLANKED_PIECE]
        blanked = _JSON_STRING.sub(b'""', piece)
        # after the last blanked string (a cut one holds no two quotes together)
        last = blanked.rfind(b'""') + 1
        cut = _CUT_STRING.search(blanked, last) if start + _BLANKED_PIECE < len(raw) else None
        end = cut.start() if cut else len(blanked)
        carry = piece[len(piece) - (len(blanked) - end):] if cut else b""
        for i, c in enumerate(chars):
            counts[i] += blanked.count(c, 0, end)
    return counts


def _rank_of(stem: str) -> int:
    """The rank a file's name gives (``graph_capture_<rank+1>_of_<world>``, as ttnn names per-rank files), else 0."""
    m = _RANK_IN_NAME.search(stem)
    return int(m.group(1)) - 1 if m and 0 < int(m.group(1)) <= int(m.group(2)) else 0


def _list(value: Any, where: str, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise SidecarError(f"{where}: {what} must be a JSON list, not {type(value).__name__}")
    return value


def _rows(records: list[Any], make: Callable[[Any, int], dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """``make(record, index)`` for each parsed record, each record let go once made into its row, so the parsed
    file and its rows are not both held whole (together about twice the memory)."""
    rows = []
    for i in range(len(records)):
        rows.append(make(records[i], i))
        records[i] = None
    return tuple(rows)


def _row(record: Any, fields: Mapping[str, str], rank: int, where: str, optional: bool = False) -> dict[str, Any]:
    """One record checked against its fields (each present, of its type; ``rank`` optional; no other key)."""
    if not isinstance(record, dict):
        raise SidecarError(f"{where}: a record is a JSON object, not {type(record).__name__}")
    unknown = sorted(set(record) - set(fields) - {"rank"})
    if unknown:
        raise SidecarError(f"{where}: unknown field(s) {unknown}: this reportdb cannot keep them; nothing was written")
    missing = [] if optional else sorted(set(fields) - set(record))
    if missing or "tensor_id" not in record:
        raise SidecarError(f"{where}: field(s) {missing or ['tensor_id']} missing")
    row = {name: _value(record.get(name), kind, f"{where}.{name}") for name, kind in fields.items()}
    if row["tensor_id"] is None:
        raise SidecarError(f"{where}.tensor_id: null; every record names its tensor")
    row["rank"] = _value(record.get("rank", rank), _INT, f"{where}.rank")
    if row["rank"] is None:
        raise SidecarError(f"{where}.rank: null")
    return row


def _value(value: Any, kind: str, where: str) -> Any:
    """A field's value as its column holds it (ttnn's importer: ``int(bool(matches))``, PCCs as floats)."""
    if value is None:
        if kind == _BOOL:
            raise SidecarError(f"{where}: null; expected true or false")
        return None
    if kind == _BOOL and isinstance(value, bool):
        return int(value)
    if kind == _INT and isinstance(value, int) and not isinstance(value, bool):
        if not -(2**63) <= value < 2**63:
            raise SidecarError(f"{where}: {value} does not fit a 64-bit integer")
        return value
    if kind == _FLOAT and isinstance(value, (int, float)) and not isinstance(value, bool):
        return None if math.isnan(value) else float(value)  # SQLite keeps NaN as NULL, as it does in ttnn's table
    if kind == _TEXT and isinstance(value, str):
        return value
    raise SidecarError(f"{where}: {type(value).__name__} {str(value)[:60]!r}; expected {kind}")


def _tensor_row(row: dict[str, Any]) -> dict[str, Any]:
    """A golden tensor's ``tensors`` row as ttnn's importer makes it (``_tensor_row_from_params``)."""
    for key in ("dtype", "layout"):
        if row[key] and "::" in row[key]:
            row[key] = row[key].replace("::", ".")
    row["shape"] = "" if row["shape"] is None else row["shape"]
    if row["storage_type"] is None and (row["memory_config"] is not None or row["address"] is not None):
        row["storage_type"] = "DEVICE"
    return row


def read_sidecars(paths: Iterable[str | os.PathLike[str]], *, max_bytes: int = MAX_SIDECAR_BYTES) -> list[Sidecar]:
    """Every file read and checked (the first problem raised), before anything is written anywhere."""
    return [read_sidecar(p, max_bytes=max_bytes) for p in paths]


def import_sidecars(conn: sqlite3.Connection, sidecars: list[Sidecar], *, write: bool = True) -> SidecarImport:
    """Store the sidecars' rows in the database of ``conn`` (in the caller's transaction, or one of its own), or with
    ``write=False`` only check that they can be (a read-only source). A row already there with the same values
    counts as present; other values under its key, or a field whose column the table lacks, raise SidecarError
    before any row is written."""
    added: dict[str, dict[tuple[int, int], dict[str, Any]]] = {}  # table -> (tensor id, rank) -> row to insert
    present: dict[str, int] = {}
    columns_of = {t: [r[1] for r in conn.execute(f"PRAGMA main.table_info({t})")] or _columns(ddl) for t, ddl in _DDL.items()}
    stored: dict[str, dict[tuple[int, int], dict[str, Any]]] = {}  # each table's rows, read once when first needed
    for sidecar in sidecars:
        for table, rows in sidecar.rows.items():
            columns = set(columns_of[table])
            for row in rows:
                absent = row.keys() - columns
                lost = sorted(k for k in absent if row[k] is not None and not (k == "rank" and row[k] == 0))
                if lost:
                    raise SidecarError(f"{sidecar.path}: table {table} of the report has no column for {lost}; nothing was written")
                key = (row["tensor_id"], row["rank"])
                wanted = {k: v for k, v in row.items() if k not in absent} if absent else row
                if table not in stored:
                    stored[table] = _existing(conn, table)
                held = added.get(table, {}).get(key) or stored[table].get(key if "rank" in columns else (key[0], 0))
                if held is None:
                    added.setdefault(table, {})[key] = wanted
                elif table == "tensors" or _same(held, wanted):
                    present[table] = present.get(table, 0) + 1  # ttnn's importer ignores a tensor row it has
                else:
                    raise SidecarError(
                        f"{sidecar.path}: {table} already holds tensor {key[0]} (rank {key[1]}) with other values "
                        f"({held} against {wanted}); nothing was written"
                    )
    if write:
        for table, items in added.items():
            conn.execute(f"CREATE TABLE IF NOT EXISTS main.{table} ({_DDL[table]})")
            by_names: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
            for wanted in items.values():
                by_names.setdefault(tuple(wanted), []).append(tuple(wanted.values()))
            for names, values in by_names.items():
                conn.executemany(f"INSERT INTO main.{table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                                 values)
    return SidecarImport(
        files=tuple(s.path for s in sidecars), added={t: len(v) for t, v in added.items()}, already_present=present
    )


def _columns(ddl: str) -> list[str]:
    return [part.split()[0] for part in ddl.split(", ") if not part.startswith("UNIQUE")]


def _existing(conn: sqlite3.Connection, table: str) -> dict[tuple[int, int], dict[str, Any]]:
    """The table's rows by (tensor id, rank) (rank 0 where the table has no rank column), as ``{column: value}``;
    empty when the table does not exist. The first row of a key wins, as a lookup by key would find it."""
    if not conn.execute("SELECT 1 FROM main.sqlite_master WHERE type='table' AND name=?", (table,)).fetchone():
        return {}
    cursor = conn.execute(f"SELECT * FROM main.{table} WHERE tensor_id IS NOT NULL ORDER BY rowid")
    names = [d[0] for d in cursor.description]
    rows: dict[tuple[int, int], dict[str, Any]] = {}
    for values in cursor:
        row = dict(zip(names, values))
        key = (row["tensor_id"], row.get("rank") or 0)
        rows.setdefault(key, row)
    return rows


def _same(existing: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether a stored row holds the record's values (numbers compared as numbers: ``1`` equals ``1.0``)."""
    return all(existing.get(k) == v or _close(existing.get(k), v) for k, v in wanted.items())


def _close(a: Any, b: Any) -> bool:
    return isinstance(a, (int, float)) and isinstance(b, (int, float)) and float(a) == float(b)
