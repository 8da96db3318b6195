"""What replay gives: a row per operation output (:class:`ReplayRow`), the whole result with its counts
(:class:`ReplayResult`), the counting itself (:class:`ReplayCounts`), which the CLI also runs as rows stream, and
the one place an output is judged (:func:`judged`).

Kept apart from :mod:`.replay` so that :mod:`.replay_store` (which stores rows) and :mod:`.replay` (which makes them)
both import it and not each other.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from ..numeric.metrics import Comparison, compare
from ..results import Result, html_table
from .peers import Anomaly, PeerOutput, anomalies

if TYPE_CHECKING:
    from .policy import Policy


def judged(policy: "Policy", op: str, dtype: str, device: np.ndarray, expected: np.ndarray, *,
           full: bool = True, accumulated: bool = False) -> tuple[Comparison, Any]:
    """The metric vector of the device output against the reference, made at the policy's tolerances, and the policy's
    verdict on it: the one place replay and repro decide pass or fail.

    Without ``full`` the comparison first computes only what the verdict reads (``compare(full=False)``, the ULPs
    only where the criteria read them: ``Criteria.reads_ulps``), and the whole vector only when the output fails: a passing output's
    distribution figures (quantiles, relative errors...) are then None (``full_stats`` False). The fields a verdict
    reads come from the same arithmetic either way, so the verdict is the same. ``accumulated``: the expected side
    carries error made before the operation (a chain's values), as :meth:`Policy.judge` takes it."""
    rtol, atol = policy.tolerances(op, dtype)
    pcc = policy.pcc_threshold(op, dtype)
    if not full:  # the ULPs where either the built-in rule's criteria or the dtype's read them (judge picks one)
        ulps = any(policy.criteria_for(op, dtype, accumulated=a).reads_ulps for a in (False, True))
        metrics = compare(device, expected, rtol=rtol, atol=atol, pcc=pcc, full=False, ulps=ulps)
        verdict = policy.judge(metrics, op=op, dtype=dtype, accumulated=accumulated)
        if verdict.passed:
            return metrics, verdict
    metrics = compare(device, expected, rtol=rtol, atol=atol, pcc=pcc)
    return metrics, policy.judge(metrics, op=op, dtype=dtype, accumulated=accumulated)


@dataclass(frozen=True)
class DeviceVerdict(Result):
    """One device's shard of a collective's output judged against its reference: its mesh coordinate, the verdict,
    the criteria that failed and the largest absolute error."""

    coordinate: tuple[int, ...]
    passed: bool
    failed: tuple[str, ...] = ()
    max_abs_error: float | None = None


@dataclass(frozen=True)
class ReplayRow(Result):
    """One operation replayed: its id and name, ``status`` (``compared``, ``no_reference``, ``missing_inputs``,
    ``unsupported_arguments`` or ``in_place``: an output that is also an input, of which the report keeps one value),
    the output compared (tensor id, its index among the operation's outputs: one row per
    output) and the dtype it was judged by), ``passed`` (None when not compared), the criteria that failed, the metric
    vector (of a passing output, only what its verdict reads unless the replay asked for ``full_stats``: its
    ``full_stats`` field says), the unsupported arguments' names, and a sentence saying what was not compared and why.

    With substitution (:func:`reportdb.replay` ``substitute=``) the row also holds the three verdicts side by side:
    ``isolated`` (on the device's inputs), ``chained`` (against the plain chain) and ``substituted`` (against the
    chain that takes substituted operations as right), and ``substitute`` says whether this operation was one of them.
    ``devices`` judges each device shard of a collective's output (empty for other operations)."""

    operation_id: int
    name: str
    status: str
    passed: bool | None = None
    output_tensor_id: int | None = None
    output_index: int = 0
    dtype: str | None = None
    failed: tuple[str, ...] = ()
    metrics: Comparison | None = None
    unsupported: tuple[str, ...] = ()
    detail: str = ""
    isolated: bool | None = None
    chained: bool | None = None
    substituted: bool | None = None
    substitute: bool = False
    devices: tuple[DeviceVerdict, ...] = ()


class ReplayCounts:
    """How much a replay judged, counted row by row as rows stream: operations replayed, those with an output
    compared, the others by why (their first row's status, in the order they first occur), the outputs that failed
    and the first of them. An operation counts once however many outputs it has, when its rows end (they come
    together, in operation order); :meth:`done` counts the last."""

    def __init__(self, rows: Iterable[ReplayRow] = ()) -> None:
        self.rows = self.operations = self.compared = self.failed = 0
        self.why: Counter[str] = Counter()
        self.first: ReplayRow | None = None
        self._op: int | None = None
        self._status = ""  # the current operation's first row's status, or "compared" once an output of it is
        for row in rows:
            self.add(row)
        self.done()

    def add(self, row: ReplayRow) -> None:
        """Count one row."""
        self.rows += 1
        if row.operation_id != self._op:
            self.done()
            self._op, self._status = row.operation_id, row.status
            self.operations += 1
        elif row.status == "compared":
            self._status = "compared"
        if row.passed is False:
            self.failed += 1
            self.first = self.first or row

    def done(self) -> None:
        """Count the operation whose rows were last added."""
        if self._op is not None:
            if self._status == "compared":
                self.compared += 1
            else:
                self.why[self._status] += 1
            self._op = None

    def line(self) -> str:
        """``compared N of M operations (K no_reference, ...); F failed``: how much was judged."""
        left = ", ".join(f"{n} {status}" for status, n in self.why.items())
        return f"compared {self.compared} of {self.operations} operations" + (f" ({left})" if left else "") + \
            f"; {self.failed} failed"


@dataclass(frozen=True)
class ReplayResult(Result):
    """Every operation replayed (a row per output), in execution order, and the first row that failed its policy (by
    operation, then output index; None when none did); the counts: ``operations`` replayed, ``compared`` (with an
    output compared), ``not_compared`` (the others by status: ``no_reference``, ``unsupported_arguments``...) and
    ``failed_outputs``; ``anomalies``: compared outputs far out of line with the same operation's on the same shape
    (``analysis/peers.py``), passing or not."""

    rows: tuple[ReplayRow, ...]
    first_failure: ReplayRow | None
    operations: int = 0
    compared: int = 0
    not_compared: dict[str, int] = field(default_factory=dict)
    failed_outputs: int = 0
    anomalies: tuple[Anomaly, ...] = ()

    @classmethod
    def of(cls, rows: Iterable[ReplayRow], *, chain: bool = False) -> "ReplayResult":
        """The result of these rows, counted, with their anomalies (none for a chain: its errors accumulate)."""
        kept = tuple(rows)
        counts = ReplayCounts(kept)
        found = () if chain else anomalies(filter(None, map(peer_output, kept)))
        return cls(kept, counts.first, counts.operations, counts.compared, dict(counts.why), counts.failed, found)

    @property
    def failed(self) -> tuple[ReplayRow, ...]:
        """The operations that failed their policy."""
        return tuple(r for r in self.rows if r.passed is False)

    def _repr_html_(self) -> str:
        """The rows as one table."""
        header = ("op", "out", "name", "status", "passed", "pcc", "max abs err", "failed", "detail")
        rows = [(r.operation_id, r.output_index, r.name, r.status, r.passed, r.metrics.pcc if r.metrics else None,
                 r.metrics.max_abs_error if r.metrics else None, ", ".join(r.failed), r.detail) for r in self.rows]
        return html_table(header, rows, caption=f"Replay: {len(self.rows)} operations, {len(self.failed)} failed")


def peer_output(row: ReplayRow) -> PeerOutput | None:
    """A compared row of a replay in isolation as its peers see it, None for any other row."""
    m = row.metrics
    if row.status != "compared" or m is None or m.shape_mismatch or row.devices:
        return None
    return PeerOutput(row.operation_id, row.output_tensor_id or 0, 0, row.name, m.shape_a, m.dtype_a, m.sqnr_db)
