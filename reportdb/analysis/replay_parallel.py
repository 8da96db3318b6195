"""Isolated operations replayed on several threads at once: each operation's reference and comparison depend only on
its own stored tensors, and numpy releases the GIL in both, so threads use the machine's cores. Reads from the report
still go one at a time through the Report's lock (:mod:`reportdb.reading`), as every read does.

Memory is bounded by a budget of bytes in flight (each operation's cost estimated before it starts, from its stored
tensors' metadata); an operation larger than the whole budget runs alone. Rows are yielded in the order the
operations were given (execution order), whatever order the threads finish in.
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterator, Sequence, TypeVar

from ..errors import InvalidArgumentError

#: Bytes of inputs, references and outputs replay may hold in flight at once across its threads (1 GiB).
BUDGET = 1 << 30
#: The most threads replay starts by default, however many cores the machine has: beyond that the report's lock
#: (one read at a time) bounds the rate.
MAX_WORKERS = 8

Row = TypeVar("Row")


def default_workers() -> int:
    """Threads replay uses unless told: the machine's cores, at most :data:`MAX_WORKERS`."""
    return max(1, min(os.cpu_count() or 1, MAX_WORKERS))


def replay_isolated(
    operations: Sequence[int], run: Callable[[int], list[Row]], cost: Callable[[int], int], *, workers: int,
    budget: int = BUDGET,
) -> Iterator[Row]:
    """The rows ``run`` gives for each of ``operations``, in their order: on ``workers`` threads, starting an
    operation only while the ``cost`` (bytes) of those in flight stays within ``budget`` (or none is in flight)."""
    if workers < 1 or budget < 1:
        raise InvalidArgumentError(f"replay needs at least one worker and a positive budget (got workers={workers}, "
                                   f"budget={budget})")
    if workers == 1:
        for op in operations:
            yield from run(op)
        return
    pending: deque[tuple[Future[list[Row]], int]] = deque()
    held = 0
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="reportdb-replay") as pool:
        try:
            for op in operations:
                need = cost(op)
                while pending and (held + need > budget or len(pending) >= 2 * workers):
                    future, spent = pending.popleft()
                    held -= spent
                    yield from future.result()
                pending.append((pool.submit(run, op), need))
                held += need
            while pending:
                future, spent = pending.popleft()
                held -= spent
                yield from future.result()
        finally:  # a consumer that stops early, or an error: queued operations are not started
            for future, _ in pending:
                future.cancel()
