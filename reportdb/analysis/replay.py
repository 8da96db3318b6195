"""Replay: each operation's reference computed from the inputs the device actually had, compared with its stored output.

This is the operation's *local* (isolated) error on any report that kept inputs and outputs, no comparison mode
needed: an operation wrong by itself fails, and the operations after it, replayed on their own (already wrong)
device inputs, pass. References come from :mod:`reportdb.analysis.references`; every verdict is the tolerance
policy's (:mod:`reportdb.analysis.policy`). Isolated operations are replayed on several threads within a memory budget
(:mod:`.replay_parallel`), rows in execution order; a chain (``chain``, ``substitute``) runs one operation at a time.
Collectives, and operations on tensors stored as several device shards, are judged device by device
(:mod:`.replay_collectives`), in a chain too. Memory holds the operations in flight, never the report.
"""

from __future__ import annotations

import fnmatch
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

import numpy as np

from ..errors import InvalidArgumentError, ReportDBError
from . import references
from .graph import TensorGraph, judged_dtype, opened, table_columns, tensor_graph
from .places import placed_notes
from .policy import Policy, as_policy, canonical_dtype
from .replay_parallel import (
    BUDGET, ReadAhead, Reads, SharedReads, blas_threads, cpus, default_workers, replay_isolated, stored_elements,
)
from .replay_collectives import ChainValues, replay_per_device, runs_per_device
from .replay_rows import DeviceVerdict, ReplayCounts, ReplayResult, ReplayRow, judged
from .replay_store import ReplayStore

__all__ = [
    "DeviceVerdict", "ReplayCounts", "ReplayResult", "ReplayRow", "iter_replay", "judged", "prepare", "replay",
    "replay_operation", "stored_elements",
]

if TYPE_CHECKING:
    from ..report import Report

#: Longest argument text read (ttnn 0.6x stores tensors' printed values; the reference needs only their start).
ARGUMENT_TEXT_LIMIT = 1 << 16


def replay(
    report: "Report | str | Path", *, ops: str | None = None, policy: "Policy | str | Path | None" = None, rank: int = 0,
    store: bool = False, chain: bool = False, substitute: "str | Iterable[int | str] | None" = None,
    substitute_failing: bool = False, workers: int | None = None, budget: int = BUDGET, full_stats: bool = False,
) -> ReplayResult:
    """Replay every operation of ``report`` (one ``rank``) whose name matches the glob ``ops`` (all when None): its
    reference from its stored inputs and recorded arguments against its stored output, judged by ``policy`` (a
    Policy, a TOML file, or None for the dtype-aware defaults). With ``store`` the references and results are kept in
    the report (:mod:`.replay_store`; a path is then opened with mode ``"a"``, a legacy original refused). See
    :func:`iter_replay` for one row at a time, and for ``substitute``, ``workers``, ``budget`` and ``full_stats``.

    With ``chain`` each reference takes the *chained* references of the operations before it instead of the device's
    values (the stored values only for tensors no operation produced: the model's inputs and weights), so each output
    is compared with the global golden, the error accumulated from the start; an operation fed by one the chain does
    not cover is ``missing_inputs``. From the first operation on a tensor stored as several device shards, the chain
    runs device by device, through collectives, each device judged against its own shard
    (:func:`.replay_collectives.replay_per_device`). Stored (``store``) as global comparison records."""
    return ReplayResult.of(iter_replay(report, ops=ops, policy=policy, rank=rank, store=store, chain=chain,
                                       substitute=substitute, substitute_failing=substitute_failing, workers=workers,
                                       budget=budget, full_stats=full_stats), chain=chain)


def iter_replay(
    report: "Report | str | Path", *, ops: str | None = None, policy: "Policy | str | Path | None" = None, rank: int = 0,
    store: bool = False, chain: bool = False, substitute: "str | Iterable[int | str] | None" = None,
    substitute_failing: bool = False, workers: int | None = None, budget: int = BUDGET, full_stats: bool = False,
) -> Iterator[ReplayRow]:
    """The rows of :func:`replay`, each as soon as its operation is replayed (execution order: operation id). A chain
    keeps each chained reference only until its last consumer has run.

    Isolated operations are independent: ``workers`` threads (default :func:`default_workers`) replay them at once,
    with at most ``budget`` bytes of inputs, references and outputs in flight, rows still in execution order and
    verdicts the same as one worker's (``store`` replays on one). ``substitute`` (operation ids, names or globs: a
    list, or one text of them separated by commas) and ``substitute_failing`` (every operation that fails in
    isolation) run a chain (as ``chain``) past the first culprit: see :func:`_chained`.

    A passing output's row holds only the metrics its verdict reads (:func:`.replay_rows.judged`; the quantiles,
    relative errors and other distribution figures None), a failing one's the full vector: about half the
    comparisons' cost, the same verdicts. ``full_stats`` (and ``store``, which keeps the full vectors) computes the
    full vector of every output."""
    judge = as_policy(policy)
    swap = Substitution.of(substitute, substitute_failing)
    if swap and store:
        raise InvalidArgumentError("replay cannot store substituted results (they are no golden of the report): run "
                                   "with --store and without --substitute to keep the chain's records")
    with _opened(report, store) as rep:
        keeper = ReplayStore(rep, rank, chain=chain) if store else None
        graph = tensor_graph(rep, rank)
        arguments = _arguments(rep, rank)
        wanted = [op for op, name in sorted(graph.names.items()) if ops is None or fnmatch.fnmatchcase(name, ops)]
        full = full_stats or keeper is not None
        if not chain and not swap:
            count = 1 if keeper is not None else default_workers() if workers is None else workers
            reads = SharedReads(rep, rank, _reads(graph, wanted), budget // 4)
            yield from replay_isolated(
                wanted, lambda op: replay_operation(rep, graph, op, arguments.get(op, []), judge, rank, keeper,
                                                    full=full, reads=reads),
                lambda op: _cost(rep, graph, op, rank, reads), workers=count, budget=budget)
            return
        # a chain reads the tensors no operation made (weights, the model's inputs) and metadata ahead of itself
        reads = ReadAhead(rep, rank, _chain_plan(graph), budget // 4)
        try:
            yield from _chained(rep, graph, arguments, set(wanted), judge, rank, keeper, swap, full, reads, budget // 4)
        finally:
            reads.close()


class Substitution:
    """Which operations a substituted chain takes as right: by id, by name glob, or every one failing in isolation."""

    def __init__(self, ids: set[int], globs: list[str], failing: bool) -> None:
        self.ids, self.globs, self.failing = ids, globs, failing

    @classmethod
    def of(cls, spec: "str | Iterable[int | str] | None", failing: bool) -> "Substitution":
        """The substitution ``spec`` names (ids or globs, a list or one comma-separated text)."""
        items = [p.strip() for p in spec.split(",")] if isinstance(spec, str) else list(spec or ())
        ids, globs = set(), []
        for item in items:
            if isinstance(item, int) or (isinstance(item, str) and item.isdigit()):
                ids.add(int(item))
            elif isinstance(item, str) and item:
                globs.append(item)
            else:
                raise InvalidArgumentError(f"--substitute takes operation ids or names (globs), not {item!r}: for "
                                           "example --substitute 12,ttnn.softmax")
        return cls(ids, globs, failing)

    def __bool__(self) -> bool:
        """Whether anything is substituted (a substitution of nothing runs no substituted chain)."""
        return bool(self.ids or self.globs or self.failing)

    def takes(self, op_id: int, name: str, alone: list[ReplayRow]) -> bool:
        """Whether operation ``op_id`` is substituted, ``alone`` being its isolated rows."""
        return op_id in self.ids or any(fnmatch.fnmatchcase(name, g) for g in self.globs) or (
            self.failing and any(r.passed is False for r in alone))


def _chained(
    rep: "Report", graph: TensorGraph, arguments: dict[int, list[references.Argument]], wanted: set[int],
    judge: Policy, rank: int, keeper: ReplayStore | None, swap: Substitution, full: bool = False,
    reads: Reads | None = None, judging: int = 0,
) -> Iterator[ReplayRow]:
    """The rows of a chain (every operation runs; those ``wanted`` are shown). With a substitution, each row also
    holds its isolated and plain chained verdicts, and its own verdict is the substituted chain's: that chain carries,
    for each substituted operation, the *device's* output in place of its reference. Downstream outputs are then
    judged against references continued from what the device actually had there, so they measure only the error
    made after the substituted operations, as if those had been right (to first order: the device's later
    operations cannot be rerun on the golden values offline). A culprit whose failure plain ``--chain`` shows only as
    one more victim of an earlier one stands out, and the last output's substituted verdict says whether the model's
    output recovers once the substituted operations are fixed. A substituted operation without a reference still
    carries its stored output, so the chain goes on past it (each device's shard where the chain runs per device).
    ``full``: every output's full metric vector; ``reads``: how tensors are read (:func:`replay_operation`);
    ``judging``: the bytes of outputs a plain chain may hold while they wait to be judged on a thread of their own
    (:class:`JudgedInOrder`; 0: each judged at once)."""
    plain = ChainValues()
    fixed = ChainValues() if swap else None
    diverged = False  # until the first substitution the substituted chain is the plain one: its values are shared
    uses = {t: len(users) for t, users in graph.consumers.items()}
    # a plain chain judges each output on a second thread while the next references are computed; a substituted one
    # needs each verdict before its next step, and a stored one writes its records from this thread
    judged_later = JudgedInOrder(judging if fixed is None and keeper is None else 0)
    reads = reads or Reads(rep, rank)
    try:
        for op_id, name in sorted(graph.names.items()):
            args = arguments.get(op_id, [])
            step = _chain_step(rep, graph, op_id, args, judge, rank, keeper if op_id in wanted else None, plain, full,
                               reads)
            if fixed is not None:
                rows = step()
                alone = replay_operation(rep, graph, op_id, args, judge, rank, full=full, reads=reads)
                if diverged:
                    again = _chain_step(rep, graph, op_id, args, judge, rank, None, fixed, full, reads)()
                else:
                    again = rows
                    fixed.share(plain, list(graph.outputs.get(op_id, {}).values()))
                took = swap.takes(op_id, name, alone)
                diverged = diverged or took
                if took:
                    for tensor_id in graph.outputs.get(op_id, {}).values():
                        if rep.has_tensor(tensor_id, rank):
                            fixed.take_stored(rep, tensor_id, rank)
                step = _judged_already(_side_by_side(alone, rows, again, took))
            if op_id in wanted:  # an operation only carried on by the chain is not judged
                outputs = [t for t in graph.outputs.get(op_id, {}).values() if reads.has(t)]
                yield from judged_later.add(step, 8 * sum(map(reads.elements, outputs)))  # reference and output
            for t in dict.fromkeys(graph.inputs.get(op_id, [])):  # once per consumer
                uses[t] -= 1
                if uses[t] <= 0:
                    plain.drop(t)
                    if fixed is not None:
                        fixed.drop(t)
        yield from judged_later.rest()
    finally:
        judged_later.close()


def _judged_already(rows: list[ReplayRow]) -> Callable[[], list[ReplayRow]]:
    """A judging step whose rows are already made."""
    return lambda: rows


class JudgedInOrder:
    """A chain's judging steps run on one thread of their own while the chain goes on, their rows given back in the
    order the steps came. Each step holds its references and outputs until it ends: the steps waiting hold at most
    ``limit`` bytes (by the costs given; one step at least), beyond which the caller waits for the oldest; with
    ``limit`` 0 each step runs at once, on the caller's thread. While a judging thread runs, the BLAS libraries keep
    a core free for it (the references' matmuls take the others)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.held = limit, 0
        self.pending: deque[tuple[Future[list[ReplayRow]], int]] = deque()
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="reportdb-judge") if limit > 0 else None
        self.blas = blas_threads(max(1, cpus() - 1)) if limit > 0 else None
        if self.blas is not None:
            self.blas.__enter__()

    def add(self, step: Callable[[], list[ReplayRow]], cost: int) -> Iterator[ReplayRow]:
        """Start ``step`` (holding ``cost`` bytes); the rows of the earlier steps the limit no longer lets wait."""
        if self.pool is None:
            yield from step()
            return
        while self.pending and self.held + cost > self.limit:
            yield from self._oldest()
        self.pending.append((self.pool.submit(step), cost))
        self.held += cost

    def _oldest(self) -> list[ReplayRow]:
        """The rows of the oldest step, waited for."""
        future, cost = self.pending.popleft()
        self.held -= cost
        return future.result()

    def rest(self) -> Iterator[ReplayRow]:
        """The rows of every step still pending, in order."""
        while self.pending:
            yield from self._oldest()

    def close(self) -> None:
        """Drop the steps not started (a consumer that stopped early, or an error) and wait for the running one."""
        for future, _ in self.pending:
            future.cancel()
        if self.pool is not None:
            self.pool.shutdown(wait=True)
        if self.blas is not None:
            self.blas.__exit__(None, None, None)
            self.blas = None


def _chain_step(
    rep: "Report", graph: TensorGraph, op_id: int, args: list[references.Argument], judge: Policy, rank: int,
    keeper: ReplayStore | None, values: ChainValues, full: bool, reads: Reads | None,
) -> Callable[[], list[ReplayRow]]:
    """One operation of a chain on the chain's ``values``, its references computed now and its judging returned
    (:func:`referenced`): device by device where the chain runs it so (a collective, or an operation on per-device
    values: :func:`.replay_collectives.runs_per_device`), else on whole arrays. Where the operation leaves its output
    undefined, the chain carries the device's own values on (:func:`.references.completed`)."""
    if runs_per_device(rep, graph, op_id, rank, values, reads):
        return _judged_already(replay_per_device(rep, graph, op_id, args, judge, rank, values, IN_PLACE_FAMILIES,
                                                 keeper, full=full))
    step = referenced(rep, graph, op_id, args, judge, rank, keeper, values, full=full, reads=reads)
    name = graph.names.get(op_id, "")
    known = references.lookup(name)
    if known is not None and known.defined is not None:  # where it defines nothing, the device's values travel on
        for t in graph.outputs.get(op_id, {}).values():
            if t in values and rep.has_tensor(t, rank):
                values[t] = references.completed(name, values[t], rep.tensor(t, rank))
    return step


def _side_by_side(alone: list[ReplayRow], chained: list[ReplayRow], again: list[ReplayRow], took: bool) -> list[ReplayRow]:
    """The substituted rows, each with the isolated and chained verdicts of the same output beside its own."""
    isolated = {r.output_index: r.passed for r in alone}
    plain = {r.output_index: r.passed for r in chained}
    return [replace(r, isolated=isolated.get(r.output_index), chained=plain.get(r.output_index), substituted=r.passed,
                    substitute=took) for r in again]


def _reads(graph: TensorGraph, operations: list[int]) -> Iterator[int]:
    """The tensors an isolated replay of ``operations`` reads, once per read: each operation's distinct inputs and its
    outputs (each read to be judged)."""
    for op_id in operations:
        yield from dict.fromkeys(graph.inputs.get(op_id, []))
        yield from graph.outputs.get(op_id, {}).values()


def _chain_plan(graph: TensorGraph) -> Iterator[tuple[int, bool]]:
    """What a chain asks of the report, in the order it asks (:class:`.replay_parallel.ReadAhead`): each operation's
    inputs and outputs, inputs no operation made read whole where the operation has a reference on whole arrays (a
    collective reads each device's shard), the others' metadata only."""
    for op_id, name in sorted(graph.names.items()):
        known = references.lookup(name)
        whole = known is not None and not known.per_device
        for t in dict.fromkeys(graph.inputs.get(op_id, [])):
            yield t, whole and t not in graph.producer
        for t in graph.outputs.get(op_id, {}).values():
            yield t, False


def _cost(rep: "Report", graph: TensorGraph, op_id: int, rank: int, reads: SharedReads) -> int:
    """The bytes an operation's isolated replay holds at once, bounded from its stored tensors' metadata: its inputs
    and outputs read, and a float32 reference and float64 comparison per output element."""
    inputs = [t for t in dict.fromkeys(graph.inputs.get(op_id, [])) if reads.has(t)]
    outputs = [t for t in graph.outputs.get(op_id, {}).values() if reads.has(t)]
    return 4 * sum(map(reads.elements, inputs)) + 16 * sum(map(reads.elements, outputs))


@contextmanager
def _opened(report: "Report | str | Path", store: bool) -> Iterator["Report"]:
    """The report (a path opened for reading, or with mode ``"a"`` to store: a legacy original is refused first)."""
    if not store or not isinstance(report, (str, Path)):
        with opened(report) as rep:
            yield rep
        return
    from ..report import open as open_report

    with open_report(report, "r") as probe:
        ReplayStore.check(probe, "r")
    with open_report(report, "a") as rep:
        yield rep


def replay_operation(
    report: "Report", graph: TensorGraph, op_id: int, arguments: list[references.Argument], policy: Policy, rank: int,
    keeper: ReplayStore | None = None, chained: dict[int, np.ndarray] | None = None, *, full: bool = True,
    reads: Reads | None = None,
) -> list[ReplayRow]:
    """One operation's rows, one per output it has (see :class:`ReplayRow`); ``keeper`` stores each compared output's
    reference and result; ``chained`` (chain mode) gives the references of produced inputs and receives this
    operation's. Without ``full`` a passing output's metrics are only those its verdict reads (:func:`judged`).
    ``reads`` answers which tensors are stored and reads them (default: the report, asked each time)."""
    return referenced(report, graph, op_id, arguments, policy, rank, keeper, chained, full=full, reads=reads)()


def referenced(
    report: "Report", graph: TensorGraph, op_id: int, arguments: list[references.Argument], policy: Policy, rank: int,
    keeper: ReplayStore | None = None, chained: dict[int, np.ndarray] | None = None, *, full: bool = True,
    reads: Reads | None = None,
) -> Callable[[], list[ReplayRow]]:
    """:func:`replay_operation` in two steps: the references now (put into ``chained`` before this returns), and the
    returned call that reads the device's outputs and judges them, which may run on another thread: a chain computes
    the next operation's references while this one's outputs are compared."""
    row = ReplayRow(op_id, graph.names.get(op_id, ""), "compared")
    reads = reads or Reads(report, rank)
    if chained is None and runs_per_device(report, graph, op_id, rank, reads=reads):  # a collective, or on a mesh's shards
        return _judged_already(replay_per_device(report, graph, op_id, arguments, policy, rank, None, IN_PLACE_FAMILIES,
                                                 keeper, full=full))
    if chained is not None:
        broken = [t for t in dict.fromkeys(graph.inputs.get(op_id, [])) if t in graph.producer and t not in chained]
        if broken:
            return _judged_already([replace(row, status="missing_inputs", detail="the chain does not cover the operations "
                                            "that made " + ", ".join(f"tensor {t} (operation {graph.producer[t][0]})"
                                                                     for t in broken))])
    prepared = prepare(report, graph, op_id, arguments, rank, chained, reads)
    if isinstance(prepared, ReplayRow):
        return _judged_already([replace(prepared, operation_id=op_id, name=row.name)])
    if chained is not None:
        for _, output_id, expected in prepared:
            if not isinstance(expected, str):
                chained[output_id] = expected

    def judge_outputs() -> list[ReplayRow]:
        rows = []
        for index, output_id, expected in prepared:
            at = replace(row, output_index=index, output_tensor_id=output_id)
            if isinstance(expected, str):
                rows.append(replace(at, status="no_reference" if "reference" in expected else "missing_inputs",
                                    detail=expected))
                continue
            device = references.defined_part(row.name, reads.tensor(output_id))  # where defined
            dtype = canonical_dtype(judged_dtype(report, graph, output_id, rank, reads.info))
            metrics, verdict = judged(policy, row.name, dtype, device, references.defined_part(row.name, expected),
                                      full=full or keeper is not None, accumulated=chained is not None)
            notes = placed_notes(report, output_id, verdict.worst_tile, verdict.notes, rank=rank, tile=metrics.tile_shape)
            at = replace(at, passed=verdict.passed, dtype=dtype, failed=verdict.failed, metrics=metrics,
                         detail="; ".join(notes))  # what the verdict saw: the worst tile and its core, a fidelity shrink
            if keeper is not None:
                keeper.keep(at, expected, policy)
            rows.append(at)
        return rows

    return judge_outputs


def prepare(
    report: "Report", graph: TensorGraph, op_id: int, arguments: list[references.Argument], rank: int,
    given: dict[int, np.ndarray] | None = None, reads: Reads | None = None,
) -> "list[tuple[int, int, np.ndarray | str]] | ReplayRow":
    """Per output the operation has, in output-index order: its index, tensor id and reference output (or a sentence
    saying why it has none: its reference gives fewer outputs, its value is not stored); or the row saying why the
    operation has no reference at all. Inputs are read from the report (through ``reads`` when given), or taken from
    ``given`` where it holds them."""
    given = given or {}
    reads = reads or Reads(report, rank)
    name = graph.names.get(op_id, "")
    ref = references.lookup(name)
    if ref is None:
        return ReplayRow(op_id, name, "no_reference", detail=f"no reference for {name or 'an unnamed operation'}")
    outputs = graph.outputs.get(op_id, {})
    if not outputs:
        return ReplayRow(op_id, name, "missing_inputs", detail="the report lists no output for it")
    first = outputs[min(outputs)]
    input_ids = graph.inputs.get(op_id, [])
    aliased = sorted(set(outputs.values()) & set(input_ids))
    if aliased and ref.family not in IN_PLACE_FAMILIES:
        return ReplayRow(op_id, name, "in_place", output_tensor_id=aliased[0], detail=(
            f"tensor {aliased[0]} is both an input and an output of this in-place call, and the report keeps one value "
            "for it (from before or after the call, by the ttnn version): nothing to compare its result with"))
    distinct = list(dict.fromkeys(input_ids))  # each tensor read once: an operation can list one tensor 10^6 times
    absent = [t for t in distinct if t not in given and not reads.has(t)]
    if absent:
        return ReplayRow(op_id, name, "missing_inputs", output_tensor_id=first,
                         detail="tensors not stored: " + ", ".join(map(str, absent)))
    try:
        arrays = {t: given[t] if t in given else reads.tensor(t) for t in distinct}
    except ReportDBError as exc:  # e.g. a multi-device input whose shards do not assemble
        return ReplayRow(op_id, name, "missing_inputs", output_tensor_id=first, detail=str(exc))
    inputs = [(t, arrays[t]) for t in input_ids]
    stored = {t: reads.has(t) for t in set(outputs.values())}
    # the reference may build what the operation's stored arrays justify: its inputs, and its outputs where stored
    limit = references.justified_elements([a.size for a in arrays.values()]
                                          + [reads.elements(t) for t, kept in stored.items() if kept])
    dtypes = input_dtypes(report, graph, distinct, rank, reads)
    try:
        with np.errstate(all="ignore"):
            expected = references.compute_outputs(name, inputs, arguments, dtypes, max_elements=limit)
    except references.UnsupportedArguments as exc:  # an oversized one names no argument: its reason is the detail
        names = () if isinstance(exc, references.Oversized) else exc.names
        return ReplayRow(op_id, name, "unsupported_arguments", output_tensor_id=first, unsupported=names,
                         detail=str(exc))
    except (ValueError, IndexError) as exc:  # the stored inputs do not fit the operation as its reference reads it
        return ReplayRow(op_id, name, "unsupported_arguments", output_tensor_id=first, unsupported=("inputs",),
                         detail=f"the stored inputs do not fit {name}: {exc}")
    prepared: list[tuple[int, int, np.ndarray | str]] = []
    for index, tensor_id in sorted(outputs.items()):
        if index >= len(expected):
            why: np.ndarray | str = f"its reference gives {len(expected)} output(s), none for output {index}"
        elif not stored[tensor_id]:
            why = f"tensors not stored: {tensor_id}"
        else:
            why = expected[index]
        prepared.append((index, tensor_id, why))
    return prepared


#: Families whose in-place calls give the same result from the value before or after the call (a cache update
#: overwrites the same positions with the same new values), so an output that is also an input is still judged.
IN_PLACE_FAMILIES = frozenset({"caches"})


def input_dtypes(report: "Report", graph: TensorGraph, tensor_ids: list[int], rank: int,
                 reads: Reads | None = None) -> dict[int, str]:
    """The ttnn dtypes of an operation's inputs where the report says them (a BFLOAT8_B input is stored as bfloat16
    values; typecast converts it otherwise); ``reads`` answers which tensors are stored and their metadata (default:
    the report, asked each time)."""
    reads = reads or Reads(report, rank)
    return {t: judged_dtype(report, graph, t, rank, reads.info) for t in tensor_ids if graph.dtypes.get(t) or reads.has(t)}


def _arguments(report: "Report", rank: int) -> dict[int, list[references.Argument]]:
    """Every operation's recorded arguments in the order ttnn wrote them (texts cut at ARGUMENT_TEXT_LIMIT)."""
    with report.session() as session:
        conn = session.connection()
        columns = table_columns(conn, "operation_arguments")
        if not {"operation_id", "name", "value"} <= columns:
            return {}
        where = " WHERE rank=?" if "rank" in columns else ""
        result: dict[int, list[references.Argument]] = {}
        rows = conn.exec_driver_sql(
            f"SELECT operation_id, name, substr(value, 1, {ARGUMENT_TEXT_LIMIT}) FROM operation_arguments{where}"
            " ORDER BY rowid", (rank,) if where else ()
        )
        for op_id, name, value in rows:
            if op_id is not None:
                result.setdefault(int(op_id), []).append(references.Argument(str(name), "" if value is None else str(value)))
        return result
