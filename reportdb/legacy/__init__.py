"""Legacy report folders (TTNN's ``db.sqlite`` + ``tensors/``) migrated into one self-contained report database.

The flow, one module a step: ``inventory`` (the folder's files, read without following links), ``tables`` (the
partial database and the table copy), ``decode`` (tensor files decoded, in worker processes with ``jobs > 1``),
``importer`` (decoded tensors stored), ``verification`` (every stored tensor re-hashed, values compared with the
legacy files), ``finish`` (the partial file renamed into place, side files copied, legacy files removed),
``pipeline``, whose :func:`migrate` runs them in order, ``summary`` (the :class:`MigrationSummary` it returns), and
``sidecars`` (ttnn 0.81's comparison-records and tensor-lifetime JSON into the tables, for migrate and attach).

Names load on first use, like ``reportdb``'s: a ``migrate --jobs N`` worker imports ``reportdb.legacy.decode``
and must not load SQLAlchemy with this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_getattr
from ..errors import (
    MigrationError, MigrationWriteError, NotAReportFolderError, UnreadableTensorFileError, UnsafeFolderError,
    VerificationError,
)

_LAZY = {
    "migrate": "reportdb.legacy.pipeline",
    "verify": "reportdb.legacy.verification",
    "pending_legacy_files": "reportdb.legacy.inventory",
    "PARTIAL_NAME": "reportdb.legacy.common",
    "SidecarError": "reportdb.legacy.sidecars",
    "find_sidecars": "reportdb.legacy.sidecars",
    "read_sidecars": "reportdb.legacy.sidecars",
    "import_sidecars": "reportdb.legacy.sidecars",
}

__all__ = [
    *_LAZY, "MigrationError", "MigrationWriteError", "NotAReportFolderError", "UnreadableTensorFileError",
    "UnsafeFolderError", "VerificationError",
]

if TYPE_CHECKING:  # pragma: no cover
    from .common import PARTIAL_NAME  # noqa: F401
    from .inventory import pending_legacy_files  # noqa: F401
    from .pipeline import migrate  # noqa: F401
    from .sidecars import SidecarError, find_sidecars, import_sidecars, read_sidecars  # noqa: F401
    from .verification import verify  # noqa: F401


__getattr__ = lazy_getattr(__name__, globals(), _LAZY)
