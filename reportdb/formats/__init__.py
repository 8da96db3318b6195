"""Read any TTNN tensor file into a ``LoadedTensor``: legacy ``.bin`` (v0-v5), ``.tensorbin``, ``.pt``.

The format is recognised from the bytes, never the file name: ``.pt`` archives start with a zip
or pickle header, legacy streams with the all-ones sentinel (or, for v0, a shape rank), and
anything else is tried as a ``.tensorbin`` whose first u64 is its header size. Files are memory
mapped, so only the bytes a tensor needs are read, and every error names the file.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..errors import FormatError, UnsupportedDTypeError
from ..spec import LoadedTensor
from . import bin as legacy
from .source import open_tensor_file
from .tensorbin import read_tensorbin

__all__ = ["load_tensor_file"]


def _is_pt(head: bytes) -> bool:
    """A torch.save zip archive, or a legacy torch pickle stream: protocol 2-5, then the long
    magic number (``\x8a``) or, from protocol 4, a frame (``\x95``). A ``.tensorbin`` header
    size would need to exceed 9 MB to start with the same three bytes."""
    if head.startswith(b"PK\x03\x04"):
        return True
    return len(head) >= 3 and head[0] == 0x80 and 2 <= head[1] <= 5 and head[2] in (0x8A, 0x95)


def load_tensor_file(path: str | os.PathLike[str]) -> LoadedTensor:
    """Read a tensor file of any supported format, detected from its first bytes.

    Raises FormatError (naming the file) for a truncated, corrupt or unknown file or an unreadable
    path, and ReportNotFoundError for a missing path, a folder or a symlink loop.
    """
    name = os.fspath(path)
    handle, size = open_tensor_file(name)
    with handle:
        try:
            head = handle.read(8)
        except OSError as exc:
            raise FormatError(f"{name}: cannot read: {exc.strerror or exc}") from None
        if _is_pt(head) and not legacy.is_legacy(head):
            from .pt import read_pt_file  # written separately; imported only when a .pt file shows up

            return read_pt_file(handle, size, name)
        try:
            buf = np.memmap(handle, dtype=np.uint8, mode="r", shape=(size,)) if size else np.zeros(0, np.uint8)
        except (OSError, ValueError) as exc:  # the file shrank between fstat and mmap
            raise FormatError(f"{name}: cannot map the file: {exc}") from None
        try:
            loaded = _parse(buf.view(np.ndarray))
        except (FormatError, UnsupportedDTypeError) as exc:
            raise type(exc)(f"{name}: {exc}") from None
    loaded.source["path"] = str(Path(name))
    return loaded


def _parse(buf: np.ndarray) -> LoadedTensor:
    """Parse a non-``.pt`` tensor file held in ``buf`` (uint8)."""
    if buf.size < 8:
        raise FormatError(f"only {buf.size} bytes, too short for any tensor file")
    head = buf[:8].tobytes()
    if legacy.is_legacy(head):
        return legacy.read_bin(buf)
    for order in ("little", "big"):
        header = int.from_bytes(head, order)  # type: ignore[arg-type]
        if 8 <= header <= buf.size - 8:
            return read_tensorbin(buf, order)
    raise FormatError("not a tensor file: no legacy sentinel, v0 rank or plausible .tensorbin header")
