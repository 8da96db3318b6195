"""Peers: an output whose error is far out of line with the other calls of the same operation on the same shape.

A model calls most operations many times on the same shapes (every layer's ``silu`` on ``[1, 256, 2816]``), and
correct results of one operation on one shape and dtype have about the same error, whatever the layer: the dtype's
rounding and the operation's accumulation set it. One call whose SQNR sits far below its peers' (27.5 dB where the
other ``silu`` calls reach 55 dB) is an anomaly worth a look even when the policy passes it: a local fault the
whole-tensor numbers dilute, or a kernel path only that call takes. Judged on each operation's own error (local golden
records, replay in isolation), never on errors accumulated along the chain, which grow with depth.

* An output's peers are the other outputs of the same operation name, shape and dtype; it needs at least
  :data:`MIN_PEERS` of them (of two calls alone, neither is out of line with the other).
* It is an anomaly when its SQNR is more than :data:`PEER_GAP_DB` below the median of its peers' (an output without
  error counts as infinitely good, so the only erring call among exact peers is one).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable

from ..results import Result

#: How far below its peers' median SQNR an output is an anomaly: 20 dB is 100 times their error energy. Correct calls
#: of one operation on one shape differ by a few dB (their inputs' statistics); one x1.5 tile in a [1, 256, 2816]
#: bfloat16 silu output sits 27.5 dB below its peers (27.5 against 55 dB).
PEER_GAP_DB = 20.0
#: The fewest peers (other outputs of the same operation, shape and dtype) an output is compared with.
MIN_PEERS = 2
#: The most outputs :class:`Peers` keeps while rows stream (about 100 bytes each): a replay of 10^6 operations prints
#: its rows without keeping them, and its peers stay within ~10 MB.
MAX_TRACKED = 100_000


@dataclass(frozen=True)
class PeerOutput:
    """One judged output as peers see it: where it is (operation, tensor, rank), what it is (operation name, shape,
    dtype) and its SQNR (None: no error at all)."""

    operation_id: int | None
    tensor_id: int
    rank: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    sqnr_db: float | None


@dataclass(frozen=True)
class Anomaly(PeerOutput, Result):
    """An output far out of line with its peers: the output as peers see it (its ``sqnr_db`` never None: an output
    without error is never out of line), its peers' median SQNR (None: every peer is exact), how many peers, and the
    gap in dB (None when the peers are exact)."""

    peer_sqnr_db: float | None
    peers: int
    gap_db: float | None

    def describe(self) -> str:
        """One line: which output, its SQNR and its peers'."""
        shape = "x".join(map(str, self.shape))
        peers = "exact" if self.peer_sqnr_db is None else f"{self.peer_sqnr_db:.1f} dB"
        gap = "" if self.gap_db is None else f", {self.gap_db:.1f} dB below"
        op = "-" if self.operation_id is None else str(self.operation_id)
        return (f"operation {op} {self.name} (tensor {self.tensor_id}, {shape} {self.dtype}): SQNR {self.sqnr_db:.1f} dB"
                f"{gap} the median of its {self.peers} peers ({peers})")


class Peers:
    """Outputs collected as rows stream (at most :data:`MAX_TRACKED`; ``complete`` says whether every one was kept),
    judged against each other at the end."""

    def __init__(self, limit: int = MAX_TRACKED) -> None:
        self.outputs: list[PeerOutput] = []
        self.limit = limit
        self.complete = True

    def add(self, output: PeerOutput) -> None:
        """Keep one judged output, unless the limit is reached (then ``complete`` turns False)."""
        if len(self.outputs) < self.limit:
            self.outputs.append(output)
        else:
            self.complete = False

    def anomalies(self) -> tuple[Anomaly, ...]:
        """The anomalies among the outputs kept."""
        return anomalies(self.outputs)


def anomalies(outputs: Iterable[PeerOutput], gap_db: float = PEER_GAP_DB) -> tuple[Anomaly, ...]:
    """The outputs more than ``gap_db`` below their peers' median SQNR, in the order given."""
    listed = list(outputs)
    groups: dict[tuple[str, tuple[int, ...], str], list[int]] = {}
    for i, out in enumerate(listed):
        groups.setdefault((out.name, out.shape, out.dtype), []).append(i)
    found: dict[int, Anomaly] = {}
    for members in groups.values():
        if len(members) <= MIN_PEERS:
            continue
        quality = [_quality(listed[i].sqnr_db) for i in members]
        for pos, i in enumerate(members):
            out = listed[i]
            if out.sqnr_db is None:
                continue
            median = statistics.median(quality[:pos] + quality[pos + 1 :])
            if median - out.sqnr_db > gap_db:
                exact = math.isinf(median)
                found[i] = Anomaly(**vars(out), peer_sqnr_db=None if exact else median, peers=len(members) - 1,
                                   gap_db=None if exact else median - out.sqnr_db)
    return tuple(found[i] for i in sorted(found))


def _quality(sqnr_db: float | None) -> float:
    """An output's SQNR for ranking among peers: no error at all is infinitely good (+inf, which the median of
    ``statistics`` handles: no -inf ever joins it, so no NaN)."""
    return math.inf if sqnr_db is None else sqnr_db
