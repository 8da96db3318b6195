"""The one decision made when a report database is opened: what schema it has, and what to do.

Cases: a new (empty) file; a report of any pre-reportdb age; an older reportdb schema; the current
one; a newer one, which is refused before anything touches the file. Before any of that, :func:`check_safety`
refuses a schema that would make reportdb run the report's own SQL: views or other non-tables under reportdb's
names, triggers on its tables, and (for writes) any trigger at all. :func:`open_database` runs them in order.

Classifying a file needs only the revision names, which :func:`_revisions` reads from the migration scripts as text;
alembic (and SQLAlchemy under it, most of a CLI command's start-up) is imported only by :func:`upgrade`.
"""

from __future__ import annotations

import ast
import enum
import functools
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import NotAReportError, ReadOnlyError, ReportDBError, SchemaError, SchemaTooNewError, UnsafeReportError, excerpt
from . import engine as engine_mod, journal
from .files import write_open_advice

if TYPE_CHECKING:  # pragma: no cover
    from alembic.config import Config
    from sqlalchemy import Engine

VERSION_TABLE = "reportdb_alembic_version"
#: Where the migrations live in a source checkout (the wheel ships them as ``reportdb.migrations``).
_SOURCE_MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"


class SchemaKind(enum.Enum):
    EMPTY = "empty"
    LEGACY = "legacy"  # a TTNN report database that reportdb never touched
    OLDER = "older"
    CURRENT = "current"


@dataclass(frozen=True)
class SchemaState:
    kind: SchemaKind
    revision: str | None


@dataclass(frozen=True)
class Opened:
    """A report database as :func:`open_database` left it: the connection, its schema revision, whether it is a new
    file (already in WAL mode) and whether an older reportdb schema was upgraded (its tensors may lack statistics)."""

    conn: sqlite3.Connection
    revision: str | None
    new_file: bool
    upgraded_older: bool


def open_database(path: Path, *, writing: bool, existed: bool) -> Opened:
    """Connect to the report database ``path``, refuse an unsafe or too new schema and, when ``writing``, set the
    write mode and bring an older schema to the current one, in one transaction. A file this call created
    (``existed`` False) is removed again, with its side files, if anything fails."""
    try:
        conn = engine_mod.connect(path, readonly=not writing)
    except sqlite3.DatabaseError as exc:
        raise NotAReportError(f"{path}: not a SQLite report database ({exc})") from exc
    except sqlite3.Error as exc:
        raise ReportDBError(f"{path}: cannot open: {exc}") from exc
    try:
        check_safety(conn, path, writing=writing)
        state = inspect(conn, path)
        new_file = writing and state.kind is SchemaKind.EMPTY
        if writing:
            journal.set_write_mode(conn, new_file=new_file)
            if state.kind is not SchemaKind.CURRENT:
                # Upgrade in the file's own journal mode first, so a failure leaves it byte-for-byte as it was.
                upgrade(engine_mod.engine_for(conn, readonly=False))
            return Opened(conn, inspect(conn, path).revision, new_file, state.kind is SchemaKind.OLDER)
        return Opened(conn, state.revision, False, False)
    except BaseException as exc:
        conn.close()
        if not existed:
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        if isinstance(exc, sqlite3.OperationalError) and "readonly" in str(exc):
            raise ReadOnlyError(write_open_advice(
                path,
                f"{path}: cannot be read without write access ({exc}): a hot journal beside it needs rolling "
                "back. Open it once where it is writable (reportdb.open(path, 'a')), then read it"
            )) from exc
        if isinstance(exc, sqlite3.DatabaseError):
            raise NotAReportError(f"{path}: not a SQLite report database ({exc})") from exc
        raise


def _migrations_folder() -> Path:
    """The alembic scripts: ``reportdb.migrations`` when installed, else ``migrations/`` beside the package (a
    checkout's source tree imported ahead of a non-editable install has no ``reportdb.migrations``)."""
    try:
        import reportdb.migrations
    except ModuleNotFoundError as exc:
        if exc.name != "reportdb.migrations" or not (_SOURCE_MIGRATIONS / "env.py").is_file():
            raise
        return _SOURCE_MIGRATIONS
    return Path(reportdb.migrations.__file__).parent


def _alembic_config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(_migrations_folder()))
    return config


def folded(name: str) -> str:
    """A table name as SQLite compares it: ASCII letters in lower case (``RDB_SHARD`` is ``rdb_shard`` to SQLite, so
    every check of reportdb's names compares folded names)."""
    return name.translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _is_ours(name: str) -> bool:
    """Whether ``name`` is one of reportdb's table names (``rdb_*`` and the alembic version table), in any letter
    case."""
    name = folded(name)
    return name.startswith("rdb_") or name == VERSION_TABLE


def _listed(items: list[str], most: int = 5) -> str:
    """The first ``most`` of ``items`` for a message, joined, with how many more there are."""
    return ", ".join(items[:most]) + (f" and {len(items) - most} more" if len(items) > most else "")


#: A word ``AS`` in a table's SQL: the tables where :func:`check_safety` looks for generated columns (every
#: generated column is declared ``... AS (expr)``; looking at every table's columns would cost ~0.5 ms an open).
_MAY_GENERATE = re.compile(r"\bAS\b", re.IGNORECASE)


def _generated_columns(conn: sqlite3.Connection, rows: list[tuple[object, ...]]) -> list[str]:
    """``table.column`` of every generated column (``PRAGMA table_xinfo`` hidden 2: virtual, 3: stored) in the
    tables of ``rows`` (``sqlite_master``'s type, name, tbl_name, sql)."""
    found = []
    for kind, name, _, sql in rows:
        if kind == "table" and isinstance(name, str) and isinstance(sql, str) and _MAY_GENERATE.search(sql):
            for column in conn.execute(f"PRAGMA table_xinfo({engine_mod.quoted(name)})").fetchall():
                if column[6] in (2, 3):
                    found.append(f"{name}.{column[1]}")
    return found


def check_safety(conn: sqlite3.Connection, path: Path, *, writing: bool) -> None:
    """Refuse a report whose schema would make reportdb run report-supplied SQL: a view, virtual table or trigger
    under one of reportdb's names (a recursive view named ``rdb_shard`` made every read spin), triggers on
    reportdb's tables, and, when ``writing``, any trigger (reportdb never runs someone else's SQL on its writes:
    triggers made a later ``put_tensor`` read back another tensor's values), and generated columns anywhere (their
    expressions run at each read: a ``printf`` of 999,000,000 characters made one 4 KiB read take 39 s and 1 GB).
    Names are compared as SQLite compares them, case-folded (a view ``RDB_SHARD`` is ``rdb_shard``)."""
    rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
    impostors = sorted(
        f"{str(kind)[:20]} {excerpt(name, 80)}"
        for kind, name, _, sql in rows
        if isinstance(name, str) and _is_ours(name)
        and (kind not in ("table", "index") or str(sql or "").lstrip()[:14].upper() == "CREATE VIRTUAL")
    )
    if impostors:
        raise UnsafeReportError(
            f"{path}: {_listed(impostors)} stands where reportdb keeps a plain table; reportdb will not read or "
            "write through it. The file is not a report reportdb wrote: check where it came from"
        )
    generated = _generated_columns(conn, rows)
    if generated:
        raise UnsafeReportError(
            f"{path}: the report has generated columns ({_listed([excerpt(name, 80)[1:-1] for name in generated])}), whose SQL would run at every read; reportdb reads "
            "no report with them (neither ttnn nor reportdb writes any). Check where the file came from"
        )
    triggers = sorted((str(name), str(table)) for kind, name, table, _ in rows if kind == "trigger")
    on_ours = [f"{excerpt(name, 80)} on {excerpt(table, 80)[1:-1]}" for name, table in triggers if _is_ours(table)]
    if on_ours or (writing and triggers):
        listed = _listed(on_ours or [f"{excerpt(name, 80)} on {excerpt(table, 80)[1:-1]}" for name, table in triggers])
        raise UnsafeReportError(
            f"{path}: the report has triggers ({listed}); reportdb never runs report-supplied SQL on "
            + ("its tables" if on_ours else "its writes")
            + ". `reportdb migrate` copies a report without them"
        )


#: A module-level ``revision = ...`` or ``down_revision = ...`` line of a migration script (optionally annotated, as
#: alembic's newer template writes them, optionally with a comment); the last one of each wins, as in Python.
_REVISION_LINE = re.compile(r"^(revision|down_revision)\s*(?::[^=\n]*)?=\s*(.+?)\s*(?:#[^\n]*)?$", re.MULTILINE)


@functools.lru_cache(maxsize=None)
def _revisions() -> tuple[frozenset[str], str]:
    """Every revision the migration scripts declare and the head, read as text (no alembic import, a fraction of a
    millisecond) as alembic finds them: each ``versions/*.py`` script's ``revision`` and ``down_revision`` literals;
    the head is the one revision that no other one revises. tests/test_startup.py checks this equals alembic's own
    ``ScriptDirectory.walk_revisions()`` and ``get_current_head()``, so the two cannot drift apart."""
    folder = _migrations_folder() / "versions"
    known: set[str] = set()
    revised: set[str] = set()
    for script in sorted(folder.glob("*.py")):
        if script.name.startswith(("__init__", ".#")):
            continue
        values = dict(_REVISION_LINE.findall(script.read_text(encoding="utf-8")))
        try:
            revision = ast.literal_eval(values["revision"])
            down = ast.literal_eval(values.get("down_revision", "None"))
        except (KeyError, ValueError, SyntaxError) as exc:
            raise SchemaError(
                f"{script}: reportdb's migration script declares no literal revision ({exc!r}); the installation is "
                "damaged: reinstall reportdb"
            ) from exc
        if not isinstance(revision, str) or not (down is None or isinstance(down, (str, tuple))):
            raise SchemaError(f"{script}: reportdb's migration script declares no revision name; reinstall reportdb")
        known.add(revision)
        revised.update((down,) if isinstance(down, str) else down or ())
    heads = known - revised
    if len(heads) != 1:
        raise SchemaError(
            f"{folder}: reportdb's migration scripts have {len(heads)} heads ({sorted(heads)}), not one; reinstall reportdb"
        )
    return frozenset(known), heads.pop()


def head_revision() -> str:
    """The newest schema revision this reportdb knows."""
    return _revisions()[1]


def known_revisions() -> frozenset[str]:
    """Every schema revision this reportdb knows (it reads each, and upgrades each to the head)."""
    return _revisions()[0]


def inspect(conn: sqlite3.Connection, path: Path) -> SchemaState:
    """Classify the database without writing to it; a schema newer than this code raises here."""
    tables = {folded(row[0]) for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
              if isinstance(row[0], str)}
    if not tables:
        return SchemaState(SchemaKind.EMPTY, None)
    if VERSION_TABLE not in tables:
        return SchemaState(SchemaKind.LEGACY, None)
    row = conn.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchone()
    revision = row[0] if row else None
    if revision is None:
        return SchemaState(SchemaKind.LEGACY, None)
    if revision not in known_revisions():
        written_by = None
        if "rdb_meta" in tables:
            found = conn.execute("SELECT value FROM rdb_meta WHERE key='written_by'").fetchone()
            written_by = found[0] if found else None
        from .. import __version__

        need = f"reportdb>={written_by}" if written_by and _newer(str(written_by), __version__) else (
            f"a reportdb newer than {__version__}"
        )
        raise SchemaTooNewError(
            f"{path}: schema revision {revision!r} is newer than this reportdb {__version__} "
            f"(which knows up to {head_revision()!r}); install {need} to open it. The file was not changed."
        )
    kind = SchemaKind.CURRENT if revision == head_revision() else SchemaKind.OLDER
    return SchemaState(kind, revision)


def _newer(version: str, than: str) -> bool:
    """Whether release ``version`` (dotted numbers; anything else compares as not newer) is newer than ``than``."""
    def parts(text: str) -> tuple[int, ...] | None:
        pieces = text.split("+")[0].split(".")
        return tuple(int(p) for p in pieces) if all(p.isdigit() for p in pieces) else None

    mine, theirs = parts(than), parts(version)
    return mine is not None and theirs is not None and theirs > mine


def upgrade(engine: Engine, target: str = "head") -> None:
    """Bring the schema to ``target`` in one transaction: an interruption or error leaves the file as it was."""
    from alembic import command

    from .. import __version__

    config = _alembic_config()
    try:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, target)
            connection.exec_driver_sql(
                "INSERT INTO rdb_meta(key, value) VALUES ('written_by', ?) "
                "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                (__version__,),
            )
    except SchemaError:
        raise
    except Exception as exc:  # alembic and SQLite errors become one clear, typed error
        raise SchemaError(f"schema upgrade failed and was rolled back, the file is unchanged: {exc}") from exc
