"""The replay endpoint through Flask's test client: each mode's answer is ``reportdb.replay(...).to_dict()`` of the
same report under the same policy, with the counts line and the anomalies' sentences; ``wait=0`` answers pending
first, then the same result; a bad mode is a 400."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

import reportdb
import reportdb.web as web
from reportdb.analysis.replay_rows import ReplayCounts

from test_replay_substitute import make_two_culprits


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("web-replay") / "two.sqlite"
    make_two_culprits(path)
    return path


@pytest.fixture(scope="module")
def client(report: Path) -> Any:
    return web.create_app([report]).test_client()


def _get(client: Any, url: str, status: int = 200) -> Any:
    response = client.get(url)
    assert response.status_code == status, response.get_data(as_text=True)
    return response.get_json()


def _strict(data: dict[str, Any]) -> Any:
    """A result's dict as the API's strict JSON gives it (NaN and infinities as None)."""
    return json.loads(json.dumps(data, allow_nan=True).replace("NaN", "null").replace("-Infinity", "null")
                      .replace("Infinity", "null"))


@pytest.mark.parametrize("mode, kwargs", [("isolated", {}), ("chain", {"chain": True}),
                                          ("substitute", {"chain": True, "substitute_failing": True})])
def test_each_mode_answers_what_replay_gives(client: Any, report: Path, mode: str, kwargs: dict[str, bool]) -> None:
    got = _get(client, f"api/reports/two/replay?mode={mode}")
    want = reportdb.replay(report, **kwargs)
    assert got["pending"] is False and got["mode"] == mode
    assert got["result"] == _strict(want.to_dict())
    assert got["line"] == ReplayCounts(want.rows).line()
    assert got["anomaly_notes"] == [a.describe() for a in want.anomalies]


def test_substitute_shows_the_hidden_culprit(client: Any) -> None:
    rows = _get(client, "api/reports/two/replay?mode=substitute")["result"]["rows"]
    by_op = {r["operation_id"]: r for r in rows}
    assert by_op[1]["substitute"] is True and by_op[1]["isolated"] is False
    assert by_op[3]["isolated"] is False and by_op[3]["substituted"] is False  # culprit B, hidden in the plain chain
    assert by_op[3]["chained"] is False


def test_wait_zero_answers_pending_then_the_result(report: Path) -> None:
    fresh = web.create_app([report]).test_client()
    first = _get(fresh, "api/reports/two/replay?mode=isolated&wait=0")
    deadline = time.monotonic() + 60
    answer = first
    while answer["pending"] and time.monotonic() < deadline:
        time.sleep(0.05)
        answer = _get(fresh, "api/reports/two/replay?mode=isolated&wait=0")
    assert first["pending"] is True or first["result"] is not None  # a fast machine may finish before it asks again
    assert answer["pending"] is False and answer["result"]["first_failure"]["operation_id"] == 1
    assert _get(fresh, "api/reports/two/replay?mode=isolated")["result"] == answer["result"]


def test_bad_mode_is_refused(client: Any) -> None:
    assert "mode" in _get(client, "api/reports/two/replay?mode=sideways", 400)["error"]
