"""Anomalies on the page (outputs far below their peers' SQNR, ``GoldenComparison.anomalies``): the overview and the
operation list answers carry each one's sentence (``Anomaly.describe()``), and in Chromium the overview canvas marks
it with a dot whose hover text says it, and the list row with a marker titled by it; correct calls are not marked."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

import reportdb
import reportdb.web as web
from served import Pages, serving, shot

from test_culprits import _silu_layers

pytestmark = [pytest.mark.process, pytest.mark.service]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("web-anomalies")
    _silu_layers(base / "silu.sqlite", faulty=True)
    _silu_layers(base / "clean.sqlite", faulty=False)
    return base


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[str]:
    with serving(str(root / "silu.sqlite"), str(root / "clean.sqlite"), cwd=root) as url:
        yield url


def test_the_answers_carry_each_anomaly_sentence(root: Path) -> None:
    client = web.create_app([root / "silu.sqlite", root / "clean.sqlite"]).test_client()
    want = reportdb.compare_golden(root / "silu.sqlite", store=False).anomalies
    assert [a.operation_id for a in want] == [3]
    overview = client.get("api/reports/silu/overview").get_json()
    assert overview["anomalies"] == [{"operation_id": 3, "text": want[0].describe()}]
    items = client.get("api/reports/silu/operations").get_json()["items"]
    assert {op["id"]: op["anomaly"] for op in items} == {1: None, 2: None, 3: want[0].describe(), 4: None}
    assert client.get("api/reports/clean/overview").get_json()["anomalies"] == []


def test_overview_and_list_mark_the_anomaly(browser: Any, server: str, root: Path, tmp_path: Path) -> None:
    want = reportdb.compare_golden(root / "silu.sqlite", store=False).anomalies[0].describe()
    with Pages(browser, server) as pages:
        page = pages.open("#report=silu")
        page.set_viewport_size({"width": 1280, "height": 800})
        page.wait_for_selector("#overview[data-ready=true][data-pending=false]")
        page.wait_for_selector("#op-table[data-pending=false]", state="attached")
        assert page.get_attribute("#overview", "data-anomalies") == "3"
        box = page.query_selector("#overview canvas").bounding_box()
        dot = page.evaluate("""() => {  // the anomaly colour drawn in op 3's column (of 4), none in op 1's
            const c = document.querySelector('#overview canvas');
            const px = (i) => { const x = Math.floor((i + 0.5) * c.width / 4);
              const d = c.getContext('2d').getImageData(x, 0, 1, c.height).data;
              for (let y = 0; y < c.height; y++) if (d[4*y] === 122 && d[4*y+1] === 63 && d[4*y+2] === 192) return true;
              return false; };
            return [px(0), px(1), px(2), px(3)]; }""")
        assert dot == [False, False, True, False]
        page.mouse.move(box["x"] + 2.5 * box["width"] / 4, box["y"] + box["height"] - 4)
        assert page.text_content("#overview .overview-readout").endswith(f"anomaly: {want}")
        marks = page.eval_on_selector_all("#op-table tbody tr", "rows => rows.map((tr) => tr.querySelector('.anomaly-mark')?.title ?? null)")
        assert marks == [None, None, want, None]
        page.mouse.move(box["x"] + 2.5 * box["width"] / 4, box["y"] + box["height"] - 4)
        shot(page, tmp_path, "overview-anomaly.png")
        clean = pages.open("#report=clean")
        clean.wait_for_selector("#overview[data-ready=true][data-pending=false]")
        assert clean.get_attribute("#overview", "data-anomalies") == ""
        assert clean.query_selector("#op-table .anomaly-mark") is None
