"""What every request passes before it is answered: the Host header checked against the names the server answers
to (a DNS-rebinding page names another), the CORS origins allowed to read answers, and the memory budget the
requests being answered share (a request reserves what it may hold before it reads, and waits or is refused)."""

from __future__ import annotations

import contextlib
import ipaddress
import threading
import time
from typing import Iterable, Iterator

from flask import Request, Response

from .params import ApiError

#: Host names that only ever reach this machine.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def _host_name(host: str) -> str:
    """The name part of a Host header or of a configured name (no port, no brackets, no trailing dot), lower case."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host[1:]
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host.rstrip(".")


class Hosts:
    """The host names a server answers to; ``*`` among them answers any (for a server behind a proxy that checks)."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = frozenset(_host_name(n) for n in names if n.strip())
        self.any = "*" in self.names

    @classmethod
    def for_address(cls, bound: str, extra: Iterable[str] = ()) -> Hosts:
        """The names of a server bound to ``bound``: the loopback names, the bound address itself, and ``extra``
        (``serve --allow-host``). A wildcard address (0.0.0.0, ::) is no name a browser sends: ask for names."""
        names = [*LOOPBACK_NAMES, *extra]
        try:
            if not ipaddress.ip_address(_host_name(bound)).is_unspecified:
                names.append(bound)
        except ValueError:
            names.append(bound)
        return cls(names)

    def check(self, request: Request) -> None:
        """421 when the request's Host header is none of the names."""
        if self.any:
            return
        given = request.headers.get("Host", "")
        if _host_name(given) in self.names:
            return
        shown = given if len(given) <= 80 else given[:77] + "..."
        raise ApiError(421, f"this server does not answer to the host name {shown!r}",
                       f"open it as one of {', '.join(sorted(self.names))}, or start it with --allow-host NAME "
                       "(blueprint(allowed_hosts=...)) for a name you trust")


#: The answer headers a page of another origin may read (the heatmap's scale and region, a download's dtype).
_EXPOSED = "X-Reportdb-Scale, X-Reportdb-Min, X-Reportdb-Max, X-Reportdb-Region, X-Reportdb-Cell, X-Reportdb-Dtype"


class Cors:
    """The origins whose pages may read the answers (``*``: any); none by default, so only the page itself can."""

    def __init__(self, origins: Iterable[str]) -> None:
        self.origins = frozenset(o.strip().rstrip("/") for o in origins if o.strip())

    def apply(self, request: Request, response: Response) -> None:
        """Add the CORS headers to ``response`` when the request comes from an allowed origin."""
        origin = request.headers.get("Origin")
        if not self.origins or origin is None:
            return
        if "*" in self.origins:
            response.headers["Access-Control-Allow-Origin"] = "*"
        elif origin.rstrip("/") in self.origins:
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers.add("Vary", "Origin")
        else:
            return
        response.headers["Access-Control-Allow-Methods"] = "GET, OPTIONS"
        response.headers["Access-Control-Allow-Headers"] = "Accept, Content-Type"
        response.headers["Access-Control-Expose-Headers"] = _EXPOSED


class MemoryBudget:
    """Bytes the requests being answered may hold together. A request reserves its worst case before it reads
    (:meth:`hold`); one that cannot fit in the whole budget is 413, one that finds it in use waits up to ``wait``
    seconds, then is 503 with Retry-After. ``peak`` is the most ever reserved at once."""

    def __init__(self, limit: int, wait: float) -> None:
        self.limit = limit
        self.wait = wait
        self.in_use = 0
        self.peak = 0
        self.waiting = 0
        self.refused = 0
        self._cond = threading.Condition()

    @contextlib.contextmanager
    def hold(self, nbytes: int, what: str) -> Iterator[None]:
        """Reserve ``nbytes`` for the body of the ``with`` (``what`` names the request in the answers)."""
        nbytes = max(0, int(nbytes))
        if nbytes > self.limit:
            with self._cond:
                self.refused += 1
            raise ApiError(413, f"{what} may need {nbytes:,} bytes, more than this server's memory budget of "
                                f"{self.limit:,}", "ask for a smaller window or region, or run the command-line tool "
                                                   "(reportdb show/compare), or serve with a larger --memory-budget")
        deadline = time.monotonic() + self.wait
        with self._cond:
            self.waiting += 1
            try:
                while self.in_use + nbytes > self.limit:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self.refused += 1
                        raise ApiError(503, f"the server is busy: {what} waits for {nbytes:,} bytes of its memory "
                                            f"budget ({self.in_use:,} of {self.limit:,} in use)",
                                       "retry in a few seconds, or ask for a smaller window",
                                       headers={"Retry-After": "2"})
                    self._cond.wait(left)
            finally:
                self.waiting -= 1
            self.in_use += nbytes
            self.peak = max(self.peak, self.in_use)
        try:
            yield
        finally:
            with self._cond:
                self.in_use -= nbytes
                self._cond.notify_all()

    def to_json(self) -> dict[str, int]:
        """The budget's state (``GET api/status``)."""
        with self._cond:
            return {"limit": self.limit, "in_use": self.in_use, "peak": self.peak, "waiting": self.waiting,
                    "refused": self.refused}
