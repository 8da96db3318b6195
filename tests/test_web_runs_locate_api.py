"""Where run B differs from run A through the web API (``api/runs/locate``, Flask's test client): the worst tile and
the core of a sharded output, as ``reportdb.locate(B, ID, against=(A, ID))`` (``locate --against``) finds them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import reportdb
import reportdb.web as web

import web_debug_data as data


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two runs of the sharded report: right, and with one core's shard wrong."""
    base = tmp_path_factory.mktemp("web-runs-locate")
    data.build_sharded(base / "right", wrong=False)
    data.build_sharded(base / "wrong")
    return base


@pytest.fixture(scope="module")
def client(root: Path) -> Any:
    """The API over both runs."""
    return web.create_app([root / "right", root / "wrong"]).test_client()


def test_the_diverging_tile_and_core_as_locate_against_finds_them(client: Any, root: Path) -> None:
    t = data.SHARDED_TENSOR
    response = client.get(f"api/runs/locate?a=right&b=wrong&tensor_a={t}&tensor_b={t}&top=3")
    assert response.status_code == 200, response.get_data(as_text=True)
    found = response.get_json()
    engine = reportdb.locate(root / "wrong", t, against=(root / "right", t), top=3).to_dict()
    assert found["worst_tiles"] == engine["worst_tiles"] and found["golden"] == engine["golden"]
    out, golden = data.sharded_tensor()
    err = np.abs(out[0, 0].astype(np.float64) - golden[0, 0])
    worst = found["worst_tiles"][0]
    assert worst["tile"] == [0, 0, 1, 2]  # rows 32:64, columns 64:96: the wrong shard
    assert worst["max_abs_error"] == pytest.approx(float(err[32:64, 64:96].max()), rel=1e-6)
    wrong = [c for c in found["cores"] if c["mismatches"]]
    assert [c["core"] for c in wrong] == [list(data.WRONG_CORE)]
    assert wrong[0]["region"] == {"index": [0, 0], "y": [32, 64], "x": [64, 96]}


def test_refusals(client: Any) -> None:
    assert client.get("api/runs/locate?a=right&b=wrong&tensor_a=2").status_code == 400
    assert client.get("api/runs/locate?a=right&b=nowhere&tensor_a=2&tensor_b=2").status_code == 404
