"""reportdb.web: tensors and their golden comparisons in a browser, as a Flask blueprint.

Two ways to use it::

    reportdb serve reports/a reports/b            # a waitress server on 127.0.0.1, the page at /

    app.register_blueprint(reportdb.web.blueprint(["reports/a"]), url_prefix="/reportdb")   # inside another app

The reports are named at start (``reports.report_names``) and opened read-only; requests name them, never paths. A
host app that opens reports at run time gives a ``resolver`` instead (or as well): a callable from the request to
the path of the report that request is about. The HTTP contract (endpoints, parameters, errors) is in ``api.py``;
Flask and waitress come with the ``web`` extra (``pip install 'reportdb[web]'``).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import signal
import socket
import sys
import threading
import webbrowser
from pathlib import Path
from types import FrameType
from typing import Mapping, Sequence

import flask
from werkzeug.exceptions import HTTPException

from ..analysis.policy import Policy, as_policy
from ..errors import InvalidArgumentError
from . import limits, visualizer  # noqa: F401  (reportdb.web.visualizer.active_report, the visualizer's resolver)
from .answers import error_answer
from .api import STATIC, routes
from .context import Resolver, Settings
from .guard import Cors, Hosts, MemoryBudget
from .reports import ServedReports

__all__ = ["ReportBlueprint", "Resolver", "blueprint", "create_app", "serve"]

Paths = Sequence["str | os.PathLike[str]"]
#: Named tolerance policies a request may choose with ``policy=NAME``: each a Policy or a TOML file's path.
Policies = Mapping[str, "Policy | str | Path"]


class ReportBlueprint(flask.Blueprint):
    """The blueprint of the API and the page over its reports (``served``), open until ``close()``; ``budget`` is
    the memory budget its requests share."""

    served: ServedReports
    budget: MemoryBudget
    settings: Settings

    def close(self) -> None:
        """Close the served reports' connections (the blueprint answers no request after this)."""
        self.served.close()


def blueprint(
    reports: Paths = (), *, name: str = "reportdb", resolver: Resolver | None = None,
    allowed_hosts: Sequence[str] | None = None, cors_origins: Sequence[str] = (),
    memory_budget: int = limits.MEMORY_BUDGET, budget_wait: float = limits.BUDGET_WAIT_SECONDS,
    policy: Policy | str | Path | None = None, policies: Policies | None = None,
) -> ReportBlueprint:
    """A Flask blueprint serving ``reports`` (report folders or database files, opened read-only now, so a missing
    or unreadable one fails here with its ReportDBError); register it under any ``url_prefix``.

    ``resolver(request)`` gives the path of the report a request is about (None: none), opened on first use and
    kept open: mounted in an app that opens reports at run time, the blueprint serves the one the app has open.
    ``allowed_hosts`` are the Host names it answers to (None: any; the host app decides); ``cors_origins`` the
    origins whose pages may read its answers (``*``: any); ``memory_budget`` the bytes its requests may hold
    together (a request waits up to ``budget_wait`` seconds for its share, then is answered 503); ``policy`` the
    tolerance policy its verdicts follow (a Policy or a TOML file; None: the dtype-aware defaults), ``policies`` others a
    request may choose by name (``policy=NAME``; the page offers them), each loaded now (a bad file: its PolicyError)."""
    named = named_policies(policies or {})
    served = ServedReports(reports, resolving=resolver is not None, max_resolved=limits.MAX_RESOLVED)
    bp = ReportBlueprint(name, __name__, static_folder=str(STATIC), static_url_path="/static")
    bp.served = served
    bp.budget = MemoryBudget(memory_budget, budget_wait)
    config = Settings(served, resolver, None if allowed_hosts is None else Hosts(allowed_hosts), Cors(cors_origins),
                      bp.budget, as_policy(policy), named)
    bp.settings = config
    routes(bp, config)
    return bp


def named_policies(policies: Policies) -> dict[str, Policy]:
    """Each named policy loaded (a path read as TOML now), its name checked: a word the page can put in a URL."""
    loaded: dict[str, Policy] = {}
    for name, given in policies.items():
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name) or name == "default" or name.startswith("pasted-"):
            raise InvalidArgumentError(f"policy name {name[:80]!r} is not usable: give letters, digits, '.', '_' or "
                                       "'-' (up to 64), other than 'default' and not starting with 'pasted-'")
        loaded[name] = as_policy(given)
    return loaded


def create_app(
    reports: Paths, *, allowed_hosts: Sequence[str] | None = None, cors_origins: Sequence[str] = (),
    memory_budget: int = limits.MEMORY_BUDGET, policies: Policies | None = None,
) -> flask.Flask:
    """A Flask app with the blueprint at ``/`` and JSON answers for unknown URLs (the ``reportdb serve`` app);
    ``policies`` are the named tolerance policies the page offers besides the defaults."""
    app = flask.Flask(__name__, static_folder=None)
    bp = blueprint(reports, allowed_hosts=allowed_hosts, cors_origins=cors_origins, memory_budget=memory_budget,
                   policies=policies)
    app.register_blueprint(bp, url_prefix="")
    app.extensions["reportdb"] = bp

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> flask.Response:
        return error_answer(exc)

    return app


def _is_loopback(host: str) -> bool:
    """Whether ``host`` only reaches this machine (``localhost``, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


#: Threads answering requests (waitress's own default): the page asks a few things at once.
THREADS = 4


class ShortQueues(logging.Filter):
    """Drops waitress's "Task queue depth is N" warning while fewer requests wait than the server has threads: it
    comes whenever a request arrives before a thread that just answered is counted idle again (on a busy machine,
    between two requests of one page), which is no overload and only alarms the user. A deeper queue still shows."""

    @classmethod
    def install(cls) -> None:
        """Filter waitress's queue logger (once per process)."""
        queue_log = logging.getLogger("waitress.queue")
        if not any(isinstance(f, cls) for f in queue_log.filters):
            queue_log.addFilter(cls())

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether the record is shown: all but a short queue's warning."""
        depth = record.args[0] if isinstance(record.args, tuple) and record.args else None
        return not (record.msg == "Task queue depth is %d" and isinstance(depth, int) and depth < THREADS)


def serve(
    reports: Paths, host: str = "127.0.0.1", port: int = 0, open_browser: bool = False, *,
    allow_hosts: Sequence[str] = (), cors_origins: Sequence[str] = (), memory_budget: int = limits.MEMORY_BUDGET,
    policies: Policies | None = None,
) -> None:
    """Serve ``reports`` with waitress (a production WSGI server, pure Python) until Ctrl-C or SIGTERM, which stop it
    cleanly. Prints the URL (``port=0`` takes a free port); warns on stderr when ``host`` is not a loopback address,
    since anyone who reaches it can then read the reports. It answers only requests whose Host header names it (the
    loopback names, the bound address, this machine's name when bound to a wildcard, and ``allow_hosts``), so a
    page of another site that rebinds its name to this address reads nothing. ``policies``: the named tolerance
    policies the page offers (see :func:`create_app`)."""
    from waitress import create_server  # type: ignore[import-untyped]  # waitress ships no type information

    app = create_app(reports, allowed_hosts=(), cors_origins=cors_origins, memory_budget=memory_budget, policies=policies)
    server = create_server(app, host=host, port=port, threads=THREADS, ident="reportdb",
                           clear_untrusted_proxy_headers=True)
    ShortQueues.install()
    bound_host, bound_port = server.getsockname()[:2]
    extra = [*allow_hosts, *(() if _is_loopback(host) else (socket.gethostname(),))]
    app.extensions["reportdb"].settings.hosts = Hosts.for_address(str(bound_host), extra)
    shown = f"[{bound_host}]" if ":" in str(bound_host) else str(bound_host)
    url = f"http://{shown}:{bound_port}/"
    if not _is_loopback(host):
        print(f"reportdb: warning: serving on {host}, not a loopback address: anyone who can reach this machine can "
              "read these reports (use --host 127.0.0.1 to keep them local)", file=sys.stderr, flush=True)
    served: ServedReports = app.extensions["reportdb"].served
    names = ", ".join(served.by_name)
    offered = app.extensions["reportdb"].settings.policies
    with_policies = f" with policies default, {', '.join(offered)}" if offered else ""
    print(f"reportdb: serving {names} at {url}{with_policies} (Ctrl-C stops)", flush=True)
    previous = None
    if threading.current_thread() is threading.main_thread():

        def _stop(signum: int, frame: FrameType | None) -> None:
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGTERM, _stop)
    try:
        if open_browser:
            webbrowser.open(url)
        server.run()  # returns on Ctrl-C (waitress catches the KeyboardInterrupt) or SIGTERM
    except KeyboardInterrupt:  # one that came before the loop ran
        pass
    finally:
        print("reportdb: stopped", flush=True)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        server.close()
        served.close()
