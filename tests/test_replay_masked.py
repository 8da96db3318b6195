"""Replay of an operation whose output is defined only in part (the pre-all-gather norms' statistics: column 0 of
each 32-wide block): the comparison sees only the defined values, so whatever the device left in the other columns
neither fails it nor hides a wrong statistic."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import reportdb
from test_repro import RUN

BF16 = ml_dtypes.bfloat16


def summary(tensor_id: int) -> str:
    """A tensor argument as ttnn 0.81's graph report records it."""
    return f"ttnn.Tensor(shape=Shape([1, 1, 64, 96]), dtype=DataType.BFLOAT16, tensor_id={tensor_id})"


def make_stats(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Three pre-all-gather operations on one input: op 1's statistics right, with junk in the undefined columns;
    op 2's with one row's statistic 1.5x too large; op 3 layer norm's right; then op 4, a clone of op 1's statistics,
    junk included. Returns op 1's device output and its defined values (zeros elsewhere)."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 1, 64, 96)).astype(BF16)
    wide = x.astype(np.float64)
    rms = np.zeros((1, 1, 64, 32), np.float32)
    rms[..., 0] = (wide * wide).sum(-1)
    layer = np.zeros((1, 1, 64, 64), np.float32)
    layer[..., 0], layer[..., 32] = (wide * wide).sum(-1), wide.sum(-1)
    junk = rng.standard_normal((1, 1, 64, 32)).astype(np.float32) * 1e3  # what the device's memory held there
    garbage = rms + np.where(np.arange(32) == 0, 0, junk)
    wrong = rms.copy()
    wrong[0, 0, 40, 0] *= 1.5  # one row's statistic wrong: one value among 64 defined ones (2048 stored)
    with reportdb.Writer(path) as w:
        w.put_tensor(1, x, ttnn_dtype="BFLOAT16", layout="TILE")
        for tensor_id, stats in ((2, garbage), (3, wrong), (4, layer)):
            w.put_tensor(tensor_id, stats.astype(BF16), ttnn_dtype="BFLOAT16", layout="TILE")
        w.add_operation(1, "ttnn.rms_norm_pre_all_gather", inputs=[1], outputs=[2], arguments={"0": summary(1)})
        w.add_operation(2, "ttnn.rms_norm_pre_all_gather", inputs=[1], outputs=[3], arguments={"0": summary(1)})
        w.add_operation(3, "ttnn.layer_norm_pre_all_gather", inputs=[1], outputs=[4], arguments={"0": summary(1)})
        w.put_tensor(5, garbage.astype(BF16), ttnn_dtype="BFLOAT16", layout="TILE")
        w.add_operation(4, "ttnn.clone", inputs=[2], outputs=[5], arguments={"0": summary(2)})
    return garbage.astype(BF16), rms.astype(BF16)


def test_only_the_defined_columns_are_judged(tmp_path: Path) -> None:
    garbage, rms = make_stats(tmp_path / "stats.sqlite")
    garbage_row, wrong_row, layer_row, _ = reportdb.replay(tmp_path / "stats.sqlite").rows
    assert garbage_row.passed and garbage_row.metrics is not None and garbage_row.metrics.shape_a == (1, 1, 64, 1)
    assert not wrong_row.passed and wrong_row.metrics is not None and wrong_row.metrics.count == 64
    assert layer_row.passed and layer_row.metrics is not None and layer_row.metrics.shape_a == (1, 1, 64, 2)
    # judged whole, the garbage columns alone would fail the first
    assert not reportdb.compare(garbage, rms).passed


def test_a_chain_carries_the_devices_values_where_an_output_is_undefined(tmp_path: Path) -> None:
    make_stats(tmp_path / "stats.sqlite")
    rows = reportdb.replay(tmp_path / "stats.sqlite", chain=True).rows
    assert [(r.operation_id, r.passed) for r in rows] == [(1, True), (2, False), (3, True), (4, True)]
    assert rows[3].metrics is not None and rows[3].metrics.max_abs_error == 0


@pytest.mark.process
def test_a_repro_folder_judges_the_defined_columns_too(tmp_path: Path) -> None:
    make_stats(tmp_path / "stats.sqlite")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    for op_id, passes in ((1, True), (2, False)):
        folder = reportdb.make_repro(tmp_path / "stats.sqlite", op_id, tmp_path / f"r{op_id}")
        assert json.loads((folder / "repro.json").read_text())["reportdb_verdict"]["passed"] is passes
        run = subprocess.run([sys.executable, "-c", RUN], cwd=folder, capture_output=True, text=True, env=env,
                             timeout=300)
        assert (run.returncode == 0) is passes, run.stdout[-2000:]
