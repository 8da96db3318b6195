"""A report's tables in exact, engine-neutral form: what a push sends and a pull (or a remote open) restores.

Every table of the report database except the chunk bytes travels as its ``CREATE`` text (as SQLite's
``sqlite_master`` holds it: declared types, constraints, collations) and its rows with their rowids. Rows go as
JSON arrays (UTF-8), ``bytes`` as ``{"b": base64}``: JSON keeps SQLite's five storage classes apart (integers of any
size, floats through ``repr`` exactly, text, NULL, blobs), so a value comes back with the storage class it had, even
in a column whose declared type says otherwise. Indexes are rebuilt after the rows. Views, triggers, virtual tables
and SQLite's internal tables (but ``sqlite_sequence``) are not taken: they run report-supplied SQL, and reportdb runs
none (``migrate`` does the same); the push result names what was left out.

Restoring runs report-supplied ``CREATE`` text, checked to be one ``CREATE TABLE`` or ``CREATE [UNIQUE] INDEX``
statement, on a hardened connection (``trusted_schema=OFF``, defensive mode, statements bounded in time) into a new
file of our own.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from ..errors import CorruptionError, FormatError, SchemaError
from ..store import engine as engine_mod
from ..store.schema import folded

#: The chunk table travels as references into the shared chunk store, not as rows (``push.py``).
CHUNK_TABLE = "rdb_chunk"
CHUNK_COLUMNS = ("id", "digest", "nbytes", "crc32", "data", "codec")
PART_ROWS = 20_000
PART_BYTES = 8 << 20
#: The most a part of encoded rows may hold: a push cuts its parts below it (a single row above it is refused), and a
#: pull refuses a stored part above it before fetching it, so a store cannot make reportdb decode an unbounded text.
MAX_PART_BYTES = 256 << 20
#: Time bound of one call into SQLite while restoring (a CREATE INDEX over millions of rows, say).
RESTORE_TIMEOUT = 300.0
#: SQLite's page cache (KiB) while a restore builds tables and indexes.
RESTORE_CACHE_KIB = 65536

_CREATE_TABLE = re.compile(r"\s*CREATE\s+TABLE\s", re.IGNORECASE)
_CREATE_INDEX = re.compile(r"\s*CREATE\s+(UNIQUE\s+)?INDEX\s", re.IGNORECASE)


@dataclass(frozen=True)
class TableDef:
    """One table (``kind`` 'table', or 'chunks' for rdb_chunk) or index (``kind`` 'index') of a report."""

    name: str
    kind: str
    ddl: str | None  # None for sqlite_sequence, which SQLite creates itself
    columns: tuple[str, ...] = ()
    has_rowid: bool = False

    @property
    def insert_columns(self) -> tuple[str, ...]:
        return (("rowid",) if self.has_rowid else ()) + self.columns


@dataclass
class Layout:
    """Everything of a report's schema that travels, in ``sqlite_master`` order, and what does not."""

    tables: list[TableDef] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    page_size: int = 4096
    user_version: int = 0


def quoted(name: str) -> str:
    return engine_mod.quoted(name)


def read_layout(conn: sqlite3.Connection, path: Path) -> Layout:
    """The layout of the report open on ``conn`` (read only)."""
    layout = Layout(page_size=int(conn.execute("PRAGMA page_size").fetchone()[0]),
                    user_version=int(conn.execute("PRAGMA user_version").fetchone()[0]))
    indexes = []
    for kind, name, sql in conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY rowid").fetchall():
        if not isinstance(name, str):
            raise CorruptionError(f"{path}: sqlite_master holds a {kind} without a name; the file is damaged")
        if kind == "index":
            if sql is not None:  # automatic indexes (UNIQUE, PRIMARY KEY) come with their table
                indexes.append(TableDef(name, "index", str(sql)))
            continue
        if kind != "table" or (name.startswith("sqlite_") and name != "sqlite_sequence"):
            layout.left_out.append(f"{kind} {name}")
            continue
        if str(sql or "").lstrip()[:14].upper() == "CREATE VIRTUAL":
            layout.left_out.append(f"virtual table {name}")
            continue
        info = conn.execute(f"PRAGMA table_xinfo({quoted(name)})").fetchall()
        columns = tuple(str(r[1]) for r in info if r[6] == 0)  # generated columns (hidden 2, 3) regenerate
        lowered = {c.lower() for c in columns}
        has_rowid = not lowered & {"rowid", "oid", "_rowid_"}
        if has_rowid:
            try:
                conn.execute(f"SELECT rowid FROM {quoted(name)} LIMIT 0")
            except sqlite3.OperationalError:
                has_rowid = False  # WITHOUT ROWID
        if folded(name) == CHUNK_TABLE:  # SQLite's names are case-insensitive (RDB_CHUNK is it too)
            unknown = sorted(set(columns) - set(CHUNK_COLUMNS))
            if unknown or not {"id", "digest", "nbytes", "crc32", "data"} <= set(columns):
                raise SchemaError(
                    f"{path}: rdb_chunk has columns {list(columns)}, not reportdb's; the file was changed by another tool"
                )
            layout.tables.append(TableDef(name, "chunks", str(sql), columns, False))
            continue
        layout.tables.append(TableDef(name, "table", None if name == "sqlite_sequence" else str(sql), columns, has_rowid))
    layout.tables += indexes
    return layout


def _bytes_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"b": base64.b64encode(bytes(value)).decode("ascii")}
    raise TypeError(f"a value of type {type(value).__name__} cannot be sent")


def encode_rows(rows: Sequence[Sequence[Any]]) -> bytes:
    """Rows as the JSON text described above, UTF-8."""
    return json.dumps(rows, default=_bytes_default, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _bytes_hook(obj: dict[str, Any]) -> Any:
    data = obj.get("b")
    if len(obj) != 1 or not isinstance(data, str):
        raise ValueError("an object that is not an encoded blob")
    return base64.b64decode(data, validate=True)


def decode_rows(data: bytes, width: int, what: str) -> list[Any]:
    """Rows :func:`encode_rows` wrote, each checked to have ``width`` values; damage is a CorruptionError."""
    try:
        rows = json.loads(data, object_hook=_bytes_hook)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptionError(f"{what}: the stored rows are malformed ({exc}); push the report again") from None
    if not isinstance(rows, list) or not all(isinstance(r, list) and len(r) == width for r in rows):
        raise CorruptionError(f"{what}: the stored rows do not have the table's {width} columns; push the report again")
    return rows


def iter_parts(conn: sqlite3.Connection, table: TableDef, path: Path) -> Iterator[tuple[bytes, int]]:
    """The rows of ``table`` in parts of at most PART_ROWS rows (about PART_BYTES), as ``(encoded, n_rows)``."""
    cols = ", ".join(quoted(c) for c in table.columns)
    select = f"SELECT {'rowid, ' if table.has_rowid else ''}{cols} FROM {quoted(table.name)}"
    if table.has_rowid:
        select += " ORDER BY rowid"
    try:
        cursor = conn.execute(select)
        while True:
            batch = cursor.fetchmany(PART_ROWS)
            if not batch:
                return
            # big texts (captured graphs) make a part big: cut it in smaller ones by a rough size estimate
            start = 0
            while start < len(batch):
                size, end = 0, start
                while end < len(batch) and (size < PART_BYTES or end == start):
                    size += sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in batch[end])
                    end += 1
                yield from _bounded(batch[start:end], table, path)
                start = end
    except sqlite3.OperationalError as exc:
        if "decode" in str(exc):
            raise FormatError(f"{path}: table {table.name} holds text that is not UTF-8 ({exc}); it cannot be sent") from None
        raise


def _bounded(rows: Sequence[Sequence[Any]], table: TableDef, path: Path) -> Iterator[tuple[bytes, int]]:
    """``rows`` encoded as one part, or cut in halves until each part is at most MAX_PART_BYTES (escapes and base64
    can make the encoding several times the estimate); one row that alone encodes above it is a FormatError."""
    data = encode_rows(rows)
    if len(data) <= MAX_PART_BYTES:
        yield data, len(rows)
    elif len(rows) == 1:
        raise FormatError(
            f"{path}: a row of table {table.name} takes {len(data)} bytes encoded, more than the team store's "
            f"{MAX_PART_BYTES} per part; it cannot be pushed"
        )
    else:
        half = len(rows) // 2
        yield from _bounded(rows[:half], table, path)
        yield from _bounded(rows[half:], table, path)


def layout_digest(layout: Layout) -> "hashlib._Hash":
    """The start of a report's content digest: its tables' definitions (rows and chunk addresses are added)."""
    h = hashlib.sha256(b"reportdb-team-1\0")
    h.update(json.dumps([[t.name, t.kind, t.ddl, list(t.columns), t.has_rowid] for t in layout.tables]).encode())
    h.update(f"{layout.page_size}:{layout.user_version}".encode())
    return h


def new_database(path: Path, page_size: int, user_version: int) -> sqlite3.Connection:
    """A new file at ``path`` to restore into: hardened, no foreign-key checks (rows come back as they were, in the
    report's own order), no journal while it is built (a failed restore deletes the file)."""
    conn = engine_mod.connect(path, readonly=False, timeout=RESTORE_TIMEOUT)
    if page_size & (page_size - 1) or not 512 <= page_size <= 65536:
        page_size = 4096
    conn.execute(f"PRAGMA page_size={page_size}")
    conn.execute("PRAGMA foreign_keys=OFF")
    conn.execute("PRAGMA journal_mode=OFF")
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute(f"PRAGMA user_version={int(user_version)}")
    return conn


def create_table(conn: sqlite3.Connection, table: TableDef, what: str) -> None:
    """Run a table's or index's CREATE text, once checked to be just that."""
    if table.ddl is None:
        return
    pattern = _CREATE_INDEX if table.kind == "index" else _CREATE_TABLE
    if not pattern.match(table.ddl):
        raise CorruptionError(f"{what}: the stored definition of {table.name!r} is not a CREATE statement of its kind")
    try:
        conn.execute(table.ddl)  # sqlite3 refuses a second statement in one execute
    except (sqlite3.Error, sqlite3.Warning) as exc:
        raise CorruptionError(f"{what}: the stored definition of {table.name!r} cannot be created ({exc})") from None


def insert_rows(conn: sqlite3.Connection, table: TableDef, rows: Iterable[Sequence[Any]], what: str) -> None:
    """Insert rows (values in ``table.insert_columns`` order) as they were."""
    names = (["rowid"] if table.has_rowid else []) + [quoted(c) for c in table.columns]
    sql = f"INSERT INTO {quoted(table.name)} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"
    try:
        conn.executemany(sql, rows)
    except sqlite3.Error as exc:
        raise CorruptionError(f"{what}: rows of table {table.name!r} cannot be restored ({exc}); push the report again") from None
