"""reportdb: a TTNN report as one self-contained SQLite database of report tables and tensor values.

The public API is small: ``open`` a report, ``load_tensor_file`` to read a legacy tensor file,
``compare`` two tensors, ``Writer`` for profiling runs. Submodules load on first use, so importing
reportdb inside a model run costs little.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import ReportDBError
from .spec import Distribution, LoadedTensor, Placement, TensorSpec

__version__ = "0.1.0"

_LAZY = {
    "open": "reportdb.report",
    "Report": "reportdb.report",
    "upgrade": "reportdb.report",
    "load_tensor_file": "reportdb.formats",
    "convert_tensor_file": "reportdb.export",
    "describe_tensor_file": "reportdb.export",
    "compare": "reportdb.compare",
    "compare_golden": "reportdb.comparisons",
    "compare_runs": "reportdb.comparisons",
    "plot_tensor": "reportdb.plot",
    "Writer": "reportdb.writer",
    "migrate": "reportdb.migration",
    "verify": "reportdb.migration",
}

__all__ = ["ReportDBError", "TensorSpec", "Distribution", "Placement", "LoadedTensor", "__version__", *_LAZY]

if TYPE_CHECKING:  # pragma: no cover
    from .report import Report, open  # noqa: F401


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'reportdb' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
