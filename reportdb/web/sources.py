"""Tensors as a request reads them: a :class:`Source` (the assembled tensor, one device shard, or the golden part a
shard covers) whose shape and dtype are known before any value is read, and the actual/golden pair of a comparison
record. Nothing in a request reaches the filesystem or becomes SQL: a tensor is a number, a window numpy basic
indexing checked against the stored shape before any byte is read."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from ..dtypes import numpy_dtype
from ..errors import AssemblyError
from ..spec import distribution_coordinate
from ..store.rows import TensorInfo, shard_boxes
from ..store.windows import plan_window
from . import params
from .params import ApiError
from .reports import RECORD_TABLES, Record, Served


class Source:
    """One tensor as a request reads it, its shape and dtype known before any value is read (so every size is checked
    first): the assembled tensor, one device shard (``device``), or the box ``part`` of the assembled tensor (the
    golden part a device shard covers), each window reading only the chunks that hold it."""

    def __init__(
        self, served: Served, tensor_id: int, rank: int, device: tuple[int, ...] | None,
        part: tuple[slice, ...] | None = None,
    ) -> None:
        self.served = served
        self.tensor_id = tensor_id
        self.rank = rank
        self.device = device
        self.part = part
        info = served.report.tensor_info(tensor_id, rank)
        self.info = info
        self.dtype = numpy_dtype(info.dtype)
        if device is not None:
            self.shape = tuple(info.shards[shard_index(info, device)].shape)
        elif info.shape is None:
            raise AssemblyError(f"report {served.name}: tensor {tensor_id} (rank {rank}) has {len(info.shards)} shards "
                                "that do not assemble into one array")
        else:
            self.shape = tuple(info.shape) if part is None else tuple(s.stop - s.start for s in part)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def cost(self, elements: int, per_element: int) -> int:
        """Bytes a request reading ``elements`` of this tensor may hold: ``per_element`` bytes each (its arrays and
        their conversions) and one whole chunk of the tensor (a read unpacks whole chunks)."""
        return elements * per_element + self.served.chunk_bytes(self.tensor_id, self.rank)

    def plan(self, window: tuple[int | slice, ...]) -> tuple[int, ...]:
        """The shape ``window`` gives (InvalidArgumentError, a 400, for one numpy would refuse), reading nothing."""
        return plan_window(self.shape, self.dtype.itemsize, window).shape

    def read(self, window: tuple[int | slice, ...]) -> np.ndarray:
        """The values of ``window`` (() = all)."""
        if self.part is not None:
            self.plan(window)
            window = _within(self.part, window)
        return self.served.report.tensor(self.tensor_id, self.rank, window=window or None, device=self.device)


def shard_index(info: TensorInfo, device: tuple[int, ...]) -> int:
    """The position of the shard on ``device`` among a tensor's shards; 404 naming its devices otherwise."""
    for i, shard in enumerate(info.shards):
        if tuple(shard.mesh_coordinate) == device:
            return i
    devices = " ".join(",".join(map(str, s.mesh_coordinate)) for s in info.shards[:16])
    raise ApiError(404, f"tensor {info.tensor_id} (rank {info.rank}) has no shard on device {','.join(map(str, device))}",
                   f"its devices: {devices or 'none'}")


def _within(part: tuple[slice, ...], window: tuple[int | slice, ...]) -> tuple[int | slice, ...]:
    """``window`` (already checked against the part's shape) as a window of the whole tensor the box ``part`` is in."""
    items = window + (slice(None),) * (len(part) - len(window))
    out: list[int | slice] = []
    for item, box in zip(items, part):
        n = box.stop - box.start
        if isinstance(item, int):
            out.append(box.start + item % n)
        else:
            start, stop, step = item.indices(n)
            out.append(slice(box.start + start, box.start + max(start, stop), step))
    return tuple(out)


def golden_part(actual: TensorInfo, device: tuple[int, ...]) -> tuple[slice, ...]:
    """The box of the assembled tensor that the shard on ``device`` covers (a replica: the box of the shard it
    repeats), where a single golden tensor is compared with one device's shard; 400 when the distribution does not
    say."""
    index = shard_index(actual, device)
    boxes = {i: (origin, shape) for i, origin, shape in (shard_boxes(actual) or [])}
    dist = actual.spec.distribution
    if index not in boxes and dist is not None and dist.placements is not None:
        coords = [distribution_coordinate(tuple(s.mesh_coordinate), i, dist) for i, s in enumerate(actual.shards)]
        wanted = tuple(0 if p.kind == "replicate" else c for c, p in zip(coords[index], dist.placements))
        index = next((i for i, c in enumerate(coords) if c == wanted and i in boxes), index)
    if index not in boxes:
        raise ApiError(400, f"the distribution of tensor {actual.tensor_id} does not say which part of the tensor the "
                            f"shard on device {','.join(map(str, device))} holds, so its golden part is unknown",
                       "compare the assembled tensor: leave out device")
    origin, shape = boxes[index]
    return tuple(slice(o, o + n) for o, n in zip(origin, shape))


def tensor_id_of(text: str) -> int:
    """A tensor id of a URL (a whole number); 400 otherwise."""
    if not re.fullmatch(r"-?[0-9]{1,19}", text):
        raise params.bad("tensor id", text, "a whole number")
    return int(text)


def normalised(items: tuple[int | slice, ...], shape: tuple[int, ...]) -> str:
    """A window with every axis spelled out, negative indices and open ends resolved against ``shape``."""
    items = items + (slice(None),) * (len(shape) - len(items))
    parts = []
    for item, n in zip(items, shape):
        if isinstance(item, int):
            parts.append(str(item % n))
        else:
            start, stop, step = item.indices(n)
            parts.append(f"{start}:{max(start, stop)}" + (f":{step}" if step != 1 else ""))
    return ",".join(parts)


def verdict_key(served: Served, kind: str, tensor_id: int, rank: int) -> tuple[Any, ...]:
    """The cache key of a comparison at the record's own tolerances (the one the operation list shows)."""
    return ("verdict", str(served.path), kind, tensor_id, rank)


def pair(served: Served, kind: str, tensor_id: int, rank: int, device: tuple[int, ...] | None) -> tuple[Record, Source, Source]:
    """A record's actual and golden tensors, both stored (404 saying which is not)."""
    if kind not in RECORD_TABLES:
        raise ApiError(404, f"no comparison kind {kind[:40]!r}", "use compare-tensor/local/<id> or compare-tensor/global/<id>")
    record = served.record(kind, tensor_id, rank)
    if record.golden_tensor_id is None:
        raise ApiError(404, f"the {kind} record of tensor {tensor_id} names no golden tensor", "nothing to compare with")
    missing = [f"{what} tensor {tid}" for what, tid in (("actual", tensor_id), ("golden", record.golden_tensor_id))
               if not served.report.has_tensor(tid, rank)]
    if missing:
        raise ApiError(404, f"report {served.name}: {' and '.join(missing)} (rank {rank}) not stored",
                       "migrate the report folder with its tensors (reportdb migrate) and serve the result")
    actual = Source(served, tensor_id, rank, device)
    golden_info = served.report.tensor_info(record.golden_tensor_id, rank)
    if device is None or len(golden_info.shards) > 1:
        return record, actual, Source(served, record.golden_tensor_id, rank, device)
    # One golden tensor (the usual case) against one device's shard: the golden part that shard covers.
    return record, actual, Source(served, record.golden_tensor_id, rank, None, golden_part(actual.info, device))


def same_shape(actual: Source, golden: Source) -> tuple[Source, Source]:
    """The pair, when element-wise errors are defined for it (the same shape); else a 422."""
    if actual.shape != golden.shape:
        raise ApiError(422, f"tensor {actual.tensor_id} {list(actual.shape)} and its golden tensor {golden.tensor_id} "
                            f"{list(golden.shape)} differ in shape", "the comparison's metrics report the mismatch")
    return actual, golden
