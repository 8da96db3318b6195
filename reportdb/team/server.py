"""The connection to a team store: URLs, psycopg connections, the store's tables, and server errors as ReportDBErrors.

A store URL is a libpq URL naming a database, optionally followed by a report name:
``postgresql://user@host:5432/team/nightly-2026-11-30?sslmode=verify-full``. Everything but the report name goes to
libpq as it is, so passwords come from the URL, ``PGPASSWORD`` or ``~/.pgpass`` and TLS from ``sslmode`` and friends,
as for any PostgreSQL client. psycopg is imported here only, on first use: ``pip install 'reportdb[team]'``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from ..errors import InvalidArgumentError, ReportDBError, SchemaTooNewError, TeamStoreError
from . import schema

if TYPE_CHECKING:  # pragma: no cover
    import psycopg

SCHEMES = ("postgresql", "postgres")
#: Advisory lock keys (one 64-bit space per database): creating the tables, and the chunk garbage collector against
#: pushes uploading chunks (see ``push.py`` and ``delete``).
SCHEMA_LOCK = 0x5244_4201
GC_LOCK = 0x5244_4202
MAX_NAME = 200


def is_store_url(text: object) -> bool:
    """Whether ``text`` is a PostgreSQL URL (``postgresql://`` or ``postgres://``) rather than a path."""
    return isinstance(text, str) and text.split("://", 1)[0].lower() in SCHEMES and "://" in text


@dataclass(frozen=True)
class StoreURL:
    """A parsed store URL: ``conninfo`` for libpq (no report name), the report ``name`` if the URL has one, and
    ``display``, the URL without its password, for messages."""

    conninfo: str
    name: str | None
    display: str


def parse_url(url: str, *, name: str | None = None, need_name: bool = False) -> StoreURL:
    """Split ``url`` into the database's conninfo and a report name (the path after the database, percent-decoded;
    ``name`` given separately wins). A URL without a database, or a missing or unusable name, is an
    InvalidArgumentError saying what the URL must look like."""
    if not is_store_url(url):
        raise InvalidArgumentError(f"{url!r} is not a PostgreSQL URL: give postgresql://[USER@]HOST[:PORT]/DATABASE")
    parts = urlsplit(url)
    segments = parts.path.split("/")[1:] if parts.path.startswith("/") else []
    database = unquote(segments[0]) if segments else ""
    shown = parts.netloc.rsplit("@", 1)
    netloc_shown = (shown[0].split(":", 1)[0] + ":***@" + shown[1]) if len(shown) == 2 and ":" in shown[0] else parts.netloc
    display = urlunsplit((parts.scheme, netloc_shown, "/" + quote(database), "", ""))
    if not database:
        raise InvalidArgumentError(
            f"{display} names no database: give postgresql://[USER@]HOST[:PORT]/DATABASE (the report name follows it: "
            ".../DATABASE/NAME)"
        )
    in_url = unquote("/".join(segments[1:])) if len(segments) > 1 else ""
    chosen = name if name is not None else (in_url or None)
    if chosen is not None:
        check_name(chosen)
    elif need_name:
        raise InvalidArgumentError(f"{display}: give the report's name after the database (.../DATABASE/NAME)")
    conninfo = urlunsplit((parts.scheme, parts.netloc, "/" + quote(database), parts.query, ""))
    return StoreURL(conninfo, chosen, display)


def report_url(url: str, name: str) -> str:
    """The URL of report ``name`` in the store at ``url`` (the name percent-encoded into the path, before any
    query), as ``reportdb.open`` takes it."""
    check_name(name)
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + "/" + quote(name, safe=""), parts.query, ""))


def check_name(name: str) -> None:
    """A report name is any text of 1 to MAX_NAME characters without control characters (it is only ever a bound
    parameter, so quotes and SQL in it are just characters)."""
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise InvalidArgumentError(
            f"report name {name!r} is not usable: give 1 to {MAX_NAME} printable characters"
        )


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise ReportDBError(
            f"the team store needs psycopg, which is not installed ({exc}): pip install 'reportdb[team]'"
        ) from None
    return psycopg


def connect(store: StoreURL, *, autocommit: bool = False) -> "psycopg.Connection[Any]":
    """A connection to the store's database; an unreachable server, a refused login or an unknown database is a
    ReportDBError naming the URL (without its password) and what to check."""
    psycopg = _psycopg()
    try:
        extra = {} if "connect_timeout" in store.conninfo else {"connect_timeout": 20}
        conn = psycopg.connect(store.conninfo, autocommit=autocommit, **extra)
    except psycopg.Error as exc:
        raise TeamStoreError(
            f"cannot connect to the team store {store.display}: {_first_line(exc)}; check the URL, that the server "
            "runs and accepts you (password from the URL, PGPASSWORD or ~/.pgpass)"
        ) from None
    return conn


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def failure(exc: BaseException, store: StoreURL, doing: str) -> TeamStoreError:
    """The ReportDBError a psycopg error met while ``doing`` something stands for."""
    psycopg = _psycopg()
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        return TeamStoreError(
            f"the team store {store.display} went away while {doing} ({_first_line(exc)}); nothing partial is "
            "visible to others: run it again when the server is back (a push resumes where it stopped)"
        )
    return TeamStoreError(f"the team store {store.display} refused {doing}: {_first_line(exc)}")


@contextlib.contextmanager
def mapped(store: StoreURL, doing: str) -> Iterator[None]:
    """Raise every psycopg error of the block as :func:`failure` says."""
    psycopg = _psycopg()
    try:
        yield
    except psycopg.Error as exc:
        raise failure(exc, store, doing) from exc


def _ddl() -> list[str]:
    """The PostgreSQL statements that create the store's tables (compiled from ``schema.metadata``)."""
    from sqlalchemy.dialects import postgresql
    from sqlalchemy.schema import CreateIndex, CreateTable

    dialect = postgresql.dialect()
    statements = []
    for t in schema.metadata.sorted_tables:
        statements.append(str(CreateTable(t).compile(dialect=dialect)))
        statements += [str(CreateIndex(i).compile(dialect=dialect)) for i in sorted(t.indexes, key=lambda i: str(i.name))]
    return statements + list(schema.POSTGRES_AFTER_CREATE)


def object_ddl() -> list[str]:
    """The statements that add ``team_object`` to a store made before it existed (none when it is there)."""
    from sqlalchemy.dialects import postgresql
    from sqlalchemy.schema import CreateTable

    return [str(CreateTable(schema.object_, if_not_exists=True).compile(dialect=postgresql.dialect()))]


def ensure_schema(conn: "psycopg.Connection[Any]", store: StoreURL, *, create: bool) -> bool:
    """Whether the store's tables exist (made here when ``create``, under an advisory lock, so concurrent first
    pushes do not race); a store made by a newer reportdb is refused. Commits."""
    with mapped(store, "reading the store's version"), conn.transaction():
        if create:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        found = conn.execute("SELECT to_regclass('team_meta') IS NOT NULL").fetchone()
        if not (found and found[0]):
            if not create:
                return False
            for statement in _ddl():
                conn.execute(statement.encode())
            conn.execute("INSERT INTO team_meta (key, value) VALUES ('schema_version', %s)", (str(schema.BASE_VERSION),))
            return True
        row = conn.execute("SELECT value FROM team_meta WHERE key='schema_version'").fetchone()
    version = row[0] if row else None
    if not (isinstance(version, str) and version.isdigit()):
        raise TeamStoreError(f"{store.display}: team_meta holds no usable schema_version ({version!r}); is it a team store?")
    if int(version) > schema.SCHEMA_VERSION:
        raise SchemaTooNewError(
            f"{store.display} is a team store of schema {version}, newer than this reportdb's "
            f"{schema.SCHEMA_VERSION}: upgrade reportdb"
        )
    return True
