"""The operation list's answer through Flask's test client: each operation's worst local SQNR (what ``sort=error``
ranks by, so the page can show the key it sorts by) and the count of operations that fail only globally (victims),
checked against numpy."""

from __future__ import annotations

import math
from typing import Any

import pytest

import reportdb.web as web

import web_debug_data as data


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The API over run_a (a culprit and its victims) and drift (victims only)."""
    base = tmp_path_factory.mktemp("web-list")
    data.build(base / "run_a", 0)
    data.build_drift(base / "drift")
    return web.create_app([base / "run_a", base / "drift"]).test_client()


def _items(client: Any, url: str) -> Any:
    """The JSON answer of a GET that must succeed."""
    response = client.get(url)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def _db(value: float | str | None) -> float | None:
    """A local SQNR as the answer carries it, as a float."""
    return None if value is None else float(value)  # "inf" / "-inf" travel as strings


def test_sort_by_error_is_sorted_by_the_local_sqnr_it_carries(client: Any) -> None:
    found = _items(client, "api/reports/run_a/operations?sort=error")
    shown = [_db(op["local_sqnr_db"]) for op in found["items"]]
    assert shown == sorted(shown, key=lambda v: math.inf if v is None else v)
    chain = data.chain(0)
    by_id = {op["id"]: _db(op["local_sqnr_db"]) for op in found["items"]}
    op = data.CULPRIT_OP
    assert by_id[op] == pytest.approx(data.sqnr_db(chain["device"][op], chain["local"][op]), abs=1e-9)
    assert by_id[1] == math.inf  # no error at all
    assert found["victims"] == 3 and found["global_only"] is False


def test_victims_are_counted_without_a_culprit(client: Any) -> None:
    drift = data.drift_chain()
    victims = sum(data.sqnr_db(drift["device"][op], drift["global"][op]) < 30 for op in range(1, data.DRIFT_OPS + 1))
    found = _items(client, "api/reports/drift/operations?limit=2")  # counted over the report, not the page
    assert found["first_culprit"] is None and found["judged"] is True
    assert found["victims"] == victims == 6
