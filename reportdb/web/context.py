"""What a request of the blueprint works with: the blueprint's :class:`Settings` (its reports, resolver, host names,
CORS origins and memory budget) and the request's :class:`Lookup` of reports by name (the fixed ones, plus the one
the host app's resolver names for this request), both kept on ``flask.g`` for the request."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Hashable

from flask import Request, g

from ..analysis.policy import Policy

from .guard import Cors, Hosts, MemoryBudget
from .params import ApiError
from .reports import Served, ServedReports

#: A host app's resolver: the report a request is about (a folder or database path), or None when it has none open.
Resolver = Callable[[Request], "str | os.PathLike[str] | None"]


@dataclass
class Settings:
    """One blueprint's reports, guards (``hosts`` None: any Host header, the host app decides) and tolerance policy."""

    reports: ServedReports
    resolver: Resolver | None
    hosts: Hosts | None
    cors: Cors
    budget: MemoryBudget
    policy: Policy


class Lookup:
    """The reports one request may name: the fixed ones by name and the resolver's (``current``) under its own name;
    the resolver's is the one a request that names none is about."""

    def __init__(self, shared: ServedReports, current: Served | None, resolving: bool) -> None:
        self.shared = shared
        self.current = current
        self.resolving = resolving
        self.by_name: dict[str, Served] = dict(shared.by_name)
        if current is not None and current.name not in self.by_name:
            self.by_name[current.name] = current

    def names(self) -> dict[str, str]:
        """Database paths (absolute and as given) to report names, the longest first, for error messages."""
        paths = [(str(p), name) for name, one in self.by_name.items() for p in (one.path.resolve(), one.path)]
        return dict(sorted(paths, key=lambda item: -len(item[0])))

    def get(self, name: str) -> Served:
        """The report served under ``name``; 404 otherwise."""
        found = self.by_name.get(name)
        if found is None:
            known = ", ".join(sorted(self.by_name)[:20]) or "none"
            raise ApiError(404, f"no report named {name[:80]!r} is served", f"served reports: {known} (GET api/reports)")
        return found

    def pick(self, name: str | None) -> Served:
        """The report ``name``; with none, the resolver's report, else the only one served."""
        if name is not None:
            return self.get(name)
        if self.current is not None:
            return self.current
        if len(self.by_name) == 1:
            return next(iter(self.by_name.values()))
        if not self.by_name:
            raise ApiError(404, "no report is open", "open a report in the application first" if self.resolving
                           else "serve a report")
        raise ApiError(400, "several reports are served: say which one", "add ?report=<name> (GET api/reports lists them)")

    def cached(self, key: Hashable) -> Any:
        """A result the server kept under ``key`` (keys hold a report's path, not its name), or None."""
        return self.shared.cached(key)

    def keep(self, key: Hashable, value: Any) -> None:
        """Keep a result for later requests."""
        self.shared.keep(key, value)


def settings() -> Settings:
    """The settings of the blueprint answering this request."""
    found: Settings = g.reportdb_settings
    return found


def lookup() -> Lookup:
    """The reports this request may name."""
    found: Lookup = g.reportdb_lookup
    return found
