"""The store-level CPU work of one canonical shard (chunk digests, statistics), done before a write transaction.

``Report.put_tensor`` takes these precomputed, so the writing process only writes: ``migrate --jobs N`` prepares
shards in worker processes. Kept free of SQLAlchemy and alembic so that those workers start quickly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._lazy import lazy_module

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
else:  # numpy is imported on first use: opening a report and reading its metadata need none
    np = lazy_module("numpy", globals(), "np")

from ..numeric.stats import compute_stats
from . import blobs


@dataclass(frozen=True)
class PreparedShard:
    """What :func:`prepare_shard` computed for one canonical shard, for ``Report.put_tensor(..., _prepared=[...])``."""

    digests: blobs.Digests
    stats: dict[str, Any] | None  # compute_stats() of the shard; None when statistics are not wanted


def prepare_shard(array: np.ndarray, *, chunk_size: int = blobs.DEFAULT_CHUNK_SIZE, stats: bool = True,
                  address: str = blobs.NEW_ADDRESS) -> PreparedShard:
    """The chunk digests (content addresses of kind ``address``, the kind of the file they are for) and (with
    ``stats``) the statistics of a canonical (little-endian, C-contiguous) shard."""
    return PreparedShard(blobs.digest(array, chunk_size, address), compute_stats(array) if stats else None)
