"""The optional ttnn adapter: ttnn tensors into reportdb values, and ttnn's report hooks into a Writer.

``import ttnn`` happens only inside these functions, so reportdb never needs ttnn (which installs only on Linux x86-64
with CPython 3.10/3.12), and importing this package loads no Writer. What it offers, in the order data flows:

- ``convert(tensor)`` / ``to_loaded(tensor)`` read a ``ttnn.Tensor`` as per-device shards and the spec ttnn gave it
  (``reportdb.formats.ttnn_tensor``, below the Writer, which uses it for every ttnn value it is given).
- ``hooks``: ``patch_database()`` makes a legacy ``ttnn.database`` write its whole report through a Writer, and
  ``capture(writer)`` records every operation of current ttnn through its operation hooks.
- ``attach_values``: ``attach(values, report_dir)`` stores the values ``capture()`` recorded into the report ttnn 0.81+ wrote
  itself (and reads comparison mode's JSON sidecars into its tables), so one folder holds both (loaded on first use: it needs the report API, a model run does not).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_getattr
from ..formats.ttnn_tensor import Converted, convert, to_loaded
from .hooks import Patch, capture, patch_database

if TYPE_CHECKING:  # pragma: no cover - the lazy names, for type checkers
    from .attach_values import AttachResult, attach  # noqa: F401

__all__ = ["Converted", "convert", "to_loaded", "patch_database", "Patch", "capture", "attach", "AttachResult"]

__getattr__ = lazy_getattr(__name__, globals(), {"attach": f"{__name__}.attach_values", "AttachResult": f"{__name__}.attach_values"})
