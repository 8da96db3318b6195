"""The operations of a report as a graph of tensors: which operation produced each tensor, which consume it, and the
dtype a policy judges it by. Read from the report tables (``operations``, ``input_tensors``, ``output_tensors``,
``tensors``) of every report age: a missing table or column reads as empty, never as an error.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ..errors import CorruptionError
from ..results import Result

if TYPE_CHECKING:
    from ..report import Report
    from ..store.rows import TensorInfo


def table_columns(conn: Any, table: str) -> set[str]:
    """The columns a report table has (none when it is absent): older reports lack ``rank`` and some tables. A view
    under a table's name is no report table and reads as absent: a report's view can be made to run until the
    statement bound stops it (an endless recursive one named ``operations``)."""
    found = conn.exec_driver_sql(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE", (table,)
    ).fetchone()
    return {r[1] for r in conn.exec_driver_sql(f"PRAGMA table_info({table})")} if found else set()


#: Rows fetched per call into SQLite when a whole table is read.
FETCH_ROWS = 1 << 14


def ranked_rows(conn: Any, sql: str, table: str, rank: int) -> list[tuple[Any, ...]]:
    """The rows of ``sql`` (its ``{where}`` replaced by a rank filter when ``table`` has a ``rank`` column), none when
    ``table`` is absent; reports without a ``rank`` column hold one rank."""
    columns = table_columns(conn, table)
    if not columns:
        return []
    ranked = "rank" in columns
    sql = sql.format(where=" WHERE rank=?" if ranked else "")
    # the report's own sqlite3 cursor, a batch per call: row by row through SQLAlchemy cost ~7 us a row (a graph of
    # 10^6 edges read in 9 s); a batch keeps each call's time bound (engine.STATEMENT_TIMEOUT) whatever the table's size
    cursor = conn.connection.driver_connection.execute(sql, (rank,) if ranked else ())
    rows: list[tuple[Any, ...]] = []
    while batch := cursor.fetchmany(FETCH_ROWS):
        rows.extend(batch)
    return rows


@dataclass(frozen=True)
class OperationRef(Result):
    """An operation by id and name: a link in the CLI's and the page's views, or one run's operation without a partner
    in the other."""

    operation_id: int
    name: str


@dataclass
class TensorGraph:
    """One rank of a report: operation names in id order, each tensor's producer (operation id, output index), the
    operations consuming it, and each tensor's dtype as recorded (``DataType.BFLOAT8_B``), where the report says."""

    names: dict[int, str] = field(default_factory=dict)
    producer: dict[int, tuple[int, int]] = field(default_factory=dict)
    consumers: dict[int, list[int]] = field(default_factory=dict)
    inputs: dict[int, list[int]] = field(default_factory=dict)
    outputs: dict[int, dict[int, int]] = field(default_factory=dict)
    dtypes: dict[int, str] = field(default_factory=dict)

    def op_name(self, tensor_id: int) -> str | None:
        """The name of the operation that produced ``tensor_id``, None when no operation lists it as an output."""
        made = self.producer.get(tensor_id)
        return None if made is None else self.names.get(made[0])

    def order(self, tensor_id: int) -> tuple[int, int]:
        """The execution-order key of a tensor: its producer's id and output index (unproduced tensors last)."""
        return self.producer.get(tensor_id, (1 << 62, tensor_id))


def tensor_graph(report: "Report", rank: int = 0) -> TensorGraph:
    """The graph of one rank of ``report`` (see :class:`TensorGraph`)."""
    try:
        return _read_graph(report, rank)
    except (TypeError, ValueError) as exc:  # an id column holding text or a float that is no integer
        raise CorruptionError(
            f"{report.path}: the operation tables (operations, input_tensors, output_tensors, tensors) hold an id that "
            f"is not an integer ({exc}); the report was damaged or written by another tool: migrate it again"
        ) from exc


def _read_graph(report: "Report", rank: int) -> TensorGraph:
    graph = TensorGraph()
    with report.session() as session:
        conn = session.connection()
        for op_id, name in ranked_rows(conn, "SELECT operation_id, name FROM operations{where} ORDER BY operation_id",
                                       "operations", rank):
            graph.names[int(op_id)] = name or ""
        for op_id, index, tensor_id in ranked_rows(
            conn, "SELECT operation_id, output_index, tensor_id FROM output_tensors{where}", "output_tensors", rank
        ):
            if int(index) < 0:  # read as an index from the end, it would name another output
                raise CorruptionError(
                    f"{report.path}: output_tensors gives operation {op_id} the output index {index}, and an index is 0 "
                    "or more; the report was damaged or written by another tool: migrate it again"
                )
            graph.outputs.setdefault(int(op_id), {})[int(index)] = int(tensor_id)
            graph.producer.setdefault(int(tensor_id), (int(op_id), int(index)))
        for op_id, _index, tensor_id in ranked_rows(
            conn, "SELECT operation_id, input_index, tensor_id FROM input_tensors{where} ORDER BY operation_id, input_index",
            "input_tensors", rank,
        ):
            op, tensor = int(op_id), int(tensor_id)
            graph.inputs.setdefault(op, []).append(tensor)
            users = graph.consumers.setdefault(tensor, [])
            if not users or users[-1] != op:  # rows come in operation order: an operation's repeats are adjacent
                users.append(op)
        for tensor, users in graph.consumers.items():  # ids stored as text sort apart from integers: drop repeats left
            if len(users) > 1:
                graph.consumers[tensor] = list(dict.fromkeys(users))
        if "dtype" in table_columns(conn, "tensors"):
            for tensor_id, dtype in ranked_rows(conn, "SELECT tensor_id, dtype FROM tensors{where}", "tensors", rank):
                if dtype:
                    graph.dtypes[int(tensor_id)] = str(dtype)
    return graph


def judged_dtype(report: "Report", graph: TensorGraph, tensor_id: int, rank: int,
                 info_of: "Callable[[int], TensorInfo] | None" = None) -> str:
    """The dtype a policy judges a stored tensor by: the hardware dtype where known (BFLOAT8_B stays BFLOAT8_B although
    its values are stored as bfloat16), else the stored one (its metadata from ``info_of`` when given, else the
    report)."""
    recorded = graph.dtypes.get(tensor_id)
    if recorded:
        return recorded
    info = info_of(tensor_id) if info_of is not None else report.tensor_info(tensor_id, rank)
    return info.spec.ttnn_dtype or info.dtype


@contextmanager
def opened(report: "Report | str | Path") -> Iterator["Report"]:
    """The report itself, or the report at a path opened for reading (and closed afterwards): the analysis functions
    take either, as ``verify`` and ``migrate`` take paths."""
    if isinstance(report, (str, Path)):
        from ..report import open as open_report

        with open_report(report, "r") as opened_report:
            yield opened_report
    else:
        yield report
