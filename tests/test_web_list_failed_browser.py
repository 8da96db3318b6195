"""The operation list colours the value of the criterion that failed, not the PCC whatever failed: on a report whose
faulty silu passes its PCC but fails SQNR and the tile criterion, its dB is red and its PCC is not, and the failed
criteria are named on the row; where the PCC fails (the debug report's culprit) the PCC is red."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

import reportdb
import web_debug_data as data
from served import Pages, serving, shot

from test_culprits import _silu_layers

pytestmark = [pytest.mark.process, pytest.mark.service]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("web-list-failed")
    _silu_layers(base / "silu.sqlite", faulty=True)
    data.build(base / "run_a", 0)
    return base


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[str]:
    with serving(str(root / "silu.sqlite"), str(root / "run_a"), cwd=root) as url:
        yield url


def _cells(page: Any) -> dict[int, dict[str, Any]]:
    """Each list row's PCC and dB cells (text, whether red) and the failed criteria it names, by operation id."""
    page.wait_for_selector("#op-table[data-pending=false]", state="attached")
    return {r["id"]: r for r in page.eval_on_selector_all("#op-table tbody tr", """rows => rows.map((tr) => ({
        id: Number(tr.dataset.opId), pccRed: tr.cells[2].classList.contains('pcc-fail'),
        dbRed: tr.cells[3].classList.contains('pcc-fail'), db: tr.cells[3].textContent,
        failed: tr.cells[4].dataset.failed, title: tr.cells[4].title }))""")}


def test_the_failed_criterion_is_red_not_the_pcc(browser: Any, server: str, root: Path, tmp_path: Path) -> None:
    record = [r for r in reportdb.compare_golden(root / "silu.sqlite", store=False).records if r.operation_id == 3][0]
    assert record.verdict == "fail" and "pcc" not in record.failed and "sqnr_db" in record.failed
    with Pages(browser, server) as pages:
        page = pages.open("#report=silu")
        page.set_viewport_size({"width": 1280, "height": 800})
        rows = _cells(page)
        assert rows[3]["pccRed"] is False and rows[3]["dbRed"] is True
        assert rows[3]["failed"] == ",".join(record.failed) and rows[3]["title"] == "failed: " + ", ".join(record.failed)
        assert rows[3]["db"] == f"{record.metrics.sqnr_db:.1f}"
        assert not any(r["pccRed"] or r["dbRed"] or r["failed"] for i, r in rows.items() if i != 3)
        shot(page, tmp_path, "list-failed-criterion.png")
        culprit = _cells(pages.open("#report=run_a"))[data.CULPRIT_OP]
        assert culprit["pccRed"] is True and "pcc" in culprit["failed"].split(",")
