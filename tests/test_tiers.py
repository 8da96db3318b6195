"""The test tiers' contract: ``--fast`` is the one definition of the fast tier (README and ``.ci/run`` use it, no
copy of its marker expression), markers are strict, and a test that starts a process without the ``process`` marker
fails (tests/conftest.py), so the fast tier cannot start one unseen.

The guard is checked the only way it can be: a pytest run (a subprocess) of a few sample tests beside a copy of this
suite's conftest.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FAST_TIER, ROOT

pytestmark = pytest.mark.process  # runs pytest in a subprocess

SAMPLES = '''
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile

import pytest


def test_plain(tmp_path):
    facts = {"worker": os.environ.get("PYTEST_XDIST_WORKER"), "tmp_path": str(tmp_path), "tempdir": tempfile.gettempdir()}
    with open(os.environ["SAMPLE_FACTS"], "w") as out:
        json.dump(facts, out)


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


def _run_samples(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """Run the samples under a copy of this suite's conftest and pytest settings; test name -> outcome (from ``-rA``'s
    summary, which one process and pytest-xdist's workers print alike). ``test_plain`` writes where it ran to
    ``tmp_path/facts.json``."""
    for name in ("conftest.py", "pg_server.py", "s3_server.py", "served.py"):  # conftest and the modules whose fixtures it imports
        shutil.copy(ROOT / "tests" / name, tmp_path / name)
    (tmp_path / "test_samples.py").write_text(SAMPLES)
    section = re.search(r"^\[tool\.pytest\.ini_options\]\n(.*?)(?=^\[)", (ROOT / "pyproject.toml").read_text(), re.S | re.M)
    assert section is not None
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\n" + section.group(1).replace('["tests"]', '["."]'))
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**(os.environ if env is None else env), "SAMPLE_FACTS": str(tmp_path / "facts.json")},
    )
    outcomes = {name: outcome for outcome, name in re.findall(r"^(PASSED|FAILED|ERROR) test_samples\.py::(\w+)", out.stdout, re.M)}
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


def test_fast_runs_on_every_core_with_its_files_in_memory(tmp_path: Path) -> None:
    """``--fast`` spreads the tier over pytest-xdist workers and, with no TMPDIR or --basetemp given, puts pytest's
    and tempfile's temporary files on /dev/shm where that is a tmpfs with room (tests/conftest.py); ``-n 0`` and
    ``--basetemp`` are the user's to override it."""
    from conftest import _memory_tmp

    # as a user's shell would start it: no TMPDIR, none of this run's pytest-xdist worker variables
    env = {key: value for key, value in os.environ.items() if key != "TMPDIR" and not key.startswith("PYTEST_")}
    assert _run_samples(tmp_path, "--fast", "-k", "plain", env=env) == {"test_plain": "PASSED"}
    facts = json.loads((tmp_path / "facts.json").read_text())
    assert facts["worker"] is not None and facts["worker"].startswith("gw")
    memory = _memory_tmp()
    if memory is not None:  # a machine without a writable tmpfs at /dev/shm keeps them on disk
        assert facts["tmp_path"].startswith(memory + "/") and facts["tempdir"] == memory

    chosen = tmp_path / "chosen"
    assert _run_samples(tmp_path, "--fast", "-k", "plain", "-n", "0", "--basetemp", str(chosen), env=env) == {
        "test_plain": "PASSED"
    }
    facts = json.loads((tmp_path / "facts.json").read_text())
    assert facts["worker"] is None and facts["tmp_path"].startswith(str(chosen))


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
