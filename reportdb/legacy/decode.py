"""Decoding legacy tensor files, in this process or in worker processes, before the write transaction.

A worker reads one file, canonicalizes its shards and computes each shard's chunk digests and statistics
(:func:`reportdb.store.prepared.prepare_shard`), so the single writing process only writes. This module imports
neither SQLAlchemy nor alembic (and ``reportdb.legacy`` loads its other modules lazily): ``migrate --jobs N`` runs
:func:`decode_file` in spawned worker processes, which then start in a fraction of the time.
"""

from __future__ import annotations

import collections
import concurrent.futures
import multiprocessing
import os
import shutil
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from ..dtypes import canonical, dtype_name, numpy_dtype
from ..spec import LoadedTensor
from ..store.prepared import PreparedShard, prepare_shard

if TYPE_CHECKING:  # only a type here: importing inventory would load SQLAlchemy into every worker
    from .inventory import TensorFile

_INFLIGHT_BYTES = 256 << 20


@dataclass
class DecodedFile:
    """One legacy tensor file read and prepared: canonical shards with one PreparedShard each, or the error text.

    A worker process does not send the shards' bytes back through its result pipe (about 300 MB/s on a small
    VM, and received by one thread of the parent): it writes them to a spool file and sends their dtypes and
    shapes (``spooled``); the writing process reads them back from the page cache at several GB/s.
    """

    loaded: LoadedTensor | None
    prepared: list[PreparedShard] | None
    error: str | None
    spool: str | None = None
    spooled: list[tuple[tuple[int, ...], str, tuple[int, ...]]] | None = None  # (mesh coordinate, dtype, shape)

    def spool_to(self, path: str) -> None:
        """Move the shards' bytes into the new file ``path``, keeping only their coordinates, dtypes and shapes."""
        assert self.loaded is not None
        with open(path, "wb") as handle:
            for _, array in self.loaded.shards:
                handle.write(array.reshape(-1).view(np.uint8).data)
        self.spooled = [(tuple(coord), dtype_name(a.dtype), tuple(a.shape)) for coord, a in self.loaded.shards]
        self.loaded.shards = []
        self.spool = path

    def unspool(self) -> None:
        """Read the shards back from the spool file (then deleted), in the writing process."""
        if self.spool is None or self.loaded is None or self.spooled is None:
            return
        shards = []
        with open(self.spool, "rb") as handle:
            for coord, dtype, shape in self.spooled:
                array = np.empty(shape, numpy_dtype(dtype))
                if handle.readinto(array.reshape(-1).view(np.uint8).data) != array.nbytes:
                    raise OSError(f"{self.spool}: spool file is shorter than its shards")
                shards.append((coord, array))
        os.unlink(self.spool)
        self.loaded.shards, self.spool, self.spooled = shards, None, None


def decode_file(path: str, stats: bool, chunk_size: int, address: str, spool: str | None = None) -> DecodedFile:
    """Read a legacy tensor file, canonicalize its shards and prepare each (content addresses of kind ``address``,
    the output file's); an unreadable file gives its error, and
    so does a path that is not a regular file (checked with lstat: a link is not followed, a FIFO not opened).

    With ``spool``, the shards' bytes are left in that file (see :class:`DecodedFile`).
    """
    from ..formats import load_tensor_file

    try:
        mode = os.lstat(path).st_mode
    except OSError as exc:
        return DecodedFile(None, None, f"{type(exc).__name__}: {exc}")
    if not stat.S_ISREG(mode):  # replaced by a link, FIFO or device since the folder was scanned: never read it
        return DecodedFile(None, None, f"{path}: no longer a regular file (a link or a special file); not read")
    try:
        loaded = load_tensor_file(path)
        loaded.shards = [(coord, canonical(np.asarray(a))) for coord, a in loaded.shards]  # not memmap views
    except Exception as exc:  # any failure to read a file is a finding, not a crash
        return DecodedFile(None, None, f"{type(exc).__name__}: {exc}")
    prepared = [prepare_shard(a, chunk_size=chunk_size, stats=stats, address=address) for _, a in loaded.shards]
    decoded = DecodedFile(loaded, prepared, None)
    if spool is not None:
        decoded.spool_to(spool)
    return decoded


def exit_with_parent(parent: int) -> None:
    """Pool initializer: end this worker once ``parent`` (the process that started it) is gone.

    A worker holds both ends of its task queue, so a parent killed with SIGKILL would otherwise leave
    it waiting forever. The parent passes its own pid: it may already be dead when this runs.
    """

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="reportdb-parent-watch", daemon=True).start()


def decoded_files(
    files: list[TensorFile], jobs: int, stats: bool, chunk_size: int, address: str, spool_dir: Path
) -> Iterator[tuple[TensorFile, DecodedFile]]:
    """Decode and prepare files in order; with ``jobs > 1`` in worker processes, at most ``2 * jobs`` files or
    ~256 MiB in flight, their bytes passed through spool files in ``spool_dir`` (removed on the way out; a
    killed run's leftovers are removed by the next one)."""
    shutil.rmtree(spool_dir, ignore_errors=True)  # what a killed run left
    if jobs == 1:
        for f in files:
            yield f, decode_file(str(f.path), stats, chunk_size, address)
        return
    spool_dir.mkdir()
    context = multiprocessing.get_context("spawn")
    try:
        with concurrent.futures.ProcessPoolExecutor(
            max_workers=jobs, mp_context=context, initializer=exit_with_parent, initargs=(os.getpid(),)
        ) as pool:
            pending: collections.deque[tuple[TensorFile, concurrent.futures.Future[Any]]] = collections.deque()
            queued = iter(enumerate(files))
            inflight = 0
            nxt = next(queued, None)
            while nxt is not None or pending:
                while nxt is not None and (
                    not pending or (len(pending) < 2 * jobs and inflight + nxt[1].nbytes <= _INFLIGHT_BYTES)
                ):
                    index, f = nxt
                    spool = str(spool_dir / f"{index}.bin")
                    pending.append((f, pool.submit(decode_file, str(f.path), stats, chunk_size, address, spool)))
                    inflight += f.nbytes
                    nxt = next(queued, None)
                f, future = pending.popleft()
                inflight -= f.nbytes
                decoded = future.result()
                decoded.unspool()
                yield f, decoded
    finally:
        shutil.rmtree(spool_dir, ignore_errors=True)
