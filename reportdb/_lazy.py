"""Names a package exports, and modules a module uses, imported only on first use, so importing reportdb inside a
model run (or a migration worker process), or opening a report to read its metadata, does not load numpy,
SQLAlchemy or alembic before they are needed."""

from __future__ import annotations

import importlib
import sys
import types
import warnings
from typing import Any, Callable, Mapping, MutableMapping


def lazy_getattr(
    package: str,
    namespace: MutableMapping[str, Any],
    names: Mapping[str, str],
    submodules: frozenset[str] = frozenset(),
    moved: Mapping[str, str] | None = None,
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``names`` maps an exported name to the module defining it,
    ``submodules`` are reachable as attributes; each is imported on first use and bound in ``namespace``. ``moved``
    maps names the package no longer exports to the module that holds them: each still resolves, with a
    DeprecationWarning saying where to import it from, and is not bound (so every use warns)."""

    def __getattr__(name: str) -> Any:
        if name in submodules:
            return importlib.import_module(f"{package}.{name}")  # the import binds it in the package too
        if moved is not None and name in moved:
            warnings.warn(f"{package}.{name} is no longer exported from {package}: import it from {moved[name]}",
                          DeprecationWarning, stacklevel=2)
            return getattr(importlib.import_module(moved[name]), name)
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__


class LazyModule(types.ModuleType):
    """Stands for a module in one importing module's globals until an attribute of it is first used; then imports
    it and puts the real module in those globals, so every later use is a plain global lookup (no per-call cost).
    Used for numpy: opening a report and reading its metadata never touch it, reading a value does."""

    def __init__(self, name: str, namespace: MutableMapping[str, Any], alias: str) -> None:
        super().__init__(name)
        self._namespace, self._alias = namespace, alias

    def __getattr__(self, attr: str) -> Any:
        module = importlib.import_module(self.__name__)
        if self._namespace.get(self._alias) is self:
            self._namespace[self._alias] = module
        return getattr(module, attr)


def lazy_module(name: str, namespace: MutableMapping[str, Any], alias: str) -> Any:
    """A stand-in for ``import name as alias`` in ``namespace`` (a module's ``globals()``) that imports on first use.
    Write it as ``if TYPE_CHECKING: import numpy as np`` / ``else: np = lazy_module("numpy", globals(), "np")``."""
    module = sys.modules.get(name)
    return module if module is not None else LazyModule(name, namespace, alias)
