"""Read transactions of a Report: one around the statements of a read (:func:`snapshot`), and the thread that ends a
read-only Report's held snapshot once it is old enough (:class:`Reaper`), so no Report holds a lock on its file for
long. ``reportdb.report`` uses both; nothing here knows a report's tables.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
import weakref
from typing import Callable, Iterator, Protocol


class Report(Protocol):
    """What the reaper asks of a Report (``reportdb.report.Report``): to end its snapshot, unless a read holds it."""

    def _expire(self) -> bool: ...


class Reaper:
    """One daemon thread for the whole process that ends every Report's held read transaction once it is
    ``seconds()`` old (``reportdb.report.SNAPSHOT_SECONDS``), so a Report left idle (a viewer between clicks, a
    notebook) never holds a lock on its file for longer than that. Started at the first snapshot; it sleeps while no Report holds one. Reports are kept by
    weak reference: one dropped without ``close()`` is collected as before (its connection's locks go with it)."""

    def __init__(self, seconds: Callable[[], float]) -> None:
        self._seconds = seconds  # how long a snapshot is held, asked at each look
        self.reset()

    def reset(self) -> None:
        """Forget the thread and every Report (a forked child has neither)."""
        self._cond = threading.Condition(threading.Lock())
        self._due: dict[int, tuple[float, weakref.ref[Report]]] = {}
        self._started = False
        self._wake = float("inf")  # when the thread looks next (monotonic time)

    def schedule(self, report: Report, at: float) -> None:
        """End ``report``'s snapshot at monotonic time ``at`` (or soon after, when a read is holding the Report then)."""
        with self._cond:
            if not self._started:
                threading.Thread(target=self._run, name="reportdb-snapshots", daemon=True).start()
                self._started = True
            if at < self._wake:  # sooner than the thread would look: wake it
                self._cond.notify()
            self._due[id(report)] = (at, weakref.ref(report))

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due:
                    self._wake = float("inf")
                    self._cond.wait()
                now = time.monotonic()
                self._wake = min(at for at, _ in self._due.values())
                if self._wake > now:
                    self._cond.wait(self._wake - now)
                    continue
                due = [(key, ref) for key, (at, ref) in self._due.items() if at <= now]
                for key, _ in due:
                    del self._due[key]
            for key, ref in due:
                report = ref()
                if report is not None and not report._expire():
                    with self._cond:  # a read holds the Report: look again a snapshot's time later
                        self._due.setdefault(key, (time.monotonic() + self._seconds(), ref))


@contextlib.contextmanager
def snapshot(conn: sqlite3.Connection) -> Iterator[None]:
    """One read transaction around the statements of a read, unless one is open already (the Report's own snapshot,
    ``Report._renew``, or ``batch()``): SQLite then
    takes and checks its shared lock once instead of once per statement (most of a window's SQL time), and every row read comes from one state of the file."""
    if conn.in_transaction:
        yield
        return
    conn.execute("BEGIN")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    if conn.in_transaction:
        conn.execute("COMMIT")
