"""The background analyses of a served report (the golden one, ``compare_golden``, and replay, ``reportdb.replay``,
under one policy) run once in a background thread per report, policy and mode, so the page's operation list and overview answer at once from what the report recorded while it
runs (``pending``), and the next requests get the recomputed roles. A failure is kept with the flight and reported
in the answers instead of being lost in the thread; a transient one (the memory budget busy, the report closing) is
retried by a request after :data:`RETRY_SECONDS`."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

from .params import ApiError

#: Seconds after which a request starts again an analysis that failed for a passing reason (an ApiError: busy, closing).
RETRY_SECONDS = 2.0
#: Finished (failed) flights kept for their error beyond which the oldest are forgotten.
MAX_KEPT = 64


@dataclass
class Flight:
    """One run of an analysis (golden or replay): when it started, whether it is done, and its result or its error."""

    started: float = field(default_factory=time.monotonic)
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: Exception | None = None
    finished: float | None = None

    def progress(self) -> dict[str, Any]:
        """How far the analysis is, cheaply: running or done, and the seconds it has taken so far."""
        end = self.finished if self.finished is not None else time.monotonic()
        return {"state": "done" if self.done.is_set() else "running", "seconds": round(end - self.started, 2)}

    def stale(self) -> bool:
        """A transient failure old enough to try again."""
        return (isinstance(self.error, ApiError) and self.finished is not None
                and time.monotonic() - self.finished >= RETRY_SECONDS)


class Analyses:
    """The analyses running or failed, by key (policy, analysis and report path): each key runs in one thread at a time
    however many requests ask; a success goes to ``keep`` (the server's result cache) and its flight is dropped."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flights: dict[Hashable, Flight] = {}

    def start(self, key: Hashable, work: Callable[[], Any],
              keep: Callable[[Any], None]) -> Flight:
        """The flight of ``key``: the one running or failed, else a new one running ``work`` in a daemon thread (its
        result handed to ``keep`` before the flight is done, so a request after it finds the result kept)."""
        with self._lock:
            flight = self._flights.get(key)
            if flight is not None and not flight.stale():
                return flight
            flight = self._flights[key] = Flight()
        thread = threading.Thread(target=self._run, args=(key, flight, work, keep), name=f"reportdb-analysis-{key!r:.40}",
                                  daemon=True)
        thread.start()
        return flight

    def _run(self, key: Hashable, flight: Flight, work: Callable[[], Any],
             keep: Callable[[Any], None]) -> None:
        """The thread's body: run ``work`` and keep its result, or keep its error with the flight (anything raised,
        so that no failure is lost in the thread; the answers report it)."""
        try:
            flight.result = work()
            keep(flight.result)
        except Exception as exc:  # reported in the answers (error_answer logs a bug's traceback
            flight.error = exc
        flight.finished = time.monotonic()
        with self._lock:
            if flight.error is None and self._flights.get(key) is flight:
                del self._flights[key]
            failed = [k for k, f in self._flights.items() if f.done.is_set()]
            for old in failed[: max(0, len(failed) - MAX_KEPT)]:
                del self._flights[old]
        flight.done.set()
