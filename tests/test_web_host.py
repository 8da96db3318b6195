"""reportdb.web inside a host application: ``reportdb.web`` after a plain ``import reportdb`` (Flask not imported
until then), reports resolved per request by the host's resolver (opened at run time, as ttnn-visualizer opens
them), a JSON 404 for any unknown path under the blueprint even where the host answers everything else with its
page, CORS origins, Host names; and the shipped web code speaks of the project alone."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import flask
import pytest

import reportdb
import reportdb.web as web

from conftest import ROOT
from test_web_api import make_report


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("web-host")
    return {"first": make_report(root / "first"), "second": make_report(root / "second")}


def host_app(bp: flask.Blueprint) -> flask.Flask:
    """An app like ttnn-visualizer: its own API, a page for every other path, reports opened at run time (per
    instance, named by ``?instanceId=``), and reportdb mounted under ``/reportdb``."""
    app = flask.Flask("host")
    app.config["open"] = {}

    @app.put("/api/instance")
    def _open() -> Any:
        body = flask.request.get_json()
        app.config["open"][flask.request.args["instanceId"]] = body["path"]
        return {"ok": True}

    @app.get("/", defaults={"path": ""})
    @app.get("/<path:path>")
    def _page(path: str) -> Any:
        return flask.Response("<html>the host's page</html>", mimetype="text/html")

    app.register_blueprint(bp, url_prefix="/reportdb")
    return app


def _resolver(request: flask.Request) -> str | None:
    found: str | None = flask.current_app.config["open"].get(request.args.get("instanceId", ""))
    return found


@pytest.mark.process
def test_reportdb_web_after_a_plain_import_without_flask_at_import(two: dict[str, Path]) -> None:
    code = ("import sys, reportdb; assert 'flask' not in sys.modules, 'flask imported by import reportdb'; "
            f"bp = reportdb.web.blueprint([{str(two['first'])!r}]); print(type(bp).__name__); bp.close()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and proc.stdout.strip() == "ReportBlueprint", proc.stderr[-2000:]


def test_reports_resolved_per_request_by_the_host(two: dict[str, Path]) -> None:
    bp = web.blueprint(resolver=_resolver)
    client = host_app(bp).test_client()
    try:
        nothing = client.get("/reportdb/api/compare-tensor/local/1?instanceId=a")
        assert nothing.status_code == 404 and "no report is open" in nothing.get_json()["error"]
        assert client.get("/reportdb/api/reports?instanceId=a").get_json() == {"reports": []}
        # A report opened after the blueprint was made, through the host's own flow, is the one answered for.
        assert client.put("/api/instance?instanceId=a", json={"path": str(two["first"])}).status_code == 200
        assert client.put("/api/instance?instanceId=b", json={"path": str(two["second"] / "db.sqlite")}).status_code == 200
        for instance, name in (("a", "first"), ("b", "second")):
            got = client.get(f"/reportdb/api/compare-tensor/local/1?instanceId={instance}")
            body = got.get_json()
            assert got.status_code == 200 and body["report"] == name, body
            assert body["comparison"]["tensor_id"] == 1 and body["comparison"]["golden_tensor_id"] == 2
            assert set(body["comparison"]) == {"tensor_id", "golden_tensor_id", "matches", "desired_pcc", "actual_pcc"}
            assert body["comparison"]["actual_pcc"] == body["metrics"]["pcc"]
            listed = client.get(f"/reportdb/api/reports?instanceId={instance}").get_json()["reports"]
            assert [(r["name"], r["current"]) for r in listed] == [(name, True)]
            ops = client.get(f"/reportdb/api/reports/{name}/operations?instanceId={instance}")
            assert ops.status_code == 200 and ops.get_json()["total"] > 0
        # The other instance's report is not reachable by name from this one.
        assert client.get("/reportdb/api/reports/second/operations?instanceId=a").status_code == 404
    finally:
        bp.close()


def test_unknown_paths_under_the_blueprint_are_json_404(two: dict[str, Path]) -> None:
    bp = web.blueprint([two["first"]])
    client = host_app(bp).test_client()
    try:
        for path in ("/reportdb/api/no-such-endpoint", "/reportdb/api/compare-tensor", "/reportdb/nothing/here",
                     "/reportdb/api/reports/first/tensors/1/nope"):
            got = client.get(path)
            assert got.status_code == 404 and got.mimetype == "application/json" and got.get_json()["hint"], path
        posted = client.post("/reportdb/api/reports")
        assert posted.status_code in (404, 405) and posted.mimetype == "application/json"
        host = client.get("/somewhere/else")
        assert host.status_code == 200 and host.mimetype == "text/html"  # the host's own paths are its own
    finally:
        bp.close()


def test_cors_origins(two: dict[str, Path]) -> None:
    bp = web.blueprint([two["first"]], cors_origins=["http://localhost:5173"])
    client = host_app(bp).test_client()
    try:
        allowed = client.get("/reportdb/api/reports", headers={"Origin": "http://localhost:5173"})
        assert allowed.headers["Access-Control-Allow-Origin"] == "http://localhost:5173"
        assert "Origin" in allowed.headers.get("Vary", "")
        other = client.get("/reportdb/api/reports", headers={"Origin": "https://attacker.example"})
        assert "Access-Control-Allow-Origin" not in other.headers
        preflight = client.options("/reportdb/api/compare-tensor/local/1", headers={
            "Origin": "http://localhost:5173", "Access-Control-Request-Method": "GET"})
        assert preflight.status_code == 200 and "GET" in preflight.headers["Access-Control-Allow-Methods"]
    finally:
        bp.close()
    plain = web.blueprint([two["first"]])
    try:
        got = host_app(plain).test_client().get("/reportdb/api/reports", headers={"Origin": "http://localhost:5173"})
        assert "Access-Control-Allow-Origin" not in got.headers  # none by default
    finally:
        plain.close()


def test_allowed_hosts_of_a_blueprint(two: dict[str, Path]) -> None:
    bp = web.blueprint([two["first"]], allowed_hosts=["localhost", "127.0.0.1", "::1"])
    client = host_app(bp).test_client()
    try:
        assert client.get("/reportdb/api/reports", headers={"Host": "localhost:8000"}).status_code == 200
        assert client.get("/reportdb/api/reports", headers={"Host": "[::1]:8000"}).status_code == 200
        bad = client.get("/reportdb/api/reports", headers={"Host": "rebound.attacker.example:8000"})
        assert bad.status_code == 421 and bad.get_json()["hint"]
    finally:
        bp.close()


def test_shipped_web_code_speaks_of_the_project_alone() -> None:
    folder = Path(reportdb.__file__).parent / "web"
    for path in [*folder.glob("*.py"), *(folder / "static").glob("*")]:
        text = path.read_text()
        assert "/work/" not in text and not re.search(r"\bissues? #?\d", text, re.IGNORECASE), path.name


def test_web_modules_and_functions_are_small() -> None:
    import ast

    for path in (Path(reportdb.__file__).parent / "web").glob("*.py"):
        text = path.read_text()
        assert text.count("\n") < 700, path.name
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                limit = 400 if isinstance(node, ast.ClassDef) else 160
                assert node.end_lineno - node.lineno < limit, f"{path.name}: {node.name}"


def test_the_memory_budget_is_shared_by_concurrent_requests() -> None:
    """Threads reserving parts of a budget never hold more than it together; one that cannot get its share in time
    is told to retry (503), one larger than the whole budget is refused at once (413)."""
    import threading

    from reportdb.web.guard import MemoryBudget
    from reportdb.web.params import ApiError

    budget = MemoryBudget(100, wait=5.0)
    held, most, lock = [0], [0], threading.Lock()
    release = threading.Event()

    def worker(n: int) -> None:
        with budget.hold(n, "a test request"):
            with lock:
                held[0] += n
                most[0] = max(most[0], held[0])
            release.wait(0.05)
            with lock:
                held[0] -= n

    threads = [threading.Thread(target=worker, args=(40,)) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert most[0] <= 100 and budget.peak == 80 and budget.in_use == 0  # two 40-byte requests at a time, not twelve
    with pytest.raises(ApiError) as too_big:
        with budget.hold(101, "a huge window"):
            pass
    assert too_big.value.status == 413 and "memory budget" in too_big.value.error
    quick = MemoryBudget(100, wait=0.05)
    with quick.hold(80, "a long request"):
        with pytest.raises(ApiError) as busy:
            with quick.hold(40, "a second request"):
                pass
    assert busy.value.status == 503 and busy.value.extra_headers == {"Retry-After": "2"} and quick.to_json()["refused"] == 1
