"""Values as the Writer stores them: any supported tensor as canonical shards, spec metadata and its report row,
and any row value as what SQLite binds.

A tensor arrives as a numpy array, a torch tensor, a ``ttnn.Tensor`` or a ``LoadedTensor``; :func:`tensor_item` turns
each into the same queued :class:`TensorItem`, so the queue and the SQL never look at where a value came from. Row
values are checked here when they are added (:func:`bindable`), so a value SQLite would refuse fails in the caller's
thread, not in a background batch.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from ..dtypes import canonical, dtype_name
from ..errors import RowError
from ..spec import LoadedTensor, check_metadata
from ..formats.ttnn_tensor import convert as convert_ttnn
from ..formats.ttnn_tensor import is_ttnn_object

if TYPE_CHECKING:  # pragma: no cover
    from ..store.prepared import PreparedShard

#: Metadata that only goes into the legacy ``tensors`` row (the visualizer's columns), not the spec.
ROW_FIELDS = frozenset({"device_id", "address", "buffer_type", "size"})

_I64 = 1 << 63


@dataclass
class TensorItem:
    """One tensor as queued: its shards (None: metadata row only), spec metadata and ``tensors`` row."""

    tensor_id: int
    rank: int
    shards: list[tuple[tuple[int, ...], np.ndarray]] | None
    metadata: dict[str, Any]
    row: dict[str, Any]
    nbytes: int
    owned: bool  # the shards are private copies (a caller cannot change them before they are written)
    #: Reused buffers (``copies.CopyBuffers``) the shards' copies live in, given back once the item is written.
    buffers: list[np.ndarray] = field(default_factory=list)
    #: Its shards' statistics and digests, being computed since it was queued (``ahead.prepare_ahead``), or None.
    prepared: Future[list[PreparedShard]] | None = None


def split_metadata(metadata: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``put_tensor``'s keyword metadata as (spec metadata and ``source``, ``tensors`` row fields); an unknown name
    is refused, listing the known ones."""
    check_metadata(metadata, also=ROW_FIELDS)
    meta = dict(metadata)
    row_extra = {k: meta.pop(k) for k in list(meta) if k in ROW_FIELDS}
    return meta, row_extra


def tensor_item(
    tensor_id: int, rank: int, data: Any, meta: dict[str, Any], row_extra: dict[str, Any], keep: bool
) -> TensorItem:
    """Turn any supported tensor into canonical shards (when ``keep``), spec metadata and its ``tensors`` row, from
    :func:`split_metadata`'s two parts."""
    if not meta and not row_extra and type(data) is np.ndarray:  # the common case, without the general bookkeeping
        array = canonical(data)
        return TensorItem(tensor_id, rank, [((), array)] if keep else None, {},
                          {"shape": f"Shape({list(array.shape)})", "dtype": dtype_name(array.dtype)},
                          int(array.nbytes) if keep else 0, array is not data)
    row: dict[str, Any] = {}
    owned = False
    shards: list[tuple[tuple[int, ...], np.ndarray]] | None
    if is_ttnn_object(data):
        converted = convert_ttnn(data, values=keep)
        shards, row = converted.shards, converted.row
        meta = {**converted.metadata, **meta}
        owned = True  # the adapter's arrays are fresh copies of the device or host buffers
    elif isinstance(data, LoadedTensor):
        shards = data.shards if keep else None
        meta = {**data.spec.as_metadata(), "source": data.source, **meta}
    elif (type(data).__module__ or "").startswith("torch"):
        array = _torch_to_numpy(data)
        shards = [((), array)] if keep else None
        row = {"shape": f"torch.Size({list(array.shape)})", "dtype": str(data.dtype)}
    else:
        array = np.asarray(data)
        shards = [((), array)] if keep else None
        row = {"shape": f"Shape({list(array.shape)})", "dtype": dtype_name(array.dtype)}
    if isinstance(meta.get("memory_config"), str):
        from ..formats.memconfig import parse_memory_config

        row.setdefault("memory_config", meta["memory_config"])
        meta["memory_config"] = parse_memory_config(meta["memory_config"])
    meta = {k: v for k, v in meta.items() if v is not None and (k != "transpose_tile" or v)}
    if shards is not None:
        originals = [a for _, a in shards]
        shards = [(tuple(int(c) for c in coord), canonical(a)) for coord, a in shards]
        owned = owned or all(c is not o for (_, c), o in zip(shards, originals))  # canonical() copied
    if meta.get("ttnn_dtype"):
        row["dtype"] = f"DataType.{meta['ttnn_dtype']}"
    if meta.get("layout"):
        row["layout"] = f"Layout.{meta['layout']}"
    if isinstance(meta.get("storage_type"), str):
        # The bare name, as ttnn 0.81 writes the column ('HOST'); the enum's text ('StorageType.HOST') is taken too.
        meta["storage_type"] = meta["storage_type"].removeprefix("StorageType.")
        row.setdefault("storage_type", meta["storage_type"])
    row.update(row_extra)
    if "shape" not in row and shards:
        row["shape"] = f"Shape({list(shards[0][1].shape)})"
    row = {k: bindable(v, "tensors", k) for k, v in row.items()}
    nbytes = sum(int(a.nbytes) for _, a in shards) if shards else 0
    return TensorItem(tensor_id, rank, shards, meta, row, nbytes, owned)


def _torch_to_numpy(tensor: Any) -> np.ndarray:
    """A torch tensor's values as numpy, through same-width integer views for dtypes numpy lacks."""
    import ml_dtypes
    import torch

    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    views = {
        torch.bfloat16: (torch.int16, ml_dtypes.bfloat16),
        getattr(torch, "float8_e4m3fn", None): (torch.uint8, ml_dtypes.float8_e4m3fn),
        getattr(torch, "float8_e5m2", None): (torch.uint8, ml_dtypes.float8_e5m2),
    }
    if t.dtype in views:
        as_int, target = views[t.dtype]
        return t.contiguous().view(as_int).numpy().view(target)
    return t.numpy()


def int64(value: Any, table: str, column: str) -> int:
    """``int(value)``, refused now if it does not fit the 64-bit integers SQLite stores."""
    number = int(value)
    if not -_I64 <= number < _I64:
        raise RowError(f"table {table!r}, column {column!r}: {number} does not fit SQLite's 64-bit integers")
    return number


def bindable(value: Any, table: str, column: str) -> Any:
    """``value`` as SQLite stores it (numpy scalars and int/str subclasses as plain Python values), or a ReportDBError
    now for a value the insert would fail on at flush time: an unsupported type, an integer beyond 64 bits, text that
    is not valid Unicode."""
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        value = value.item()
    if value is None or type(value) is float:
        return value
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise RowError(f"table {table!r}, column {column!r}: text that is not valid Unicode ({exc})") from None
        return value if type(value) is str else str.__str__(value)
    if isinstance(value, int):  # bool and IntEnum included
        return int64(value, table, column)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return value
    raise RowError(
        f"table {table!r}, column {column!r}: cannot store a {type(value).__name__} ({str(value)[:80]!r}); "
        "give an int, float, str, bytes or None"
    )
