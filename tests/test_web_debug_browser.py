"""The page's debugging views in a real browser (Playwright driving Debian's Chromium against a ``reportdb serve``
process): the first culprit marked in the operation list and opened by its control, the global golden record opened
(not the local one again), an operation's context with producer and consumer links, the runs view's tolerance
controls, verdicts and A / B / |A-B| heatmaps reached by the jump to the first divergence, and a URL reopened in a
fresh page giving the same view; where in the tensor: the worst tile, hover from the fetched window, square cells with
the tile grid on them, the core-grid map of a block-sharded tensor, pinned points, and the device view's golden
part. Numbers the page shows are checked against numpy."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from reportdb.analysis.policy import Policy

import web_debug_data as data
from served import Pages, serving, shot

pytestmark = [pytest.mark.process, pytest.mark.service]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("web-debug-browser")
    data.build(base / "run_a", 0)
    data.build(base / "run_b", 1)
    data.build_sharded(base / "sharded")
    return base


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[str]:
    """``reportdb serve`` of both runs on a free loopback port; yields the URL it printed."""
    with serving(root / "run_a", root / "run_b", root / "sharded", cwd=root) as url:
        yield url



def _metric(page: Any, key: str) -> float:
    return float(page.inner_text(f'#metrics dd[data-metric="{key}"]').strip().split(" ")[0].replace(",", ""))


def test_first_culprit_marked_and_opened_then_global(pages: Pages, tmp_path: Path) -> None:
    page = pages.open()
    chain = data.chain(0)
    # execution order by default, the first culprit marked, each operation's role shown
    ids = [int(tr.get_attribute("data-op-id")) for tr in page.query_selector_all("#op-table tbody tr")]
    assert ids == list(range(1, data.OPS + 2))
    assert page.get_attribute("#op-table tbody tr.first-culprit", "data-op-id") == str(data.CULPRIT_OP)
    roles = [page.get_attribute(f'#op-table tbody tr[data-op-id="{i}"] [data-role]', "data-role") for i in ids]
    assert roles == ["pass", "pass", "culprit", "victim", "victim", "victim", "culprit"]
    assert f"#{data.CULPRIT_OP} ttnn.step_{data.CULPRIT_OP}" in page.inner_text("#culprit-info")
    # worst first ranks by local error: the culprit on top, not the victim with the lowest global PCC
    page.click("#worst-first")
    page.wait_for_selector('#worst-first[aria-pressed="true"]')
    page.wait_for_function(f"() => document.querySelector('#op-table tbody tr').dataset.opId === '{data.CULPRIT_OP}'")
    page.click("#worst-first")
    page.wait_for_function("() => document.querySelector('#op-table tbody tr').dataset.opId === '1'")

    page.click("#jump-culprit")
    page.wait_for_function(f"() => document.querySelector('#op-title').textContent.startsWith('#{data.CULPRIT_OP} ')")
    page.wait_for_selector('#verdict[data-passed="false"]')
    assert page.input_value("#kind-select") == "local"
    t = data.CULPRIT_OP
    assert _metric(page, "pcc") == pytest.approx(data.pcc(chain["device"][t], chain["local"][t]), abs=2e-6)
    # the context: arguments, stack trace, producer and consumers as links
    page.wait_for_selector(f'#op-context[data-op-id="{t}"]')
    assert "model.py" in page.text_content("#context-stack")
    assert page.query_selector(f'#context-tensors button[data-op-link="{t - 1}"]') is not None
    assert page.query_selector(f'#context-tensors button[data-op-link="{t + 1}"]') is not None
    page.click("#op-context summary")
    assert "memory_config" in page.inner_text("#context-args")
    shot(page, tmp_path, "context.png")
    page.click(f'#context-tensors button[data-op-link="{t + 1}"]')  # a consumer's link opens that operation
    page.wait_for_function(f"() => document.querySelector('#op-title').textContent.startsWith('#{t + 1} ')")
    page.wait_for_selector(f'#op-context[data-op-id="{t + 1}"]')
    page.click("#op-context summary")

    # the global record of a victim opens as global: its golden is the global golden tensor, its PCC the global one
    page.click(f'#op-table tbody tr[data-op-id="{t + 2}"]')
    page.wait_for_function(f"() => document.querySelector('#op-title').textContent.startsWith('#{t + 2} ')")
    page.wait_for_selector('#verdict[data-passed="true"]')  # its local comparison passes: a victim
    page.select_option("#kind-select", "global")
    page.wait_for_selector('#verdict[data-passed="false"]')
    assert page.input_value("#kind-select") == "global"
    assert f"tensor {200 + t + 2}" in page.inner_text("#panel-golden .panel-sub")
    assert _metric(page, "pcc") == pytest.approx(data.pcc(chain["device"][t + 2], chain["global"][t + 2]), abs=2e-6)
    assert "kind=global" in page.evaluate("location.hash")
    shot(page, tmp_path, "culprit.png")


def test_url_reopens_the_same_view(pages: Pages, tmp_path: Path) -> None:
    page = pages.open()
    t = data.CULPRIT_OP + 1
    page.click(f'#op-table tbody tr[data-op-id="{t}"]')
    page.wait_for_selector('#verdict[data-passed="true"]')
    page.select_option("#kind-select", "global")
    page.wait_for_selector('#verdict[data-passed="false"]')
    page.fill("#rtol", "0.5")
    page.fill("#atol", "0.25")
    box = page.locator("#panel-actual .canvas-wrap canvas").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.75, box["y"] + box["height"] * 0.75)
    for _ in range(4):
        page.mouse.wheel(0, -100)
        page.wait_for_timeout(60)
    page.wait_for_function("() => document.querySelector('#panel-actual').dataset.cell === '1,1'")
    page.wait_for_timeout(400)  # the URL is written a moment after the zoom settles
    region = page.get_attribute("#panel-actual", "data-region")
    fragment = page.evaluate("location.hash")
    assert "view=" in fragment and "kind=global" in fragment and "rtol=0.5" in fragment
    mismatches = _metric(page, "allclose_mismatches")

    again = pages.open("/" + fragment)
    again.wait_for_function(f"() => document.querySelector('#op-title').textContent.startsWith('#{t} ')")
    again.wait_for_selector('#verdict[data-passed="false"]')
    again.wait_for_function(f"() => document.querySelector('#panel-actual').dataset.region === '{region}'")
    assert again.input_value("#kind-select") == "global"
    assert again.input_value("#rtol") == "0.5" and again.input_value("#atol") == "0.25"
    chain = data.chain(0)
    err = np.abs(chain["device"][t].astype(np.float64) - chain["global"][t])
    assert _metric(again, "allclose_mismatches") == mismatches == int(np.count_nonzero(err > 0.25 + 0.5 * np.abs(chain["global"][t])))
    assert again.evaluate("location.hash") == fragment


def test_runs_view_tolerances_verdicts_and_pair_heatmaps(pages: Pages, tmp_path: Path) -> None:
    page = pages.open()
    page.click("#tab-runs")
    page.select_option("#run-a", "run_a")
    page.select_option("#run-b", "run_b")
    assert page.input_value("#run-rtol") == "" and page.get_attribute("#run-rtol", "placeholder") == "policy"
    page.click("#run-compare")
    page.wait_for_selector("#run-table tbody tr.divergence")
    div = page.query_selector("#run-table tbody tr.divergence")
    assert div.get_attribute("data-verdict") == "diverges" and "diverges: " in div.inner_text()
    verdicts = [tr.get_attribute("data-verdict") for tr in page.query_selector_all("#run-table tbody tr")]
    assert verdicts[: data.DIVERGE_OP - 1] == ["identical"] * (data.DIVERGE_OP - 1)
    assert f"first divergence: op {data.DIVERGE_OP}" in page.inner_text("#run-summary")

    page.click("#run-jump")  # opens the A-against-B view of the first divergence
    page.wait_for_selector("#run-pair:not([hidden])")
    page.wait_for_function("() => document.querySelector('.run-panel[data-side=error]').dataset.max")
    a, b = data.chain(0)["device"][data.DIVERGE_OP], data.chain(1)["device"][data.DIVERGE_OP]
    sides = {s: page.get_attribute(f'.run-panel[data-side="{s}"]', "data-region") for s in ("a", "b", "error")}
    assert set(sides.values()) == {"0:64,0:96"}
    assert float(page.get_attribute(".run-panel[data-side=error]", "data-max")) == pytest.approx(float(np.abs(a - b).max()), rel=1e-6)
    size = page.evaluate("[...document.querySelectorAll('.run-panel > canvas')].map(c => [c.width, c.height])")
    assert all(w == 3 * 96 and h == 3 * 64 for w, h in size)  # square cells: 3 whole pixels per element each way
    page.click("#run-zoom-in")
    page.wait_for_function("() => document.querySelector('.run-panel[data-side=a]').dataset.region === '16:48,24:72'")
    assert len({page.get_attribute(f'.run-panel[data-side="{s}"]', "data-region") for s in ("a", "b", "error")}) == 1
    shot(page, tmp_path, "runs.png")

    # the URL keeps the runs view: a fresh page opens the same pair at the same zoom
    fragment = page.evaluate("location.hash")
    assert "tab=runs" in fragment and "row=" in fragment and "view=16%3A48%2C24%3A72" in fragment
    again = pages.open("/" + fragment)
    again.wait_for_function("() => document.querySelector('.run-panel[data-side=a]')?.dataset.region === '16:48,24:72'")
    assert again.inner_text("#run-pair-title") == page.inner_text("#run-pair-title")

    # the tolerance controls are the request's: a PCC threshold of -1 leaves SQNR as the failed criterion
    assert "diverges: pcc, sqnr_db" in page.inner_text("#run-table tbody tr.divergence")
    page.fill("#run-pcc", "-1")
    page.click("#run-compare")
    page.wait_for_function("() => document.querySelector('#run-table tbody tr.divergence')?.innerText.includes('diverges: sqnr_db')")
    assert "pcc=-1" in page.evaluate("location.hash")


def test_worst_tile_tile_grid_and_hover_from_the_fetched_window(pages: Pages, tmp_path: Path) -> None:
    page = pages.open()
    page.click("#jump-culprit")
    page.wait_for_selector('#verdict[data-passed="false"]')
    page.wait_for_function("() => document.querySelector('#panel-error').dataset.region === '0:64,0:96'")
    page.click("#worst-tile")
    page.wait_for_function("() => document.querySelector('#panel-error').dataset.region === '16:64,16:80'")
    assert page.get_attribute("#worst-tile", "data-tile") == "0,0,1,1"  # the flipped block is tile (1, 1)
    page.wait_for_function("() => document.querySelector('#panel-actual').dataset.cell === '1,1'")
    assert page.get_attribute("#panel-actual", "data-tiles") == "32x32"  # the tile grid is drawn at this zoom
    chain = data.chain(0)
    actual, golden = chain["device"][data.CULPRIT_OP][0, 0], chain["local"][data.CULPRIT_OP][0, 0]
    asked: list[str] = []
    page.on("request", lambda req: asked.append(req.url) if "/point" in req.url or "/values" in req.url else None)
    box = page.locator("#panel-actual .canvas-wrap canvas").bounding_box()
    for fy, fx in ((0.7, 0.5), (0.3, 0.2), (0.9, 0.9)):
        page.mouse.move(2, 2)
        page.wait_for_selector("#tooltip", state="hidden")
        page.mouse.move(box["x"] + fx * box["width"], box["y"] + fy * box["height"])
        page.wait_for_selector("#tooltip:not([hidden])")
        index = [int(x) for x in page.get_attribute("#tooltip .idx", "data-index").split(",")]
        shown = {tr.get_attribute("data-key"): tr.query_selector_all("td")[-1].inner_text().strip()
                 for tr in page.query_selector_all("#tooltip tr")}
        r, c = index[2], index[3]
        assert float(shown["actual"]) == pytest.approx(float(actual[r, c]), rel=1e-6)
        assert float(shown["golden"]) == pytest.approx(float(golden[r, c]), rel=1e-6)
        assert float(shown["abs_error"]) == pytest.approx(abs(float(actual[r, c]) - float(golden[r, c])), rel=1e-5)
        bits = np.array([actual[r, c], golden[r, c]], dtype=np.float32).view(np.int32).astype(np.int64)
        ordered = np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)
        assert int(shown["ulp"]) == int(abs(ordered[0] - ordered[1]))
        assert shown["tile"].startswith(f"({r // 32}, {c // 32})")
        assert page.get_attribute("#tooltip", "data-source") == "grid"
    assert not asked, asked  # the values came from the window already fetched
    shot(page, tmp_path, "worst-tile.png")


def test_device_table_of_a_mesh_tensor(pages: Pages, tmp_path: Path) -> None:
    page = pages.open()
    page.click(f'#op-table tbody tr[data-op-id="{data.OPS + 1}"]')
    page.wait_for_selector("#device-table tr[data-device]")
    rows = {tr.get_attribute("data-device"): tr.inner_text() for tr in page.query_selector_all("#device-table tr[data-device]")}
    assert sorted(rows) == ["0,0", "0,1", "0,2", "0,3"]
    assert "FAIL" in rows["0,2"] and all("pass" in v for k, v in rows.items() if k != "0,2")
    assert "1.07" in rows["0,2"]  # its fit scale
    shot(page, tmp_path, "devices.png")
    page.click('#device-table tr[data-device="0,2"]')  # opens that device's shard
    page.wait_for_function("() => document.querySelector('#device-select').value === '0,2'")
    page.wait_for_selector("#device-card", state="hidden")


def _tooltip(page: Any) -> dict[str, str]:
    return {tr.get_attribute("data-key"): tr.query_selector_all("td")[-1].inner_text().strip()
            for tr in page.query_selector_all("#tooltip tr")}


def _drawn_box(page: Any, panel: str) -> dict[str, int]:
    """The box of a panel canvas's painted pixels (alpha > 0), in canvas pixels, and the canvas size."""
    return page.evaluate("""(sel) => {
      const c = document.querySelector(sel + ' .canvas-wrap canvas');
      const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      let x0 = c.width, y0 = c.height, x1 = -1, y1 = -1;
      for (let y = 0; y < c.height; y++) for (let x = 0; x < c.width; x++) {
        if (d[(y * c.width + x) * 4 + 3] > 0) {
          x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y);
        }
      }
      return {x0, y0, w: x1 - x0 + 1, h: y1 - y0 + 1, cw: c.width, ch: c.height};
    }""", panel)


def _bright_line(page: Any, panel: str, *, span: tuple[int, int], row: int | None = None,
                 col: int | None = None) -> bool:
    """Whether canvas pixel row ``row`` (or column ``col``) is light over ``span``: a tile-grid line over the cells."""
    return page.evaluate("""([sel, row, col, a, b]) => {
      const c = document.querySelector(sel + ' .canvas-wrap canvas');
      const ctx = c.getContext('2d');
      const d = row !== null ? ctx.getImageData(a, row, b - a, 1).data : ctx.getImageData(col, a, 1, b - a).data;
      for (let i = 0; i < d.length; i += 4) if (Math.min(d[i], d[i + 1], d[i + 2]) < 180) return false;
      return true;
    }""", [panel, row, col, span[0], span[1]])


def test_square_cells_letterboxed_with_the_tile_grid_on_them(pages: Pages, tmp_path: Path) -> None:
    page = pages.open()
    page.click("#jump-culprit")
    page.wait_for_function("() => document.querySelector('#panel-actual').dataset.region === '0:64,0:96'")
    page.wait_for_timeout(200)
    for height in (None, 420):  # the panel as laid out (wider than 3:2), then taller than wide
        if height:
            page.add_style_tag(content=f".canvas-wrap {{ height: {height}px !important; }}")
            page.evaluate("window.dispatchEvent(new Event('resize'))")
            page.wait_for_function(f"() => document.querySelector('#panel-actual canvas').height === {height}")
            page.wait_for_function("() => document.querySelector('#panel-actual').dataset.cell === '1,1'")
            page.wait_for_timeout(300)
        box = _drawn_box(page, "#panel-actual")
        assert abs(box["cw"] / box["ch"] - 96 / 64) > 0.2  # a panel whose aspect is not the tensor's
        assert box["w"] / 96 == pytest.approx(box["h"] / 64, rel=0.02)  # square cells: 64 rows as tall as 64 columns
        assert box["w"] == box["cw"] or box["h"] == box["ch"]  # letterboxed: one side fills the panel
        shot(page, tmp_path, f"square-{height or 'laid-out'}.png")
    # the tile grid at the worst tile's zoom lies on the cells: a light line at rows 32 and column 32 of the view
    page.click("#worst-tile")
    page.wait_for_function("() => document.querySelector('#panel-actual').dataset.region === '16:64,16:80'")
    page.wait_for_function("() => document.querySelector('#panel-actual').dataset.cell === '1,1'")
    page.wait_for_timeout(200)
    box = _drawn_box(page, "#panel-actual")
    s = box["w"] / 64
    assert s == pytest.approx(box["h"] / 48, rel=0.02)
    row, col = box["y0"] + round((32 - 16) * s), box["x0"] + round((32 - 16) * s)
    across, down = (box["x0"] + 1, box["x0"] + box["w"] - 1), (box["y0"] + 1, box["y0"] + box["h"] - 1)
    assert _bright_line(page, "#panel-actual", row=row, span=across)
    assert _bright_line(page, "#panel-actual", col=col, span=down)
    assert not _bright_line(page, "#panel-actual", row=row + round(s * 5), span=across)  # cells, not a line


def _open_sharded(page: Any, op: int) -> None:
    """Open operation ``op`` of the sharded report (once the list is that report's: run_a has the same ids)."""
    page.select_option("#report-select", "sharded")
    page.wait_for_function("() => document.querySelector('#op-table tbody tr')?.innerText.includes('ttnn.sharded_add')")
    page.click(f'#op-table tbody tr[data-op-id="{op}"]')
    page.wait_for_function(f"() => document.querySelector('#op-title').textContent.startsWith('#{op} ttnn.sharded_')")


def test_core_map_of_a_block_sharded_tensor(pages: Pages, tmp_path: Path) -> None:
    page = pages.open()
    _open_sharded(page, 1)
    page.wait_for_selector("#core-map .core[data-core]")
    out, golden = data.sharded_tensor()
    err = np.abs(out[0, 0].astype(np.float64) - golden[0, 0])
    rtol, atol = Policy.default().tolerances("ttnn.sharded_add", "FLOAT32")  # the policy's, as locate counts
    cores = {b.get_attribute("data-core"): b for b in page.query_selector_all("#core-map .core[data-core]")}
    assert sorted(cores) == sorted(f"{x},{y}" for x in range(3) for y in range(2))
    for name, button in cores.items():
        x, y = map(int, name.split(","))
        shard = y * 3 + x  # row major: shards along x first
        assert button.get_attribute("data-shard") == str(shard)
        block = err[32 * y : 32 * (y + 1), 32 * x : 32 * (x + 1)]
        assert float(button.get_attribute("data-max-error")) == pytest.approx(float(block.max()), rel=1e-6, abs=1e-12)
        near = np.abs(golden[0, 0, 32 * y : 32 * (y + 1), 32 * x : 32 * (x + 1)].astype(np.float64))
        assert int(button.get_attribute("data-mismatches")) == int(np.count_nonzero(block > atol + rtol * near))
    wrong = ",".join(map(str, data.WRONG_CORE))
    assert [n for n, b in cores.items() if "wrong" in (b.get_attribute("class") or "")] == [wrong]
    # the wrong core stands out: its colour is the scale's top, the others' its bottom
    colours = {n: b.evaluate("(e) => getComputedStyle(e).backgroundColor") for n, b in cores.items()}
    assert len({c for n, c in colours.items() if n != wrong}) == 1 and colours[wrong] not in {colours["0,0"]}
    page.hover(f'#core-map .core[data-core="{wrong}"]')
    assert page.inner_text("#core-info").startswith(f"core ({data.WRONG_CORE[0]}, {data.WRONG_CORE[1]}) \u00b7 shard 5")
    page.locator("#core-card").scroll_into_view_if_needed()
    shot(page, tmp_path, "cores.png")
    page.click(f'#core-map .core[data-core="{wrong}"]')  # to the shard's region
    page.wait_for_function("() => document.querySelector('#panel-actual').dataset.region === '32:64,64:96'")
    page.wait_for_function("() => document.querySelector('#panel-actual').dataset.cell === '1,1'")
    box = page.locator("#panel-actual .canvas-wrap canvas").bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_selector("#tooltip:not([hidden])")
    shown = _tooltip(page)
    r, c = (int(x) for x in page.get_attribute("#tooltip .idx", "data-index").split(",")[2:])
    assert 32 <= r < 64 and 64 <= c < 96
    assert shown["core"] == f"({data.WRONG_CORE[0]}, {data.WRONG_CORE[1]}) shard 5"
    assert float(shown["actual"]) == pytest.approx(float(out[0, 0, r, c]), rel=1e-6)


def test_core_map_of_a_height_sharded_tensor_with_leading_dims(pages: Pages) -> None:
    page = pages.open()
    _open_sharded(page, 2)
    page.wait_for_selector("#core-map .core[data-core]")
    cores = {b.get_attribute("data-core"): b.get_attribute("data-shard") for b in page.query_selector_all("#core-map .core[data-core]")}
    assert cores == {"0,0": "0", "1,0": "1", "2,0": "2", "3,0": "3"}
    assert not page.query_selector("#core-map .core.wrong")
    # shard 1 holds padded rows 96..191 of the (2 x 3 matrices of 64 padded rows) tensor: it starts in matrix [0, 1]
    # at row 32 and takes its last 8 logical rows (40 of them are real) there
    page.click('#core-map .core[data-core="1,0"]')
    page.wait_for_function("() => document.querySelector('#panel-actual').dataset.region === '32:40,0:32'")
    assert [page.input_value(f"#lead-fields input >> nth={i}") for i in range(2)] == ["0", "1"]


def _pin_rows(page: Any) -> list[dict[str, str]]:
    """The pins' table: each row's index, values by key and differences from the first pin as ``d_<key>``."""
    rows = []
    for tr in page.query_selector_all("#pins-table tr[data-pin]"):
        row = {"index": tr.get_attribute("data-pin")}
        for td in tr.query_selector_all("td[data-key], td[data-diff]"):
            row[td.get_attribute("data-key") or "d_" + td.get_attribute("data-diff")] = td.inner_text().strip()
        rows.append(row)
    return rows


def test_pinned_points_listed_removed_and_kept_in_the_url(pages: Pages, tmp_path: Path) -> None:
    page = pages.open()
    page.click("#jump-culprit")
    page.wait_for_selector('#verdict[data-passed="false"]')
    page.click("#worst-tile")
    page.wait_for_function("() => document.querySelector('#panel-actual').dataset.cell === '1,1'")
    page.wait_for_function("() => document.querySelector('#panel-actual').dataset.region === '16:64,16:80'")
    chain = data.chain(0)
    actual, golden = chain["device"][data.CULPRIT_OP][0, 0], chain["local"][data.CULPRIT_OP][0, 0]
    box = page.locator("#panel-golden .canvas-wrap canvas").bounding_box()  # any panel pins
    for n, (fy, fx) in enumerate(((0.3, 0.3), (0.8, 0.7), (0.5, 0.5)), 1):
        page.mouse.click(box["x"] + fx * box["width"], box["y"] + fy * box["height"])
        page.wait_for_function(f"() => document.querySelectorAll('#pins-table tr[data-pin]').length === {n}")
    rows = _pin_rows(page)
    assert len(rows) == 3
    for row in rows:
        _, _, r, c = map(int, row["index"].split(","))
        assert float(row["actual"]) == pytest.approx(float(actual[r, c]), rel=1e-6)
        assert float(row["golden"]) == pytest.approx(float(golden[r, c]), rel=1e-6)
        assert float(row["abs_error"]) == pytest.approx(abs(float(actual[r, c]) - float(golden[r, c])), rel=1e-5)
    r0, c0 = map(int, rows[0]["index"].split(",")[2:])
    r1, c1 = map(int, rows[1]["index"].split(",")[2:])
    for key, values in (("d_actual", actual), ("d_golden", golden)):
        assert float(rows[1][key]) == pytest.approx(float(values[r1, c1]) - float(values[r0, c0]), rel=1e-5, abs=1e-6)
    shot(page, tmp_path, "pins.png")
    page.click('#pins-table tr[data-pin] button.unpin >> nth=2')  # remove the third
    page.wait_for_function("() => document.querySelectorAll('#pins-table tr[data-pin]').length === 2")
    assert [r["index"] for r in _pin_rows(page)] == [rows[0]["index"], rows[1]["index"]]
    page.wait_for_timeout(300)
    fragment = page.evaluate("location.hash")
    assert "pins=" in fragment and rows[2]["index"].replace(",", ".") not in fragment

    again = pages.open("/" + fragment)  # the URL reopens the pins, values and all
    again.wait_for_function("() => document.querySelectorAll('#pins-table tr[data-pin]').length === 2")
    assert _pin_rows(again) == _pin_rows(page)
    again.click('#pins-table tr[data-pin] button.unpin >> nth=0')
    again.wait_for_function("() => document.querySelectorAll('#pins-table tr[data-pin]').length === 1")
    again.wait_for_timeout(300)
    assert rows[0]["index"].replace(",", ".") not in again.evaluate("location.hash")


def test_device_view_golden_panel_and_statistics_are_the_devices_part(pages: Pages, tmp_path: Path) -> None:
    page = pages.open()
    page.click(f'#op-table tbody tr[data-op-id="{data.OPS + 1}"]')
    page.wait_for_selector("#device-table tr[data-device]")
    page.click('#device-table tr[data-device="0,2"]')
    page.wait_for_function("() => document.querySelector('#device-select').value === '0,2'")
    page.wait_for_function("() => document.querySelector('#panel-golden').dataset.region === '0:32,0:32'")
    page.wait_for_function("() => document.querySelector('#panel-golden').dataset.cell === '1,1'")
    mesh, golden = data.mesh_tensor()
    part = golden[0, 0, :, 64:96]  # device (0, 2)'s columns of the golden
    assert "64:96" in page.inner_text("#panel-golden .panel-sub")
    box = page.locator("#panel-actual .canvas-wrap canvas").bounding_box()
    for fy, fx in ((0.2, 0.3), (0.7, 0.8)):
        page.mouse.move(2, 2)
        page.wait_for_selector("#tooltip", state="hidden")
        page.mouse.move(box["x"] + fx * box["width"], box["y"] + fy * box["height"])
        page.wait_for_selector("#tooltip:not([hidden])")
        r, c = (int(x) for x in page.get_attribute("#tooltip .idx", "data-index").split(",")[2:])
        shown = _tooltip(page)
        assert float(shown["golden"]) == pytest.approx(float(part[r, c]), rel=1e-6)
        assert float(shown["actual"]) == pytest.approx(float(mesh[0, 0, r, 64 + c]), rel=1e-6)
    heads = [th.inner_text() for th in page.query_selector_all("#stats tr:first-child th")]
    assert heads[1:] == ["actual @0,2", "golden @0,2 part"]
    stats = {tr.query_selector_all("td")[0].inner_text(): [td.inner_text() for td in tr.query_selector_all("td")[1:]]
             for tr in page.query_selector_all("#stats tr") if tr.query_selector("td")}
    assert float(stats["mean"][1]) == pytest.approx(float(part.astype(np.float64).mean()), rel=1e-5)
    assert float(stats["max"][1]) == pytest.approx(float(part.max()), rel=1e-6)
    assert float(stats["std"][1]) == pytest.approx(float(part.astype(np.float64).std()), rel=1e-4)
    assert float(stats["count"][1].replace(",", "")) == part.size
    shot(page, tmp_path, "device-view.png")
