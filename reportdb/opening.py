"""``reportdb.open``: a report file or folder, or a report in a team store by its ``postgresql://`` URL.

It sits above both kinds (``reportdb.report`` and ``reportdb.team``), so the report layer never imports the team
store that is built on it: only this dispatch knows both.
"""

from __future__ import annotations

import os

from .errors import InvalidArgumentError
from .report import Mode, Report, open as open_file
from .store.blobs import DEFAULT_CHUNK_SIZE
from .store.codec import Compression

#: URL schemes of a team store (libpq's).
TEAM_SCHEMES = ("postgresql", "postgres")


def open(  # shadows the builtin open: the public name is fixed
    path: str | os.PathLike[str], mode: Mode = "r", *, chunk_size: int = DEFAULT_CHUNK_SIZE,
    compression: Compression = "none",
) -> Report:
    """Open a report folder or database file. ``"r"``: read only, as it is; ``"a"``: create or upgrade.

    ``chunk_size`` and ``compression`` apply to the tensors this Report writes (see :class:`~reportdb.report.Report`).
    A ``postgresql://HOST/DATABASE/NAME`` URL opens report NAME of a team store, read only (``reportdb.team``).
    """
    if isinstance(path, str) and "://" in path and path.split("://", 1)[0].lower() in TEAM_SCHEMES:
        if mode != "r":
            raise InvalidArgumentError(f"a report in a team store opens read only (mode 'r'), not {mode!r}; pull it to write")
        from .team import open_remote

        report: Report = open_remote(path)
        return report
    return open_file(path, mode, chunk_size=chunk_size, compression=compression)
