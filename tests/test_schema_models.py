"""One source of truth for the schema: the ORM models (``reportdb.models``) describe exactly what the migrations
create in a new file, and what the Writer creates for a report table a file lacks.

alembic's ``compare_metadata`` diffs a freshly created file against the models' metadata, with column types and
server defaults compared. What it cannot judge on SQLite is checked here directly, and its few deliberate
exclusions are these (nothing else is filtered out):

- ``rowid`` columns: the models map SQLite's implicit rowid of the legacy report tables (they have no key of their
  own); no file declares it.
- ``reportdb_alembic_version``: alembic's own table, which no model describes.
- ``buffer_pages``: a legacy table the newest report schema dropped; a new file does not have it. The Writer creates
  it from its model when a legacy run writes pages, and ``test_tables_the_writer_creates_match_the_models`` compares
  that one.
- NOT NULL on primary-key columns: SQLite reports ``INTEGER PRIMARY KEY`` (the rowid, which can never be NULL) as
  nullable.
- Foreign-key options: SQLAlchemy does not reflect ``ON DELETE`` of a column-level ``REFERENCES`` on SQLite, so the
  ``ON DELETE`` of every foreign key is compared through ``PRAGMA foreign_key_list`` instead.
- Unnamed UNIQUE constraints (the report tables' keys, ``digest``, ``path``, ``key``): alembic only notices those
  missing from the file, so the UNIQUE column sets of every table are also compared both ways here.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import UniqueConstraint, create_engine, inspect

import reportdb
from reportdb import models
from reportdb.store import schema
from reportdb.writer import Writer, create_table_sql

NOT_IN_A_NEW_FILE = {"buffer_pages"}


def _include(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    if type_ == "column" and name == "rowid":
        return False
    return not (type_ == "table" and name == schema.VERSION_TABLE)


def _pk_nullable(diff: Any, metadata_tables: dict[str, Any]) -> bool:
    """A ``modify_nullable`` of a primary-key column: SQLite's reflection, not a difference."""
    if not isinstance(diff, list) or len(diff) != 1 or diff[0][0] != "modify_nullable":
        return False
    _, _, table, column, *_ = diff[0]
    return bool(metadata_tables[table].c[column].primary_key)


def _fk_options_only(diffs: list[Any]) -> list[Any]:
    """Drop remove_fk/add_fk pairs for the same columns and target, which differ only in options (ON DELETE) that
    SQLAlchemy cannot reflect here; ``_check_on_delete`` compares those."""

    def sig(fk: Any) -> tuple[Any, ...]:
        return (fk.parent.name, tuple(c.name for c in fk.columns), fk.referred_table.name,
                tuple(e.column.name for e in fk.elements))

    removed = {sig(d[1]) for d in diffs if isinstance(d, tuple) and d[0] == "remove_fk"}
    added = {sig(d[1]) for d in diffs if isinstance(d, tuple) and d[0] == "add_fk"}
    paired = removed & added
    return [d for d in diffs if not (isinstance(d, tuple) and d[0] in ("remove_fk", "add_fk") and sig(d[1]) in paired)]


def _differences(db: Path, tables: set[str]) -> list[Any]:
    metadata_tables = {t.name: t for t in models.Base.metadata.sorted_tables}
    engine = create_engine(f"sqlite:///{db}")
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"compare_type": True, "compare_server_default": True, "include_object": _include}
            )
            diffs = compare_metadata(context, models.Base.metadata)
    finally:
        engine.dispose()

    def table_of(diff: Any) -> str:
        item = diff[0] if isinstance(diff, list) else diff
        if item[0] in ("add_table", "remove_table"):
            return str(item[1].name)
        if item[0] in ("add_column", "remove_column", "modify_nullable", "modify_type", "modify_default"):
            return str(item[2])
        if item[0] in ("add_index", "remove_index"):
            return str(item[1].table.name)
        return str(item[1].table.name)  # constraints and foreign keys

    diffs = [d for d in _fk_options_only(diffs) if table_of(d) in tables and not _pk_nullable(d, metadata_tables)]
    return diffs


def _check_on_delete(db: Path, tables: set[str]) -> None:
    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    try:
        for table in sorted(tables):
            in_file = {(r[3], r[2], r[4]): r[6] for r in conn.execute(f"PRAGMA foreign_key_list({table})")}
            in_model = {
                (fk.parent.name, fk.column.table.name, fk.column.name): (fk.ondelete or "NO ACTION").upper()
                for fk in models.Base.metadata.tables[table].foreign_keys
            }
            assert in_file == in_model, table
    finally:
        conn.close()


def _check_unique_sets(db: Path, tables: set[str]) -> None:
    engine = create_engine(f"sqlite:///{db}")
    try:
        inspector = inspect(engine)
        for table in sorted(tables):
            in_file = {tuple(sorted(u["column_names"])) for u in inspector.get_unique_constraints(table)}
            model = models.Base.metadata.tables[table]
            in_model = {tuple(sorted(c.name for c in u.columns)) for u in model.constraints if isinstance(u, UniqueConstraint)}
            in_model |= {(c.name,) for c in model.columns if c.unique}
            assert in_file == in_model, table
    finally:
        engine.dispose()


def _new_file_tables() -> set[str]:
    return set(models.Base.metadata.tables) - NOT_IN_A_NEW_FILE


def test_a_new_file_is_what_the_models_describe(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    reportdb.open(db, "a").close()
    tables = _new_file_tables()
    conn = sqlite3.connect(db)
    in_file = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    conn.close()
    assert in_file == tables | {schema.VERSION_TABLE}  # every model's table is there, and nothing else
    assert _differences(db, tables) == []
    _check_on_delete(db, tables)
    _check_unique_sets(db, tables)


def test_the_comparison_finds_a_model_that_drifts(tmp_path: Path) -> None:
    """The check is not vacuous: a column, an index or a UNIQUE key the file lacks is reported."""
    db = tmp_path / "db.sqlite"
    reportdb.open(db, "a").close()
    conn = sqlite3.connect(db)
    conn.execute("DROP INDEX ix_rdb_shard_blob_id")
    conn.execute("ALTER TABLE stack_traces DROP COLUMN operation_id")
    conn.execute("CREATE TABLE t2 (operation_id int, name text, duration float, rank int NOT NULL DEFAULT 0)")
    conn.execute("INSERT INTO t2 SELECT * FROM operations")
    conn.execute("DROP TABLE operations")
    conn.execute("ALTER TABLE t2 RENAME TO operations")  # the same columns, without UNIQUE(operation_id, rank)
    conn.commit()
    conn.close()
    found = {(d[0] if isinstance(d, tuple) else d[0][0]) for d in _differences(db, _new_file_tables())}
    assert found == {"add_index", "add_column", "add_constraint"}  # the index, the column, the unnamed UNIQUE key
    with pytest.raises(AssertionError, match="operations"):
        _check_unique_sets(db, {"operations"})


def test_tables_the_writer_creates_match_the_models(tmp_path: Path) -> None:
    """A report table a file lacks is created by the Writer from its model: the same columns, types, defaults, keys,
    indexes and references as a new file's (``buffer_pages``, which no new file has, through the Writer itself)."""
    with Writer(tmp_path) as w:
        w.add_rows("buffer_pages", [{"operation_id": 1, "page_index": 0}])
        w.put_tensor(1, np.zeros(2))
    db = tmp_path / "db.sqlite"
    assert _differences(db, {"buffer_pages"}) == []
    _check_unique_sets(db, {"buffer_pages"})
    every = tmp_path / "every.sqlite"
    report_tables = {m.__tablename__ for m in models.REPORT_MODELS}
    conn = sqlite3.connect(every)
    conn.execute("PRAGMA foreign_keys=ON")
    for table in sorted(report_tables, key=lambda t: t != "source_files"):  # referenced first
        for statement in create_table_sql(table):
            conn.execute(statement)
    conn.commit()
    conn.close()
    assert _differences(every, report_tables) == []
    _check_on_delete(every, report_tables)
    _check_unique_sets(every, report_tables)


def test_the_version_table_is_named_in_one_place(tmp_path: Path) -> None:
    """migrations/env.py takes the version table's name from the module that reads it at open time."""
    import reportdb.migrations

    env = (Path(reportdb.migrations.__file__).parent / "env.py").read_text()
    assert "from reportdb.store.schema import VERSION_TABLE" in env and schema.VERSION_TABLE not in env
    db = tmp_path / "db.sqlite"
    reportdb.open(db, "a").close()
    conn = sqlite3.connect(db)
    assert conn.execute(f"SELECT version_num FROM {schema.VERSION_TABLE}").fetchone() == (schema.head_revision(),)
    conn.close()
