"""Where a Report's chunk bytes come from: the one seam between reading a tensor and the store that holds its chunks.

A Report reads every tensor from its SQLite file, with the same row checks, crc32s and window planning whatever the
file is. Before a read that needs chunk bytes (``tensor``, ``shards``, ``verify_tensor``), a Report whose source is
not :attr:`ChunkSource.complete` tells its source which shards (or windows of them) it is about to read
(:meth:`ChunkSource.missing`) and has it bring in the chunks the file lacks (:meth:`ChunkSource.fetch`); it does so
under its lock and with no read transaction of its own open, so the source may write the file through a connection
of its own, and the read that follows begins its snapshot on the file as filled.

:class:`ChunkSource` itself is the file: it holds every chunk, so a read asks it nothing (not even which chunks it
needs: a local read costs no more than it did before the seam). ``reportdb.team.remote`` is another source: the
chunks of a report in a team store, fetched into a private cache file as reads need them.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

from .results import ReportSummary
from .store.rows import LAYOUT_GROUP, ShardInfo
from .store.windows import Window


class ShardRead(NamedTuple):
    """One shard a read is about to read: its blob, its rows as checked, and the window of it (None: all of it)."""

    blob_id: int
    shard: ShardInfo
    window: Window | None


class ChunkSource:
    """The chunks of a Report's file, held in the file itself; the base of every other source.

    A source that is not :attr:`complete` answers :meth:`missing` and :meth:`fetch`; any source may add what it
    knows of the chunks it keeps elsewhere to :meth:`store_problems` and :meth:`summary`, and frees what it holds in
    :meth:`close` (after the Report's connection is closed)."""

    #: Whether the file holds every chunk's bytes already: a Report then asks nothing before a read.
    complete: bool = True
    #: Chunks a read lists at a time (``rows.ReadMemo.group``): a file holding only the chunks fetched for past reads
    #: lists one at a time, so no chunk row whose bytes are not there yet is read as part of a group.
    layout_group: int = LAYOUT_GROUP

    def missing(self, reads: Sequence[ShardRead]) -> list[int]:
        """The ids of the chunks ``reads`` span whose bytes the file does not hold yet (the file's own: none)."""
        return []

    def fetch(self, chunk_ids: list[int], what: str) -> None:
        """Store the bytes of chunks ``chunk_ids`` (from :meth:`missing`) into the file, each checked against its
        row, for the read of ``what`` (``"tensor 7 (rank 0)"``, for messages). The file holds every chunk already."""

    def store_problems(self) -> list[str]:
        """Problems of the chunks kept outside the file (``Report.check_store`` adds them to its own); none here."""
        return []

    def summary(self, local: ReportSummary) -> ReportSummary:
        """``Report.summary`` as this source tells it (where the report is, its chunks' stored bytes): the file's."""
        return local

    def close(self) -> None:
        """Free what this source holds, once its Report has closed its connection (the file's source holds nothing)."""


#: The source of every Report that reads its own file.
LOCAL = ChunkSource()
