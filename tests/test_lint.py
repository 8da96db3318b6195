"""The code passes pyflakes' checks as ruff runs them (``[tool.ruff]`` in pyproject.toml: unused imports and
variables, undefined and redefined names), so dead or misspelt names cannot land. ruff is pinned in the test extra."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from conftest import ROOT


@pytest.mark.process
def test_ruff_finds_nothing() -> None:
    assert importlib.util.find_spec("ruff") is not None, "ruff is missing: pip install -e '.[test]' installs it"
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "reportdb", "tests", "benchmarks",
                          "migrations"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
