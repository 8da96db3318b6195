"""The web API's debugging endpoints through Flask's test client, views of ``reportdb.analysis``: the operation list's
roles and first culprit, worst-first by local error, the golden analysis, an operation's context, the A-against-B
heatmaps of run against run and ``locate``, each checked against numpy and against the engine's own answer (one
policy everywhere)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import reportdb
import reportdb.web as web
import reportdb.web.routes_debug as routes_debug
from reportdb.errors import CorruptionError

import web_debug_data as data


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two runs' reports: ``run_a`` (one culprit and its victims) and ``run_b`` (diverging from it at DIVERGE_OP)."""
    base = tmp_path_factory.mktemp("web-debug")
    data.build(base / "run_a", 0)
    data.build(base / "run_b", 1)
    return base


@pytest.fixture(scope="module")
def client(root: Path) -> Any:
    return web.create_app([root / "run_a", root / "run_b"]).test_client()


def _get(client: Any, url: str, status: int = 200) -> Any:
    response = client.get(url)
    assert response.status_code == status, response.get_data(as_text=True)
    return response.get_json()


def test_operations_carry_roles_and_the_first_culprit(client: Any) -> None:
    page = _get(client, "api/reports/run_a/operations")
    assert page["judged"] is True
    assert page["first_culprit"] == {"operation_id": data.CULPRIT_OP, "tensor_id": data.CULPRIT_OP,
                                     "name": f"ttnn.step_{data.CULPRIT_OP}", "rank": 0}
    assert [op["id"] for op in page["items"]] == list(range(1, data.OPS + 2))  # execution order by default
    roles = {op["id"]: op["role"] for op in page["items"]}
    assert roles == {1: "pass", 2: "pass", 3: "culprit", 4: "victim", 5: "victim", 6: "victim", 7: "culprit"}
    out = page["items"][data.CULPRIT_OP - 1]["outputs"][0]["comparisons"]
    assert out["local"]["role"] == "culprit" and "pcc" in out["local"]["failed"]
    assert out["local"]["passed"] is False and out["global"]["passed"] is False
    victim = page["items"][4]["outputs"][0]["comparisons"]
    assert victim["local"]["passed"] is True and victim["global"]["passed"] is False
    chain = data.chain(0)
    assert victim["global"]["pcc"] == pytest.approx(data.pcc(chain["device"][5], chain["global"][5]), abs=1e-9)


def test_worst_first_ranks_by_local_error_not_by_pcc(client: Any) -> None:
    by_error = _get(client, "api/reports/run_a/operations?sort=error")["items"]
    assert by_error[0]["id"] == data.CULPRIT_OP  # the culprit, though a victim's global PCC is lower
    by_pcc = _get(client, "api/reports/run_a/operations?sort=pcc")["items"]
    assert by_pcc[0]["id"] != data.CULPRIT_OP and by_pcc[0]["role"] == "victim"


def test_golden_analysis_is_the_engines(client: Any, root: Path) -> None:
    answer = _get(client, "api/reports/run_a/golden")
    engine = reportdb.compare_golden(root / "run_a", store=False)
    assert engine.first_culprit is not None
    assert answer["first_culprit"]["operation_id"] == engine.first_culprit.operation_id
    assert answer["counts"] == engine.counts()
    assert [(r["kind"], r["tensor_id"], r["role"], r["verdict"]) for r in answer["records"]] == [
        (r.kind, r.tensor_id, r.role, r.verdict) for r in engine.records
    ]
    _get(client, "api/reports/nope/golden", 404)


def test_operation_context(client: Any) -> None:
    c = _get(client, f"api/reports/run_a/operations/{data.CULPRIT_OP + 1}")
    assert c["name"] == f"ttnn.step_{data.CULPRIT_OP + 1}" and c["duration"] == 1000.0 * (data.CULPRIT_OP + 1)
    assert dict(c["arguments"])["memory_config"] == "DRAM"
    assert "model.py" in c["stack_trace"]
    (inp,) = c["inputs"]
    assert inp["tensor_id"] == data.CULPRIT_OP and inp["producer"]["operation_id"] == data.CULPRIT_OP
    (out,) = c["outputs"]
    assert [ref["operation_id"] for ref in out["consumers"]] == [data.CULPRIT_OP + 2]
    roles = {k["kind"]: (k["verdict"], k["role"]) for k in out["comparisons"]}
    assert roles == {"local": ("pass", "victim"), "global": ("fail", "victim")}
    unknown = _get(client, "api/reports/run_a/operations/999", 404)  # unknown, as an unknown tensor is
    assert unknown["error"] == "report run_a has no operation 999 on rank 0" and "/operations" in unknown["hint"]
    _get(client, "api/reports/run_a/tensors/999999", 404)
    _get(client, "api/reports/run_a/operations/x1", 400)


def test_run_pair_heatmaps_against_numpy(client: Any) -> None:
    a, b = data.chain(0)["device"][data.DIVERGE_OP], data.chain(1)["device"][data.DIVERGE_OP]
    runs = _get(client, "api/runs?a=run_a&b=run_b")
    first = runs["first_divergence"]
    assert first["operation_id_b"] == data.DIVERGE_OP
    base = (f"api/runs/heatmap?a=run_a&b=run_b&tensor_a={first['tensor_a']}&tensor_b={first['tensor_b']}"
            "&index=0,0&y=0:64&x=0:96&width=96&height=64&format=json")
    grid_a = np.array(_get(client, base + "&side=a")["grid"], dtype=np.float64)
    grid_b = np.array(_get(client, base + "&side=b")["grid"], dtype=np.float64)
    err = _get(client, base + "&side=error&error=abs")
    assert np.array_equal(grid_a, a[0, 0].astype(np.float64)) and np.array_equal(grid_b, b[0, 0].astype(np.float64))
    assert np.allclose(np.array(err["grid"], dtype=np.float64), np.abs(a[0, 0] - b[0, 0]), rtol=1e-6)
    assert err["max"] == pytest.approx(float(np.abs(a - b).max()), rel=1e-6)
    row = next(r for r in runs["items"] if r["first_divergence"])
    assert row["verdict"] == "diverges" and row["failed"]  # the verdict names what failed
    _get(client, base.replace(f"tensor_b={first['tensor_b']}", "tensor_b=424242") + "&side=b", 404)


def test_locate_worst_tile(client: Any) -> None:
    found = _get(client, f"api/locate/local/{data.CULPRIT_OP}?report=run_a&top=3")
    chain = data.chain(0)
    err = np.abs(chain["device"][data.CULPRIT_OP] - chain["local"][data.CULPRIT_OP])[0, 0]
    worst = found["worst_tiles"][0]
    tile_r, tile_c = worst["tile"][-2:]
    assert (tile_r, tile_c) == (1, 1)  # the flipped block is tile (1, 1)
    assert worst["max_abs_error"] == pytest.approx(float(err[32:64, 32:64].max()), rel=1e-6)
    assert np.array(found["tile_map"]).shape[-2:] == (2, 3)
    _get(client, "api/locate/sideways/3?report=run_a", 404)


def test_locate_devices_of_a_mesh_tensor(client: Any) -> None:
    found = _get(client, f"api/locate/local/{data.MESH_TENSOR}?report=run_a")
    mesh, golden = data.mesh_tensor()
    by_device = {tuple(d["coordinate"]): d for d in found["devices"]}
    assert [k for k, d in by_device.items() if not d["passed"]] == [(0, 2)]
    part = (Ellipsis, slice(64, 96))
    assert by_device[(0, 2)]["fit_scale"] == pytest.approx(1.07, rel=1e-6)
    assert by_device[(0, 2)]["max_abs_error"] == pytest.approx(float(np.abs(mesh[part] - golden[part]).max()), rel=1e-6)


def test_engine_endpoints_beside_concurrent_requests(root: Path) -> None:
    """The engine endpoints answer while other threads read the same report (they share its one connection)."""
    import threading
    import urllib.error
    import urllib.request

    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, web.create_app([root / "run_a", root / "run_b"]), threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.port}/"
    failures: list[tuple[str, int]] = []

    def get(url: str) -> None:
        try:
            urllib.request.urlopen(base + url, timeout=60).read()
        except urllib.error.HTTPError as exc:
            failures.append((url, exc.code))

    urls = ["api/reports/run_a/operations/5", "api/compare-tensor/global/5?report=run_a",
            "api/compare-tensor/global/5/heatmap?format=json&report=run_a", "api/reports/run_a/operations/4",
            "api/reports/run_a/tensors/5/heatmap?format=json", "api/locate/global/4?report=run_a",
            "api/reports/run_b/operations"]
    try:
        threads = [threading.Thread(target=get, args=(u,)) for u in urls * 3]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        server.shutdown()
    assert not failures


def test_runs_beside_engine_requests_on_the_same_reports(root: Path) -> None:
    """api/runs and the other engine endpoints at once, from many threads, on the same served reports (each request
    new work: no answer comes from the cache): every answer is right. Before the served reports lent each engine
    request a connection of its own, run against run opened ORM sessions on the connection the other threads were
    using ("cannot start a transaction within a transaction", wrong rows)."""
    import threading

    from werkzeug.serving import make_server

    app = web.create_app([root / "run_a", root / "run_b"])
    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = app.test_client()
    expected_runs = _get(client, "api/runs?a=run_a&b=run_b")
    expected_op = _get(client, f"api/reports/run_a/operations/{data.CULPRIT_OP}")
    base = f"http://127.0.0.1:{server.port}/"
    problems: list[str] = []

    def get(url: str) -> Any:
        import json
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(base + url, timeout=120) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            problems.append(f"{url}: {exc.code} {exc.read()[:300]!r}")
            return None

    def runs(i: int) -> None:
        found = get(f"api/runs?a=run_a&b=run_b&pcc={0.9 + i * 1e-4:.4f}")  # a new pcc: work, not the cache
        if found is not None and [r["tensor_b"] for r in found["items"]] != [r["tensor_b"] for r in expected_runs["items"]]:
            problems.append(f"runs {i}: other rows")

    def operation(i: int) -> None:
        found = get(f"api/reports/run_a/operations/{data.CULPRIT_OP}?rank=0&_={i}")
        other = get(f"api/locate/local/{data.CULPRIT_OP}?report=run_a&top={i + 1}")
        if found is not None and found["outputs"][0]["consumers"] != expected_op["outputs"][0]["consumers"]:
            problems.append(f"operation {i}: other consumers")
        if other is not None and tuple(other["worst_tiles"][0]["tile"][-2:]) != (1, 1):
            problems.append(f"locate {i}: another worst tile")

    try:
        for attempt in range(2):
            app.extensions["reportdb"].served.keep = lambda key, value: None  # nothing kept: every request works
            threads = [threading.Thread(target=f, args=(attempt * 6 + i,)) for i in range(6) for f in (runs, operation)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        server.shutdown()
        app.extensions["reportdb"].close()
    assert not problems, problems[:5]


LENIENT = '[[rules]]\nop = "ttnn.step_[34]"\npcc = 0.0\n'  # the culprit (3) and the op runs diverge at (4) pass
GATHER = '[[rules]]\nop = "ttnn.all_gather"\npcc = 0.5\n'  # the mesh tensor's device 2: no sqnr_db criterion


def _cli_json(*args: str) -> Any:
    """``python -m reportdb ARGS --json`` (the CLI's own verdicts), parsed."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-m", "reportdb", *args, "--json"], capture_output=True, text=True, env=env)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def policies(root: Path) -> dict[str, Path]:
    files = {"lenient": root / "lenient.toml", "gather": root / "gather.toml"}
    files["lenient"].write_text(LENIENT)
    files["gather"].write_text(GATHER)
    return files


@pytest.fixture(scope="module")
def chosen(root: Path, policies: dict[str, Path]) -> Any:
    """The app with two named policies besides the defaults."""
    app = web.create_app([root / "run_a", root / "run_b"], policies=policies)
    yield app.test_client()
    app.extensions["reportdb"].close()


@pytest.mark.process
def test_a_chosen_policy_gives_the_clis_verdicts(chosen: Any, root: Path, policies: dict[str, Path]) -> None:
    """``policy=NAME`` on the operation list, the golden analysis and run against run answers what the CLI's
    ``--policy FILE`` does; without it, the defaults' verdicts (the culprit is op 3, runs diverge at op 4)."""
    cli = _cli_json("compare", str(root / "run_a"), "--golden", "--policy", str(policies["lenient"]))
    page = _get(chosen, "api/reports/run_a/operations?policy=lenient")
    assert page["first_culprit"]["operation_id"] == cli["first_culprit"]["operation_id"] == data.OPS + 1
    assert _get(chosen, "api/reports/run_a/operations")["first_culprit"]["operation_id"] == data.CULPRIT_OP
    golden = _get(chosen, "api/reports/run_a/golden?policy=lenient")
    assert [(r["kind"], r["tensor_id"], r["role"], r["verdict"]) for r in golden["records"]] == [
        (r["kind"], r["tensor_id"], r["role"], r["verdict"]) for r in cli["records"]]
    roles = {op["id"]: op["role"] for op in page["items"]}
    assert roles[data.CULPRIT_OP] == "pass"
    runs_cli = _cli_json("compare", str(root / "run_a"), str(root / "run_b"), "--policy", str(policies["lenient"]))
    runs = _get(chosen, "api/runs?a=run_a&b=run_b&policy=lenient")
    assert runs["first_divergence"]["operation_id_b"] == runs_cli["first_divergence"]["operation_id_b"] == data.DIVERGE_OP + 1
    assert [r["verdict"] for r in runs["items"]] == [r["verdict"] for r in runs_cli["rows"]]
    assert _get(chosen, "api/runs?a=run_a&b=run_b")["first_divergence"]["operation_id_b"] == data.DIVERGE_OP


def test_a_chosen_policy_judges_locate_and_compare_tensor(chosen: Any) -> None:
    url = f"api/locate/local/{data.MESH_TENSOR}?report=run_a"
    by_default = _get(chosen, url)["devices"][2]
    gather = _get(chosen, url + "&policy=gather")["devices"][2]
    assert by_default["failed"] == ["max_ulp"]  # all_gather only moves values: float32 held within TF32, as locate says
    assert gather["failed"] == ["scale_or_offset"]  # the rule has no sqnr_db criterion; locate's own fit check stays
    one = f"api/compare-tensor/local/{data.CULPRIT_OP}?report=run_a"
    assert _get(chosen, one)["passed"] is False
    lenient = _get(chosen, one + "&policy=lenient")  # the rule's PCC, not the record's desired 0.99, as the engine
    assert lenient["passed"] is True and lenient["comparison"]["matches"] is True and lenient["tolerances"]["pcc"] == 0.0
    info = _get(chosen, f"api/reports/run_a/tensors/{data.CULPRIT_OP}?policy=lenient")["policy"]
    assert info["name"] == "lenient" and info["pcc"] == 0.0 and info["rule_pcc"] is True


def test_policies_listed_pasted_and_refused(chosen: Any) -> None:
    listed = _get(chosen, "api/policies")
    assert [p["name"] for p in listed["policies"]] == ["default", "lenient", "gather"]
    assert listed["policies"][1]["rules"] == [{"op": "ttnn.step_[34]", "pcc": 0.0}]
    unknown = _get(chosen, "api/reports/run_a/operations?policy=nope", 400)
    assert "nope" in unknown["error"] and "lenient" in unknown["hint"]
    pasted = chosen.post("api/policies", data=LENIENT.replace("0.0", "0.1"))
    assert pasted.status_code == 200, pasted.get_data(as_text=True)
    name = pasted.get_json()["name"]
    assert name.startswith("pasted-")
    assert _get(chosen, f"api/reports/run_a/operations?policy={name}")["first_culprit"]["operation_id"] == data.OPS + 1
    bad = chosen.post("api/policies", data='[[rules]]\nop = "*"\npcc = 2.5\n')
    assert bad.status_code == 400 and "\n" not in bad.get_json()["error"] and "pcc" in bad.get_json()["error"]
    broken = chosen.post("api/policies", data="[[rules]\nop=")
    assert broken.status_code == 400 and "TOML" in broken.get_json()["error"]
    assert chosen.post("api/policies", data=b"x" * (1 << 20)).status_code == 413


@pytest.mark.process
def test_serve_refuses_a_bad_policy_file_in_one_line(root: Path) -> None:
    import os
    import subprocess
    import sys

    bad = root / "bad.toml"
    bad.write_text('[[rules]]\nop = "*"\nrtol = -1\n')
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-m", "reportdb", "serve", str(root / "run_a"), "--policy", f"strict={bad}"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "bad.toml" in done.stderr and "line 1" in done.stderr


def test_overview_columns_match_the_operation_list(chosen: Any) -> None:
    """The overview gives every operation in execution order with the list's roles and first culprit, compactly, and
    follows the chosen policy."""
    over = _get(chosen, "api/reports/run_a/overview")
    page = _get(chosen, f"api/reports/run_a/operations?limit={data.OPS + 1}")
    assert over["ids"] == [op["id"] for op in page["items"]] and over["total"] == data.OPS + 1
    assert [over["names"][i] for i in over["name_index"]] == [op["name"] for op in page["items"]]
    assert over["roles"] == "".join({"culprit": "c", "victim": "v", "pass": "p"}[op["role"]] for op in page["items"])
    assert over["roles"] == "ppcvvvc" and over["first_culprit"] == page["first_culprit"]
    chain = data.chain(0)
    i = data.CULPRIT_OP - 1
    assert over["pcc"][i] == pytest.approx(data.pcc(chain["device"][data.CULPRIT_OP], chain["local"][data.CULPRIT_OP]), abs=1e-6)
    assert over["sqnr_db"][i] < 20 and over["sqnr_db"][0] is None  # op 1 is exact: infinite SQNR, given as None
    lenient = _get(chosen, "api/reports/run_a/overview?policy=lenient")
    assert lenient["policy"] == "lenient" and lenient["roles"][i] == "p"
    assert lenient["first_culprit"]["operation_id"] == data.OPS + 1
    _get(chosen, "api/reports/nope/overview", 404)


def _within(ask: Any, release: threading.Event) -> Any:
    """``ask()`` answered while the analysis is held back; a request that waits for it instead (the old server) is
    a failure, not a hang: the analysis is let go and the test fails."""
    got: list[Any] = []
    thread = threading.Thread(target=lambda: got.append(ask()), daemon=True)
    thread.start()
    thread.join(60)
    if not got:
        release.set()
        thread.join(60)
        pytest.fail("the request waited for the golden analysis instead of answering at once")
    return got[0]


def _final(client: Any, url: str) -> Any:
    """The answer of ``url`` once the analysis is done (polled, as the page does)."""
    for _ in range(2400):
        got = _get(client, url)
        if not got.get("pending"):
            return got
        time.sleep(0.05)
    pytest.fail(f"{url} still pending after 2 minutes")


def _engine_roles(root: Path) -> tuple[dict[int, str | None], str]:
    """Each operation's role from ``reportdb.compare_golden`` (culprit before victim before pass), and the overview's
    letters of them."""
    engine = reportdb.compare_golden(root / "run_a", store=False)
    roles: dict[int, set[str | None]] = {}
    for r in engine.records:
        if r.operation_id is not None:
            roles.setdefault(r.operation_id, set()).add(r.role)
    by_op = {op: next((x for x in ("culprit", "victim", "pass") if x in found), None) for op, found in roles.items()}
    letters = "".join({"culprit": "c", "victim": "v", "pass": "p"}.get(by_op.get(op) or "", "-")
                      for op in range(1, data.OPS + 2))
    return by_op, letters


def test_the_first_list_and_overview_answer_while_the_analysis_runs(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a fresh server the page's first requests (``wait=0``) answer with the recorded verdicts, ``pending``, while
    the golden analysis is held back; it runs once however many ask, and then they answer the engine's roles."""
    release, calls = threading.Event(), []
    real = routes_debug.compare_golden

    def held(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        assert release.wait(120)
        return real(*args, **kwargs)

    monkeypatch.setattr(routes_debug, "compare_golden", held)
    app = web.create_app([root / "run_a"])
    client = app.test_client()
    try:
        first = _within(lambda: _get(client, "api/reports/run_a/operations?wait=0"), release)
        assert first["pending"] is True and first["judged"] is False and first["analysis"]["state"] == "running"
        assert first["first_culprit"] is None and all(op["role"] is None for op in first["items"])
        culprit = first["items"][data.CULPRIT_OP - 1]["outputs"][0]["comparisons"]["local"]
        assert culprit["pcc"] is None and culprit["passed"] is None and culprit["role"] is None  # nothing recomputed
        recorded = [all(c["recorded_matches"] for t in op["outputs"] for c in t["comparisons"].values() if c)
                    for op in first["items"]]
        assert [op["passed"] for op in first["items"]] == recorded  # the recorded verdicts meanwhile
        overview = _within(lambda: _get(client, "api/reports/run_a/overview?wait=0"), release)
        assert overview["pending"] is True and overview["judged"] is False
        assert overview["roles"] == "".join("o" if ok else "f" for ok in recorded)
        release.set()
        final = _final(client, "api/reports/run_a/operations?wait=0")
        by_op, letters = _engine_roles(root)
        assert final["judged"] is True and final["analysis_error"] is None
        assert {op["id"]: op["role"] for op in final["items"]} == {op: by_op.get(op) for op in range(1, data.OPS + 2)}
        assert final["first_culprit"]["operation_id"] == data.CULPRIT_OP
        done = _final(client, "api/reports/run_a/overview?wait=0")
        assert done["roles"] == letters and "c" in letters and done["first_culprit"]["operation_id"] == data.CULPRIT_OP
        assert len(calls) == 1  # one analysis for the list's and the overview's requests
    finally:
        release.set()
        app.extensions["reportdb"].close()


def test_an_error_inside_the_analysis_surfaces_in_the_answers(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A golden analysis that fails in its background thread is reported by the list and the overview (the recorded
    verdicts shown meanwhile) and by the golden endpoint, not lost."""

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise CorruptionError("golden tensor 3 is damaged: run `reportdb verify`")

    monkeypatch.setattr(routes_debug, "compare_golden", broken)
    app = web.create_app([root / "run_a"])
    client = app.test_client()
    try:
        page = _final(client, "api/reports/run_a/operations?wait=0")
        assert page["pending"] is False and page["judged"] is False
        assert 400 <= page["analysis_error"]["status"] < 500  # a ReportDBError's answer, with its hint
        assert "golden tensor 3 is damaged" in page["analysis_error"]["error"]
        assert all(op["role"] is None and op["passed"] is not None for op in page["items"])  # recorded verdicts shown
        overview = _final(client, "api/reports/run_a/overview?wait=0")
        assert "golden tensor 3 is damaged" in overview["analysis_error"]["error"]
        assert "golden tensor 3 is damaged" in _get(client, "api/reports/run_a/golden", page["analysis_error"]["status"])["error"]
    finally:
        app.extensions["reportdb"].close()
