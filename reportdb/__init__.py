"""reportdb: a TTNN report as one self-contained SQLite database of report tables and tensor values.

The top level holds what a user calls: ``open`` a report (a ``Report``; ``upgrade`` one in place); ``migrate`` and
``verify`` a legacy report folder; ``load_tensor_file``, ``convert_tensor_file``, ``describe_tensor_file`` for one
legacy tensor file; ``compare`` two tensors, ``compare_golden`` and ``compare_runs`` whole reports, ``locate`` where a
tensor goes wrong, ``replay`` (``iter_replay``) operations on numpy references, ``make_repro``, ``operation_context``,
``plot_tensor``; a ``Policy`` for every verdict; ``Writer`` and the spec types (``TensorSpec``, ``Distribution``,
``Placement``) for profiling runs; and ``ReportDBError``, the base of every error reportdb raises on purpose.

The rest lives in the module that defines it: every error class in ``reportdb.errors``, the result types beside the
function returning them (``reportdb.numeric.metrics.Comparison``, ``reportdb.analysis.replay.ReplayResult``, ...).
``reportdb.ttnn``, ``reportdb.models`` and ``reportdb.web`` are submodules. Everything loads on first use, and numpy
only with the first tensor value, so importing reportdb inside a model run, or for ``reportdb --help``, costs little.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_getattr
from .errors import ReportDBError

#: The release, written here only: pyproject.toml reads it (``dynamic = ["version"]``), migrations record it.
__version__ = "0.1.0"

_LAZY = {
    "open": "reportdb.opening",
    "Report": "reportdb.report",
    "upgrade": "reportdb.report",
    "migrate": "reportdb.legacy",
    "verify": "reportdb.legacy",
    "load_tensor_file": "reportdb.formats",
    "convert_tensor_file": "reportdb.formats.export",
    "describe_tensor_file": "reportdb.formats.export",
    "compare": "reportdb.numeric.metrics",
    "compare_golden": "reportdb.analysis.golden",
    "compare_runs": "reportdb.analysis.runs",
    "locate": "reportdb.analysis.locate",
    "replay": "reportdb.analysis.replay",
    "iter_replay": "reportdb.analysis.replay",
    "make_repro": "reportdb.analysis.repro",
    "operation_context": "reportdb.analysis.ops",
    "plot_tensor": "reportdb.analysis.plot",
    "Policy": "reportdb.analysis.policy",
    "Writer": "reportdb.writer",
    "TensorSpec": "reportdb.spec",
    "Distribution": "reportdb.spec",
    "Placement": "reportdb.spec",
}

__all__ = ["__version__", "ReportDBError", *_LAZY]

#: Names the top level exported before it kept to what a user calls, and where each lives: they still resolve, with a
#: DeprecationWarning naming the module to import them from.
_MOVED = {
    **{name: "reportdb.errors" for name in (
        "AssemblyError", "ComparisonError", "CompressionUnavailableError", "ConfigError", "ConstraintError",
        "CorruptionError", "DiskError", "ExportFormatError", "FormatError", "InvalidArgumentError", "MigrationError",
        "MigrationWriteError", "MissingObjectError", "NotAReportError", "NotAReportFolderError", "ObjectStoreError",
        "OutputPathError", "PlotFormatError",
        "PlotUnavailableError", "PolicyError", "QueryTimeoutError", "ReadOnlyError", "ReportClosedError",
        "ReportExistsError", "ReportLockedError", "ReportNotFoundError", "ResourceLimitError", "RowError",
        "RowsRefusedError", "SchemaError", "SchemaTooNewError", "SidecarError", "SpecError", "StatsError",
        "TensorExistsError", "TeamStoreError", "TensorNotFoundError", "TtnnError", "UnreadableTensorFileError",
        "UnsafeFolderError", "UnsafePickleError", "UnsafeReportError", "UnsupportedArgumentsError",
        "UnsupportedDTypeError", "VerificationError", "WriterError",
    )},
    "LoadedTensor": "reportdb.spec",
    "LocateResult": "reportdb.analysis.locate",
    "Comparison": "reportdb.numeric.metrics",
    "GoldenResult": "reportdb.analysis.records",
    "RunComparison": "reportdb.analysis.runs",
    "RunRow": "reportdb.analysis.runs",
    "TensorStats": "reportdb.numeric.stats",
    "ShardStats": "reportdb.numeric.stats",
    "ReportSummary": "reportdb.results",
    "VerifyResult": "reportdb.legacy.verification",
    "MigrationSummary": "reportdb.legacy.summary",
    "Criteria": "reportdb.analysis.policy",
    "Verdict": "reportdb.analysis.policy",
    "GoldenComparison": "reportdb.analysis.culprits",
    "Culprit": "reportdb.analysis.culprits",
    "OperationContext": "reportdb.analysis.ops",
    "ReplayResult": "reportdb.analysis.replay",
    "ReplayRow": "reportdb.analysis.replay",
}

#: Submodules reachable as attributes after a plain ``import reportdb`` (``reportdb.ttnn.capture(w)``,
#: ``reportdb.web.blueprint(...)``), imported on first use: ``reportdb.ttnn`` needs neither ttnn nor the writer, and
#: ``import reportdb`` no Flask, until then.
_SUBMODULES = frozenset({"ttnn", "models", "web", "errors"})

if TYPE_CHECKING:  # pragma: no cover - what the lazy names are, for type checkers and editors (tests/test_typing.py)
    from . import errors as errors, models as models, ttnn as ttnn, web as web
    from .analysis.golden import compare_golden as compare_golden
    from .analysis.locate import locate as locate
    from .analysis.ops import operation_context as operation_context
    from .analysis.plot import plot_tensor as plot_tensor
    from .analysis.policy import Policy as Policy
    from .analysis.replay import iter_replay as iter_replay, replay as replay
    from .analysis.repro import make_repro as make_repro
    from .analysis.runs import compare_runs as compare_runs
    from .formats import load_tensor_file as load_tensor_file
    from .formats.export import convert_tensor_file as convert_tensor_file, describe_tensor_file as describe_tensor_file
    from .legacy.pipeline import migrate as migrate
    from .legacy.verification import verify as verify
    from .numeric.metrics import compare as compare
    from .opening import open as open
    from .report import Report as Report, upgrade as upgrade
    from .spec import Distribution as Distribution, Placement as Placement, TensorSpec as TensorSpec
    from .writer import Writer as Writer


__getattr__ = lazy_getattr(__name__, globals(), _LAZY, _SUBMODULES, _MOVED)
