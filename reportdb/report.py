"""Report: the public API of one report database, its report tables (through the ORM) and its stored tensors.

``reportdb.open(path, mode)`` is the entry point. Mode ``"r"`` never writes the file; mode ``"a"``
creates it, or upgrades an older schema in place, in one transaction. A Report is made of parts by what they hold:
the connection, its lock, read snapshot and transactions (``reading.ReportConnection``), tensor reads and the chunk
source they read through (``tensor_reads``, ``chunk_source``), tensor writes (``tensor_writes``), checks and
statistics (``checks``); this module opens the file and closes it. The work is done in ``reportdb.store``: opening
(``schema.open_database``), the tensor write path (``tensors``), reading and checking the tensor tables (``rows``),
blobs (``blobs``).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from . import recognize
from .checks import Checks
from .errors import InvalidArgumentError, ReportNotFoundError
from .reading import Mode, Reaper
from .store import blobs, codec as codec_mod, engine as engine_mod, journal, schema
from .store.codec import Compression
from .store.rows import TensorInfo
from .tensor_writes import TensorWrites

DB_NAME = "db.sqlite"


def resolve_path(path: str | os.PathLike[str]) -> Path:
    """A report folder means its ``db.sqlite``; anything else is the database file itself."""
    p = Path(path)
    return p / DB_NAME if p.is_dir() else p


def open(  # shadows the builtin open: the public name is fixed
    path: str | os.PathLike[str], mode: Mode = "r", *, chunk_size: int = blobs.DEFAULT_CHUNK_SIZE,
    compression: Compression = "none",
) -> "Report":
    """Open a report folder or database file. ``"r"``: read only, as it is; ``"a"``: create or upgrade.

    ``chunk_size`` and ``compression`` apply to the tensors this Report writes (see :class:`Report`). The public
    ``reportdb.open`` (``reportdb.opening``) also opens a report in a team store by its URL.
    """
    return Report(path, mode, chunk_size=chunk_size, compression=compression)


#: Seconds a read-only Report keeps one read transaction open across its reads (``Report._renew``). Each read
#: transaction costs SQLite several system calls of file locking and a ``PRAGMA data_version``, a large part of a small
#: tensor's read; held for a few milliseconds, that is paid once per many reads (benchmarks/NOTES.md). Short, because in a rollback-journal file a reader's shared lock holds back every
#: commit: the reaper thread (:class:`~reportdb.reading.Reaper`) ends a snapshot this old even when its Report reads no more, so a
#: writer waits at most this long plus a read in progress (SQLite's busy handler then retries within milliseconds),
#: well inside any busy timeout (reportdb's is 60 s, Python sqlite3's default 5 s).
SNAPSHOT_SECONDS = 0.002


_REAPER = Reaper(lambda: SNAPSHOT_SECONDS)  # read at each look, so a change to SNAPSHOT_SECONDS applies
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_REAPER.reset)


def copy_tensor(
    source: "Report", dest: "Report", tensor_id: int, rank: int = 0, *, to_rank: int | None = None
) -> TensorInfo:
    """Store a tensor of ``source`` into ``dest`` (under ``to_rank``, by default its own rank) with its values, spec
    and source, through ``put_tensor`` (chunks ``dest`` holds already are not stored again); return its info."""
    info = source.tensor_info(tensor_id, rank)
    dest.put_tensor(tensor_id, rank=rank if to_rank is None else to_rank, shards=source.shards(tensor_id, rank),
                    source=info.source, **info.spec.to_json())
    return info


def upgrade(path: str | os.PathLike[str]) -> str:
    """Bring an existing report database to the current schema in place; return the schema revision. A file that is
    no report (:mod:`reportdb.recognize`) is refused untouched with :class:`NotAReportError`."""
    db = resolve_path(path)
    if not db.is_file():
        raise ReportNotFoundError(f"{db}: no such report database")
    recognize.check_file(db, empty_ok=False)  # an empty file or someone else's database is no report to upgrade
    with Report(db, "a") as report:
        report.fill_missing_stats()
        return str(report.schema_revision)


class Report(TensorWrites, Checks):
    """A report database: report tables through ``session()``, tensors through ``put_tensor``/``tensor``.

    Example::

        with reportdb.open("generated/ttnn/reports/1234", "a") as report:
            report.put_tensor(7, np.ones((32, 32), np.float32), ttnn_dtype="FLOAT32", layout="TILE")
            array = report.tensor(7)

    ``compression="zstd"`` stores a tensor's chunks zstd-compressed where a sample of its bytes shrinks by at
    least 10% (``reportdb.store.codec``); reading needs zstd only for chunks stored that way.

    A Report opened read-only keeps one read transaction (a snapshot of the file) open across its reads for at most
    :data:`SNAPSHOT_SECONDS`, see :meth:`_renew`.
    """

    _reaper = _REAPER  # ends this Report's snapshots once SNAPSHOT_SECONDS old

    def __init__(
        self,
        path: str | os.PathLike[str],
        mode: Mode = "r",
        *,
        chunk_size: int = blobs.DEFAULT_CHUNK_SIZE,
        compression: Compression = "none",
    ) -> None:
        if mode not in ("r", "a"):
            raise InvalidArgumentError(f"mode must be 'r' or 'a', not {mode!r}")
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or not 0 < chunk_size <= blobs.MAX_CHUNK_SIZE:
            raise InvalidArgumentError(f"chunk_size must be a number of bytes from 1 to {blobs.MAX_CHUNK_SIZE}, not {chunk_size!r}")
        codec = codec_mod.codec_for(compression)
        super().__init__(resolve_path(path), mode)
        self._codec = codec
        self.chunk_size = chunk_size
        self.compression = compression
        existed = self.path.exists()
        if not existed and (mode == "r" or not self.path.parent.is_dir()):
            raise ReportNotFoundError(
                f"{self.path}: no such report database"
                + ("" if mode == "r" else f" (folder {self.path.parent} does not exist)")
            )
        if existed and self.path.is_dir():
            raise ReportNotFoundError(f"{self.path}: is a folder without {DB_NAME}")
        if existed and mode == "a" and self.path.stat().st_size > 0:
            recognize.check_file(self.path)  # someone else's database gets no reportdb tables
        opened = schema.open_database(self.path, writing=mode == "a", existed=existed)
        try:
            self._open(opened, mode)
        except BaseException:  # a file that fails to open is not held open until the error is collected
            opened.conn.close()
            raise

    def _open(self, opened: schema.Opened, mode: Mode) -> None:
        """The rest of opening, on the connection :func:`schema.open_database` made: what the file holds."""
        if mode == "r":
            recognize.check(opened.conn, self.path, empty_ok=False)
        self._attach(opened.conn, opened.revision, opened.new_file)
        if opened.upgraded_older:
            self.fill_missing_stats()  # tensors stored before the statistics table existed

    def _attach(self, conn: sqlite3.Connection, revision: str | None, new_file: bool) -> None:
        super()._attach(conn, revision, new_file)
        self._complete = self._source.complete  # the chunk source this Report reads through (TensorReads._source)
        self._memo.group = self._source.layout_group

    def close(self) -> None:
        """Close the connection. In mode "a", the last connection to the file puts it back into rollback-journal
        mode first, so a finished report is one self-contained file (copyable alone, readable from read-only media);
        while other connections are open (writer processes) this is left, silently, to the last of them."""
        with self._lock:
            if self._closed:  # closing twice is harmless; any other use of a closed Report raises ReportClosedError
                return
            self._closed = True
            self._hold = False
            try:
                self._end_snapshot()
                if self.mode == "a" and not self._conn.in_transaction:
                    journal.finish_writing(self._conn)
            except sqlite3.Error as exc:
                mapped = engine_mod.translate(exc, self.path, what="closing")
                assert mapped is not None
                raise mapped from exc
            finally:
                try:
                    if self._engine is not None:
                        self._engine.dispose()  # StaticPool: closes the connection too
                    self._conn.close()
                finally:
                    self._source.close()

    def __enter__(self) -> "Report":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
