"""Reports with 10^6 graph edges (issue 30): the graph is read in linear time, and replay, op, repro, locate and the
page's operation view answer in seconds with the right answer.

Each report is a small one reportdb wrote, given 10^6 ``input_tensors`` rows with plain sqlite3: 1000 operations
each listing tensor 1 1000 times (``fan``), or 10^6 operations each reading tensor 1 once (``wide``: a membership test
in a list of its consumers was quadratic, 100k of them took 81 s). The bounds are generous (slow CI machines): the
point is linear against quadratic.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import ml_dtypes
import numpy as np
import pytest

import reportdb
import reportdb.web as web
from reportdb.analysis.graph import tensor_graph
from reportdb.analysis.ops import CONSUMERS_LISTED

from conftest import ROOT, built_once

pytestmark = pytest.mark.slow
BOUND = 60.0  # seconds; each measured at 1-5 s on a 2-core VM
EDGES = 1_000_000


def _base(path: Path) -> None:
    """Operation 1: relu of tensor 1 into tensor 2 (correct), tensor 2's local golden tensor 3."""
    x = (np.arange(32 * 32, dtype=np.float32).reshape(32, 32) - 512).astype(ml_dtypes.bfloat16)
    y = np.maximum(x.astype(np.float32), 0).astype(ml_dtypes.bfloat16)
    with reportdb.Writer(path) as w:
        for tensor_id, array in ((1, x), (2, y), (3, y)):
            w.put_tensor(tensor_id, array, ttnn_dtype="BFLOAT16", layout="TILE")
        w.add_operation(1, "ttnn.relu", inputs=[1], outputs=[2], arguments={"0": "ttnn.Tensor(tensor_id=1)"})
        w.add_rows("local_tensor_comparison_records",
                   [{"tensor_id": 2, "golden_tensor_id": 3, "matches": 1, "desired_pcc": 0.99, "actual_pcc": 1.0}])


def _hostile(path: Path, ops: int, per: int) -> Path:
    """The base report and operations 2..ops+1 (ttnn.add, outputs not stored), each listing tensor 1 ``per`` times."""
    built_once(path, _base)
    con = sqlite3.connect(path)
    con.executemany("INSERT INTO operations(operation_id, name, rank) VALUES (?, 'ttnn.add', 0)",
                    ((i,) for i in range(2, ops + 2)))
    con.executemany("INSERT INTO output_tensors(operation_id, output_index, tensor_id, rank) VALUES (?, 0, ?, 0)",
                    ((i, 10 + i) for i in range(2, ops + 2)))
    con.executemany("INSERT INTO input_tensors(operation_id, input_index, tensor_id, rank) VALUES (?, ?, 1, 0)",
                    ((o, i) for o in range(2, ops + 2) for i in range(per)))
    con.commit()
    con.close()
    return path


@pytest.fixture(scope="module")
def fan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _hostile(tmp_path_factory.mktemp("fan") / "fan.sqlite", 1000, 1000)


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _hostile(tmp_path_factory.mktemp("wide") / "wide.sqlite", EDGES, 1)


def timed(call: Callable[[], Any]) -> Any:
    """``call()``, which must finish within :data:`BOUND`."""
    start = time.monotonic()
    result = call()
    assert time.monotonic() - start < BOUND
    return result


def test_the_graph_is_read_in_linear_time(fan: Path, wide: Path) -> None:
    with reportdb.open(wide) as report:
        graph = timed(lambda: tensor_graph(report))
    assert graph.consumers[1] == list(range(1, EDGES + 2)) and len(graph.names) == EDGES + 1
    with reportdb.open(fan) as report:
        graph = timed(lambda: tensor_graph(report))
    assert graph.consumers[1] == list(range(1, 1002)) and graph.inputs[2] == [1] * 1000


def test_replay(fan: Path, wide: Path) -> None:
    rows = timed(lambda: reportdb.replay(fan)).rows
    assert len(rows) == 1001 and (rows[0].status, rows[0].passed) == ("compared", True)
    assert {(r.status, r.unsupported) for r in rows[1:]} == {("unsupported_arguments", ("inputs 2-999",))}
    only = timed(lambda: reportdb.replay(wide, ops="ttnn.relu")).rows
    assert [(r.operation_id, r.status, r.passed) for r in only] == [(1, "compared", True)]


def test_op_and_the_page_s_operation_view(fan: Path, wide: Path) -> None:
    context = timed(lambda: reportdb.operation_context(fan, 2))
    assert len(context.inputs) == 1000 and [t.index for t in context.inputs] == list(range(1000))
    first = context.inputs[0]
    assert first.tensor_id == 1 and first.consumer_count == 1001 and first.stored
    assert [c.operation_id for c in first.consumers] == list(range(1, CONSUMERS_LISTED + 1))
    one = timed(lambda: reportdb.operation_context(wide, 1))
    assert one.inputs[0].consumer_count == EDGES + 1 and len(one.inputs[0].consumers) == CONSUMERS_LISTED
    assert one.outputs[0].comparisons[0].verdict == "pass"
    client = web.create_app([fan]).test_client()
    name = client.get("api/reports").get_json()["reports"][0]["name"]
    response = timed(lambda: client.get(f"api/reports/{name}/operations/2"))
    assert response.status_code == 200, response.get_data(as_text=True)[:500]
    page = response.get_json()
    assert len(page["inputs"]) == 1000 and page["inputs"][999]["consumer_count"] == 1001


def test_repro_and_locate(fan: Path, wide: Path, tmp_path: Path) -> None:
    for path in (fan, wide):
        folder = timed(lambda: reportdb.make_repro(path, 1, tmp_path / path.stem))
        assert (folder / "input0.npy").exists()
        with reportdb.open(path) as report:
            found = timed(lambda: reportdb.locate(report, 2, golden="local"))
        assert found.max_abs_error == 0.0 and found.op == "ttnn.relu"


@pytest.mark.process
def test_the_commands(fan: Path, tmp_path: Path) -> None:
    """``reportdb replay``, ``op``, ``repro`` and ``locate`` on the command line."""
    for args, expected in ((["replay", str(fan)], "compared 1 of 1001 operations"),
                           (["op", str(fan), "2"], "and 969 more"),
                           (["repro", str(fan), "1", "-o", str(tmp_path / "r")], "wrote"),
                           (["locate", str(fan), "2", "--golden"], "")):
        done = timed(lambda: subprocess.run([sys.executable, "-m", "reportdb", *args], capture_output=True, text=True,
                                            cwd=ROOT, timeout=300))
        assert done.returncode == 0, done.stderr
        assert expected in done.stdout
    shutil.rmtree(tmp_path / "r")
