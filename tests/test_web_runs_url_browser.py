"""Run against run's URL keeps the open pair's leading indices and pins: on two Writer-made runs whose 3-matrix output
differs only in matrix 2, the worst tile takes the pair there, pins are made, and a fresh page opened at that URL
shows the same matrix (its values the runs' own, by numpy) and the same pins."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import ml_dtypes
import numpy as np
import pytest

import reportdb
from served import Pages, serving, shot

pytestmark = [pytest.mark.process, pytest.mark.service]

BF16 = ml_dtypes.bfloat16


def _runs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The input, and runs A's and B's relu output of shape [3, 64, 64]: B wrong in one tile of matrix 2."""
    x = np.random.default_rng(7).standard_normal((3, 64, 64)).astype(BF16)
    a = np.maximum(x.astype(np.float32), 0).astype(BF16)
    b = a.astype(np.float32)
    b[2, 32:64, 0:32] += 3.0
    return x, a, b.astype(BF16)


def _write(path: Path, out: np.ndarray, x: np.ndarray) -> None:
    with reportdb.Writer(path) as w:
        w.put_tensor(1, x, ttnn_dtype="BFLOAT16", layout="TILE")
        w.put_tensor(2, out, ttnn_dtype="BFLOAT16", layout="TILE")
        w.add_operation(1, "ttnn.relu", inputs=[1], outputs=[2])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("web-runs-url")
    x, a, b = _runs()
    _write(base / "a.sqlite", a, x)
    _write(base / "b.sqlite", b, x)
    with serving(base / "a.sqlite", base / "b.sqlite", cwd=base) as url:
        yield url


def _pins(page: Any) -> list[tuple[str, dict[str, str]]]:
    """The pins table: each pin's index and its values by key."""
    page.wait_for_selector("#run-pins tr[data-pin]")
    return [(tr.get_attribute("data-pin"), {td.get_attribute("data-key"): td.inner_text()
                                             for td in tr.query_selector_all("td[data-key]")})
            for tr in page.query_selector_all("#run-pins tr[data-pin]")]


def test_lead_index_and_pins_survive_the_url(browser: Any, server: str, tmp_path: Path) -> None:
    _, a, b = _runs()
    with Pages(browser, server) as pages:
        page = pages.open()
        page.set_viewport_size({"width": 1280, "height": 800})
        page.click("#tab-runs")
        page.select_option("#run-a", "a")
        page.select_option("#run-b", "b")
        page.click("#run-compare")
        page.wait_for_selector("#run-jump:not([disabled])")
        page.click("#run-jump")
        page.wait_for_function("() => document.querySelector('#run-where').dataset.tile === '2,1,0'")
        page.click("#run-worst-tile")
        page.wait_for_function("() => document.querySelector('.run-panel[data-side=b]').dataset.region === '16:64,0:48'")
        box = page.locator('.run-panel[data-side="b"] > canvas').bounding_box()
        for fy, fx in ((0.8, 0.3), (0.1, 0.9)):  # in the wrong tile, then outside it
            page.mouse.click(box["x"] + fx * box["width"], box["y"] + fy * box["height"])
        pins = _pins(page)
        assert len(pins) == 2
        for index, values in pins:
            k, r, c = map(int, index.split(","))
            assert k == 2
            assert float(values["a"]) == pytest.approx(float(a[k, r, c]), rel=1e-5)
            assert float(values["b"]) == pytest.approx(float(b[k, r, c]), rel=1e-5)
        page.wait_for_function("() => location.hash.includes('pins=')")
        assert "lead=2" in page.url
        shot(page, tmp_path, "runs-lead-pins.png")
        again = pages.open("#" + page.url.split("#", 1)[1])
        again.wait_for_function("() => document.querySelector('.run-panel[data-side=b]').dataset.region === '16:64,0:48'")
        assert _pins(again) == pins  # the same matrix (values of matrix 2) and the same pins
        assert "lead=2" in again.url and "pins=" in again.url
