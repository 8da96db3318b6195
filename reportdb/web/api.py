"""The web API's contract: reports, operations, tensors, values, heatmaps, golden comparisons and run against run, all
as JSON (values also as ``.npy``, heatmaps also as PNG); this module puts the endpoints and the guards on a blueprint.

Endpoints (relative to the blueprint's prefix; ``report`` is a served report's name):

- ``GET api/reports``, ``api/status`` (the memory budget), ``api/colormaps``
- ``GET api/reports/<report>/operations`` (``filter``, ``sort``, ``order``, ``offset``, ``limit``, ``rank``,
  ``wait``: with ``wait=0`` it and the overview answer at once with the recorded verdicts, ``pending`` true, while
  the golden analysis runs once per report and policy in the background; ``analysis`` says how long it has run,
  ``analysis_error`` why it failed; the default waits for it): each operation with its worst PCC, verdict, role and
  ``local_sqnr_db`` (what ``sort=error`` ranks by), and ``victims``, the operations failing only globally
- ``GET api/reports/<report>/tensors/<id>`` and its ``/values`` (``slice``, ``format``) and ``/heatmap``
- ``GET api/compare-tensor/<local|global>/<id>`` (``report``, ``rank``, ``device``, ``rtol``, ``atol``, ``pcc``) and
  its ``/heatmap``, ``/point``, ``/histogram``: the paths of ttnn-visualizer's tensor comparison proposal, whose
  ``comparison`` object (``tensor_id``, ``golden_tensor_id``, ``matches``, ``desired_pcc``, ``actual_pcc``) the
  answer carries beside reportdb's full metrics; without ``report`` the request's own report (the resolver's) or
  the only one served
- ``GET api/runs?a=<report>&b=<report>`` (``rtol``, ``atol``, ``pcc``) and ``api/runs/heatmap`` (``a``, ``b``,
  ``tensor_a``, ``tensor_b``, ``side`` a, b or error): run against run, and one matched pair's A, B and |A-B| grids
- ``GET api/reports/<report>/golden``: every golden record recomputed with its verdict and role (culprit, victim,
  pass) and the first culprit in execution order; the operation list carries the same roles
- ``GET api/reports/<report>/overview`` (``rank``, ``wait``): every operation in execution order as compact columns (ids, names,
  one letter per role, the worst local PCC and SQNR) and the first culprit, for the page's overview
- ``GET api/policies`` and ``POST api/policies``: the tolerance policies a request may choose, and one pasted
- ``GET api/reports/<report>/operations/<id>``: an operation's context (arguments, stack trace, duration,
  producers and consumers of its tensors, their comparisons)
- ``GET api/locate/<local|global>/<id>`` (``report``, ``device``, ``top``): the worst tiles, the tile map, devices
  and cores of a tensor's error; ``api/runs/locate`` (``a``, ``b``, ``tensor_a``, ``tensor_b``, ``top``): the same
  of run B's output against run A's (``reportdb locate --against``)
- ``GET api/reports/<report>/replay`` (``mode`` isolated, chain or substitute; ``wait``): every operation replayed
  on its stored inputs (``reportdb.replay(...).to_dict()`` as ``result``, the counts ``line``, ``anomaly_notes``),
  run once per report, policy and mode in the background (``pending`` with ``wait=0`` until done)

Every endpoint that judges takes ``policy=NAME``: one of the tolerance policies the server was given (``GET
api/policies`` lists them with their rules; ``default`` or none: the blueprint's own), or one pasted into the page
and checked by ``POST api/policies`` (TOML ``[[rules]]``, answered with the name to use, or a 400 naming the line).

Nothing in a request reaches the filesystem or becomes SQL: a report is a name looked up among those served (or
the path the host app's resolver gives), a tensor a number, a window numpy basic indexing checked against the
stored shape before any byte is read. Sizes are bounded before work starts (413 with a hint to narrow the
request), and the memory all requests hold together is bounded by a budget (a request waits for its share, then
503); a bad parameter is 400, an unknown name, id or path 404, a Host header the server does not answer to 421, a
damaged or unsafe report 422; each error is ``{"error", "hint"}``, never a traceback page.
"""

from __future__ import annotations

from flask import Blueprint, Response, g, request

from . import limits, routes_compare, routes_debug, routes_replay, routes_reports
from .answers import error_answer
from .context import Lookup, Settings
from .params import ApiError

STATIC = routes_reports.STATIC


def _unknown(rest: str = "") -> Response:
    """Any path under the blueprint that names no endpoint: a JSON 404, never the host app's page."""
    shown = rest if len(rest) <= 80 else rest[:77] + "..."
    raise ApiError(404, f"no endpoint {shown!r}", "GET api/reports lists the served reports; the endpoints are "
                                                  "listed in reportdb.web.api")


def routes(bp: Blueprint, config: Settings) -> None:
    """Add every endpoint, the page, the guards (host names, resolver, CORS, headers) and the JSON errors to ``bp``."""

    @bp.before_request
    def _enter() -> None:
        g.reportdb_settings = config
        g.reportdb_lookup = Lookup(config.reports, None, config.resolver is not None)
        g.reportdb_release = None
        if config.hosts is not None:
            config.hosts.check(request)
        chosen, g.reportdb_policy = config.chosen(request.args)
        g.reportdb_lookup = Lookup(config.reports, None, config.resolver is not None, chosen)
        if config.resolver is not None and request.method != "OPTIONS":
            path = config.resolver(request)
            if path is not None:
                held = config.reports.resolved(path)
                current = held.__enter__()
                g.reportdb_release = held
                g.reportdb_lookup = Lookup(config.reports, current, True, chosen)

    @bp.teardown_request
    def _leave(exc: BaseException | None) -> None:
        held = g.pop("reportdb_release", None)
        if held is not None:
            held.__exit__(None, None, None)

    @bp.errorhandler(Exception)
    def _error(exc: Exception) -> Response:
        lookup: Lookup | None = g.get("reportdb_lookup")
        return error_answer(exc, lookup.names() if lookup is not None else None)

    @bp.after_request
    def _headers(response: Response) -> Response:
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        if response.mimetype == "text/html":
            response.headers.setdefault("Content-Security-Policy", limits.PAGE_POLICY)
        config.cors.apply(request, response)
        return response

    routes_reports.register(bp)
    routes_compare.register(bp)
    routes_debug.register(bp)
    routes_replay.register(bp)
    bp.add_url_rule("/<path:rest>", endpoint="unknown", view_func=_unknown,
                    methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"])
