"""The built wheel, installed in a fresh virtual environment, opens and upgrades a real legacy report.

This proves the alembic migrations ship inside the wheel, not only in the source tree.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT


@pytest.mark.slow
def test_installed_wheel_opens_and_upgrades_a_report(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(dist)], check=True, timeout=600
    )
    wheel = next(dist.glob("reportdb-*.whl"))
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", str(wheel)], check=True, timeout=900)
    report = tmp_path / "report"
    shutil.copytree(FIXTURES / "ttnn-0.62.2-bin" / "report", report, ignore=shutil.ignore_patterns("tensors"))
    script = f"""
import pathlib, numpy as np, reportdb
assert "site-packages" in reportdb.__file__, reportdb.__file__
import reportdb.migrations as m
assert (pathlib.Path(m.__file__).parent / "versions").is_dir()
with reportdb.open({str(report)!r}, "a") as r:
    r.put_tensor(1, np.arange(6, dtype=np.float32).reshape(2, 3))
with reportdb.open({str(report)!r}) as r:
    assert r.tensor(1).sum() == 15
    print(r.schema_revision)
"""
    out = subprocess.run([str(py), "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0006"
    cli = subprocess.run([str(env_dir / "bin" / "reportdb"), "info", str(report)], capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0 and "operations" in cli.stdout, cli.stderr
