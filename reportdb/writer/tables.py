"""The report tables of the file a Writer appends to: their columns and keys, the checks a row passes when it is
added, the SQL that writes a batch's rows, and ``CREATE TABLE`` for a report table the file lacks.

A report of any age can be appended to (a new one, one ``reportdb.migrate`` made of a 2024 report, ttnn 0.81's), so
the writer reads the file's own tables once per open (:class:`FileTables`) and checks every row against them when it
is added: a row the file cannot take is refused then, with a ``ReportDBError``, and never costs a batch at flush time.
Columns the writer fills on its own (``tensors.storage_type`` and ``size``...) are left out where the file lacks them.
A file whose tables have no ``rank`` column (ttnn before multi-host runs) keeps its schema as ttnn wrote it, since the
visualizer reads a report by the columns it finds: rank 0 is written there without the column, another rank is refused
(its rows could not be told from rank 0's, and such files key ``tensors`` and ``operations`` on the id alone). A report
table the file lacks is created, in the transaction of its first rows, as its model in ``reportdb.models`` declares it.
Every name a file holds is quoted (:func:`quote`), so any table or column name is safe in SQL.
"""

from __future__ import annotations

import functools
import sqlite3
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from ..errors import ReportDBError, RowError, excerpt
from ..store.engine import quoted
from .values import TensorItem, bindable, int64

#: A queued report row: its table, the columns it fills and their values.
Row = tuple[str, tuple[str, ...], tuple[Any, ...]]
#: A queued operation: operation id, rank, name and duration (None keeps the one stored).
Operation = tuple[int, int, str | None, float | None]

#: The ``tensors`` row columns the writer fills, those the file's table lacks left out.
_TENSOR_ROW = ("shape", "dtype", "layout", "memory_config", "device_id", "address", "buffer_type", "storage_type", "size")
#: The rows ``add_operation`` writes, by table: their columns, ``rank`` added where the file's table has it.
_OPERATION_ROWS: dict[str, tuple[str, ...]] = {
    "operations": ("operation_id", "name", "duration"),
    "operation_arguments": ("operation_id", "name", "value"),
    "stack_traces": ("operation_id", "stack_trace"),
    "input_tensors": ("operation_id", "input_index", "tensor_id"),
    "output_tensors": ("operation_id", "output_index", "tensor_id"),
}


@functools.lru_cache(maxsize=None)
def _model_tables() -> dict[str, Any]:
    """The SQLAlchemy ``Table`` of every report table, from the ORM models (the newest schema, plus ``buffer_pages``)."""
    from ..models import REPORT_MODELS

    return {m.__tablename__: m.__table__ for m in REPORT_MODELS}


@functools.lru_cache(maxsize=None)
def _model_columns(table: str) -> tuple[str, ...] | None:
    """The columns a report table the file lacks is created with, or None for a name that is no report table."""
    model = _model_tables().get(table)
    return None if model is None else tuple(c.name for c in model.columns if c.name != "rowid")


def create_table_sql(table: str) -> list[str]:
    """``CREATE TABLE IF NOT EXISTS`` (and its indexes) for a report table as its model declares it, with the report
    schema's type names: NOT NULL, defaults, the integer key, references and UNIQUE constraints included."""
    from sqlalchemy import Float, Integer, UniqueConstraint

    model = _model_tables()[table]
    body = []
    for column in model.columns:
        if column.name == "rowid":  # SQLite's own, mapped by the model, never declared
            continue
        if column.primary_key:
            decl = f"{quoted(column.name)} INTEGER PRIMARY KEY"
        else:
            kind = "int" if isinstance(column.type, Integer) else "float" if isinstance(column.type, Float) else "text"
            decl = f"{quoted(column.name)} {kind}" + (" UNIQUE" if column.unique else "")
            decl += "" if column.nullable else " NOT NULL"
            if column.server_default is not None:
                decl += f" DEFAULT {column.server_default.arg}"
        for fk in column.foreign_keys:
            decl += f" REFERENCES {quoted(fk.column.table.name)}({quoted(fk.column.name)})"
        body.append(decl)
    for constraint in model.constraints:
        if isinstance(constraint, UniqueConstraint):
            body.append(f"UNIQUE({', '.join(quoted(c.name) for c in constraint.columns)})")
    statements = [f"CREATE TABLE IF NOT EXISTS {quoted(table)} ({', '.join(body)})"]
    for index in model.indexes:
        columns = ", ".join(quoted(c.name) for c in index.columns)
        statements.append(f"CREATE INDEX IF NOT EXISTS {quoted(str(index.name))} ON {quoted(table)} ({columns})")
    return statements


def _file_tables(conn: sqlite3.Connection) -> dict[str, tuple[str, ...]]:
    """The report tables of the file and their columns: every plain table but SQLite's, reportdb's own (``rdb_*``)
    and alembic's version table."""
    from ..store.schema import VERSION_TABLE

    tables = {}
    for name, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE type='table'").fetchall():
        if name.startswith(("sqlite_", "rdb_")) or name == VERSION_TABLE or str(sql).lstrip().upper().startswith("CREATE VIRTUAL"):
            continue
        tables[name] = tuple(r[1] for r in conn.execute(f"PRAGMA table_info({quoted(name)})"))
    return tables


def _unique_tensor_rows(conn: sqlite3.Connection, columns: Sequence[str]) -> bool:
    """Whether the ``tensors`` table is keyed on exactly the ids the writer checks: UNIQUE(tensor_id, rank) in the
    newest report schema, UNIQUE(tensor_id) in a report from before ranks (``columns`` has no ``rank``)."""
    if not columns:
        return False
    key = {"tensor_id", "rank"} if "rank" in columns else {"tensor_id"}
    for _, name, unique, *_ in conn.execute("PRAGMA index_list(tensors)").fetchall():
        if unique and {r[2] for r in conn.execute(f"PRAGMA index_info({quoted(name)})")} == key:
            return True
    return False


def _grouped(rows: list[Row]) -> Iterator[tuple[tuple[str, tuple[str, ...]], list[tuple[Any, ...]]]]:
    """Consecutive rows for the same table and columns, so each run becomes one ``executemany``."""
    start = 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or rows[i][:2] != rows[start][:2]:
            yield rows[start][:2], [r[2] for r in rows[start:i]]
            start = i


class FileTables:
    """The report tables of one open file and their columns, read once per open: rows are checked against them when
    they are added and written with them when their batch commits. Tables a batch creates join once it commits
    (:meth:`commit`)."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self._tables = _file_tables(conn)
        #: The ``tensors`` table is keyed on (tensor_id[, rank]): ``INSERT OR IGNORE`` alone skips stored ids.
        self._unique_rows = _unique_tensor_rows(conn, self._tables.get("tensors", ()))
        self._op_shapes: dict[str, tuple[tuple[str, ...], bool]] | None = None  # see operation_shapes
        self._tensors_ranked: bool | None = None  # see tensor_rows_ranked

    # --- checks when a row is added ---------------------------------------------------------------

    def columns(self, table: str) -> tuple[str, ...]:
        """The columns rows of ``table`` may fill: the file's own, or, for a report table the file lacks, those its
        model creates it with. Any other name is refused."""
        columns = self._tables.get(table)
        if columns is None:
            columns = _model_columns(table)
            if columns is None:
                raise RowError(
                    f"{self.path}: unknown report table {table!r}; this report has {sorted(self._tables)}, and reportdb "
                    f"can create {sorted(set(_model_tables()) - set(self._tables))}"
                )
        return columns

    def no_columns(self, table: str, missing: Iterable[str]) -> ReportDBError:
        """The error for columns a row asks for that the file's ``table`` lacks, saying why where it is the age."""
        missing = sorted(missing)
        have = self.columns(table)
        newer = [c for c in missing if c in (_model_columns(table) or ())]
        why = f" (newer reports have {', '.join(newer)}; an older ttnn wrote this one)" if newer else ""
        return RowError(f"{self.path}: table {table!r} of this report has no columns {missing}{why}; it has {list(have)}")

    def rank_refused(self, table: str, rank: int) -> ReportDBError:
        """The error for a row of a rank other than 0 in a table without a rank column."""
        return RowError(
            f"{self.path}: table {table!r} of this report has no rank column (ttnn wrote it before multi-host runs), "
            f"so only rank 0 can be written to it, not rank {rank}; write other ranks to a new report"
        )

    def tensor_rows_ranked(self) -> bool:
        """Whether the file's ``tensors`` rows carry a rank; checked once per open that they can carry a tensor id."""
        ranked = self._tensors_ranked
        if ranked is None:
            have = self.columns("tensors")
            if "tensor_id" not in have:
                raise self.no_columns("tensors", ["tensor_id"])
            ranked = self._tensors_ranked = "rank" in have
        return ranked

    def check_tensor_row(self, row_extra: Mapping[str, Any]) -> None:
        """Refuse ``tensors`` row fields asked for explicitly that the file's table lacks, rather than drop them."""
        have = self.columns("tensors")
        if any(k not in have for k in row_extra):
            raise self.no_columns("tensors", (k for k in row_extra if k not in have))

    def operation_shapes(self, rank: int) -> dict[str, tuple[tuple[str, ...], bool]]:
        """For each table ``add_operation`` writes, the columns of its rows and whether ``rank`` is one of them (where
        the file's table has the column), checked against the file once per open; a rank other than 0 is refused
        where a table has no rank column."""
        shapes = self._op_shapes
        if shapes is None:
            shapes = {}
            for table, columns in _OPERATION_ROWS.items():
                have = self.columns(table)
                if any(c not in have for c in columns):
                    raise self.no_columns(table, (c for c in columns if c not in have))
                shapes[table] = ((*columns, "rank"), True) if "rank" in have else (columns, False)
            self._op_shapes = shapes
        if rank:
            for table, (_, ranked) in shapes.items():
                if not ranked:
                    raise self.rank_refused(table, rank)
        return shapes

    def operation_rows(
        self,
        operation_id: int,
        name: str,
        duration: float | None,
        rank: int,
        arguments: Mapping[str, Any] | Iterable[tuple[str, Any]] | None,
        stack_trace: str | Sequence[str] | None,
        inputs: Sequence[int],
        outputs: Sequence[int],
    ) -> tuple[Operation, list[Row]]:
        """``add_operation``'s operation and its argument, stack-trace and tensor-link rows, every value checked now."""
        shapes = self.operation_shapes(rank)
        op = int64(operation_id, "operations", "operation_id")
        name = bindable(name, "operations", "name")
        rows: list[Row] = []
        if arguments is not None:
            columns, ranked = shapes["operation_arguments"]
            pairs = arguments.items() if isinstance(arguments, Mapping) else arguments
            for arg_name, value in pairs:
                key, text = str(arg_name), value if isinstance(value, str) else str(value)
                if not (key.isascii() and text.isascii()):  # text SQLite cannot take fails here, not at flush
                    bindable(key, "operation_arguments", "name")
                    bindable(text, "operation_arguments", "value")
                rows.append(("operation_arguments", columns, (op, key, text, rank) if ranked else (op, key, text)))
        if stack_trace is not None:
            text = stack_trace if isinstance(stack_trace, str) else "\n".join(stack_trace)
            text = bindable(text, "stack_traces", "stack_trace")
            columns, ranked = shapes["stack_traces"]
            rows.append(("stack_traces", columns, (op, text, rank) if ranked else (op, text)))
        for table, tids in (("input_tensors", inputs), ("output_tensors", outputs)):
            columns, ranked = shapes[table]
            for index, tid in enumerate(tids):
                tid = int64(tid, table, "tensor_id")
                rows.append((table, columns, (op, index, tid, rank) if ranked else (op, index, tid)))
        return (op, rank, name, None if duration is None else float(duration)), rows

    def table_rows(self, table: str, rows: Iterable[Mapping[str, Any]], default_rank: int) -> list[Row]:
        """``add_rows``'s rows, each checked against the file's columns and its values against what SQLite stores;
        ``rank`` filled in, left out or refused as the module docstring says."""
        have = self.columns(table)
        has_rank = "rank" in have
        ranked_table = has_rank or "rank" in (_model_columns(table) or ())
        out: list[Row] = []
        for row in rows:
            values = dict(row)
            explicit = "rank" in values
            rank = values.pop("rank", default_rank)
            if not isinstance(rank, (int, np.integer)) or isinstance(rank, bool):
                raise RowError(f"table {table!r}: rank must be an integer, not {rank!r}")
            missing = [c for c in values if c not in have]
            if missing:
                raise self.no_columns(table, missing)
            if has_rank:
                values["rank"] = int(rank)
            elif rank and (explicit or ranked_table):
                raise self.rank_refused(table, int(rank))
            out.append((table, tuple(values), tuple(bindable(v, table, c) for c, v in values.items())))
        return out

    # --- writing a batch, inside its transaction ------------------------------------------------

    def commit(self, created: Mapping[str, tuple[str, ...]]) -> None:
        """The tables a committed batch created, with their columns, are the file's from now on."""
        self._tables.update(created)

    def _ensure_table(self, conn: sqlite3.Connection, table: str, created: dict[str, tuple[str, ...]]) -> None:
        """Create a report table the file lacks (legacy ttnn's ``buffer_pages`` in a report with the newest schema,
        say) as its model declares it, in the batch's transaction, so its rows are not lost."""
        if table in self._tables or table in created:
            return
        for statement in create_table_sql(table):
            conn.execute(statement)
        created[table] = tuple(r[1] for r in conn.execute(f"PRAGMA table_info({quoted(table)})"))
        if table == "tensors":
            self._unique_rows = _unique_tensor_rows(conn, created[table])

    def write_rows(
        self,
        conn: sqlite3.Connection,
        operations: list[Operation],
        rows: list[Row],
        refused: list[str],
        created: dict[str, tuple[str, ...]],
    ) -> None:
        """A batch's operations and report rows, set-based; when one breaks a constraint of the file, all of them
        again one by one, leaving out (and noting in ``refused``) those that fail."""
        if not operations and not rows:
            return
        for table in dict.fromkeys([*(["operations"] if operations else []), *(r[0] for r in rows)]):
            self._ensure_table(conn, table, created)
        conn.execute("SAVEPOINT rdb_rows")
        try:
            self._insert_rows(conn, operations, rows, None)
        except sqlite3.IntegrityError:
            conn.execute("ROLLBACK TO rdb_rows")
            self._insert_rows(conn, operations, rows, refused)
        conn.execute("RELEASE rdb_rows")

    def _insert_rows(
        self, conn: sqlite3.Connection, operations: list[Operation], rows: list[Row], refused: list[str] | None
    ) -> None:
        """Insert the rows: by ``executemany`` when ``refused`` is None, else row by row into ``refused``."""

        def run(sql: str, values_list: list[tuple[Any, ...]], table: str) -> None:
            if refused is None:
                conn.executemany(sql, values_list)
                return
            for values in values_list:
                try:
                    conn.execute(sql, values)  # a failed statement undoes itself; the transaction goes on
                except sqlite3.IntegrityError as exc:
                    refused.append(f"{table} {excerpt(values)}: {exc}")

        if operations:
            ranked = "rank" in self.columns("operations")
            where, extra = (" AND rank=?", ", rank") if ranked else ("", "")
            update = f"UPDATE operations SET name=?, duration=COALESCE(?, duration) WHERE operation_id=?{where}"
            insert = f"INSERT INTO operations(operation_id, name, duration{extra}) VALUES (?, ?, ?{', ?' if ranked else ''})"
            for op, rank, name, duration in operations:
                key = (op, rank) if ranked else (op,)
                if not conn.execute(update, (name, duration, *key)).rowcount:
                    run(insert, [(op, name, duration, *key[1:])], "operations")
        for (table, columns), group in _grouped(rows):
            names = ", ".join(quoted(c) for c in columns)
            run(f"INSERT INTO {quoted(table)}({names}) VALUES ({', '.join('?' * len(columns))})", group, table)

    def write_tensor_rows(
        self, conn: sqlite3.Connection, items: list[TensorItem], created: dict[str, tuple[str, ...]]
    ) -> None:
        """The legacy ``tensors`` rows of a batch's tensors, filling the columns the file's table has.

        Where the table is keyed on the tensor id (and rank), ``INSERT OR IGNORE`` lets that key skip ids already
        stored, about 3x faster than probing for each with ``NOT EXISTS``, which only files without the key need.
        Either way a row that breaks a key of another shape (a legacy ``UNIQUE(tensor_id)`` in a file that has ranks)
        is left out, not the batch.
        """
        self._ensure_table(conn, "tensors", created)
        have = created.get("tensors") or self._tables["tensors"]
        columns = [c for c in _TENSOR_ROW if c in have]
        ranked = "rank" in have
        names = ", ".join(("tensor_id", *columns, *(("rank",) if ranked else ())))
        width = 1 + len(columns) + ranked
        rows = [
            (item.tensor_id, *(item.row.get(c) for c in columns), *((item.rank,) if ranked else ())) for item in items
        ]
        if self._unique_rows:
            conn.executemany(f"INSERT OR IGNORE INTO tensors({names}) VALUES ({', '.join('?' * width)})", rows)
        else:
            key = "tensor_id=? AND rank=?" if ranked else "tensor_id=?"
            conn.executemany(
                f"INSERT OR IGNORE INTO tensors({names}) SELECT {', '.join('?' * width)}"
                f" WHERE NOT EXISTS (SELECT 1 FROM tensors WHERE {key})",
                [(*row, item.tensor_id, *((item.rank,) if ranked else ())) for row, item in zip(rows, items)],
            )
