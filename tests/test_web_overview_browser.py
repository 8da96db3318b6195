"""The page's overview and policy selector in a real browser (Playwright driving Debian's Chromium against a
``reportdb serve --policy`` process): every operation drawn on one canvas in execution order, coloured by its local
comparison's role, the first culprit marked and opened by a click; the policy selector changing the verdicts as the
CLI's ``compare --golden --policy`` does (the overview, the list, the tensor view), and the URL reopening the same
policy and view in a fresh page."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

import web_debug_data as data
from served import VIEWPORT, Pages, serving, shot

pytestmark = [pytest.mark.process, pytest.mark.service]

LENIENT = '[[rules]]\nop = "ttnn.step_[34]"\npcc = 0.0\n'  # op 3 (the culprit) passes: the next culprit is op 7
ROLE_RGB = {"c": (196, 48, 43), "v": (228, 154, 37), "p": (58, 160, 105)}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("web-overview-browser")
    data.build(base / "run_a", 0)
    data.build(base / "run_b", 1)
    (base / "lenient.toml").write_text(LENIENT)
    return base


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[str]:
    with serving(str(root / "run_a"), str(root / "run_b"), "--policy", f"lenient={root / 'lenient.toml'}", cwd=root) as url:
        yield url


class OverviewPages(Pages):
    """Pages opened once the overview and the list show the server's final roles."""

    def open(self, fragment: str = "") -> Any:
        pg = super().open(fragment)
        pg.wait_for_selector("#overview[data-ready=true][data-pending=false]")
        pg.wait_for_selector("#op-table[data-pending=false]", state="attached")  # the server's golden analysis done and drawn
        return pg


@pytest.fixture()
def pages(browser: Any, server: str) -> Iterator[Pages]:
    with OverviewPages(browser, server) as found:
        yield found


def _column_rgb(page: Any, index: int, total: int) -> tuple[int, int, int]:
    """The colour the overview canvas shows at the bottom of operation ``index``'s bar (of ``total``)."""
    return tuple(page.evaluate("""([i, n]) => {
        const c = document.querySelector('#overview canvas');
        const x = Math.floor((i + 0.5) * c.width / n);
        return Array.from(c.getContext('2d').getImageData(x, c.height - 2, 1, 1).data.slice(0, 3));
    }""", [index, total]))


def _click_op(page: Any, index: int, total: int) -> None:
    box = page.query_selector("#overview canvas").bounding_box()
    page.mouse.click(box["x"] + (index + 0.5) * box["width"] / total, box["y"] + box["height"] - 4)


def _cli(root: Path, *args: str) -> Any:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-m", "reportdb", *args, "--json"], capture_output=True, text=True, env=env, cwd=root)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def test_overview_marks_the_first_culprit_and_a_click_opens_an_operation(pages: Pages, tmp_path: Path) -> None:
    page = pages.open()
    total = data.OPS + 1
    assert page.get_attribute("#overview", "data-total") == str(total)
    assert page.get_attribute("#overview", "data-first-culprit") == str(data.CULPRIT_OP)
    assert f"first culprit #{data.CULPRIT_OP} ttnn.step_{data.CULPRIT_OP}" in page.inner_text("#overview")
    roles = "ppcvvvc"  # the operation list's roles (tests/test_web_debug_api.py), one colour each
    assert [_column_rgb(page, i, total) for i in range(total)] == [ROLE_RGB[r] for r in roles]
    # the marker sits over the first culprit's bar
    box = page.query_selector("#overview canvas").bounding_box()
    marker = float(page.get_attribute("#overview", "data-culprit-x"))
    assert int(marker * total / box["width"]) == data.CULPRIT_OP - 1
    shot(page, tmp_path, "overview.png")
    _click_op(page, data.CULPRIT_OP - 1, total)
    page.wait_for_function(f"() => document.querySelector('#op-title').textContent.startsWith('#{data.CULPRIT_OP} ')")
    page.wait_for_selector(f'#op-context[data-op-id="{data.CULPRIT_OP}"]')
    page.wait_for_selector('#verdict[data-passed="false"]')
    assert f"op={data.CULPRIT_OP}" in page.evaluate("location.hash")
    page.mouse.move(box["x"] + (4.5 * box["width"] / total), box["y"] + box["height"] - 4)
    assert "#5 ttnn.step_5 \u00b7 victim" in page.inner_text("#overview .overview-readout")
    _click_op(page, 4, total)  # a victim
    page.wait_for_function("() => document.querySelector('#op-title').textContent.startsWith('#5 ')")
    page.wait_for_selector('#verdict[data-passed="true"]')  # its local comparison passes
    shot(page, tmp_path, "overview-victim.png")


def test_policy_selector_changes_verdicts_as_the_cli_does(pages: Pages, root: Path, tmp_path: Path) -> None:
    cli = _cli(root, "compare", str(root / "run_a"), "--golden", "--policy", str(root / "lenient.toml"))
    expected = cli["first_culprit"]["operation_id"]
    assert expected == data.OPS + 1
    page = pages.open()
    assert page.input_value("#policy-select") == "default"
    page.select_option("#policy-select", "lenient")  # reloads the view under the chosen policy
    page.wait_for_function("() => location.hash.includes('policy=lenient')")
    page.wait_for_selector("body[data-ready=true]")
    page.wait_for_selector("#overview[data-ready=true][data-policy=lenient][data-pending=false]")
    page.wait_for_selector("#op-table[data-pending=false]", state="attached")  # the analysis under it done
    assert page.input_value("#policy-select") == "lenient"
    assert page.get_attribute("#overview", "data-first-culprit") == str(expected)
    assert page.get_attribute("#op-table tbody tr.first-culprit", "data-op-id") == str(expected)
    cli_roles = {r["tensor_id"]: r["role"] for r in cli["records"] if r["kind"] == "local"}
    role = page.get_attribute(f'#op-table tbody tr[data-op-id="{data.CULPRIT_OP}"] [data-role]', "data-role")
    assert role == cli_roles[data.CULPRIT_OP] == "pass"
    assert _column_rgb(page, data.CULPRIT_OP - 1, data.OPS + 1) == ROLE_RGB["p"]
    # the tensor view judges by the chosen policy too: the rule's PCC threshold, so op 3's local output passes
    _click_op(page, data.CULPRIT_OP - 1, data.OPS + 1)
    page.wait_for_function(f"() => document.querySelector('#op-title').textContent.startsWith('#{data.CULPRIT_OP} ')")
    page.wait_for_selector('#verdict[data-passed="true"]')
    assert float(page.input_value("#pcc")) == 0.0
    page.wait_for_function("() => location.hash.includes('policy=lenient') && location.hash.includes('op=3')")
    url = page.evaluate("location.hash")
    shot(page, tmp_path, "policy-lenient.png")

    # the URL reopens the same view under the same policy in a fresh page
    again = pages.open(url)
    assert again.input_value("#policy-select") == "lenient"
    again.wait_for_function(f"() => document.querySelector('#op-title').textContent.startsWith('#{data.CULPRIT_OP} ')")
    again.wait_for_selector('#verdict[data-passed="true"]')
    assert again.get_attribute("#overview", "data-first-culprit") == str(expected)
    # back to the defaults: op 3 is the culprit again
    again.select_option("#policy-select", "default")
    again.wait_for_function("() => !location.hash.includes('policy=')")
    again.wait_for_selector("body[data-ready=true]")
    again.wait_for_selector("#overview[data-ready=true][data-policy=default][data-pending=false]")
    assert again.get_attribute("#overview", "data-first-culprit") == str(data.CULPRIT_OP)


def test_a_pasted_policy_is_checked_by_the_server(pages: Pages, tmp_path: Path) -> None:
    page = pages.open()
    page.select_option("#policy-select", "__paste__")
    page.fill("#policy-text", '[[rules]]\nop = "*"\npcc = 7\n')
    page.click("#policy-use")
    page.wait_for_function("() => document.querySelector('#policy-error').textContent.length > 0")
    message = page.inner_text("#policy-error")
    assert "pcc" in message and "\n" not in message
    shot(page, tmp_path, "policy-paste-error.png")
    page.fill("#policy-text", LENIENT)
    page.click("#policy-use")
    page.wait_for_function("() => location.hash.includes('policy=pasted-')")
    page.wait_for_selector("body[data-ready=true]")
    page.wait_for_selector("#overview[data-ready=true][data-pending=false]")
    assert page.input_value("#policy-select").startswith("pasted-")
    assert page.get_attribute("#overview", "data-first-culprit") == str(data.OPS + 1)


def test_the_list_shows_before_the_analysis_and_then_its_roles(browser: Any, root: Path, monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    """On a fresh server whose golden analysis is held back, the page shows the operation list and the overview from
    the recorded verdicts with a note, then (no reload) the final roles with the culprit marked, the operation the user
    opened still open and selected."""
    import reportdb.web as web
    import reportdb.web.routes_debug as routes_debug
    from werkzeug.serving import make_server

    release = threading.Event()
    real = routes_debug.compare_golden

    def held(*args: Any, **kwargs: Any) -> Any:
        assert release.wait(120)
        return real(*args, **kwargs)

    monkeypatch.setattr(routes_debug, "compare_golden", held)
    app = web.create_app([root / "run_a"])
    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
    errors: list[str] = []
    try:
        page = context.new_page()
        page.set_default_timeout(20_000)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"http://127.0.0.1:{server.server_port}/")
        page.wait_for_selector("body[data-ready=true]")
        page.wait_for_selector("#overview[data-ready=true][data-pending=true]")
        assert page.get_attribute("#op-table", "data-pending") == "true"
        assert "verdicts being recomputed" in page.inner_text("#culprit-info")
        assert "verdicts being recomputed" in page.inner_text("#overview")
        total = data.OPS + 1
        assert len(page.query_selector_all("#op-table tbody tr")) == total  # the list, before the analysis ends
        assert page.eval_on_selector_all("#op-table tbody [data-role]", "s => s.map(x => x.dataset.role)") == [""] * total
        page.click('#op-table tbody tr[data-op-id="5"]')  # the user opens an operation meanwhile
        page.wait_for_function("() => document.querySelector('#op-title').textContent.startsWith('#5 ')")
        release.set()
        page.wait_for_selector("#op-table[data-pending=false]", state="attached")
        page.wait_for_selector("#overview[data-ready=true][data-pending=false]")
        roles = "ppcvvvc"  # the engine's (tests/test_web_debug_api.py)
        assert page.eval_on_selector_all("#op-table tbody [data-role]", "s => s.map(x => x.dataset.role[0])") == list(roles)
        assert page.get_attribute(f'#op-table tbody tr[data-op-id="{data.CULPRIT_OP}"]', "class") == "first-culprit"
        assert f"first culprit: #{data.CULPRIT_OP}" in page.inner_text("#culprit-info")
        assert page.get_attribute("#overview", "data-first-culprit") == str(data.CULPRIT_OP)
        assert [_column_rgb(page, i, total) for i in range(total)] == [ROLE_RGB[r] for r in roles]
        assert page.get_attribute('#op-table tbody tr[data-op-id="5"]', "aria-selected") == "true"  # still selected
        assert page.inner_text("#op-title").startswith("#5 ")  # and still open
        shot(page, tmp_path, "overview-final.png")
    finally:
        release.set()
        context.close()
        server.shutdown()
        app.extensions["reportdb"].close()
    assert not errors, errors
