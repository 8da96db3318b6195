"""A queued large tensor's CPU work (its statistics and chunk digests) started as it is queued, not when its batch is
written.

The background thread writes a batch in one transaction and commits it (with ``durable``, an fsync), and until this
it also computed each large tensor's statistics and digests first: the SQLite writes, the commit and the disk waited
for that work, and that work waited for them. Started here in a helper thread as each tensor of :data:`AHEAD_MIN` or
more is queued, it runs while the previous batch is written and committed, and the batch takes the results
(``Report.put_tensor(..., _prepared=...)``, as ``migrate``'s decoding workers hand theirs over). Nothing is computed
twice and no memory is added: the work reads the queued copy the batch will write.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Sequence

import numpy as np

from .. import pools
from ..store.prepared import PreparedShard, prepare_shard

#: Tensors from this size on are prepared ahead; smaller ones are cheaper in the batch's set-based path.
AHEAD_MIN = 1 << 20


def prepare_ahead(shards: Sequence[tuple[tuple[int, ...], np.ndarray]], *, chunk_size: int, stats: bool,
                  address: str) -> Future[list[PreparedShard]]:
    """Start :func:`~reportdb.store.prepared.prepare_shard` of each canonical shard in this process's ``prepare``
    thread (one: a tensor's statistics and hashing already use helper threads of their own)."""
    arrays = [array for _, array in shards]
    return pools.pool("prepare", 1).submit(
        lambda: [prepare_shard(array, chunk_size=chunk_size, stats=stats, address=address) for array in arrays])
