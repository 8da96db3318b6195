"""``reportdb op`` and ``reportdb.operation_context``: an operation's arguments, stack trace with source lines,
duration, device, tensors with their producers and consumers, and their golden comparisons with verdicts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import reportdb

from conftest import FIXTURES

ROOT = Path(__file__).resolve().parents[1]
SOURCE = "import ttnn\n\ndef forward(x, w):\n    y = ttnn.matmul(x, w)\n    z = ttnn.relu(y)\n    return ttnn.add(z, z)\n"


def _writer_report(path: Path) -> Path:
    """Three operations: matmul(1, 2) -> 3, relu(3) -> 4, add(4, 4) -> 5; a golden record for tensor 4."""
    rng = np.random.default_rng(5)
    x, w_ = rng.standard_normal((32, 32)).astype(np.float32), rng.standard_normal((32, 32)).astype(np.float32)
    y = x @ w_
    with reportdb.Writer(path) as w:
        w.add_device(0, num_x_cores=8, num_y_cores=8)
        for tensor_id, value in ((1, x), (2, w_), (3, y), (4, np.maximum(y, 0)), (5, 2 * np.maximum(y, 0))):
            w.put_tensor(tensor_id, value, ttnn_dtype="FLOAT32", device_id=0)
        w.put_tensor(104, np.maximum(y, 0) * 1.5)  # a wrong golden: relu's comparison fails by scale
        w.add_rows("source_files", [{"id": 1, "path": "model.py", "contents": SOURCE}])
        w.add_operation(1, "ttnn.matmul", duration=0.25, arguments={"transpose_b": False}, inputs=[1, 2], outputs=[3],
                        stack_trace='File "model.py", line 4, in forward')
        w.add_operation(2, "ttnn.relu", duration=0.5, inputs=[3], outputs=[4],
                        stack_trace=['File "elsewhere.py", line 9, in g', 'File "model.py", line 5, in forward'])
        w.add_operation(3, "ttnn.add", inputs=[4, 4], outputs=[5])
        w.add_rows("local_tensor_comparison_records", [{"tensor_id": 4, "golden_tensor_id": 104, "desired_pcc": 0.99}])
    return path


def test_operation_context_of_a_writer_report(tmp_path: Path) -> None:
    ctx = reportdb.operation_context(_writer_report(tmp_path / "r"), 2)
    assert (ctx.operation_id, ctx.name, ctx.duration) == (2, "ttnn.relu", 0.5)
    assert ctx.stack_trace == 'File "elsewhere.py", line 9, in g\nFile "model.py", line 5, in forward'
    (src,) = ctx.source  # elsewhere.py is not in the report: no lines for it
    assert (src.path, src.line, src.first_line) == ("model.py", 5, 3)
    assert src.lines == tuple(SOURCE.splitlines()[2:6])
    assert ctx.device_ids == (0,) and ctx.devices[0]["num_x_cores"] == 8
    (inp,) = ctx.inputs
    assert inp.tensor_id == 3 and inp.producer == reportdb.analysis.ops.OperationRef(1, "ttnn.matmul")
    assert [c.operation_id for c in inp.consumers] == [2] and inp.stored and inp.comparisons == ()
    (out,) = ctx.outputs
    assert out.tensor_id == 4 and [(c.operation_id, c.name) for c in out.consumers] == [(3, "ttnn.add")]
    (cmp,) = out.comparisons
    assert (cmp.kind, cmp.golden_tensor_id, cmp.verdict, cmp.role) == ("local", 104, "fail", "culprit")
    assert cmp.pcc == pytest.approx(1.0) and cmp.failed == ("scale_or_offset", "sqnr_db", "tile_sqnr_db")  # PCC is blind to the scale; its fit and SQNR are not
    first = reportdb.operation_context(tmp_path / "r", 1)
    assert first.arguments == (("transpose_b", "False"),) and [t.tensor_id for t in first.inputs] == [1, 2]
    assert first.inputs[0].producer is None
    with pytest.raises(reportdb.errors.InvalidArgumentError, match="no operation 9 on rank 0 .operations 1-3."):
        reportdb.operation_context(tmp_path / "r", 9)


@pytest.mark.process
def test_cli_op_text_json_and_a_missing_operation(tmp_path: Path) -> None:
    path = _writer_report(tmp_path / "r")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = lambda *a: subprocess.run([sys.executable, "-m", "reportdb", "op", *a], capture_output=True, text=True,
                                    timeout=300, env=env)
    text = run(str(path), "2")
    assert text.returncode == 0, text.stderr
    assert "operation 2 ttnn.relu" in text.stdout and ">     5 |     z = ttnn.relu(y)" in text.stdout
    assert "produced by: op 1 ttnn.matmul; consumed by: op 2 ttnn.relu" in text.stdout
    assert "produced by: op 2 ttnn.relu; consumed by: op 3 ttnn.add" in text.stdout
    assert "fail (scale_or_offset,sqnr_db,tile_sqnr_db) [culprit]" in text.stdout
    data = json.loads(run(str(path), "2", "--json").stdout)
    assert data["outputs"][0]["comparisons"][0]["role"] == "culprit"
    assert data["inputs"][0]["producer"] == {"operation_id": 1, "name": "ttnn.matmul"}
    missing = run(str(path), "9")
    assert missing.returncode == 1 and len(missing.stderr.strip().splitlines()) == 1
    assert "no operation 9" in missing.stderr


def test_op_on_the_real_fixture_reports(tmp_path: Path) -> None:
    migrated = tmp_path / "report"
    reportdb.migrate(FIXTURES / "ttnn-0.64.5-report-tensorbin" / "report", migrated)
    ctx = reportdb.operation_context(migrated, 3)
    assert ctx.name == "ttnn.embedding" and ctx.duration == pytest.approx(0.00293161390380582)
    assert ("core_grid", "(8, 8)") in ctx.arguments and ctx.stack_trace == 'File "model.py", line 3, in forward'
    assert [t.tensor_id for t in ctx.inputs] == [5, 6] and ctx.inputs[0].producer is not None
    assert ctx.inputs[0].producer.name == "ttnn.all_gather" and ctx.inputs[0].dtype == "DataType.BFLOAT16"
    (out,) = ctx.outputs
    assert {c.kind: (c.verdict, c.role) for c in out.comparisons} == {"local": ("fail", "culprit"), "global": ("fail", "culprit")}
    assert out.comparisons[0].pcc == pytest.approx(out.comparisons[0].recorded_pcc, abs=1e-6)
    legacy = reportdb.operation_context(FIXTURES / "ttnn-0.62.2-bin" / "report", 4)  # the original folder, read as is
    assert legacy.name == "ttnn.linear" and legacy.outputs and not legacy.outputs[0].stored
    assert {c.status for c in legacy.outputs[0].comparisons} == {"tensor not stored"}


def test_an_id_that_is_not_an_integer_is_corruption_not_a_crash(tmp_path: Path) -> None:
    import sqlite3

    from reportdb.errors import CorruptionError

    path = _writer_report(tmp_path / "r")
    con = sqlite3.connect(path / "db.sqlite", isolation_level=None)
    con.execute("UPDATE input_tensors SET tensor_id='four' WHERE operation_id=3")
    con.close()
    with pytest.raises(CorruptionError, match="operation tables.*not an integer"):
        reportdb.operation_context(path, 2)
    with pytest.raises(CorruptionError, match="not an integer"):
        reportdb.compare_golden(path)
