"""The Writer's private copies of queued tensors, made in buffers it reuses.

A tensor below ``sync_bytes`` is copied before it is queued (the caller may change its array once ``put_tensor``
returns). A fresh large buffer costs as much again as the copy, or more: the kernel zeroes every page of it on first
touch (figures: benchmarks/NOTES.md). So large copies go into buffers
given back once their batch is committed, kept up to the queue's own bound (the memory the queue may hold anyway)
and dropped when the queue goes quiet or the Writer closes.
"""

from __future__ import annotations

import bisect
import threading

import numpy as np

#: Copies from this size on go into reused buffers; below it, malloc's heap serves them without fresh pages.
POOLED_MIN = 1 << 20


class CopyBuffers:
    """Reusable byte buffers for copies of at least :data:`POOLED_MIN` bytes, at most ``limit`` bytes of them kept
    free (the largest first: they save the most)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._free: list[tuple[int, int, np.ndarray]] = []  # (size, serial, buffer), by size
        self._free_bytes = 0
        self._serial = 0

    def copy(self, array: np.ndarray, borrowed: list[np.ndarray]) -> np.ndarray:
        """A C-contiguous copy of ``array``; a pooled buffer it lives in is appended to ``borrowed``, for
        :meth:`give_back` once nothing reads the copy any more."""
        nbytes = int(array.nbytes)
        if nbytes < POOLED_MIN:
            return array.copy()
        buffer = self._take(nbytes)
        if buffer is None:
            buffer = np.empty(nbytes, dtype=np.uint8)
        borrowed.append(buffer)
        out = buffer[:nbytes].view(array.dtype).reshape(array.shape)
        np.copyto(out, array, casting="no")
        return out

    def give_back(self, buffers: list[np.ndarray]) -> None:
        """Keep ``buffers`` (from :meth:`copy`; nothing may use their copies any more) for later copies, the
        smallest dropped beyond ``limit`` bytes."""
        with self._lock:
            for buffer in buffers:
                self._serial += 1
                bisect.insort(self._free, (int(buffer.nbytes), self._serial, buffer), key=lambda f: f[:2])
                self._free_bytes += int(buffer.nbytes)
            while self._free_bytes > self.limit:
                self._free_bytes -= self._free.pop(0)[0]

    def clear(self) -> None:
        """Drop every kept buffer (the Writer is closing)."""
        with self._lock:
            self._free.clear()
            self._free_bytes = 0

    def _take(self, nbytes: int) -> np.ndarray | None:
        """The smallest kept buffer of at least ``nbytes`` bytes and at most twice that, removed; None when none is."""
        with self._lock:
            at = bisect.bisect_left(self._free, (nbytes, 0), key=lambda f: f[:2])
            if at == len(self._free) or self._free[at][0] > 2 * nbytes:
                return None
            size, _, buffer = self._free.pop(at)
            self._free_bytes -= size
            return buffer
