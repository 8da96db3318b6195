"""The replay endpoint of the web API: every operation of a served report replayed on its stored inputs
(``reportdb.replay``) under the request's policy, in isolation, chained, or chained with the failing operations
substituted, run once per report, policy and mode in the background like the golden analysis (``pending`` until
done). The page's Replay view shows what it answers; no verdict is made here."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, request

from ..analysis.replay import replay
from ..analysis.replay_rows import ReplayCounts, ReplayResult
from ..numeric.streamed import WINDOW_ELEMENTS
from . import limits, params
from .answers import answer, error_answer
from .context import lookup, policy, settings
from .params import ApiError

#: The replay modes a request may ask for: each one's ``chain`` and ``substitute_failing`` for ``reportdb.replay``.
MODES: dict[str, tuple[bool, bool]] = {"isolated": (False, False), "chain": (True, False), "substitute": (True, True)}
#: Threads one replay on the server uses (its requests and the golden analysis share the machine).
WORKERS = 2


def replayed(report: str) -> Response:
    """A report replayed in ``mode`` (isolated, chain or substitute): the result as ``reportdb.replay(...).to_dict()``
    (``result``), its counts line and each anomaly's sentence; with ``wait=0`` answered at once ``pending`` (with
    ``analysis``: running, seconds) while it runs, and the error answer it gave in ``analysis_error``."""
    look = lookup()
    one = look.get(report)
    args = request.args
    mode = params.choice(args, "mode", tuple(MODES))
    waits = params.choice(args, "wait", ("1", "0")) == "1"
    total = one.tensor_totals()[1]
    if total > limits.MAX_RUN_BYTES:
        raise ApiError(413, f"report {one.name} stores {total:,} bytes of tensors, more than a request replays "
                            f"({limits.MAX_RUN_BYTES:,})", "run `reportdb replay REPORT` on the command line")
    key = ("replay", str(one.path), mode)
    found: ReplayResult | None = look.cached(key)
    progress = None
    if found is None:
        budget, chosen = settings().budget, policy()

        def work() -> ReplayResult:
            kept: ReplayResult | None = look.cached(key)  # kept by a flight that ended as this one started
            if kept is not None:
                return kept
            with budget.hold(2 * WINDOW_ELEMENTS * 48 + one.chunk_bytes(), f"replaying report {one.name}"):
                with one.engine() as own:
                    chain, substitute_failing = MODES[mode]
                    return replay(own, policy=chosen, workers=WORKERS, chain=chain,
                                  substitute_failing=substitute_failing)

        flight = look.shared.analyses.start((look.policy, key), work, lambda result: look.keep(key, result))
        if waits:
            flight.done.wait()
        progress = flight.progress()
        if not flight.done.is_set():
            return answer({"report": one.name, "mode": mode, "pending": True, "analysis": progress,
                           "analysis_error": None, "result": None})
        if flight.error is not None:
            if waits:
                raise flight.error
            failed = error_answer(flight.error, look.names())
            return answer({"report": one.name, "mode": mode, "pending": False, "analysis": progress,
                           "analysis_error": {"status": failed.status_code, **failed.get_json()}, "result": None})
        found = flight.result
    assert found is not None
    return answer({"report": one.name, "mode": mode, "pending": False, "analysis": progress, "analysis_error": None,
                   **described(found)})


def described(result: ReplayResult) -> dict[str, Any]:
    """A replay result as the page reads it: ``result`` (its ``to_dict()``), the counts ``line`` the CLI prints, and
    each anomaly's sentence (``Anomaly.describe()``) in ``anomaly_notes``."""
    return {"result": result.to_dict(), "line": ReplayCounts(result.rows).line(),
            "anomaly_notes": [a.describe() for a in result.anomalies]}


def register(bp: Blueprint) -> None:
    """Add the replay endpoint to ``bp``."""
    bp.add_url_rule("/api/reports/<report>/replay", view_func=replayed)
