"""Reading a report's tensors: which are stored, their metadata, their values whole, by window or by device shard.

:class:`TensorReads` is the part of ``reportdb.report.Report`` that reads tensors, on the connection and snapshot of
:class:`~reportdb.reading.ReportConnection`; the rows are read and checked in ``reportdb.store.rows``. Every read of
chunk bytes goes through one seam, the Report's chunk source (:mod:`reportdb.chunk_source`): the file itself, or a
source that brings in the chunks a read needs first (a report in a team store).
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Sequence, Union

from ._lazy import lazy_module

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
else:  # numpy is imported on first use: opening a report and reading its metadata need none
    np = lazy_module("numpy", globals(), "np")

from .chunk_source import LOCAL, ChunkSource, ShardRead
from .dtypes import numpy_dtype
from .errors import InvalidArgumentError, ReportDBError, ReportLockedError, TensorNotFoundError
from .reading import ReportConnection, snapshot as _snapshot
from .spec import Shards, assemble
from .store import engine as engine_mod, rows as rows_mod, windows
from .store.rows import ShardInfo, TensorInfo


#: How a read of a tensor reads its shards (:meth:`TensorReads._plan`): the index of the one shard it reads (the window
#: of it the read asked for), or the answer's shape and its pieces ``[(shard index, window of that shard, where it
#: goes in the answer)]``, or None: every shard is read whole and the tensor assembled (a window is cut from it).
Plan = Union[int, tuple[tuple[int, ...], list[tuple[int, tuple[Union[int, slice], ...], tuple[slice, ...]]]], None]


class TensorReads(ReportConnection):
    """The tensor reads of a Report: ``tensor_ids``, ``tensor_keys``, ``has_tensor``, ``tensor_info``, ``shards``,
    ``tensor``."""

    #: Where this Report's chunk bytes come from (:mod:`reportdb.chunk_source`): the file itself, unless a subclass sets
    #: another source before ``Report.__init__`` runs (``reportdb.team.remote``); closed with the Report.
    _source: ChunkSource = LOCAL
    #: ``_source.complete``, as this Report's own attribute: every read looks at it, and an instance attribute is
    #: the cheapest thing to look at (a class attribute through the instance costs about three times as much).
    _complete: bool

    def tensor_ids(self, rank: int = 0) -> list[int]:
        """The ids of the tensors stored for ``rank``, ascending."""
        if "rdb_tensor" not in self._tables:
            return []
        with self._reading("table rdb_tensor") as conn:
            return [r[0] for r in conn.execute("SELECT tensor_id FROM rdb_tensor WHERE rank=? ORDER BY tensor_id", (rank,))]

    def tensor_keys(self) -> list[tuple[int, int]]:
        """Every stored ``(tensor_id, rank)``."""
        if "rdb_tensor" not in self._tables:
            return []
        with self._reading("table rdb_tensor") as conn:
            return [(r[0], r[1]) for r in conn.execute("SELECT tensor_id, rank FROM rdb_tensor ORDER BY rank, tensor_id")]

    def has_tensor(self, tensor_id: int, rank: int = 0) -> bool:
        """Whether a tensor is stored under ``tensor_id`` and ``rank``."""
        if "rdb_tensor" not in self._tables:
            return False
        with self._reading("table rdb_tensor") as conn:
            return conn.execute("SELECT 1 FROM rdb_tensor WHERE tensor_id=? AND rank=?", (tensor_id, rank)).fetchone() is not None

    def tensor_info(self, tensor_id: int, rank: int = 0) -> TensorInfo:
        """The stored metadata of a tensor; reads no tensor bytes."""
        return self._info(tensor_id, rank)[0]

    def _info(self, tensor_id: int, rank: int) -> tuple[TensorInfo, list[int]]:
        """A tensor's metadata and its shards' blob ids, every stored value checked (a malformed one is a
        CorruptionError naming the tensor, the table and the column)."""
        self._require_store()
        with self._reading(f"tensor {tensor_id} (rank {rank})") as conn:
            return rows_mod.read_info(conn, self.path, tensor_id, rank, self._parsed)

    def shards(self, tensor_id: int, rank: int = 0) -> Shards:
        """Every device shard of a tensor as ``[(mesh_coordinate, array), ...]``."""
        if not self._complete:
            self._fetch(tensor_id, rank)
        return self._shards(*self._info(tensor_id, rank))

    def _shards(self, info: TensorInfo, blob_ids: list[int]) -> Shards:
        """The shards of a tensor whose rows ``_info`` has read and checked."""
        what = f"tensor {info.tensor_id} (rank {info.rank})"
        return [(s.mesh_coordinate, self._read(blob_id, s, what)) for s, blob_id in zip(info.shards, blob_ids)]

    def tensor(
        self, tensor_id: int, rank: int = 0, *, window: windows.Window | None = None, rows: slice | None = None,
        device: Sequence[int] | None = None,
    ) -> np.ndarray:
        """The logical array (multi-device tensors assembled as their distribution says), or only ``window`` of it,
        or with ``device=(row, col)`` the one shard at that mesh coordinate (a window of it if given).

        ``window`` is numpy basic indexing (``(0, 0, slice(0, 32), slice(0, 64))``, ``np.s_[..., :64]``): only the
        chunks that hold it are read, and in chunks with block crcs only the 4 KiB blocks it touches, each checked;
        a window of a multi-device tensor reads only the shards it overlaps. ``rows=s`` is ``window=(s,)``. A whole
        tensor of one shard in one chunk (most small tensors) is read with one query. An unknown ``device`` is a
        TensorNotFoundError naming the coordinates the tensor has.

        Other reads run in one read transaction (a read-only Report keeps one open across reads for a few ms, see
        :meth:`_renew`). This Report remembers, while no connection changes the file, the
        rows it has read and checked and the blocks whose crcs matched (``rows.ReadMemo``, ``windows.VerifiedBlocks``):
        a repeated read runs no statement for its metadata and computes no crc for bytes already checked. A byte
        flipped on disk behind SQLite's back after this Report checked it is found by a new Report (its reads, or
        ``verify_tensor``), not by a repeated read.
        """
        if rows is not None:
            if window is not None:
                raise InvalidArgumentError("give window= or rows=, not both")
            window = (rows,)
        what = f"tensor {tensor_id} (rank {rank})"
        if not self._complete:
            self._fetch(tensor_id, rank, window, device)
        if window is None and device is None:
            self._require_store()
            with self._reading(what) as conn:  # the memo only in a snapshot, which has synced it already
                small = rows_mod.read_small(conn, self.path, tensor_id, rank, self._parsed, has_codec=self._has_codec,
                                            memo=self._memo if self._held else None)
            if small is not None:
                distribution = small[0].spec.distribution
                if distribution is None:  # the shard is the tensor (what assemble returns, without its calls)
                    return small[1]
                return assemble([(small[0].shards[0].mesh_coordinate, small[1])], distribution)
        self._require_store()
        with self._reading(what) as conn:
            # Inside a transaction of the caller's (batch(): rows read may yet be rolled back) none is remembered.
            memo: rows_mod.ReadMemo | None = self._memo if self._held or not conn.in_transaction else None
            with _snapshot(conn):
                array, whole = self._read_tensor(conn, what, tensor_id, rank, window, device, memo)
        return np.ascontiguousarray(array[window]) if whole and window is not None else array

    def _read_tensor(
        self, conn: sqlite3.Connection, what: str, tensor_id: int, rank: int, window: windows.Window | None,
        device: Sequence[int] | None, memo: rows_mod.ReadMemo | None,
    ) -> tuple[np.ndarray, bool]:
        """``tensor()`` past the one-query path, in its read transaction: ``(the window, False)`` where it could be read
        alone, else ``(the assembled tensor, True)``, which the caller cuts the window from."""
        self._sync(conn)
        key = ("info", tensor_id, rank)
        found = None if memo is None else memo.get(key)
        if found is None:
            found = rows_mod.read_info_blobs(conn, self.path, tensor_id, rank, self._parsed)
            if memo is not None:
                memo.put(key, found)
        info, blob_ids, blob_rows = found

        def read(index: int, part: windows.Window | None) -> np.ndarray:
            return rows_mod.read_shard(conn, blob_ids[index], info.shards[index], what, window=part,
                                       verified=self._verified, has_codec=self._has_codec,
                                       has_block_crc=self._has_block_crc, blob_row=blob_rows[index], memo=memo)

        plan = self._plan(info, window, device)
        if isinstance(plan, int):
            return read(plan, window), False
        if plan is None:
            return assemble(self._shards(info, blob_ids), info.spec.distribution), True
        shape, pieces = plan
        out = np.empty(shape, dtype=numpy_dtype(info.shards[0].dtype))
        for index, part, target in pieces if out.size else ():
            out[target] = read(index, part)
        return out, False

    def _plan(self, info: TensorInfo, window: windows.Window | None, device: Sequence[int] | None) -> Plan:
        """Which shards of ``info`` a read of ``window`` (or of ``device``'s shard) reads, and which part of each: one
        shard (the one at ``device``, the only one) or the pieces of the shards a window overlaps; else every shard,
        whole (a bad window is refused here, before any shard is read)."""
        if device is not None:
            return self._device_shard(info, device)
        if len(info.shards) == 1 and (window is not None or info.spec.distribution is None):
            return 0
        if window is not None and info.shape is not None and all(s.dtype == info.shards[0].dtype for s in info.shards):
            boxes = rows_mod.shard_boxes(info)  # where each shard lies: read only those the window overlaps
            if boxes is not None:
                return windows.split_window(info.shape, window, boxes)
        if window is not None and info.shape is not None:
            windows.plan_window(info.shape, numpy_dtype(info.dtype).itemsize, window)
        return None

    def _device_shard(self, info: TensorInfo, device: Sequence[int]) -> int:
        """The index of the shard of ``info`` at mesh coordinate ``device``; TensorNotFoundError naming the ones there
        are otherwise."""
        try:
            coord = tuple(int(c) for c in device)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"device must be a mesh coordinate such as (0, 1), not {device!r}") from None
        for index, shard in enumerate(info.shards):
            if shard.mesh_coordinate == coord:
                return index
        have = [list(s.mesh_coordinate) for s in info.shards[:16]]
        raise TensorNotFoundError(
            f"{self.path}: tensor {info.tensor_id} (rank {info.rank}) has no shard at mesh coordinate {list(coord)}; its "
            f"{len(info.shards)} shard(s) are at {have}{' ...' if len(info.shards) > 16 else ''}"
        )

    def _read(self, blob_id: int, shard: ShardInfo, what: str) -> np.ndarray:
        """A shard's values, checked before allocation."""
        with self._reading(what) as conn, _snapshot(conn):
            self._sync(conn)
            return rows_mod.read_shard(conn, blob_id, shard, what, has_codec=self._has_codec, verified=self._verified)

    def _fetch(
        self, tensor_id: int, rank: int, window: windows.Window | None = None, device: Sequence[int] | None = None,
        skip: set[int] | None = None,
    ) -> None:
        """Have the chunk source bring in the chunks a read of the tensor needs (of ``window`` or ``device``'s shard as
        :meth:`_plan` reads them; all, but those of blobs in ``skip``), before the read begins. The source writes the
        file through a connection of its own, so this Report's snapshot is ended first (a transaction of the caller's,
        which would hold the source back, is a ReportLockedError), and the lock is held throughout, so no read begins
        one until the chunks are in. A read that cannot be planned fetches nothing: the read that follows refuses it
        with its own message."""
        with self._lock:
            try:
                info, blob_ids = self._info(tensor_id, rank)
                plan = self._plan(info, window, device)
            except ReportDBError:
                return
            parts: list[tuple[int, windows.Window | None]]
            if isinstance(plan, int):
                parts = [(plan, window)]
            elif plan is None:
                parts = [(i, None) for i in range(len(info.shards))]
            else:
                parts = [(index, part) for index, part, _ in plan[1]]
            reads = [ShardRead(blob_ids[i], info.shards[i], part) for i, part in parts
                     if skip is None or blob_ids[i] not in skip]
            what = f"tensor {tensor_id} (rank {rank})"
            try:
                missing = self._source.missing(reads)
                if missing:
                    self._end_snapshot()
                    if self._conn.in_transaction:  # the caller's own: the source's writes would wait for it forever
                        raise ReportLockedError(
                            f"{self.path}: {what} needs {len(missing)} chunk(s) brought into this report's file, which a "
                            "transaction of yours holds (session(), or a BEGIN in connection()); read the tensor outside it")
                    self._source.fetch(missing, what)
            except sqlite3.Error as exc:  # the source's own statements on the file
                mapped = engine_mod.translate(exc, self.path, what=what)
                assert mapped is not None
                raise mapped from exc
