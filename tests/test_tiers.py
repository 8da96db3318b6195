"""The test tiers' contract: ``--fast`` is the one definition of the fast tier (README and ``.ci/run`` use it, no
copy of its marker expression), markers are strict, and a test that starts a process without the ``process`` marker
fails (tests/conftest.py), so the fast tier cannot start one unseen.

The guard is checked the only way it can be: a pytest run (a subprocess) of a few sample tests beside a copy of this
suite's conftest.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FAST_TIER, ROOT

pytestmark = pytest.mark.process  # runs pytest in a subprocess

SAMPLES = '''
import multiprocessing
import subprocess
import sys

import pytest


def test_plain():
    assert True


def test_unmarked_subprocess():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_unmarked_multiprocessing():
    process = multiprocessing.get_context("spawn").Process(target=print)
    process.start()
    process.join()


@pytest.fixture()
def started():
    return subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True, check=True).stdout


def test_unmarked_fixture_that_starts_one(started):
    assert started


@pytest.mark.process
def test_marked_process(started):
    assert subprocess.run([sys.executable, "-c", "pass"]).returncode == 0


@pytest.mark.slow
def test_marked_slow():
    assert subprocess.run([sys.executable, "-c", "pass"]).returncode == 0  # a slow test builds and runs venvs
'''


def _run_samples(tmp_path: Path, *args: str) -> dict[str, str]:
    """Run the samples under a copy of this suite's conftest and pytest settings; test name -> outcome."""
    for name in ("conftest.py", "pg_server.py"):
        shutil.copy(ROOT / "tests" / name, tmp_path / name)
    (tmp_path / "test_samples.py").write_text(SAMPLES)
    section = re.search(r"^\[tool\.pytest\.ini_options\]\n(.*?)(?=^\[)", (ROOT / "pyproject.toml").read_text(), re.S | re.M)
    assert section is not None
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\n" + section.group(1).replace('["tests"]', '["."]'))
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-rA", *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    outcomes = dict(re.findall(r"^test_samples\.py::(\w+) (PASSED|FAILED|ERROR)", out.stdout, re.M))
    assert outcomes, out.stdout + out.stderr
    if "FAILED" in outcomes.values() or "ERROR" in outcomes.values():
        assert "this fast-tier test starts another process" in out.stdout, out.stdout
    return outcomes


def test_a_test_that_starts_a_process_without_the_marker_fails(tmp_path: Path) -> None:
    assert _run_samples(tmp_path) == {
        "test_plain": "PASSED",
        "test_unmarked_subprocess": "FAILED",
        "test_unmarked_multiprocessing": "FAILED",
        "test_unmarked_fixture_that_starts_one": "ERROR",
        "test_marked_process": "PASSED",
        "test_marked_slow": "PASSED",
    }


def test_fast_selects_neither_slow_nor_process(tmp_path: Path) -> None:
    """The marked tests are left out; the unmarked ones that start a process are in the tier, and fail there."""
    assert _run_samples(tmp_path, "--fast") == {
        "test_plain": "PASSED",
        "test_unmarked_subprocess": "FAILED",
        "test_unmarked_multiprocessing": "FAILED",
        "test_unmarked_fixture_that_starts_one": "ERROR",
    }


def test_the_fast_tier_is_written_once() -> None:
    """README and CI run ``--fast``; neither, nor pyproject, keeps a copy of the expression; markers are strict."""
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert "python -m pytest --fast -q" in readme
    assert re.search(r"-m pytest -q --fast\b", ci)
    for text in (readme, ci, pyproject):
        assert FAST_TIER not in text and "not slow and not process" not in text
    assert "--strict-markers" in re.search(r"^addopts = (.*)$", pyproject, re.M).group(1)  # type: ignore[union-attr]
