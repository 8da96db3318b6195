"""The CLI in a real subprocess: info, ls, upgrade, and one-line errors with a non-zero exit."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import reportdb

from conftest import FIXTURES


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reportdb", *args], capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.mark.process
def test_info_ls_upgrade_on_real_report(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "ttnn-0.62.2-bin" / "report", tmp_path / "rep", ignore=shutil.ignore_patterns("tensors"))
    rep = tmp_path / "rep"
    out = run("info", str(rep), "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["schema_revision"] is None and summary["tables"]["operations"] == 12
    up = run("upgrade", str(rep))
    assert up.returncode == 0, up.stderr
    with reportdb.open(rep, "a") as report:
        report.put_tensor(3, np.ones((2, 3), np.float32), ttnn_dtype="FLOAT32", layout="ROW_MAJOR")
    listing = json.loads(run("ls", str(rep), "--json").stdout)
    assert [(t["tensor_id"], t["shape"], t["dtype"], t["spec"]["ttnn_dtype"]) for t in listing] == [(3, [2, 3], "float32", "FLOAT32")]
    text = run("ls", str(rep)).stdout
    assert "FLOAT32" in text and "2x3" in text
    with reportdb.open(rep, "a") as report:  # wider cells than the header's: the columns still line up
        report.put_tensor(123456789012, np.ones((2, 3, 4, 5), np.float32), ttnn_dtype="FLOAT32", layout="ROW_MAJOR")
    lines = run("ls", str(rep)).stdout.splitlines()
    assert [len(re.split(r"\s{2,}", line.strip())) for line in lines] == [8, 8, 8]
    ends = {line.rindex(" ") + 1 + len(line.split()[-1]) for line in lines}
    assert len({len(line) for line in lines}) == 1 and len(ends) == 1
    info = run("info", str(rep))
    assert "tensors:         2" in info.stdout


@pytest.mark.process
def test_errors_are_one_line_with_nonzero_exit(tmp_path: Path) -> None:
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"garbage" * 1000)
    for args in (("info", str(tmp_path / "missing")), ("ls", str(junk)), ("upgrade", str(tmp_path / "nope.sqlite"))):
        out = run(*args)
        assert out.returncode != 0
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert not (tmp_path / "nope.sqlite").exists()
