"""What a request of the blueprint works with: the blueprint's :class:`Settings` (its reports, resolver, host names,
CORS origins, memory budget and tolerance policies), the policy the request chose (``policy=NAME``) and the
request's :class:`Lookup` of reports by name (the fixed ones, plus the one the host app's resolver names for this
request), all kept on ``flask.g`` for the request."""

from __future__ import annotations

import collections
import hashlib
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Mapping

from flask import Request, g

from ..analysis.policy import Policy
from ..errors import PolicyError

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
    #: The other policies a request may choose by name (``policy=NAME``); ``default`` is always ``policy``.
    policies: dict[str, Policy] = field(default_factory=dict)
    #: Policies pasted into the page (``POST api/policies``), by name, the least recently pasted or chosen dropped
    #: beyond :attr:`MAX_PASTED` of them or :attr:`MAX_PASTED_TOTAL_CHARS` of their text.
    pasted: collections.OrderedDict[str, Policy] = field(default_factory=collections.OrderedDict)
    _pasted_chars: dict[str, int] = field(default_factory=dict)
    _paste_lock: threading.Lock = field(default_factory=threading.Lock)

    #: The most characters one pasted policy may hold: a policy is a few rules; this is hundreds of them.
    MAX_PASTED_CHARS = 65536
    #: How many pasted policies are kept (a page pastes one at a time; a few pages share a server), and the most
    #: characters they may hold together: a kept policy's memory grows with its text (its rules and each glob's
    #: compiled expression, ~2 MB for a full-length one of long globs), so four full-length ones at most.
    MAX_PASTED = 16
    MAX_PASTED_TOTAL_CHARS = 4 * MAX_PASTED_CHARS

    def paste(self, text: str) -> tuple[str, Policy]:
        """Check a pasted TOML policy and keep it under a name made from its text (``pasted-`` and 12 hex digits);
        PolicyError (which the API answers as a 400) saying what is wrong with it."""
        if len(text) > self.MAX_PASTED_CHARS:
            raise PolicyError(f"the pasted policy holds {len(text):,} characters, more than {self.MAX_PASTED_CHARS:,}")
        found = Policy.parse(text, source="the pasted policy")
        name = "pasted-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
        with self._paste_lock:
            self.pasted[name] = found
            self.pasted.move_to_end(name)
            self._pasted_chars[name] = len(text)
            while len(self.pasted) > self.MAX_PASTED or sum(self._pasted_chars.values()) > self.MAX_PASTED_TOTAL_CHARS:
                dropped, _ = self.pasted.popitem(last=False)
                del self._pasted_chars[dropped]
        return name, found

    def pasted_policies(self) -> list[tuple[str, Policy]]:
        """The pasted policies kept, the least recently used first."""
        with self._paste_lock:
            return list(self.pasted.items())

    def chosen(self, args: Mapping[str, str]) -> tuple[str, Policy]:
        """The policy a request names (``policy=NAME``; absent or ``default``: the blueprint's), with its name."""
        name = args.get("policy") or "default"
        if name == "default":
            return name, self.policy
        found = self.policies.get(name)
        if found is None:
            with self._paste_lock:
                found = self.pasted.get(name)
                if found is not None:  # in use: the last to be dropped
                    self.pasted.move_to_end(name)
        if found is None:
            known = ", ".join(["default", *sorted(self.policies)][:20])
            raise ApiError(400, f"no policy named {name[:80]!r} is served", f"served policies: {known} (GET api/policies)")
        return name, found


class Lookup:
    """The reports one request may name: the fixed ones by name and the resolver's (``current``) under its own name;
    the resolver's is the one a request that names none is about."""

    def __init__(self, shared: ServedReports, current: Served | None, resolving: bool, policy: str = "default") -> None:
        self.shared = shared
        self.policy = policy
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
        """A result the server kept under ``key`` for this request's policy (keys hold a report's path, not its
        name; every verdict depends on the policy, so results are kept per policy), or None."""
        return self.shared.cached((self.policy, key))

    def keep(self, key: Hashable, value: Any) -> None:
        """Keep a result for later requests under the same policy."""
        self.shared.keep((self.policy, key), value)


def settings() -> Settings:
    """The settings of the blueprint answering this request."""
    found: Settings = g.reportdb_settings
    return found


def policy() -> Policy:
    """The tolerance policy this request's verdicts follow (its ``policy=NAME``, else the blueprint's)."""
    found: Policy = g.reportdb_policy
    return found


def lookup() -> Lookup:
    """The reports this request may name."""
    found: Lookup = g.reportdb_lookup
    return found
