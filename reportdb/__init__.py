"""reportdb: a TTNN report as one self-contained SQLite database of report tables and tensor values.

The public API: ``open`` (and ``Report``, ``upgrade``) a report; ``migrate`` and ``verify`` a legacy report folder;
``load_tensor_file``, ``convert_tensor_file``, ``describe_tensor_file`` for one legacy tensor file; ``compare`` two
tensors, ``compare_golden`` and ``compare_runs`` whole reports, ``plot_tensor``; ``Writer`` for profiling runs; the
spec types; and every error class (all subclasses of ``ReportDBError``, from ``reportdb.errors``). ``reportdb.ttnn``
and ``reportdb.models`` are submodules. Everything but the error classes loads on first use, and numpy only with the
first tensor value (opening a report and reading its metadata need none), so importing reportdb inside a model run,
or for ``reportdb --help``, ``info`` or ``ls``, costs little.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_getattr

from .errors import (  # every error class, so callers can catch each by name
    AssemblyError,
    ComparisonError,
    CompressionUnavailableError,
    ConfigError,
    ConstraintError,
    CorruptionError,
    DiskError,
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
    PolicyError,
    QueryTimeoutError,
    ReadOnlyError,
    ReportClosedError,
    ReportDBError,
    ReportExistsError,
    ReportLockedError,
    ReportNotFoundError,
    ResourceLimitError,
    RowError,
    RowsRefusedError,
    SchemaError,
    SchemaTooNewError,
    SidecarError,
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
    UnsupportedArgumentsError,
    UnsupportedDTypeError,
    VerificationError,
    WriterError,
)

#: The release, written here only: pyproject.toml reads it (``dynamic = ["version"]``), migrations record it.
__version__ = "0.1.0"

_LAZY = {
    "TensorSpec": "reportdb.spec",
    "Distribution": "reportdb.spec",
    "Placement": "reportdb.spec",
    "LoadedTensor": "reportdb.spec",
    "open": "reportdb.opening",
    "Report": "reportdb.report",
    "upgrade": "reportdb.report",
    "load_tensor_file": "reportdb.formats",
    "convert_tensor_file": "reportdb.formats.export",
    "describe_tensor_file": "reportdb.formats.export",
    "compare": "reportdb.numeric.metrics",
    "compare_golden": "reportdb.analysis.golden",
    "compare_runs": "reportdb.analysis.runs",
    "plot_tensor": "reportdb.analysis.plot",
    "locate": "reportdb.analysis.locate",
    "LocateResult": "reportdb.analysis.locate",
    "Writer": "reportdb.writer",
    "migrate": "reportdb.legacy",
    "verify": "reportdb.legacy",
    "Comparison": "reportdb.numeric.metrics",
    "GoldenResult": "reportdb.analysis.records",
    "RunComparison": "reportdb.analysis.runs",
    "RunRow": "reportdb.analysis.runs",
    "TensorStats": "reportdb.numeric.stats",
    "ShardStats": "reportdb.numeric.stats",
    "ReportSummary": "reportdb.results",
    "VerifyResult": "reportdb.legacy.verification",
    "MigrationSummary": "reportdb.legacy.summary",
    "Policy": "reportdb.analysis.policy",
    "Criteria": "reportdb.analysis.policy",
    "Verdict": "reportdb.analysis.policy",
    "GoldenComparison": "reportdb.analysis.culprits",
    "Culprit": "reportdb.analysis.culprits",
    "operation_context": "reportdb.analysis.ops",
    "OperationContext": "reportdb.analysis.ops",
    "replay": "reportdb.analysis.replay",
    "iter_replay": "reportdb.analysis.replay",
    "ReplayResult": "reportdb.analysis.replay",
    "ReplayRow": "reportdb.analysis.replay",
    "make_repro": "reportdb.analysis.repro",
}

_ERRORS = [
    "AssemblyError", "ComparisonError", "CompressionUnavailableError", "ConfigError", "ConstraintError",
    "CorruptionError", "DiskError",
    "ExportFormatError", "FormatError", "InvalidArgumentError", "MigrationError", "MigrationWriteError",
    "NotAReportError", "NotAReportFolderError", "OutputPathError", "PlotFormatError", "PlotUnavailableError",
    "PolicyError", "QueryTimeoutError", "ReadOnlyError", "ReportClosedError", "ReportDBError", "ReportExistsError",
    "ReportLockedError", "ReportNotFoundError", "ResourceLimitError", "RowError",
    "RowsRefusedError", "SchemaError", "SchemaTooNewError", "SidecarError", "SpecError", "StatsError", "TensorExistsError",
    "TeamStoreError", "TensorNotFoundError", "TtnnError", "UnreadableTensorFileError", "UnsafeFolderError", "UnsafePickleError",
    "UnsafeReportError", "UnsupportedArgumentsError", "UnsupportedDTypeError", "VerificationError", "WriterError",
]

__all__ = ["__version__", *_LAZY, *_ERRORS]

#: Submodules reachable as attributes after a plain ``import reportdb`` (``reportdb.ttnn.capture(w)``,
#: ``reportdb.web.blueprint(...)``), imported on first use: ``reportdb.ttnn`` needs neither ttnn nor the writer, and
#: ``import reportdb`` no Flask, until then.
_SUBMODULES = frozenset({"ttnn", "models", "web"})

if TYPE_CHECKING:  # pragma: no cover - what the lazy names are, for type checkers and editors (tests/test_typing.py)
    from . import models, ttnn, web  # noqa: F401
    from .analysis.culprits import Culprit, GoldenComparison  # noqa: F401
    from .analysis.golden import GoldenResult, compare_golden  # noqa: F401
    from .analysis.locate import LocateResult, locate  # noqa: F401
    from .analysis.ops import OperationContext, operation_context  # noqa: F401
    from .analysis.policy import Criteria, Policy, Verdict  # noqa: F401
    from .analysis.replay import ReplayResult, ReplayRow, iter_replay, replay  # noqa: F401
    from .analysis.repro import make_repro  # noqa: F401
    from .analysis.plot import plot_tensor  # noqa: F401
    from .analysis.runs import RunComparison, RunRow, compare_runs  # noqa: F401
    from .formats import load_tensor_file  # noqa: F401
    from .formats.export import convert_tensor_file, describe_tensor_file  # noqa: F401
    from .legacy.pipeline import migrate  # noqa: F401
    from .legacy.summary import MigrationSummary  # noqa: F401
    from .legacy.verification import VerifyResult, verify  # noqa: F401
    from .numeric.metrics import Comparison, compare  # noqa: F401
    from .numeric.stats import ShardStats, TensorStats  # noqa: F401
    from .opening import open  # noqa: F401
    from .report import Report, upgrade  # noqa: F401
    from .results import ReportSummary  # noqa: F401
    from .spec import Distribution, LoadedTensor, Placement, TensorSpec  # noqa: F401
    from .writer import Writer  # noqa: F401


__getattr__ = lazy_getattr(__name__, globals(), _LAZY, _SUBMODULES)
