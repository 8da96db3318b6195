"""The optional ttnn adapter: ttnn tensors into reportdb values, and ttnn's report hooks into a Writer.

``import ttnn`` happens only inside these functions, so reportdb never needs ttnn (which installs only on Linux x86-64
with CPython 3.10/3.12), and importing this package loads no Writer. Two modules, in the order data flows:

- ``convert``: ``convert(tensor)`` / ``to_loaded(tensor)`` read a ``ttnn.Tensor`` as per-device shards and the spec
  ttnn gave it; the Writer uses it for every ttnn value it is given.
- ``hooks``: ``patch_database()`` makes a legacy ``ttnn.database`` write its whole report through a Writer, and
  ``capture(writer)`` records every operation of current ttnn through its operation hooks.
"""

from __future__ import annotations

from .convert import Converted, convert, to_loaded
from .hooks import Patch, capture, patch_database

__all__ = ["Converted", "convert", "to_loaded", "patch_database", "Patch", "capture"]
