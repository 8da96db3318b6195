"""Run against run in a real browser (Playwright driving Debian's Chromium against ``reportdb serve``): the pair's
diverging tile and core named as ``locate --against`` names them, the worst-tile button, hover values, pins and
colour bars on the A / B / |A-B| panels, and the first divergence's row in sight after the jump at 1280x800. Values
are checked against numpy."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

import web_debug_data as data
from served import Pages, serving, shot

pytestmark = [pytest.mark.process, pytest.mark.service]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Pairs of runs: the debug chain's, sharded ones (one core wrong in B) and long ones (B diverging at op 30)."""
    base = tmp_path_factory.mktemp("web-page-runs")
    data.build(base / "run_a", 0)
    data.build(base / "run_b", 1)
    data.build_sharded(base / "sharded_ok", wrong=False)
    data.build_sharded(base / "sharded")
    data.build_long(base / "long_a", 0)
    data.build_long(base / "long_b", 1)
    return base


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[str]:
    """``reportdb serve`` of every run."""
    with serving(root / "run_a", root / "run_b", root / "sharded_ok", root / "sharded", root / "long_a", root / "long_b",
                 cwd=root) as url:
        yield url



def _jump(page: Any, a: str, b: str) -> None:
    """Compare run ``a`` with run ``b`` and jump to the first divergence, its pair drawn and located."""
    page.select_option("#run-a", a)
    page.select_option("#run-b", b)
    page.click("#run-compare")
    page.wait_for_function(f"() => document.querySelector('#run-summary').textContent.includes('outputs compared') && "
                           f"location.hash.includes('a={a}') && location.hash.includes('b={b}')")
    # what the waits below look for, cleared first: a second jump would otherwise find the first pair's still set
    # (its colour bar was once read before the new pair's was drawn)
    page.evaluate("() => { for (const e of document.querySelectorAll('.run-panel[data-side=error], #run-where')) "
                  "{ delete e.dataset.max; delete e.dataset.tile; } }")
    page.click("#run-jump")
    page.wait_for_selector("#run-pair:not([hidden])")
    page.wait_for_function("() => document.querySelector('.run-panel[data-side=error]').dataset.max")
    page.wait_for_function("() => document.querySelector('#run-where').dataset.tile")


def test_the_first_divergence_stays_in_sight_and_names_its_tile(pages: Pages, tmp_path: Path) -> None:
    page = pages.open()
    page.set_viewport_size({"width": 1280, "height": 800})
    page.click("#tab-runs")
    _jump(page, "long_a", "long_b")
    page.wait_for_timeout(300)  # the row is brought into sight once the pair's panels took their room
    row = page.locator("#run-table tbody tr.divergence")
    assert row.get_attribute("data-row") == str(data.LONG_DIVERGE_OP - 1)
    box, table = row.bounding_box(), page.locator("#view-runs .table-scroll").bounding_box()
    assert table["y"] <= box["y"] and box["y"] + box["height"] <= table["y"] + table["height"] <= 800, (box, table)
    assert page.get_attribute("#run-where", "data-tile") == "0,0"  # the flipped block lies in the only tile
    shot(page, tmp_path, "runs-long-jump-1280.png")

    _jump(page, "run_a", "run_b")
    assert page.get_attribute("#run-where", "data-tile") == "0,0,1,1"  # the flipped block: rows 32:64, cols 32:64
    assert page.get_attribute("#run-where", "data-core") == ""  # an interleaved tensor has no cores
    a, b = data.chain(0)["device"][data.DIVERGE_OP], data.chain(1)["device"][data.DIVERGE_OP]
    err = np.abs(b.astype(np.float64) - a)[0, 0]
    legend = float(page.inner_text('.run-panel[data-side="error"] .legend .hi'))
    assert legend == pytest.approx(float(err.max()), rel=1e-2)  # the colour bar of |A-B| ends at its largest
    widths = page.evaluate("[...document.querySelectorAll('.run-panel > canvas')].map((c) => [c.width, c.clientWidth])")
    assert all(shown == drawn for drawn, shown in widths), widths  # square cells, not stretched to the colour bar
    shot(page, tmp_path, "runs-jump-1280.png")


def test_the_diverging_core_worst_tile_hover_and_pins(pages: Pages, tmp_path: Path) -> None:
    page = pages.open()
    page.set_viewport_size({"width": 1280, "height": 800})
    page.click("#tab-runs")
    _jump(page, "sharded_ok", "sharded")
    assert page.get_attribute("#run-where", "data-tile") == "0,0,1,2"
    assert page.get_attribute("#run-where", "data-core") == ",".join(map(str, data.WRONG_CORE))
    assert f"core ({data.WRONG_CORE[0]}, {data.WRONG_CORE[1]}) shard 5" in page.inner_text("#run-where")
    page.click("#run-worst-tile")
    page.wait_for_function("() => document.querySelector('.run-panel[data-side=a]').dataset.region === '16:64,48:96'")
    page.wait_for_function("() => document.querySelector('.run-panel[data-side=error]').dataset.region === '16:64,48:96'")
    assert page.get_attribute('.run-panel[data-side="a"]', "data-cell") == "1,1"
    out, golden = data.sharded_tensor()
    box = page.locator('.run-panel[data-side="b"] > canvas').bounding_box()
    for fy, fx in ((0.75, 0.75), (0.2, 0.2)):  # on the wrong core, then on a right one
        page.mouse.move(box["x"] + fx * box["width"], box["y"] + fy * box["height"])
        page.wait_for_selector("#tooltip:not([hidden])")
        _, _, r, c = (int(x) for x in page.get_attribute("#tooltip .idx", "data-index").split(","))
        shown = {tr.get_attribute("data-key"): tr.query_selector_all("td")[1].inner_text()
                 for tr in page.query_selector_all("#tooltip tr")}
        assert float(shown["a"]) == pytest.approx(float(golden[0, 0, r, c]), rel=1e-5)
        assert float(shown["b"]) == pytest.approx(float(out[0, 0, r, c]), rel=1e-5)
        assert float(shown["error"]) == pytest.approx(abs(float(out[0, 0, r, c]) - float(golden[0, 0, r, c])), rel=1e-4)
        assert shown["tile"] == f"(0, 0, {r // 32}, {c // 32})"
        assert shown["core"] == f"({c // 32}, {r // 32}) shard {(r // 32) * 3 + c // 32}"
        page.mouse.click(box["x"] + fx * box["width"], box["y"] + fy * box["height"])
    pinned = page.query_selector_all("#run-pins tr[data-pin]")
    assert len(pinned) == 2
    first = {td.get_attribute("data-key"): td.inner_text() for td in pinned[0].query_selector_all("td[data-key]")}
    _, _, r, c = map(int, pinned[0].get_attribute("data-pin").split(","))
    assert float(first["b"]) == pytest.approx(float(out[0, 0, r, c]), rel=1e-5) and first["core"].startswith("(2, 1)")
    page.mouse.move(2, 2)
    shot(page, tmp_path, "runs-core-1280.png")
