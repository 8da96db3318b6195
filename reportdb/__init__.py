"""reportdb: a TTNN report as one self-contained SQLite database of report tables and tensor values.

The public API: ``open`` (and ``Report``, ``upgrade``) a report; ``migrate`` and ``verify`` a legacy report folder;
``load_tensor_file``, ``convert_tensor_file``, ``describe_tensor_file`` for one legacy tensor file; ``compare`` two
tensors, ``compare_golden`` and ``compare_runs`` whole reports, ``plot_tensor``; ``Writer`` for profiling runs; the
spec types; and every error class (all subclasses of ``ReportDBError``, from ``reportdb.errors``). ``reportdb.ttnn``
and ``reportdb.models`` are submodules. Everything but the error classes loads on first use (the spec types too: they
import numpy), so importing reportdb inside a model run, or for ``reportdb --help``, costs little.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_getattr

from .errors import (  # every error class, so callers can catch each by name
    AssemblyError,
    ComparisonError,
    CompressionUnavailableError,
    ConfigError,
    CorruptionError,
    ExportFormatError,
    FormatError,
    InvalidArgumentError,
    MigrationError,
    MigrationWriteError,
    NotAReportError,
    NotAReportFolderError,
    OutputPathError,
    PlotFormatError,
    PlotUnavailableError,
    QueryTimeoutError,
    ReadOnlyError,
    ReportDBError,
    ReportExistsError,
    ReportLockedError,
    ReportNotFoundError,
    RowError,
    RowsRefusedError,
    SchemaError,
    SchemaTooNewError,
    SpecError,
    StatsError,
    TensorExistsError,
    TeamStoreError,
    TensorNotFoundError,
    TtnnError,
    UnreadableTensorFileError,
    UnsafeFolderError,
    UnsafePickleError,
    UnsafeReportError,
    UnsupportedDTypeError,
    VerificationError,
    WriterError,
)

__version__ = "0.1.0"

_LAZY = {
    "TensorSpec": "reportdb.spec",
    "Distribution": "reportdb.spec",
    "Placement": "reportdb.spec",
    "LoadedTensor": "reportdb.spec",
    "open": "reportdb.report",
    "Report": "reportdb.report",
    "upgrade": "reportdb.report",
    "load_tensor_file": "reportdb.formats",
    "convert_tensor_file": "reportdb.formats.export",
    "describe_tensor_file": "reportdb.formats.export",
    "compare": "reportdb.numeric.metrics",
    "compare_golden": "reportdb.analysis.golden",
    "compare_runs": "reportdb.analysis.runs",
    "plot_tensor": "reportdb.analysis.plot",
    "Writer": "reportdb.writer",
    "migrate": "reportdb.legacy",
    "verify": "reportdb.legacy",
    "Comparison": "reportdb.numeric.metrics",
    "GoldenResult": "reportdb.analysis.golden",
    "RunComparison": "reportdb.analysis.runs",
    "RunRow": "reportdb.analysis.runs",
    "TensorStats": "reportdb.numeric.stats",
    "ShardStats": "reportdb.numeric.stats",
    "ReportSummary": "reportdb.results",
    "VerifyResult": "reportdb.legacy.verification",
    "MigrationSummary": "reportdb.legacy.summary",
}

_ERRORS = [
    "AssemblyError", "ComparisonError", "CompressionUnavailableError", "ConfigError", "CorruptionError",
    "ExportFormatError", "FormatError", "InvalidArgumentError", "MigrationError", "MigrationWriteError",
    "NotAReportError", "NotAReportFolderError", "OutputPathError", "PlotFormatError", "PlotUnavailableError",
    "QueryTimeoutError", "ReadOnlyError", "ReportDBError", "ReportExistsError", "ReportLockedError", "ReportNotFoundError", "RowError",
    "RowsRefusedError", "SchemaError", "SchemaTooNewError", "SpecError", "StatsError", "TensorExistsError",
    "TeamStoreError", "TensorNotFoundError", "TtnnError", "UnreadableTensorFileError", "UnsafeFolderError", "UnsafePickleError",
    "UnsafeReportError", "UnsupportedDTypeError", "VerificationError", "WriterError",
]

# SQLite's errors by their code (store/engine.translate): a full disk, a constraint, a closed report, a value too big.
from .errors import ConstraintError, DiskError, ReportClosedError, ResourceLimitError  # noqa: E402

_ERRORS += ["ConstraintError", "DiskError", "ReportClosedError", "ResourceLimitError"]

__all__ = ["__version__", *_LAZY, *_ERRORS]

#: Submodules reachable as attributes after a plain ``import reportdb`` (``reportdb.ttnn.capture(w)``), imported on
#: first use: ``reportdb.ttnn`` needs neither ttnn nor the writer until then.
_SUBMODULES = frozenset({"ttnn", "models"})

if TYPE_CHECKING:  # pragma: no cover
    from . import models, ttnn  # noqa: F401
    from .report import Report, open  # noqa: F401
    from .spec import Distribution, LoadedTensor, Placement, TensorSpec  # noqa: F401


__getattr__ = lazy_getattr(__name__, globals(), _LAZY, _SUBMODULES)
