"""Isolated operations replayed on several threads at once: each operation's reference and comparison depend only on
its own stored tensors, and numpy releases the GIL in both, so threads use the machine's cores. Reads from the report
still go one at a time through the Report's lock (:mod:`reportdb.reading`), as every read does.

Memory is bounded by a budget of bytes in flight (each operation's cost estimated before it starts, from its stored
tensors' metadata); an operation larger than the whole budget runs alone. Rows are yielded in the order the
operations were given (execution order), whatever order the threads finish in. :class:`SharedReads` reads each
tensor once for all the operations that read it (an output, then the next operation's input) within a part of the
budget, and answers which tensors are stored from one query.
"""

from __future__ import annotations

import math
import os
import threading
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable, ContextManager, Iterable, Iterator, Sequence, TypeVar

from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    import numpy as np

    from ..report import Report
    from ..store.rows import TensorInfo

#: Bytes of inputs, references and outputs replay may hold in flight at once across its threads (1 GiB).
BUDGET = 1 << 30
#: The most threads replay starts by default, however many cores the machine has: beyond that the report's lock
#: (one read at a time) bounds the rate.
MAX_WORKERS = 8

Row = TypeVar("Row")


def default_workers() -> int:
    """Threads replay uses unless told: the machine's cores, at most :data:`MAX_WORKERS`."""
    return max(1, min(cpus(), MAX_WORKERS))


def cpus() -> int:
    """The machine's cores."""
    return os.cpu_count() or 1


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
    with blas_threads(max(1, cpus() // workers)), \
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="reportdb-replay") as pool:
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


def blas_threads(limit: int) -> ContextManager[object]:
    """At most ``limit`` threads in each BLAS library numpy loaded (OpenBLAS, MKL, BLIS), for the block: replay's
    workers each run matmuls, and a BLAS that also starts a thread per core on each one oversubscribes the machine
    (2 workers on 2 cores: 0.53 s of wall time for a Llama-shaped replay where 1 BLAS thread each takes 0.42 s).
    threadpoolctl finds the loaded libraries and their own thread setters; the limit is the process's while it holds."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=limit, user_api="blas")


class Reads:
    """How a replay reads one rank's tensors: whether each is stored, its element count (from its metadata) and its
    values, asked of the report each time (:class:`SharedReads` answers them once per replay)."""

    def __init__(self, report: "Report", rank: int) -> None:
        self.report, self.rank = report, rank

    def has(self, tensor_id: int) -> bool:
        """Whether the tensor is stored for this rank."""
        return self.report.has_tensor(tensor_id, self.rank)

    def info(self, tensor_id: int) -> "TensorInfo":
        """The stored tensor's metadata."""
        return self.report.tensor_info(tensor_id, self.rank)

    def elements(self, tensor_id: int) -> int:
        """How many elements the stored tensor holds (:func:`elements_of`)."""
        return elements_of(self.info(tensor_id))

    def tensor(self, tensor_id: int) -> "np.ndarray":
        """The tensor's values."""
        return self.report.tensor(tensor_id, self.rank)


class SharedReads(Reads):
    """One isolated replay's reads, shared by its threads: which tensors are stored from one query for the replay (not
    one per operation), each one's element count asked once, and each tensor's values read once and kept for the
    operations still to read them (an output is read to be judged, then as the next operation's input) while what is
    kept stays within ``limit`` bytes. ``reads`` counts, per tensor, how many reads the replay will ask for; a kept
    array is dropped at its last one. Kept arrays are read-only: every reader sees the stored values."""

    def __init__(self, report: "Report", rank: int, reads: Iterable[int], limit: int) -> None:
        super().__init__(report, rank)
        self.limit = limit
        self.stored = frozenset(report.tensor_ids(rank))
        self._left = Counter(reads)
        self._kept: dict[int, np.ndarray] = {}
        self._infos: dict[int, TensorInfo] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def has(self, tensor_id: int) -> bool:
        """Whether the tensor is stored for this rank."""
        return tensor_id in self.stored

    def info(self, tensor_id: int) -> "TensorInfo":
        """The stored tensor's metadata, read once."""
        info = self._infos.get(tensor_id)
        if info is None:
            info = self._infos[tensor_id] = super().info(tensor_id)
        return info

    def tensor(self, tensor_id: int) -> "np.ndarray":
        """The tensor's values: kept from an earlier read, or read now (and kept when another read of it follows and it
        fits the limit)."""
        with self._lock:
            self._left[tensor_id] -= 1
            last = self._left[tensor_id] <= 0
            array = self._kept.pop(tensor_id) if last and tensor_id in self._kept else self._kept.get(tensor_id)
            if array is not None:
                self._bytes -= array.nbytes if last else 0
                return array
        array = super().tensor(tensor_id)
        with self._lock:
            if self._left[tensor_id] > 0 and tensor_id not in self._kept and self._bytes + array.nbytes <= self.limit:
                array.flags.writeable = False
                self._kept[tensor_id] = array
                self._bytes += array.nbytes
        return array


def stored_elements(report: "Report", tensor_id: int, rank: int) -> int:
    """How many elements a stored tensor holds, from its metadata (:func:`elements_of`)."""
    return elements_of(report.tensor_info(tensor_id, rank))


def elements_of(info: "TensorInfo") -> int:
    """How many elements a stored tensor holds (its largest shard's when the shards do not assemble)."""
    return math.prod(info.shape) if info.shape is not None else max((math.prod(s.shape) for s in info.shards), default=0)


class ReadAhead(SharedReads):
    """A chain's reads, done ahead of it on a thread of their own so that the chain's thread computes references
    instead of waiting on the report: ``plan`` lists, in the order the chain meets them, the stored tensors it reads
    whole (each operation's inputs that no operation made: weights, the model's inputs) as ``(tensor_id, True)`` and
    those whose metadata it asks for (outputs) as ``(tensor_id, False)``. The thread reads each metadata into the
    shared cache and each tensor's values while what is read and not yet taken stays within ``limit`` bytes (one
    read at least); a tensor stored as several device shards is left to the per-device reads. A tensor read again
    later (a weight two operations share) is kept until its last read; one the chain passed by untaken (its
    operation stopped before reading it) is dropped when a later one is taken. The chain never waits for the thread
    except on the read it is doing: a tensor asked before the thread reached it is read at once (and then skipped by
    the thread). :meth:`close` stops the thread."""

    def __init__(self, report: "Report", rank: int, plan: Iterable[tuple[int, bool]], limit: int) -> None:
        super().__init__(report, rank, (), 0)
        self._plan = [(t, whole) for t, whole in plan if t in self.stored]
        reads = [t for t, whole in self._plan if whole]
        self._uses = Counter(reads)
        self._order = {t: i for i, t in enumerate(dict.fromkeys(reads))}  # each one's first read
        self._ready: dict[int, tuple[np.ndarray | BaseException, int]] = {}  # read, not yet taken for the last time
        self._taken: set[int] = set()
        self._skip: set[int] = set()  # asked before the thread reached them
        self._reading: int | None = None
        self._ahead_bytes, self._ahead_limit, self._closed = 0, limit, False
        self._ready_changed = threading.Condition(threading.Lock())
        self._thread = threading.Thread(target=self._run, name="reportdb-read-ahead", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        """Walk the plan: every metadata into the cache, every whole single-shard tensor read within the limit."""
        done = self._ready_changed
        for tensor_id, whole in self._plan:
            try:
                info = self.info(tensor_id)
            except Exception:  # the chain's own read of it will raise the error where it belongs
                continue
            if not whole or len(info.shards) != 1:
                continue
            size = 4 * elements_of(info)  # read as float32 at most, bfloat16 half of it
            with done:
                while not self._closed and self._ahead_bytes and self._ahead_bytes + size > self._ahead_limit:
                    done.wait()
                if self._closed:
                    return
                if tensor_id in self._skip or tensor_id in self._ready or tensor_id in self._taken:
                    continue
                self._reading = tensor_id
            value: np.ndarray | BaseException
            try:
                value = Reads.tensor(self, tensor_id)
                value.flags.writeable = False  # shared by every operation that reads it
            except BaseException as exc:  # handed to the reader that asks for it
                value = exc
            with done:
                self._reading = None
                if not self._closed:
                    self._ready[tensor_id] = (value, size)
                    self._ahead_bytes += size
                done.notify_all()

    def tensor(self, tensor_id: int) -> "np.ndarray":
        """The tensor's values: read ahead (waited for while the thread reads it), or read now."""
        done = self._ready_changed
        with done:
            while self._reading == tensor_id:
                done.wait()
            entry = self._ready.get(tensor_id)
            if entry is None:
                self._skip.add(tensor_id)
            else:
                self._taken.add(tensor_id)
                self._uses[tensor_id] -= 1
                first = self._order.get(tensor_id, 0)
                passed = [t for t in self._ready if t not in self._taken and self._order.get(t, 0) < first]
                for t in passed + ([tensor_id] if self._uses[tensor_id] <= 0 else []):
                    self._ahead_bytes -= self._ready.pop(t)[1]
                done.notify_all()
        if entry is None:
            return Reads.tensor(self, tensor_id)
        if isinstance(entry[0], BaseException):
            raise entry[0]
        return entry[0]

    def close(self) -> None:
        """Stop reading ahead (the read in progress ends first) and drop what was read."""
        with self._ready_changed:
            self._closed = True
            self._ready.clear()
            self._ready_changed.notify_all()
        self._thread.join()
