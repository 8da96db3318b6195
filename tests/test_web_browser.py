"""The page of ``reportdb serve`` in a real browser: Playwright drives Debian's Chromium against a real server process.

Two reports are built here with known values (a bfloat16 output against its float32 golden with one 4x4 block off
by 0.25, a failing output, a tensor sharded over a 1x2 mesh, and a second run whose relu output differs), served by
a ``reportdb serve`` subprocess on a loopback port, and used through the page as a person would: sort worst first,
click an operation, read the metrics, zoom a heatmap onto the bad block, hover a pixel, move the tolerances from pass
to fail, pick a device, filter and open with the keyboard, compare the runs. Every number the page shows is checked
against numpy. Screenshots are kept under pytest's tmp dir (and as ``docs/web-page.png`` with REPORTDB_SCREENSHOT=1).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import ml_dtypes
import numpy as np
import pytest

import reportdb
from reportdb.analysis.policy import Policy
from reportdb.spec import Distribution, Placement

from conftest import ROOT
from served import VIEWPORT, Pages, serving

pytestmark = [pytest.mark.process, pytest.mark.service]

BLOCK = (slice(100, 104), slice(600, 604))  # the 4x4 block of tensor 2 (index [0, 0]) that is off by 0.25
FILLER_OPS = 120  # operations without golden records after the three that have one, so the list has two pages


def _arrays(variant: int) -> dict[int, np.ndarray]:
    """The tensors of a run by id (``variant`` 1 is the second run, whose relu output differs)."""
    rng = np.random.default_rng(13)
    golden = rng.standard_normal((1, 2, 256, 1024)).astype(np.float32)
    actual = golden.astype(ml_dtypes.bfloat16).astype(np.float32)
    actual[(0, 0) + BLOCK] += 0.25
    relu_golden = np.maximum(rng.standard_normal((1, 1, 64, 64)), 0).astype(np.float32)
    relu = (-relu_golden if variant == 0 else relu_golden * 1.5).astype(ml_dtypes.bfloat16)
    gathered_golden = rng.standard_normal((1, 1, 32, 128)).astype(np.float32)
    gathered = (gathered_golden + rng.normal(0, 0.01, gathered_golden.shape)).astype(np.float32)
    return {
        1: rng.standard_normal((1, 1, 32, 32)).astype(np.float32),
        2: actual.astype(ml_dtypes.bfloat16), 1002: golden,
        3: relu, 1003: relu_golden,
        4: gathered, 1004: gathered_golden,
    }


def _build(path: Path, variant: int) -> dict[int, np.ndarray]:
    """A report as a run writes it: operations, their tensors, goldens and local comparison records."""
    arrays = _arrays(variant)
    with reportdb.Writer(path) as w:
        w.put_tensor(1, arrays[1], layout="ROW_MAJOR")
        w.put_tensor(2, arrays[2], role="output", ttnn_dtype="BFLOAT16", layout="TILE", tile_shape=(32, 32),
                     memory_config={"buffer_type": "DRAM", "memory_layout": "INTERLEAVED"})
        w.put_tensor(3, arrays[3], role="output", ttnn_dtype="BFLOAT16", layout="TILE")
        for golden in (1002, 1003, 1004):
            w.put_tensor(golden, arrays[golden])
        w.add_operation(1, "ttnn.add", inputs=[1], outputs=[2])
        w.add_operation(2, "ttnn.relu", inputs=[2], outputs=[3])
        w.add_operation(3, "ttnn.all_gather", inputs=[3], outputs=[4])
        for op in range(4, 4 + FILLER_OPS):
            w.add_operation(op, f"ttnn.reshape_{op}", inputs=[1])
        w.add_rows("local_tensor_comparison_records", [
            {"tensor_id": 2, "golden_tensor_id": 1002, "matches": 1, "desired_pcc": 0.99, "actual_pcc": 0.999998},
            {"tensor_id": 3, "golden_tensor_id": 1003, "matches": 0, "desired_pcc": 0.99, "actual_pcc": -0.9},
            {"tensor_id": 4, "golden_tensor_id": 1004, "matches": 1, "desired_pcc": 0.99, "actual_pcc": 0.9999},
        ])
    with reportdb.open(path, "a") as report:
        gathered = arrays[4]
        report.put_tensor(4, shards=[((0, 0), gathered[..., :64]), ((0, 1), gathered[..., 64:])], ttnn_dtype="FLOAT32",
                          distribution=Distribution((1, 2), (Placement("replicate"), Placement("shard", 3))))
    return arrays


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two runs' reports (``a`` with goldens, ``b`` whose relu output differs) and their arrays."""
    root = tmp_path_factory.mktemp("web-browser")
    out: dict[str, Any] = {"root": root}
    for name, variant in (("run_a", 0), ("run_b", 1)):
        out[name] = _build(root / name, variant)
    return out


@pytest.fixture(scope="module")
def server(runs: dict[str, Any]) -> Iterator[str]:
    """A ``reportdb serve`` process serving both runs on a free loopback port; yields the URL it printed."""
    with serving(runs["root"] / "run_a", runs["root"] / "run_b", cwd=runs["root"]) as url:
        yield url


@pytest.fixture()
def page(browser: Any, server: str) -> Iterator[Any]:
    """A fresh 1366x768 page on the server's page, loaded; fails the test on any script error or outside request."""
    with Pages(browser, server) as pages:
        yield pages.open()


def _metric(page: Any, key: str) -> str:
    return str(page.inner_text(f'#metrics dd[data-metric="{key}"]')).strip()


def _number(text: str) -> float:
    """A number as the page prints it (thousands separators, a trailing percentage in brackets)."""
    return float(text.split(" ")[0].replace(",", ""))


def _ulp_bf16(a: float, g: float) -> int:
    """ULPs between two values rounded to bfloat16 (ordered bit patterns)."""
    bits = np.array([a, g], dtype=np.float32).astype(ml_dtypes.bfloat16).view(np.int16).astype(np.int64)
    ordered = np.where(bits < 0, -32768 - bits, bits)
    return int(abs(ordered[0] - ordered[1]))


def _tooltip(page: Any) -> tuple[list[int], dict[str, str]]:
    """The index and the values the hover tooltip shows."""
    page.wait_for_selector("#tooltip:not([hidden])")
    index = [int(x) for x in page.get_attribute("#tooltip .idx", "data-index").split(",")]
    rows = {tr.get_attribute("data-key"): tr.query_selector_all("td")[-1].inner_text().strip() for tr in page.query_selector_all("#tooltip tr")}
    return index, rows


def _hover(page: Any, x: float, y: float) -> None:
    """Move the pointer off the heatmaps (which hides the tooltip), then onto (x, y): the next tooltip is for it."""
    page.mouse.move(2, 2)
    page.wait_for_selector("#tooltip", state="hidden")
    page.mouse.move(x, y)


def _canvas_point(page: Any, panel: str, fy: float, fx: float) -> tuple[float, float]:
    box = page.locator(f"#{panel} .canvas-wrap canvas").bounding_box()
    return box["x"] + fx * box["width"], box["y"] + fy * box["height"]


def _drawn(box: dict[str, float], rows: int, cols: int) -> tuple[float, float, float]:
    """Where a view of ``rows`` x ``cols`` elements lies in a panel's canvas ``box`` (square cells, centred): its
    left and top in CSS pixels and the pixels per element."""
    s = min(box["width"] / cols, box["height"] / rows)
    return box["x"] + (box["width"] - s * cols) / 2, box["y"] + (box["height"] - s * rows) / 2, s


def _save_screenshot(page: Any, tmp_path: Path, name: str, docs: bool = False) -> Path:
    """The page as a PNG under the test's tmp dir (and, for ``docs``, as docs/web-page.png when REPORTDB_SCREENSHOT=1)."""
    out = tmp_path / name
    page.screenshot(path=str(out))
    assert out.stat().st_size > 10_000
    if docs and os.environ.get("REPORTDB_SCREENSHOT") == "1":
        page.screenshot(path=str(ROOT / "docs" / "web-page.png"))
    return out


def test_operation_golden_zoom_hover_and_tolerances(page: Any, runs: dict[str, Any], tmp_path: Path) -> None:
    arrays = runs["run_a"]
    actual = np.asarray(arrays[2], dtype=np.float64)
    golden = np.asarray(arrays[1002], dtype=np.float64)

    # The list: worst output PCC first puts the failing relu on top.
    assert page.inner_text("#page-info").strip() == f"1\u2013100 of {3 + FILLER_OPS}"
    page.click("#worst-first")
    page.wait_for_selector('#worst-first[aria-pressed="true"]')
    page.wait_for_function("() => document.querySelector('#op-table tbody tr').dataset.opId === '2'")
    assert "FAIL" in page.inner_text("#op-table tbody tr:first-child")

    # An operation: its golden comparison's metrics, against numpy.
    page.click('#op-table tbody tr[data-op-id="1"]')
    page.wait_for_selector('#verdict[data-passed="true"]')
    assert page.inner_text("#op-title").strip() == "#1 ttnn.add"
    pcc = np.corrcoef(actual.ravel(), golden.ravel())[0, 1]
    assert _number(_metric(page, "pcc")) == pytest.approx(pcc, abs=1.5e-6)
    err = np.abs(actual - golden)
    assert _number(_metric(page, "max_abs_error")) == pytest.approx(err.max(), rel=1e-5)
    assert _number(_metric(page, "mean_abs_error")) == pytest.approx(err.mean(), rel=1e-5)
    rtol, atol = Policy.default().tolerances("ttnn.add", "BFLOAT16")  # the policy's, as the API judges
    shown = float(page.input_value("#rtol")), float(page.input_value("#atol"))
    assert shown == (pytest.approx(rtol, rel=1e-3), pytest.approx(atol, rel=1e-3))  # shown to 4 digits
    mismatched = int(np.count_nonzero(err > atol + rtol * np.abs(golden)))
    assert mismatched == 16  # bfloat16 rounding is within rtol; only the block is off
    assert _number(_metric(page, "allclose_mismatches")) == mismatched

    # Zoom the heatmaps onto the bad block with the wheel; the server sends finer cells as the view narrows.
    page.wait_for_function("() => document.querySelector('#panel-error').dataset.region === '0:256,0:1024'")
    cell_before = [int(x) for x in page.get_attribute("#panel-actual", "data-cell").split(",")]
    assert cell_before != [1, 1]  # 256x1024 values do not fit a ~300 px canvas: pooled
    # Whole pixels: a wheel event's position is rounded to them, a pointer move's is not.
    box = page.locator("#panel-actual .canvas-wrap canvas").bounding_box()
    # square cells: the 256 x 1024 view letterboxed in the panel, placed on the canvas's own (whole) pixels
    size = page.evaluate("(() => { const c = document.querySelector('#panel-actual .canvas-wrap canvas'); return [c.width, c.height]; })()")
    left, top, s = _drawn({"x": 0, "y": 0, "width": size[0], "height": size[1]}, 256, 1024)
    kx, ky = box["width"] / size[0], box["height"] / size[1]  # CSS pixels per canvas pixel (1 unless rounded)
    x, y = round(box["x"] + (left + s * 602) * kx), round(box["y"] + (top + s * 102) * ky)
    under = [0, 0, int(((y - box["y"]) / ky - top) / s), int(((x - box["x"]) / kx - left) / s)]
    assert BLOCK[0].start <= under[2] < BLOCK[0].stop and BLOCK[1].start <= under[3] < BLOCK[1].stop
    page.mouse.move(x, y)
    for _ in range(10):
        page.mouse.wheel(0, -100)
        page.wait_for_timeout(40)
    page.wait_for_function("() => document.querySelector('#panel-error').dataset.cell === '1,1'")
    page.wait_for_function("() => document.querySelector('#panel-golden').dataset.cell === '1,1'")
    regions = {p: page.get_attribute(f"#panel-{p}", "data-region") for p in ("actual", "golden", "error")}
    assert len(set(regions.values())) == 1, regions  # zoom is synchronised
    (r0, r1), (c0, c1) = [tuple(int(v) for v in part.split(":")) for part in regions["actual"].split(",")]
    assert r0 <= 100 and r1 >= 104 and c0 <= 600 and c1 >= 604 and (r1 - r0) * (c1 - c0) < 256 * 1024 / 50
    # The error legend's top is the region's largest |a - g| (max-abs pooling hides no outlier).
    assert _number(page.inner_text("#panel-error .legend .hi")) == pytest.approx(err[0, 0, r0:r1, c0:c1].max(), rel=5e-3)

    # Hover the block: the tooltip's index is the element under the pointer, its values those of numpy.
    _hover(page, x, y)
    index, shown = _tooltip(page)
    assert index == under  # a wheel zoom keeps the element under the pointer where it was
    at = tuple(index)
    assert float(shown["actual"]) == pytest.approx(actual[at], rel=1e-6)
    assert float(shown["golden"]) == pytest.approx(golden[at], rel=1e-6)
    assert float(shown["abs_error"]) == pytest.approx(abs(actual[at] - golden[at]), rel=1e-5)
    assert float(shown["rel_error"]) == pytest.approx(abs(actual[at] - golden[at]) / abs(golden[at]), rel=1e-5)
    assert int(shown["ulp"]) == _ulp_bf16(actual[at], golden[at])
    _save_screenshot(page, tmp_path, "web-page-zoomed.png", docs=True)

    # Tolerances: a loose atol clears the mask; a PCC threshold above the pair's turns PASS into FAIL; a tight
    # atol brings the mismatch marks back.
    def mask_cells() -> int:
        page.wait_for_function("() => document.querySelector('#panel-error').dataset.mismatchCells !== undefined")
        return int(page.get_attribute("#panel-error", "data-mismatch-cells"))

    page.wait_for_function("() => Number(document.querySelector('#panel-error').dataset.mismatchCells) > 0")
    marked = page.locator("#panel-error .canvas-wrap canvas").screenshot()
    page.fill("#atol", "1")
    page.wait_for_function("() => document.querySelector('#panel-error').dataset.mismatchCells === '0'")
    page.wait_for_function("() => document.querySelector('#metrics dd[data-metric=allclose_mismatches]').textContent.startsWith('0')")
    assert page.get_attribute("#verdict", "data-passed") == "true"
    assert page.locator("#panel-error .canvas-wrap canvas").screenshot() != marked  # the marks are gone
    page.fill("#pcc", "0.999999")
    page.wait_for_selector('#verdict[data-passed="false"]')
    assert page.inner_text("#verdict").strip() == "FAIL" and pcc < 0.999999
    page.fill("#atol", "1e-5")
    page.wait_for_function("() => Number(document.querySelector('#panel-error').dataset.mismatchCells) > 0")
    page.wait_for_function(f"() => document.querySelector('#metrics dd[data-metric=allclose_mismatches]').textContent.startsWith('{mismatched}')")
    assert mask_cells() >= 1
    page.select_option("#error-kind", "mask")
    page.wait_for_function("() => document.querySelector('#panel-error .panel-title').textContent === 'mismatch mask'")
    _save_screenshot(page, tmp_path, "web-page-final.png")


def test_keyboard_device_selector_and_single_tensor(page: Any, runs: dict[str, Any]) -> None:
    arrays = runs["run_a"]
    # Filter with "/" and the keyboard, open with Enter.
    page.keyboard.press("/")
    page.keyboard.type("gather")
    page.wait_for_function("() => document.querySelectorAll('#op-table tbody tr[data-op-id]').length === 1")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.querySelector('#op-title').textContent.includes('ttnn.all_gather')")
    page.wait_for_selector("#device-field:not([hidden])")
    options = page.eval_on_selector_all("#device-select option", "os => os.map(o => o.value)")
    assert options == ["", "0,0", "0,1"]
    page.wait_for_function("() => document.querySelector('#panel-actual').dataset.region === '0:32,0:128'")
    page.select_option("#device-select", "0,1")
    page.wait_for_function("() => document.querySelector('#panel-actual').dataset.region === '0:32,0:64'")
    # Hover on device 0,1: the value is the shard's, i.e. the global tensor's right half.
    x, y = _canvas_point(page, "panel-actual", 0.5, 0.25)
    _hover(page, x, y)
    index, shown = _tooltip(page)
    value = shown.get("actual", shown.get("value"))
    assert value is not None
    assert float(value) == pytest.approx(float(arrays[4][tuple(index[:-1]) + (64 + index[-1],)]), rel=1e-6)

    # relu: its input (add's output) passes against its golden, its output fails.
    page.fill("#op-filter", "relu")
    page.wait_for_function("() => document.querySelectorAll('#op-table tbody tr[data-op-id]').length === 1")
    page.click('#op-table tbody tr[data-op-id="2"]')
    page.wait_for_function("() => document.querySelector('#op-title').textContent.includes('ttnn.relu')")
    page.click('#op-tensors .chip[data-tensor-id="2"]')  # relu's input is add's output: it has a golden too
    page.wait_for_selector('#verdict[data-passed="true"]')
    page.click('#op-tensors .chip[data-tensor-id="3"]')
    page.wait_for_selector('#verdict[data-passed="false"]')

    # A tensor without a golden record: one heatmap, no verdict, its value on hover.
    page.fill("#op-filter", "reshape_100")
    page.wait_for_function("() => document.querySelectorAll('#op-table tbody tr[data-op-id]').length === 1")
    page.click('#op-table tbody tr[data-op-id="100"]')
    page.wait_for_function("() => document.querySelector('#verdict').textContent === 'no golden'")
    assert page.is_hidden("#panel-golden") and page.is_hidden("#panel-error")
    page.wait_for_function("() => document.querySelector('#panel-actual').dataset.region === '0:32,0:32'")
    x, y = _canvas_point(page, "panel-actual", 0.8, 0.3)
    _hover(page, x, y)
    index, shown = _tooltip(page)
    assert float(shown["value"]) == pytest.approx(float(arrays[1][tuple(index)]), rel=1e-6)


def test_run_against_run_jumps_to_the_first_divergence(page: Any, tmp_path: Path) -> None:
    page.click("#tab-runs")
    page.select_option("#run-a", "run_a")
    page.select_option("#run-b", "run_b")
    page.click("#run-compare")
    page.wait_for_selector("#run-table tbody tr.divergence")
    rows = page.query_selector_all("#run-table tbody tr")
    assert len(rows) == 3
    divergence = page.inner_text("#run-table tbody tr.divergence")
    assert "ttnn.relu" in divergence and "FAIL" in divergence
    assert "first divergence: op 2 ttnn.relu" in page.inner_text("#run-summary")
    page.click("#run-jump")  # opens the A-against-B view of the diverging output
    assert page.evaluate("document.activeElement.classList.contains('divergence')")
    page.wait_for_selector("#run-pair:not([hidden])")
    assert "ttnn.relu" in page.inner_text("#run-pair-title")
    page.click("#run-open-b")  # opens run B's operation
    page.wait_for_function("() => document.querySelector('#op-title').textContent.includes('ttnn.relu')")
    assert page.input_value("#report-select") == "run_b"
    page.wait_for_selector('#verdict[data-passed="false"]')  # run B's relu is 1.5x its golden: a scale error
    assert "scale or offset error" in page.inner_text('#metrics dd[data-metric="flags"]')
    page.wait_for_function("() => document.querySelector('#panel-error').dataset.cell === '1,1'")
    _save_screenshot(page, tmp_path, "web-page-runs.png")


def test_the_page_and_its_modules_under_a_mount_prefix(browser: Any, runs: dict[str, Any]) -> None:
    """The page mounted at ``/reportdb/`` of a host app that answers every other path with its own page (as
    ttnn-visualizer does): every module of the page's script loads from under the prefix, and the page works."""
    import threading

    import flask
    from werkzeug.serving import make_server

    bp = reportdb.web.blueprint([runs["root"] / "run_a"])
    app = flask.Flask("host")

    @app.get("/", defaults={"path": ""})
    @app.get("/<path:path>")
    def _host_page(path: str) -> Any:
        return flask.Response("<html>the host's page</html>", mimetype="text/html")

    app.register_blueprint(bp, url_prefix="/reportdb")
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_port}"
    context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
    try:
        pg = context.new_page()
        pg.set_default_timeout(20_000)
        errors: list[str] = []
        scripts: dict[str, int] = {}
        pg.on("pageerror", lambda exc: errors.append(str(exc)))
        pg.on("response", lambda r: scripts.__setitem__(r.url, r.status) if r.url.endswith(".js") else None)
        pg.goto(base + "/reportdb/")
        pg.wait_for_selector("body[data-ready=true]")
        pg.click('#op-table tbody tr[data-op-id="1"]')
        pg.wait_for_selector('#verdict[data-passed="true"]')
        pg.wait_for_function("() => document.querySelector('#panel-error').dataset.region === '0:256,0:1024'")
        modules = sorted(p.name for p in (Path(reportdb.__file__).parent / "web" / "static").glob("*.js"))
        assert sorted(url.rsplit("/", 1)[1] for url in scripts) == modules
        assert all(url.startswith(base + "/reportdb/static/") and status == 200 for url, status in scripts.items()), scripts
        assert not errors, errors
    finally:
        context.close()
        server.shutdown()
        thread.join(10)
        bp.close()
