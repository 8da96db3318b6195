"""An operation's context: everything the report holds about one operation, in one result.

Its name, arguments, stack trace (with the source lines of each frame the report's ``source_files`` hold), duration,
device, and each input and output tensor with the operation that produced it, the operations that consume it, and
the tensor's golden comparisons recomputed and judged by the tolerance policy (with the output's role). Tables an
older report lacks read as empty.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgumentError
from ..results import Result
from .culprits import assign_roles
from .records import GoldenRecord, golden_records, recompute
from .graph import OperationRef, TensorGraph, opened, ranked_rows, table_columns, tensor_graph
from .policy import as_policy

if TYPE_CHECKING:
    from ..report import Report
    from .policy import Policy

#: Lines of source shown around a frame's line (before, after).
CONTEXT_LINES = (2, 2)
#: Consumers listed per tensor: a weight read by every operation of a long run would put 10^6 links in each listing
#: of it (the graph, ``tensor_graph(report).consumers``, has them all).
CONSUMERS_LISTED = 32
_FRAME = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+)')


@dataclass(frozen=True)
class SourceLines(Result):
    """A stack frame's file and line, and the lines around it the report holds (``first_line`` numbers ``lines[0]``)."""

    path: str
    line: int
    first_line: int
    lines: tuple[str, ...]


@dataclass(frozen=True)
class TensorComparison(Result):
    """One golden record of a tensor, recomputed: kind, golden tensor, recorded and recomputed PCC, the verdict with
    its failed criteria, and the output's role; ``status`` says why it was not compared."""

    kind: str
    golden_tensor_id: int | None
    recorded_pcc: float | None
    pcc: float | None
    sqnr_db: float | None
    max_abs_error: float | None
    verdict: str | None
    failed: tuple[str, ...]
    role: str | None
    status: str


@dataclass(frozen=True)
class TensorContext(Result):
    """An input or output of the operation: its index, the report's row (shape, dtype, layout, memory config, device),
    whether its values are stored, who produced it, who consumes it (the first :data:`CONSUMERS_LISTED` in execution
    order; ``consumer_count`` says how many in all), and its golden comparisons."""

    index: int
    tensor_id: int
    shape: str | None
    dtype: str | None
    layout: str | None
    memory_config: str | None
    device_id: int | None
    stored: bool
    producer: OperationRef | None
    consumers: tuple[OperationRef, ...]
    consumer_count: int
    comparisons: tuple[TensorComparison, ...]


@dataclass(frozen=True)
class OperationContext(Result):
    """One operation of one rank (see the module docstring); ``devices`` are the ``devices`` rows of the devices its
    tensors are on."""

    operation_id: int
    rank: int
    name: str
    duration: float | None
    arguments: tuple[tuple[str, str | None], ...]
    stack_trace: str | None
    source: tuple[SourceLines, ...]
    device_ids: tuple[int, ...]
    devices: tuple[dict[str, Any], ...]
    inputs: tuple[TensorContext, ...]
    outputs: tuple[TensorContext, ...]


def operation_context(
    report: "Report | str | Path", operation_id: int, *, rank: int = 0, policy: "Policy | str | Path | None" = None
) -> OperationContext:
    """The context of operation ``operation_id`` of ``rank`` (see the module docstring); ``report`` is a Report or a
    path. InvalidArgumentError when the report has no such operation."""
    judge = as_policy(policy)
    with opened(report) as rep:
        graph = tensor_graph(rep, rank)
        if operation_id not in graph.names:
            raise InvalidArgumentError(
                f"{rep.path} has no operation {operation_id} on rank {rank}"
                + (f" (operations {min(graph.names)}-{max(graph.names)})" if graph.names else " (it records no operations)")
            )
        with rep.session() as session:
            conn = session.connection()
            rows = _operation_rows(conn, operation_id, rank)
            tensor_rows = {int(r[0]): r for r in ranked_rows(
                conn, "SELECT tensor_id, shape, dtype, layout, memory_config, device_id FROM tensors{where}", "tensors", rank
            )} if {"shape", "dtype", "layout", "memory_config", "device_id"} <= table_columns(conn, "tensors") else {}
            source = tuple(_source_lines(conn, rows["stack_trace"] or ""))
        inputs = graph.inputs.get(operation_id, [])
        outputs = [t for _, t in sorted(graph.outputs.get(operation_id, {}).items())]
        comparisons = _comparisons(rep, graph, rank, set(inputs) | set(outputs), judge)
        tensors = [_tensors(rep, graph, rank, ids, tensor_rows, comparisons) for ids in (inputs, outputs)]
        device_ids = tuple(sorted({t.device_id for t in (*tensors[0], *tensors[1]) if t.device_id is not None}))
        with rep.session() as session:
            devices = tuple(_devices(session.connection(), device_ids, rank))
    return OperationContext(
        operation_id=operation_id, rank=rank, name=graph.names[operation_id], duration=rows["duration"],
        arguments=rows["arguments"], stack_trace=rows["stack_trace"], source=source, device_ids=device_ids,
        devices=devices, inputs=tensors[0], outputs=tensors[1],
    )


def _operation_rows(conn: Any, operation_id: int, rank: int) -> dict[str, Any]:
    """The operation's duration, arguments (in row order) and stack trace (the rows joined, None without any)."""
    ranked = "rank" in table_columns(conn, "operations")
    where, params = ("operation_id=? AND rank=?", (operation_id, rank)) if ranked else ("operation_id=?", (operation_id,))
    duration = None
    if "duration" in table_columns(conn, "operations"):
        found = conn.exec_driver_sql(f"SELECT duration FROM operations WHERE {where}", params).fetchone()
        duration = None if found is None or found[0] is None else float(found[0])

    def select(table: str, columns: str) -> list[tuple[Any, ...]]:
        have = table_columns(conn, table)
        if not have or not set(columns.split(", ")) <= have:
            return []
        clause = where if "rank" in have else "operation_id=?"
        return [tuple(r) for r in conn.exec_driver_sql(
            f"SELECT {columns} FROM {table} WHERE {clause} ORDER BY rowid", params if "rank" in have else (operation_id,)
        )]

    arguments = tuple((str(n), None if v is None else str(v)) for n, v in select("operation_arguments", "name, value"))
    traces = [str(t) for (t,) in select("stack_traces", "stack_trace") if t]
    return {"duration": duration, "arguments": arguments, "stack_trace": "\n".join(traces) if traces else None}


def _source_lines(conn: Any, stack_trace: str) -> list[SourceLines]:
    """The lines around each frame of ``stack_trace`` whose file the report's ``source_files`` hold."""
    if not {"path", "contents"} <= table_columns(conn, "source_files"):
        return []
    out = []
    for match in _FRAME.finditer(stack_trace):
        path, line = match["path"], int(match["line"])
        found = conn.exec_driver_sql("SELECT contents FROM source_files WHERE path=?", (path,)).fetchone()
        if found is None or not isinstance(found[0], str):
            continue
        lines = found[0].splitlines()
        first = max(1, line - CONTEXT_LINES[0])
        last = min(len(lines), line + CONTEXT_LINES[1])
        if first <= last:
            out.append(SourceLines(path, line, first, tuple(lines[first - 1 : last])))
    return out


def _comparisons(
    report: "Report", graph: TensorGraph, rank: int, tensor_ids: set[int], policy: "Policy"
) -> dict[int, tuple[TensorComparison, ...]]:
    """The golden records of ``tensor_ids`` recomputed and judged, with roles, by tensor."""
    records: list[GoldenRecord] = [r for r in golden_records(report) if r.rank == rank and r.tensor_id in tensor_ids]
    results = assign_roles([recompute(report, r, policy, graph, explicit_pcc=False) for r in records], {rank: graph})
    out: dict[int, list[TensorComparison]] = {}
    for r in results:
        m = r.metrics
        out.setdefault(r.tensor_id, []).append(TensorComparison(
            r.kind, r.golden_tensor_id, r.recorded_pcc, None if m is None else m.pcc, None if m is None else m.sqnr_db,
            None if m is None else m.max_abs_error, r.verdict, r.failed, r.role, r.status,
        ))
    return {k: tuple(v) for k, v in out.items()}


def _tensors(
    report: "Report", graph: TensorGraph, rank: int, ids: list[int], rows: dict[int, tuple[Any, ...]],
    comparisons: dict[int, tuple[TensorComparison, ...]],
) -> tuple[TensorContext, ...]:
    """The inputs or outputs ``ids`` in order, each tensor looked up once however often the operation lists it."""
    first: dict[int, TensorContext] = {}
    listed = []
    for index, t in enumerate(ids):
        seen = first.get(t)
        if seen is None:
            seen = first[t] = _tensor(report, graph, rank, index, t, rows.get(t), comparisons.get(t, ()))
        listed.append(seen if seen.index == index else replace(seen, index=index))
    return tuple(listed)


def _tensor(
    report: "Report", graph: TensorGraph, rank: int, index: int, tensor_id: int, row: tuple[Any, ...] | None,
    comparisons: tuple[TensorComparison, ...],
) -> TensorContext:
    """One input or output with its links: the producer, the consumers."""
    made = graph.producer.get(tensor_id)
    producer = None if made is None else OperationRef(made[0], graph.names.get(made[0], ""))
    users = graph.consumers.get(tensor_id, [])
    consumers = tuple(OperationRef(o, graph.names.get(o, "")) for o in users[:CONSUMERS_LISTED])
    _, shape, dtype, layout, memory_config, device_id = row if row is not None else (None,) * 6
    return TensorContext(
        index, tensor_id, None if shape is None else str(shape), None if dtype is None else str(dtype),
        None if layout is None else str(layout), None if memory_config is None else str(memory_config),
        device_id if isinstance(device_id, int) else None, report.has_tensor(tensor_id, rank), producer, consumers,
        len(users), comparisons,
    )


def _devices(conn: Any, device_ids: tuple[int, ...], rank: int) -> list[dict[str, Any]]:
    """The ``devices`` rows of ``device_ids`` as dicts (none when the table is absent)."""
    columns = table_columns(conn, "devices")
    if not device_ids or "device_id" not in columns:
        return []
    rows = ranked_rows(conn, "SELECT * FROM devices{where}", "devices", rank)
    names = [r[1] for r in conn.exec_driver_sql("PRAGMA table_info(devices)")]
    return [dict(zip(names, row)) for row in rows if row[names.index("device_id")] in device_ids]
