"""The Writer's settings: what it stores and how it batches, from arguments, ``REPORTDB_*`` variables or defaults.

Kept apart from the Writer so the settings, their environment variables and their checks read in one place, and a
bad value is refused when the Writer is made rather than at its first background flush.

Configuration comes from arguments, else from environment variables, else defaults:

=======================  ============================  =============================================
argument                 environment variable          meaning
=======================  ============================  =============================================
``store``                ``REPORTDB_STORE``            ``all`` | ``outputs`` | ``none``: which tensor
                                                       values to keep (metadata rows are always kept)
``chunk_size``           ``REPORTDB_CHUNK_SIZE``       bytes per stored chunk (``4M``, ``65536``...)
``compression``          ``REPORTDB_COMPRESSION``      ``none`` | ``zstd``: chunks compressed where a
                                                       sample shrinks by 10% (``reportdb[zstd]`` extra)
``stats``                ``REPORTDB_STATS``            compute statistics as tensors are stored (1/0)
``batch_items``          ``REPORTDB_BATCH_ITEMS``      commit after this many queued items
``batch_bytes``          ``REPORTDB_BATCH_BYTES``      commit after this many queued tensor bytes
``batch_seconds``        ``REPORTDB_BATCH_SECONDS``    commit queued items at least this often (a
                                                       background thread; 0: only by count, bytes, flush)
``sync_bytes``           ``REPORTDB_SYNC_BYTES``       tensors this large are written at once, uncopied,
                                                       by the calling thread (default 256 MiB; smaller
                                                       ones are copied and queued)
``lock_timeout``         ``REPORTDB_LOCK_TIMEOUT``     seconds to keep retrying a locked database
``durable``              ``REPORTDB_DURABLE``          1: ``synchronous=NORMAL`` (commits survive a
                                                       process crash; an OS crash may drop the last
                                                       ones); WAL checkpoints, which fsync, run in a
                                                       thread of their own. 0: ``synchronous=OFF`` on
                                                       this writer's connection: still safe against a
                                                       process crash or SIGKILL, not against power
                                                       loss; 10-25% faster (no fsync at checkpoints)
``wal``                  ``REPORTDB_WAL``              0 (default): a rollback journal while this
                                                       process is the file's only writer (each page
                                                       written once), handed over to WAL as soon as
                                                       another writer appears; 1: WAL from the first
                                                       write (readers never wait for a commit)
=======================  ============================  =============================================

The journal: in WAL mode every page is written twice (the log, then the checkpoint into the file), which cost a
64 MiB tensor 205 instead of 148 CPU-ms. So by default a Writer writes in a rollback journal and hands the file over
to WAL before a transaction in which it finds another connection writing (``journal.share_file``); other processes'
Writers and Reports follow. A rollback journal is as safe (SQLite's locks: a reader never sees half a transaction; a
SIGKILLed writer leaves a hot journal that the next writable open rolls back, and a read-only open refuses with
advice until then), but a reader waits while a commit writes the file, and a commit waits for readers to finish their
read: a reader that holds a read transaction open for long stalls the writer. ``wal=True`` for a report read live
while it is written (``reportdb serve`` on a running model, say).

Backpressure: the queue is bounded in bytes. A tensor below ``sync_bytes`` is copied and queued; once the queue holds
``2 * batch_bytes`` (or ``2 * batch_items`` items) the background thread is behind, and ``put_tensor`` commits the
queue itself, waiting first for the batch that thread is writing. A model faster than the disk therefore waits in
``put_tensor`` rather than growing memory: the copies held are at most the queue (``2 * batch_bytes`` plus one tensor
per producing thread) and the batch being written (as much again), about 256 MiB with the defaults; a tensor of
``sync_bytes`` or more is never copied (``tests/test_writer_backpressure.py``). Copies of 1 MiB or more go into buffers
reused once their batch is committed (fresh ones cost page faults as large as the copy, ``copies.py``): up to
``4 * batch_bytes`` of them stay allocated between batches, until the queue has been empty for half of
``batch_seconds`` (or ``close()``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping

from ..errors import ConfigError
from ..store import blobs
from ..store.codec import Compression, codec_for

StorePolicy = Literal["all", "outputs", "none"]


def _parse_size(text: str, name: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    raw = text.strip().lower().removesuffix("ib").removesuffix("b")
    try:
        if raw and raw[-1] in units:
            return int(float(raw[:-1]) * units[raw[-1]])
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name}={text!r} is not a size in bytes (examples: 65536, 4M, 64MiB)") from None


def _parse_bool(text: str, name: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={text!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def _parse_float(text: str, name: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{name}={text!r} is not a number") from None


def _parse_word(text: str, name: str) -> str:
    return text.strip().lower()


_ENV: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "store": ("REPORTDB_STORE", _parse_word),
    "chunk_size": ("REPORTDB_CHUNK_SIZE", _parse_size),
    "compression": ("REPORTDB_COMPRESSION", _parse_word),
    "stats": ("REPORTDB_STATS", _parse_bool),
    "batch_items": ("REPORTDB_BATCH_ITEMS", _parse_size),
    "batch_bytes": ("REPORTDB_BATCH_BYTES", _parse_size),
    "batch_seconds": ("REPORTDB_BATCH_SECONDS", _parse_float),
    "sync_bytes": ("REPORTDB_SYNC_BYTES", _parse_size),
    "lock_timeout": ("REPORTDB_LOCK_TIMEOUT", _parse_float),
    "durable": ("REPORTDB_DURABLE", _parse_bool),
    "wal": ("REPORTDB_WAL", _parse_bool),
}


@dataclass(frozen=True)
class WriterConfig:
    """What the writer stores and how it batches; see the module docstring for the environment variables."""

    store: StorePolicy = "all"
    chunk_size: int = blobs.DEFAULT_CHUNK_SIZE
    compression: Compression = "none"
    stats: bool = True
    batch_items: int = 512
    batch_bytes: int = 64 << 20
    batch_seconds: float = 2.0
    sync_bytes: int = 256 << 20
    lock_timeout: float = 600.0
    durable: bool = True
    wal: bool = False

    def __post_init__(self) -> None:
        if self.store not in ("all", "outputs", "none"):
            raise ConfigError(f"store must be 'all', 'outputs' or 'none', not {self.store!r}")
        codec_for(self.compression)  # an unknown name, or zstd without a zstd library: a clear error now
        for name in ("chunk_size", "batch_items", "batch_bytes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, not {getattr(self, name)}")
        for name in ("batch_seconds", "sync_bytes", "lock_timeout"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must not be negative, not {getattr(self, name)}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> "WriterConfig":
        """Defaults, replaced by the ``REPORTDB_*`` environment variables, replaced by non-None ``overrides``."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name, (var, parse) in _ENV.items():
            if env.get(var, "").strip():
                values[name] = parse(env[var], var)
        unknown = set(overrides) - set(_ENV)
        if unknown:
            raise ConfigError(f"unknown writer options {sorted(unknown)}; known: {sorted(_ENV)}")
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)
