"""Writing a report's tensors: one (``put_tensor``), many in one transaction (``put_tensors``), and the statistics
of tensors stored without them (``fill_missing_stats``).

:class:`TensorWrites` is that part of ``reportdb.report.Report``: it holds how this Report stores chunks (their
size and compression); the rows and chunks are written in ``reportdb.store.tensors``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from ._lazy import lazy_module

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
else:  # numpy is imported on first use: opening a report and reading its metadata need none
    np = lazy_module("numpy", globals(), "np")

from .store import rows as rows_mod
from .tensor_reads import TensorReads

if TYPE_CHECKING:  # pragma: no cover
    from .store import tensors as tensors_mod
    from .store.codec import Compression
    from .store.prepared import PreparedShard
else:  # the write path is imported on the first write: reading a report needs none of it
    tensors_mod = lazy_module("reportdb.store.tensors", globals(), "tensors_mod")


class TensorWrites(TensorReads):
    """The tensor writes of a Report (mode "a"): ``put_tensor``, ``put_tensors``, ``fill_missing_stats``."""

    chunk_size: int  # bytes of a chunk of the tensors this Report writes
    compression: Compression  # how it compresses them
    _codec: str | None  # the codec its chunks are written with (``codec.codec_for``), None: raw

    def _write_options(self, stats: bool) -> tensors_mod.WriteOptions:
        return tensors_mod.WriteOptions(self.chunk_size, self._codec, stats and "rdb_stats" in self._tables,
                                        self._address_kind())

    def put_tensor(
        self,
        tensor_id: int,
        array: np.ndarray | None = None,
        *,
        rank: int = 0,
        shards: Sequence[tuple[Sequence[int], np.ndarray]] | None = None,
        if_exists: tensors_mod.IfExists = "error",
        stats: bool = True,
        _prepared: Sequence[PreparedShard] | None = None,
        **metadata: Any,
    ) -> bool:
        """Store a tensor: one ``array``, or ``shards=[(mesh_coordinate, array), ...]`` with a ``distribution``.

        ``metadata`` takes the TensorSpec fields (``ttnn_dtype``, ``layout``, ``tile_shape``,
        ``padded_shape``, ``storage_type``, ``memory_config``, ``distribution``...) and ``source``.
        Returns False when ``if_exists="skip"`` found the tensor already stored (``"error"`` raises
        ``TensorExistsError``, ``"replace"`` replaces it).
        ``_prepared`` (private, one per shard, ``reportdb.store.prepared.prepare_shard`` of the canonical shard) carries
        digests and statistics computed elsewhere, such as in the worker process that decoded the tensor.
        """
        self._check_writable()
        tensor = tensors_mod.new_tensor(tensor_id, array, rank=rank, shards=shards, _prepared=_prepared, **metadata)
        with self._lock, self.batch():
            return tensors_mod.put_one(self._conn, tensor, if_exists, self._write_options(stats))

    def put_tensors(
        self,
        tensors: Iterable[Mapping[str, Any]],
        *,
        if_exists: tensors_mod.IfExists = "error",
        stats: bool = True,
    ) -> list[bool]:
        """Store many tensors in one transaction; each mapping holds ``put_tensor``'s arguments (``tensor_id``,
        ``array`` or ``shards``, ``rank``, metadata). Returns ``put_tensor``'s answer for each, in order.

        Tensors of one array or one shard (a single-device ttnn tensor) that fit in one chunk go in together: a few
        set-based statements for the whole call instead of seven per tensor, and their statistics in one vectorized
        pass; much faster for many small tensors.
        """
        self._check_writable()
        self._require_store()
        new = [tensors_mod.new_tensor(**t) for t in tensors]
        with self._lock, self.batch():
            return tensors_mod.put_many(self._conn, new, if_exists, self._write_options(stats))

    def fill_missing_stats(self) -> int:
        """Compute the statistics of every stored shard that has none (older schema, or ``stats=False``)."""
        self._check_writable()
        with self._reading("table rdb_shard") as conn:
            missing = rows_mod.shards_without_stats(conn, self.path)
            for blob_id, shard in missing:
                array = self._read(blob_id, shard, f"blob {blob_id}")
                with self.batch():
                    tensors_mod.put_stats(conn, blob_id, shard.dtype, array)
        return len(missing)
