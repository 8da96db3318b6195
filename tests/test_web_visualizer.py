"""reportdb.web inside the real ttnn-visualizer 0.108.0 app: its Flask app with our blueprint registered under a
prefix serves a migrated report's tensors and comparisons there, and every one of its own ``/api/...`` answers on
that report is identical with and without the blueprint.

The visualizer runs from a venv of its own (``ttnn_env.cached_venv``, like ``test_visualizer_queries.py``) with this
checkout of reportdb installed in it (editable), built once and cached; the runner script below is run there and
prints its answers as JSON.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import reportdb
from conftest import FIXTURES
from ttnn_env import ROOT, EnvBuildError, EnvUnavailable, _dependencies, cached_venv

pytestmark = [pytest.mark.slow, pytest.mark.process]

VISUALIZER_VERSION = "0.108.0"

RUNNER = r'''
import json, sys, tempfile
from ttnn_visualizer.app import create_app
from ttnn_visualizer.extensions import db
from ttnn_visualizer.models import InstanceTable
from ttnn_visualizer.tests.fixture_settings import base_test_settings
import reportdb.web

REPORT = sys.argv[1]
OWN = ["/api/operations", "/api/operations/{op}", "/api/tensors", "/api/tensors/{tensor}", "/api/buffers",
       "/api/devices", "/api/report-metadata", "/api/operation-buffers", "/api/operation-buffers/{op}", "/api/errors",
       "/api/operation-history", "/api/buffer-pages", "/api/up", "/api/system-capabilities", "/api/no-such-route"]
OURS = ["/reportdb/api/reports", "/reportdb/api/reports/report/operations?sort=pcc",
        "/reportdb/api/reports/report/tensors/7", "/reportdb/api/reports/report/tensors/7/values?slice=0,0,0:2,0:4",
        "/reportdb/api/compare-tensor/local/7", "/reportdb/api/compare-tensor/global/7?rtol=0.1&atol=0.1",
        "/reportdb/api/compare-tensor/local/7/heatmap?error=mask&format=json&width=7&height=8",
        "/reportdb/api/compare-tensor/local/7/point?at=0,0,1,2", "/reportdb/api/reports/elsewhere/operations",
        "/reportdb/api/compare-tensor/local/7/heatmap", "/reportdb/", "/reportdb/api/no-such-endpoint"]


def app_with(mounted):
    app = create_app(settings_override=base_test_settings(tempfile.mkdtemp()))
    bp = None
    if mounted:
        bp = reportdb.web.blueprint([REPORT])
        app.register_blueprint(bp, url_prefix="/reportdb")
    with app.app_context():
        db.session.add(InstanceTable(instance_id="rdb", active_report={}, profiler_path=REPORT))
        db.session.commit()
    return app, bp


def answer(client, url):
    response = client.get(url, query_string={"instanceId": "rdb"} if url.startswith("/api/") else None)
    body = response.get_data()
    if response.mimetype == "application/json":
        body = json.loads(body)
    elif response.mimetype == "text/html" or response.mimetype.startswith("text/"):
        body = body.decode("utf-8", "replace")[:200]
    else:
        body = {"bytes": len(body), "head": body[:8].hex()}
    return {"status": response.status_code, "mimetype": response.mimetype, "body": body,
            "headers": {k: v for k, v in response.headers.items() if k.startswith("X-Reportdb")}}


def own_answers(client, op, tensor):
    return {url: answer(client, url.format(op=op, tensor=tensor)) for url in OWN}


plain, _ = app_with(False)
client = plain.test_client()
ops = client.get("/api/operations", query_string={"instanceId": "rdb"}).get_json()
op, tensor = ops[0]["id"], 7
out = {"plain": own_answers(client, op, tensor), "plain_again": own_answers(app_with(False)[0].test_client(), op, tensor)}
mounted, bp = app_with(True)
client = mounted.test_client()
out["mounted"] = own_answers(client, op, tensor)
out["ours"] = {url: answer(client, url) for url in OURS}
bp.close()
json.dump(out, sys.stdout)
'''


@pytest.fixture(scope="session")
def visualizer_with_reportdb() -> str:
    """A python with ttnn-visualizer and this checkout of reportdb (editable), built once and cached."""
    minor = f"{sys.version_info.major}.{sys.version_info.minor}"
    tag = hashlib.sha256(" ".join([sys.base_prefix, sys.version, str(ROOT), *_dependencies()]).encode()).hexdigest()[:8]
    try:
        python = cached_venv(f"ttnn-visualizer-{VISUALIZER_VERSION}-reportdb-py{minor}-{tag}", Path(sys.executable),
                             [f"ttnn-visualizer=={VISUALIZER_VERSION}", "-e", str(ROOT)],
                             f"ttnn-visualizer {VISUALIZER_VERSION} with reportdb")
    except EnvUnavailable as exc:
        pytest.skip(str(exc))
    except EnvBuildError as exc:
        pytest.fail(str(exc))
    return str(python)


@pytest.fixture(scope="module")
def answers(visualizer_with_reportdb: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("visualizer-web")
    report = work / "report"
    reportdb.migrate(FIXTURES / "ttnn-0.64.5-report-tensorbin" / "report", report)
    runner = work / "run_web.py"
    runner.write_text(RUNNER)
    proc = subprocess.run([visualizer_with_reportdb, str(runner), str(report / "db.sqlite")], capture_output=True,
                          text=True, timeout=600, cwd=work, env={"PATH": "/usr/bin:/bin", "HOME": str(work),
                                                                 "FLASK_ENV": "development"})
    assert proc.returncode == 0, proc.stderr[-6000:]
    data = json.loads(proc.stdout)
    data["report"] = report
    return data


def test_the_visualizers_own_answers_are_unchanged_by_the_blueprint(answers: dict[str, Any]) -> None:
    plain, mounted = answers["plain"], answers["mounted"]
    assert plain == answers["plain_again"]  # its answers are deterministic, so the comparison below means something
    assert plain["/api/operations"]["status"] == 200 and plain["/api/operations"]["body"]  # not vacuous
    assert plain["/api/tensors/{tensor}"]["status"] == 200
    different = {url: (plain[url], mounted[url]) for url in plain if plain[url] != mounted[url]}
    assert not different


def test_our_endpoints_answer_under_the_prefix(answers: dict[str, Any]) -> None:
    ours = answers["ours"]
    reports = ours["/reportdb/api/reports"]["body"]["reports"]
    assert [r["name"] for r in reports] == ["report"] and reports[0]["comparisons"] == 20  # 10 local, 10 global
    page = ours["/reportdb/api/reports/report/operations?sort=pcc"]["body"]
    assert page["total"] == 10 and page["items"][0]["passed"] is False  # the fixture's 0.748 record first
    local = ours["/reportdb/api/compare-tensor/local/7"]
    assert local["status"] == 200
    with reportdb.open(answers["report"]) as report:
        used = local["body"]["tolerances"]
        assert used["source"] == "policy"
        expected = reportdb.compare(report.tensor(7), report.tensor(1000003), rtol=used["rtol"], atol=used["atol"],
                                    pcc=0.99).to_dict()
        values = report.tensor(7, window=np.s_[0, 0, 0:2, 0:4]).astype(np.float64)
        point = (float(report.tensor(7, window=(0, 0, 1, 2))), float(report.tensor(1000003, window=(0, 0, 1, 2))))
    assert local["body"]["metrics"] == json.loads(json.dumps(expected)) and local["body"]["passed"] is False
    assert ours["/reportdb/api/compare-tensor/global/7?rtol=0.1&atol=0.1"]["body"]["tolerances"]["rtol"] == 0.1
    got = ours["/reportdb/api/reports/report/tensors/7/values?slice=0,0,0:2,0:4"]["body"]
    assert got["values"] == values.tolist()
    assert ours["/reportdb/api/reports/report/tensors/7"]["body"]["shape"] == [1, 1, 32, 14]
    heat = ours["/reportdb/api/compare-tensor/local/7/heatmap?error=mask&format=json&width=7&height=8"]["body"]
    assert heat["cell"] == [4, 2] and heat["scale"]["name"] == "mask"
    hover = ours["/reportdb/api/compare-tensor/local/7/point?at=0,0,1,2"]["body"]
    assert (hover["actual"], hover["golden"]) == point
    png = ours["/reportdb/api/compare-tensor/local/7/heatmap"]
    assert png["mimetype"] == "image/png" and png["body"]["head"] == "89504e470d0a1a0a"
    assert png["headers"]["X-Reportdb-Scale"] == "sequential"  # the default error view: abs
    missing = ours["/reportdb/api/reports/elsewhere/operations"]
    assert missing["status"] == 404 and missing["body"]["hint"]
    page_html = ours["/reportdb/"]
    assert page_html["status"] in (200, 404)  # 404 (JSON) only while reportdb/web/static/index.html is missing
    assert page_html["mimetype"] == ("text/html" if page_html["status"] == 200 else "application/json")
    unknown = ours["/reportdb/api/no-such-endpoint"]
    assert unknown["status"] == 404 and unknown["mimetype"] == "application/json" and unknown["body"]["hint"]


RECIPE = r'''
import json, shutil, sys, tempfile
from pathlib import Path
from ttnn_visualizer.app import create_app
from ttnn_visualizer.tests.fixture_settings import base_test_settings
import reportdb

data = Path(tempfile.mkdtemp())
folder = data / "local" / "profiler-reports" / "model_run"  # where the visualizer keeps its local reports
folder.mkdir(parents=True)
shutil.copy(sys.argv[1], folder / "db.sqlite")
app = create_app(settings_override=base_test_settings(str(data)))
bp = reportdb.web.blueprint(resolver=reportdb.web.visualizer.active_report)  # the README's recipe
app.register_blueprint(bp, url_prefix="/reportdb")
client = app.test_client()
me = {"instanceId": "me"}
out = {}


def grab(name, response):
    body = response.get_data()
    out[name] = {"status": response.status_code, "mimetype": response.mimetype,
                 "body": json.loads(body) if response.mimetype == "application/json" else None}


grab("before", client.get("/reportdb/api/compare-tensor/local/7", query_string=me))
# The visualizer's own flow: its page opens a report by name for its instance.
grab("open", client.put("/api/instance", query_string=me,
                        json={"active_report": {"profiler_name": "model_run", "profiler_location": "local"}}))
grab("local", client.get("/reportdb/api/compare-tensor/local/7", query_string=me))
grab("global", client.get("/reportdb/api/compare-tensor/global/7", query_string=me))
grab("other", client.get("/reportdb/api/compare-tensor/local/7", query_string={"instanceId": "other"}))
grab("unknown", client.get("/reportdb/api/no-such-endpoint", query_string=me))
grab("own", client.get("/api/tensors/7", query_string=me))
bp.close()
json.dump(out, sys.stdout)
'''


def test_the_recipe_serves_the_report_the_visualizer_opened(visualizer_with_reportdb: str, tmp_path: Path) -> None:
    """ttnn-visualizer 0.108's own app with reportdb mounted by the README's recipe: a report opened through the
    visualizer's own flow (PUT api/instance) is the one ``api/compare-tensor/local/<id>`` answers for, with the
    visualizer's field names; another instance with no report open gets a JSON 404."""
    report = tmp_path / "report"
    reportdb.migrate(FIXTURES / "ttnn-0.64.5-report-tensorbin" / "report", report)
    runner = tmp_path / "recipe.py"
    runner.write_text(RECIPE)
    proc = subprocess.run([visualizer_with_reportdb, str(runner), str(report / "db.sqlite")], capture_output=True,
                          text=True, timeout=600, cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                                                     "FLASK_ENV": "development"})
    assert proc.returncode == 0, proc.stderr[-6000:]
    out = json.loads(proc.stdout)
    assert out["before"]["status"] == 404 and out["before"]["mimetype"] == "application/json"
    assert out["open"]["status"] == 200
    with reportdb.open(report) as opened:
        pcc = reportdb.compare(opened.tensor(7), opened.tensor(1000003)).pcc
    for kind in ("local", "global"):
        body = out[kind]["body"]
        assert out[kind]["status"] == 200 and body["report"] == "model_run" and body["kind"] == kind
        assert body["comparison"] == {"tensor_id": 7, "golden_tensor_id": 1000003, "matches": False,
                                      "desired_pcc": 0.99, "actual_pcc": pytest.approx(pcc, rel=1e-12)}
        assert body["metrics"]["pcc"] == body["comparison"]["actual_pcc"]  # beside reportdb's full metrics
    assert out["other"]["status"] == 404 and "no report is open" in out["other"]["body"]["error"]
    assert out["unknown"]["status"] == 404 and out["unknown"]["mimetype"] == "application/json"
    assert out["own"]["status"] == 200 and out["own"]["body"]["tensor_id"] == 7  # the visualizer's own API
