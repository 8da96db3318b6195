"""The one decision made when a report database is opened: what schema it has, and what to do.

Cases: a new (empty) file; a report of any pre-reportdb age; an older reportdb schema; the current
one; a newer one, which is refused before anything touches the file.
"""

from __future__ import annotations

import enum
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from ..errors import SchemaError, SchemaTooNewError

VERSION_TABLE = "reportdb_alembic_version"


class SchemaKind(enum.Enum):
    EMPTY = "empty"
    LEGACY = "legacy"  # a TTNN report database that reportdb never touched
    OLDER = "older"
    CURRENT = "current"


@dataclass(frozen=True)
class SchemaState:
    kind: SchemaKind
    revision: str | None


def _alembic_config() -> Config:
    import reportdb.migrations

    config = Config()
    config.set_main_option("script_location", str(Path(reportdb.migrations.__file__).parent))
    return config


def head_revision() -> str:
    """The newest schema revision this reportdb knows."""
    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    assert head is not None
    return head


def known_revisions() -> set[str]:
    return {script.revision for script in ScriptDirectory.from_config(_alembic_config()).walk_revisions()}


def inspect(conn: sqlite3.Connection, path: Path) -> SchemaState:
    """Classify the database without writing to it; a schema newer than this code raises here."""
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
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

        need = f"reportdb>={written_by}" if written_by else "a newer reportdb"
        raise SchemaTooNewError(
            f"{path}: schema revision {revision!r} is newer than this reportdb {__version__} "
            f"(which knows up to {head_revision()!r}); install {need} to open it. The file was not changed."
        )
    kind = SchemaKind.CURRENT if revision == head_revision() else SchemaKind.OLDER
    return SchemaState(kind, revision)


def upgrade(engine: Engine, target: str = "head") -> None:
    """Bring the schema to ``target`` in one transaction: an interruption or error leaves the file as it was."""
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
