"""Open a tensor file for reading, with one answer per kind of bad path for every reader.

A missing path, a directory and a symlink loop all mean "there is no tensor file here", so they raise
``ReportNotFoundError`` (a ``FileNotFoundError`` too); anything that is not a regular file (a FIFO, a
device) is refused with ``FormatError`` before a byte is read, so a path can never block the reader or
stream endless data into it. The file is opened non-blocking, so even a FIFO swapped in after a check
cannot hang the open, and its type is checked on the open descriptor.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

from ..errors import FormatError, ReportNotFoundError

def open_tensor_file(name: str) -> tuple[BinaryIO, int]:
    """Open the regular file ``name`` for binary reading; return the handle and its size in bytes.

    Raises ``ReportNotFoundError`` for a missing path, a folder or a symlink loop, and ``FormatError``
    for another unreadable path (permissions, a FIFO or device). Never changes the file.
    """
    try:
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        raise _path_error(name, exc) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ReportNotFoundError(f"{name}: is a folder, not a tensor file")
        if not stat.S_ISREG(info.st_mode):
            raise FormatError(f"{name}: not a regular file; a tensor file must be a plain file")
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    return handle, info.st_size


def _path_error(name: str, exc: OSError) -> Exception:
    """The ReportDBError for an ``OSError`` raised while opening ``name``."""
    if exc.errno == errno.ELOOP:
        return ReportNotFoundError(f"{name}: a symlink loop, not a tensor file")
    if exc.errno == errno.EISDIR:
        return ReportNotFoundError(f"{name}: is a folder, not a tensor file")
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return ReportNotFoundError(f"{name}: no such tensor file")
    return FormatError(f"{name}: cannot read: {exc.strerror or exc}")
