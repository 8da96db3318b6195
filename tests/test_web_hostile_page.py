"""Report text never becomes markup on the page: every string a report holds that the page can show (operation
names, the stored dtype, ttnn dtype, layout, memory config, storage type, the ttnn version, the report's own folder
name, argument texts, stack traces, error rows) is planted with HTML here, the page is walked in Chromium through
every view that shows them, and no planted element may be in the DOM, no planted script may have run, while the
planted text is on the page as text (so the walk did reach it)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

import reportdb

from served import Pages, serving

pytestmark = [pytest.mark.process, pytest.mark.service]


def markup(field: str) -> str:
    """HTML that would add elements of class ``planted`` (and a link an attacker chose) if parsed, and run script."""
    return (f'{field}<img src=x class=planted data-field={field} onerror="window.__planted=1">'
            f'<a id=injected-{field} class=planted href="https://attacker.example/">{field}</a>')


# Where each planted string goes and whether the page shows it (shown ones must appear as text).
SHOWN = ("opname", "ttnnd", "layout", "buftype", "memlayout", "storage", "version", "runopname", "argname",
         "argvalue", "stack")
HIDDEN = ("tensorsdtype", "errmsg")


def _build(path: Path) -> None:
    """A small report with golden records, then its text columns rewritten with markup (as a hostile producer's
    sqlite3 would write them)."""
    rng = np.random.default_rng(5)
    golden = rng.standard_normal((1, 1, 32, 64)).astype(np.float32)
    with reportdb.Writer(path) as w:
        w.put_tensor(1, rng.standard_normal((1, 1, 32, 32)).astype(np.float32))
        w.put_tensor(2, golden + np.float32(0.01), role="output", ttnn_dtype="FLOAT32", layout="TILE",
                     memory_config={"buffer_type": "DRAM", "memory_layout": "INTERLEAVED"})
        w.put_tensor(1002, golden)
        w.put_tensor(5, rng.standard_normal((4, 4)).astype(np.float32))
        w.add_operation(1, "ttnn.add", inputs=[1, 5], outputs=[2], arguments={"a": "b"}, stack_trace="here")
        w.add_operation(2, "ttnn.relu", inputs=[2], outputs=[])
        w.add_rows("local_tensor_comparison_records", [
            {"tensor_id": 2, "golden_tensor_id": 1002, "matches": 1, "desired_pcc": 0.99, "actual_pcc": 0.9999}])
        w.add_rows("tensors", [{"tensor_id": 30, "shape": "Shape([4, 4])", "dtype": markup("tensorsdtype")}])
        w.add_rows("errors", [{"operation_id": 1, "operation_name": "x", "error_message": markup("errmsg")}])
    memory = {"buffer_type": markup("buftype"), "memory_layout": markup("memlayout"),
              "shard_spec": {"shape": [markup("shard"), 1]}}
    with sqlite3.connect(path / "db.sqlite") as conn:
        conn.execute("UPDATE operations SET name=? WHERE operation_id=1", (markup("opname"),))
        conn.execute("UPDATE operations SET name=? WHERE operation_id=2", (markup("runopname"),))
        conn.execute("UPDATE operation_arguments SET name=?, value=?", (markup("argname"), markup("argvalue")))
        conn.execute("UPDATE stack_traces SET stack_trace=?", (markup("stack"),))
        conn.execute("UPDATE rdb_tensor SET ttnn_dtype=?, layout=?, storage_type=?, memory_config=? WHERE tensor_id=2",
                     (markup("ttnnd"), markup("layout"), markup("storage"), json.dumps(memory)))
        conn.execute("UPDATE rdb_tensor SET dtype=? WHERE tensor_id=5", (markup("dtype"),))
        conn.execute("CREATE TABLE IF NOT EXISTS report_metadata (key TEXT, value TEXT)")
        conn.execute("DELETE FROM report_metadata WHERE key='version'")
        conn.execute("INSERT INTO report_metadata (key, value) VALUES ('version', ?)", (markup("version"),))
    conn.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``reportdb serve`` over the hostile report (its folder name is markup too) and a copy, for the runs view."""
    root = tmp_path_factory.mktemp("hostile-page")
    hostile = root / "run<img src=x class=planted onerror=alert(1)>"
    _build(hostile)
    shutil.copytree(hostile, root / "copy")
    with serving(hostile, root / "copy", cwd=root) as url:
        yield url


@pytest.fixture()
def page(server: str, browser: Any) -> Iterator[Any]:
    """The page on the hostile report; a script error or a request outside the server fails the test too."""
    with Pages(browser, server) as pages:
        yield pages.open()


def _planted(page: Any) -> list[str]:
    """Every element the planted markup made (none may exist), and whether its script ran."""
    found = page.eval_on_selector_all(".planted, [id^=injected], a[href*='attacker.example']", "els => els.map(e => e.outerHTML)")
    if page.evaluate("window.__planted === 1"):
        found.append("the planted onerror script ran")
    return list(found)


def test_no_report_string_becomes_an_element(page: Any, tmp_path: Path) -> None:
    shown: set[str] = set()

    def look() -> None:
        assert not _planted(page), _planted(page)
        text = page.evaluate("document.body.innerText + ' ' + Array.from(document.querySelectorAll('[title]'))"
                             ".map(e => e.title).join(' ')")
        shown.update(field for field in SHOWN if f"<a id=injected-{field}" in text)

    look()  # the report list, its summary (the ttnn version) and the operation list
    page.click('#op-table tbody tr[data-op-id="1"]')
    page.wait_for_selector('#op-tensors .chip[data-tensor-id="5"]')
    page.wait_for_function("() => document.querySelector('#spec').textContent.includes('injected-layout')")
    page.click("#op-context summary")  # the operation's context: its arguments and stack trace
    page.wait_for_selector('#op-context[data-op-id="1"]')
    look()  # the operation's title, its chips (tensor 5's dtype), tensor 2's spec (layout, memory config, storage)
    page.click('#op-tensors .chip[data-tensor-id="5"]')
    # a stored dtype that names no dtype is refused by the store as damaged: the page says so, quoting it as text
    page.wait_for_function("() => document.body.textContent.includes('not a dtype name')")
    look()
    page.click("#tab-runs")
    page.click("#run-compare")
    page.wait_for_selector("#run-table tbody tr")
    look()  # the run table's operation names
    page.screenshot(path=str(tmp_path / "hostile-page.png"))
    assert shown == set(SHOWN), sorted(set(SHOWN) - shown)
    for field in HIDDEN:  # not shown by the page at all; planted to prove nothing else takes them in
        assert f"injected-{field}" not in page.content()


def test_the_page_script_parses_no_strings_as_html() -> None:
    """No sink that parses a string as HTML is left in the page's scripts (every module of it)."""
    script = "\n".join(p.read_text() for p in sorted((Path(reportdb.__file__).parent / "web" / "static").glob("*.js")))
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "DOMParser", "createContextualFragment"):
        assert sink not in script, sink
