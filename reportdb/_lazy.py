"""Names a package exports but imports only on first use, so importing it inside a model run (or a migration
worker process) does not load numpy, SQLAlchemy or alembic before they are needed."""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping, MutableMapping


def lazy_getattr(
    package: str, namespace: MutableMapping[str, Any], names: Mapping[str, str], submodules: frozenset[str] = frozenset()
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``names`` maps an exported name to the module defining it,
    ``submodules`` are reachable as attributes; each is imported on first use and bound in ``namespace``."""

    def __getattr__(name: str) -> Any:
        if name in submodules:
            return importlib.import_module(f"{package}.{name}")  # the import binds it in the package too
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
