"""Honest exit statuses and clear messages on the command line (issue #33): usage errors exit 2, a replay that
compared nothing exits 3 and every replay says how much it compared, tables whose columns never run together, and
the hints that name a command that works.

Every CLI test runs the real command in a subprocess (``python -m reportdb ...``) on reports built here or on the
project's fixtures.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import reportdb
from reportdb import Distribution, Placement

from conftest import FIXTURES

LEGACY = FIXTURES / "ttnn-0.62.2-bin" / "report"
BF16 = ml_dtypes.bfloat16


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reportdb", *args], capture_output=True, text=True, timeout=300)


def one_line(out: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a command (asserting there is exactly one and no traceback)."""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    return lines[0]


def columns(line: str) -> list[str]:
    """A table line's cells: columns stand at least two spaces apart, so two spaces split them."""
    return re.split(r"\s{2,}", line.strip())


def summary(tensor_id: int) -> str:
    """A tensor argument as ttnn 0.81's graph report records it."""
    return f"ttnn.Tensor(shape=Shape([32, 64]), dtype=DataType.BFLOAT16, layout=Layout.TILE, tensor_id={tensor_id})"


def make_replayable(path: Path, *, first_argument: str = "0") -> Path:
    """Five operations: 1 relu right, 2 relu whose output is the negated input (float32: a 10-digit ULP distance,
    max abs error with 6 digits), 3 all_gather (no reference), 4 softmax with an argument no reference reads, 5 a
    multiply whose second input is not stored. ``first_argument`` names op 1's argument: anything but "0" is one
    no reference reads, so a chain breaks at op 1 and never reaches op 2."""
    x = np.random.default_rng(3).uniform(0.5, 5.5, (32, 64)).astype(np.float32)
    with reportdb.Writer(path) as w:
        for tensor_id, array in ((1, x), (2, x), (3, -x), (4, x), (5, x)):
            w.put_tensor(tensor_id, array)
        w.add_operation(1, "ttnn.relu", inputs=[1], outputs=[2], arguments={first_argument: summary(1)})
        w.add_operation(2, "ttnn.relu", inputs=[2], outputs=[3], arguments={"0": summary(2)})
        w.add_operation(3, "ttnn.all_gather", inputs=[3], outputs=[4], arguments={"dim": "3", "0": summary(3)})
        w.add_operation(4, "ttnn.softmax", inputs=[4], outputs=[5], arguments={"dim": "-1", "frobnicate": "2"})
        w.add_operation(5, "ttnn.multiply", inputs=[5, 99], outputs=[6])
    return path


@pytest.fixture(scope="module")
def replayable(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_replayable(tmp_path_factory.mktemp("replay") / "ops.sqlite")


# --- the library ------------------------------------------------------------------------------------------------


def test_locate_takes_paths_as_its_siblings_do(tmp_path: Path) -> None:
    x = np.linspace(-1, 1, 64 * 64, dtype=np.float32).reshape(64, 64)
    with reportdb.Writer(tmp_path / "a") as w:
        w.put_tensor(1, x.astype(BF16))
        w.put_tensor(2, x)
    with reportdb.Writer(tmp_path / "b") as w:
        w.put_tensor(7, x)
    con = sqlite3.connect(tmp_path / "a" / "db.sqlite")
    con.execute("INSERT INTO local_tensor_comparison_records(tensor_id, golden_tensor_id, matches, desired_pcc, "
                "actual_pcc) VALUES (1, 2, 1, 0.99, 1.0)")
    con.commit()
    con.close()
    by_path = reportdb.locate(tmp_path / "a", 1, golden="local")
    by_name = reportdb.locate(str(tmp_path / "a"), 1, against=(str(tmp_path / "b"), 7))
    with reportdb.open(tmp_path / "a") as a, reportdb.open(tmp_path / "b") as b:
        opened = reportdb.locate(a, 1, against=(b, 7))
    assert by_path.golden == "local golden tensor 2" and by_name.golden.startswith("tensor 7 of ")
    assert by_path.max_abs_error == by_name.max_abs_error == opened.max_abs_error > 0


@pytest.mark.process
def test_compare_runs_json_describes_a_as_a_and_b_as_b(tmp_path: Path) -> None:
    x = np.linspace(-1, 1, 32 * 32, dtype=np.float32).reshape(32, 32)
    for name, array in (("a", x), ("b", x.astype(BF16))):
        with reportdb.Writer(tmp_path / name) as w:
            w.put_tensor(1, x)
            w.put_tensor(2, array)
            w.add_operation(1, "ttnn.relu", inputs=[1], outputs=[2])
    out = run("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json")
    (row,) = json.loads(out.stdout)["rows"]
    assert (row["tensor_a"], row["metrics"]["dtype_a"], row["metrics"]["dtype_b"]) == (2, "float32", "bfloat16")
    result = reportdb.compare_runs(tmp_path / "a", tmp_path / "b")
    assert result.rows[0].metrics is not None and result.rows[0].metrics.dtype_a == "float32"


def test_compare_runs_shapes_name_their_runs(tmp_path: Path) -> None:
    for name, shape in (("a", (32, 32)), ("b", (32, 64))):
        with reportdb.Writer(tmp_path / name) as w:
            w.put_tensor(1, np.zeros(shape, np.float32))
            w.put_tensor(2, np.ones(shape, np.float32))
            w.add_operation(1, "ttnn.relu", inputs=[1], outputs=[2])
    (row,) = reportdb.compare_runs(tmp_path / "a", tmp_path / "b").rows
    assert row.metrics is not None and (row.metrics.shape_a, row.metrics.shape_b) == ((32, 32), (32, 64))
    assert row.shape == (32, 32) and row.verdict == "diverges"
