"""WAL checkpoints in a thread of their own, so a writer's commits do not wait for them.

In WAL mode every committed page is written twice: into the WAL, then, at a checkpoint, into the database
file, with an fsync of each under ``synchronous=NORMAL``. SQLite runs that checkpoint inside the COMMIT that
crosses ``wal_autocheckpoint`` pages, so the committing thread waits for the copy and both fsyncs while it
could be hashing and storing the next tensors. A writer hands its checkpoints to a :class:`Checkpointer`: a
second connection that runs ``PRAGMA wal_checkpoint(PASSIVE)`` when asked (:meth:`Checkpointer.committed` asks
every few MiB or commits). The writer keeps SQLite's automatic checkpoint only as a backstop, raised from the
default 1000 pages to :data:`AUTOCHECKPOINT_PAGES`, for a WAL that grows faster than this thread copies it back.
PASSIVE never blocks writers or readers (frames a reader still needs wait for the next round). The writer closes
its Checkpointer before its Report, so the Report's connection is the one that closes last and checkpoints whatever
is left (and, as the last connection to the file, returns it to rollback-journal mode). Crash safety is the WAL's
and does not depend on when checkpoints run.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from . import engine

#: SQLite's automatic checkpoint in the committing thread, kept as a backstop at 4x its default: 4000 pages of the
#: file's page size (250 MiB with the 64 KiB pages of a file reportdb created, 16 MiB in a 4 KiB-page legacy report).
AUTOCHECKPOINT_PAGES = 4000
#: A checkpoint is asked for after this many committed tensor bytes or commits, whichever comes first.
_CHECKPOINT_BYTES = 16 << 20
_CHECKPOINT_COMMITS = 64


class Checkpointer:
    """Runs a PASSIVE checkpoint of ``path`` each time it is poked (pokes while one runs fold into one)."""

    def __init__(self, path: Path, *, synchronous: str = "NORMAL") -> None:
        self._conn = engine.connect_plain(path, check_same_thread=False)
        self._conn.execute(f"PRAGMA synchronous={synchronous}")  # the fsyncs a checkpoint makes, as the writer's
        self._unchecked_bytes = self._unchecked_commits = 0  # committed since the last poke
        self._wake = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="reportdb-checkpoint", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """Ask for a checkpoint; returns at once."""
        self._wake.set()

    def committed(self, nbytes: int) -> None:
        """Note one commit of ``nbytes`` tensor bytes; pokes once enough bytes or commits have piled up since the
        last poke, so the WAL is copied back in rounds of a useful size."""
        self._unchecked_bytes += nbytes
        self._unchecked_commits += 1
        if self._unchecked_bytes >= _CHECKPOINT_BYTES or self._unchecked_commits >= _CHECKPOINT_COMMITS:
            self._unchecked_bytes = self._unchecked_commits = 0
            self.poke()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopping:
                return
            try:
                self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            except sqlite3.Error:  # another process's checkpoint holds the lock: the next poke tries again
                pass

    def close(self) -> None:
        """Stop the thread (after the checkpoint it is running, if any) and close the connection."""
        self._stopping = True
        self._wake.set()
        self._thread.join()
        self._conn.close()
