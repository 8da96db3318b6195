"""The page's Replay view in a real browser (Playwright driving Debian's Chromium against ``reportdb serve``): on a
Writer-made report with two planted faults, each mode's rows show what ``reportdb.replay`` gives (status, verdicts,
failed criteria, notes, the first failure marked, the counts line), substitute mode the three verdicts side by side
(the culprit the plain chain hid failing substituted); anomalies marked with their sentence; a row opens its
operation, and the URL reopens the view."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

import reportdb
from reportdb.analysis.replay_rows import ReplayCounts
from served import Pages, serving, shot

from test_culprits import _silu_layers
from test_replay_substitute import make_two_culprits

pytestmark = [pytest.mark.process, pytest.mark.service]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("web-replay-browser")
    make_two_culprits(base / "two.sqlite")
    _silu_layers(base / "silu.sqlite", faulty=True)
    return base


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[str]:
    with serving(str(root / "two.sqlite"), str(root / "silu.sqlite"), cwd=root) as url:
        yield url



def _rows(page: Any) -> list[dict[str, Any]]:
    """The replay table's rows as the page shows them."""
    return page.evaluate("""() => Array.from(document.querySelectorAll('#replay-table tbody tr')).map((tr) => ({
        op: Number(tr.dataset.opId), passed: tr.dataset.passed, status: tr.dataset.status,
        first: tr.classList.contains('first-failure'), anomaly: tr.classList.contains('anomaly'),
        cells: Array.from(tr.cells).map((td) => td.textContent),
        mark: tr.querySelector('.anomaly-mark')?.title ?? null }))""")


def _open_replay(page: Any, mode: str | None = None) -> None:
    """Open the Replay tab (and choose ``mode``), waiting for the server's answer to be drawn."""
    if page.get_attribute("#tab-replay", "aria-selected") != "true":
        page.click("#tab-replay")
    if mode is not None:
        page.select_option("#replay-mode", mode)
        page.wait_for_selector(f"#view-replay[data-mode={mode}]")
    page.wait_for_selector("#view-replay[data-pending=false]")


def test_isolated_rows_are_replays_and_a_row_opens_its_operation(pages: Pages, root: Path, tmp_path: Path) -> None:
    page = pages.open("#report=two")
    page.set_viewport_size({"width": 1280, "height": 800})
    _open_replay(page)
    want = reportdb.replay(root / "two.sqlite")
    rows = _rows(page)
    assert [r["op"] for r in rows] == [r.operation_id for r in want.rows]
    assert [r["passed"] for r in rows] == [str(r.passed).lower() if r.passed is not None else "null" for r in want.rows]
    assert page.text_content("#replay-line") == ReplayCounts(want.rows).line()
    first = [r["op"] for r in rows if r["first"]]
    assert want.first_failure is not None and first == [want.first_failure.operation_id]
    for shown, row in zip(rows, want.rows):
        assert shown["cells"][5] == ", ".join(row.failed)  # the failed criteria
        assert shown["cells"][-1].startswith(row.detail)  # the notes: where the verdict saw the error
    assert any(r.detail for r in want.failed)
    shot(page, tmp_path, "replay-isolated.png")
    assert "tab=replay" in page.url and "mode=isolated" in page.url
    page.click("#replay-table tbody tr[data-op-id='3']")
    page.wait_for_selector("#op-detail:not([hidden])")
    assert page.is_visible("#view-ops") and not page.is_visible("#view-replay")
    assert page.text_content("#op-title").find("ttnn.linear") >= 0
    assert page.get_attribute("#op-table tbody tr[aria-selected=true]", "data-op-id") == "3"


def test_substitute_shows_three_verdicts_and_the_hidden_culprit(pages: Pages, root: Path, tmp_path: Path) -> None:
    page = pages.open("#report=two")
    page.set_viewport_size({"width": 1280, "height": 800})
    _open_replay(page, "substitute")
    want = reportdb.replay(root / "two.sqlite", chain=True, substitute_failing=True)
    rows = _rows(page)
    label = {True: "pass", False: "FAIL", None: "\u2014"}
    for shown, row in zip(rows, want.rows, strict=True):
        assert shown["cells"][4:7] == [label[row.isolated], label[row.chained],
                                       label[row.substituted] + (" \u21c4" if row.substitute else "")]
    three = [r["cells"][4:7] for r in rows if r["op"] == 3][0]
    assert three[2].startswith("FAIL")  # culprit B fails against the substituted chain: no longer hidden
    assert page.is_visible("#replay-table th.verdict-three") and not page.is_visible("#replay-table th.verdict-one")
    assert page.text_content("#replay-line") == ReplayCounts(want.rows).line()
    shot(page, tmp_path, "replay-substitute.png")
    again = pages.open("#" + page.url.split("#", 1)[1])  # the URL reopens the same view
    again.wait_for_selector("#view-replay[data-mode=substitute][data-pending=false]")
    assert _rows(again) == rows


def test_anomalies_are_marked_with_their_sentence(pages: Pages, root: Path, tmp_path: Path) -> None:
    page = pages.open("#report=silu")
    page.set_viewport_size({"width": 1280, "height": 800})
    _open_replay(page)
    want = reportdb.replay(root / "silu.sqlite")
    assert [a.operation_id for a in want.anomalies] == [3]
    rows = _rows(page)
    assert [r["op"] for r in rows if r["anomaly"]] == [3]
    assert [r["mark"] for r in rows if r["anomaly"]] == [want.anomalies[0].describe()]
    assert page.text_content("#replay-anomalies li") == want.anomalies[0].describe()
    shot(page, tmp_path, "replay-anomaly.png")
