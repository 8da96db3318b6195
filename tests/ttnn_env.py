"""Cached virtual environments for the tests that need other packages: real ttnn wheels, ttnn-visualizer.

ttnn wheels exist for CPython 3.10 and 3.12 on Linux x86-64 only, so each wheel gets its own venv made
with the matching interpreter (found as ``REPORTDB_PYTHON310``/``REPORTDB_PYTHON312``, in pyenv, or on
PATH). ttnn-visualizer pins many heavy dependencies, so it gets a venv of its own too. The venvs live in
``REPORTDB_TTNN_ENVS`` (default ``~/.cache/reportdb-ttnn-envs``), named by what they hold (pinned
version, interpreter, requirements), and are reused across runs; a venv counts only once its ``.ready``
marker exists, so an interrupted build is redone. reportdb is installed in the ttnn venvs in editable
mode from this checkout (its ``migrations`` folder maps to ``reportdb.migrations``, which a plain
``PYTHONPATH`` cannot express), so the venv always runs the code under test.

``cached_venv`` raises ``EnvUnavailable`` (the interpreter is missing, or pip cannot download) and
``EnvBuildError`` (any other install failure); the pytest helpers turn them into a skip that says why
and a failure. ``tests/data/make/make_all.py`` uses the same venvs to remake the fixture data.

Cost measured here: ttnn 0.62.2 + deps about 1 minute and 220 MB; ttnn 0.81.1 about 1.5 minutes
and 670 MB (the wheel alone is ~300 MB). A cached run costs nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]
SFPI = "/opt/tenstorrent/sfpi"
# A one-chip cluster descriptor that lets ttnn 0.81 tilize and pack block floats with no device
# (tests/data/README.md says where it comes from).
MOCK_CLUSTER = ROOT / "tests" / "data" / "mock-cluster" / "wormhole_N150.yaml"
_DOWNLOAD_ERRORS = re.compile(
    r"No matching distribution|Could not find a version|Failed to establish a new connection|"
    r"Connection (?:refused|reset|aborted)|Read timed out|Temporary failure in name resolution|"
    r"HTTPError|ProxyError|SSLError|Network is unreachable",
    re.IGNORECASE,
)


class EnvUnavailable(Exception):
    """The environment cannot be built here (no such interpreter, or pip cannot download): a reason to skip."""


class EnvBuildError(Exception):
    """Building the environment failed for another reason: a real failure."""


@dataclass(frozen=True)
class TtnnEnv:
    """A ready venv: its interpreter and the environment to run scripts with."""

    python: Path
    ttnn_version: str

    def environ(self, extra_env: dict[str, str] | None = None) -> dict[str, str]:
        """This process's environment without reportdb/python/ttnn settings, with the mock cluster set."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("REPORTDB_", "PYTHON", "TTNN_"))}
        env["TT_METAL_MOCK_CLUSTER_DESC_PATH"] = str(MOCK_CLUSTER)
        env.update(extra_env or {})
        return env

    def run(self, *args: str, timeout: float = 600, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run the venv's python with reportdb importable from the checkout; fail the test on a non-zero exit.

        The working directory is the first argument's folder (the test's own): ttnn writes runtime
        files into the current directory.
        """
        proc = subprocess.run(
            [str(self.python), *args], capture_output=True, text=True, timeout=timeout, env=self.environ(extra_env),
            cwd=Path(args[0]).parent,
        )
        if proc.returncode != 0:
            pytest.fail(f"ttnn {self.ttnn_version} script failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")
        return proc


def find_interpreter(minor: str) -> Path | None:
    """CPython ``minor`` (e.g. "3.10"): ``REPORTDB_PYTHON310``, else the newest pyenv build, else on PATH."""
    explicit = os.environ.get(f"REPORTDB_PYTHON{minor.replace('.', '')}")
    if explicit:
        return Path(explicit)
    roots = [os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))]
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        roots.insert(0, subprocess.run(["pyenv", "root"], capture_output=True, text=True, timeout=30).stdout.strip())
    for root in roots:
        found = sorted(glob.glob(f"{root}/versions/{minor}.*/bin/python"))
        if found:
            return Path(found[-1])
    on_path = shutil.which(f"python{minor}")
    return Path(on_path) if on_path else None


def _dependencies() -> list[str]:
    """reportdb's runtime requirements, read from pyproject.toml (a change makes a new venv)."""
    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"^dependencies\s*=\s*\[(.*?)\]", text, re.MULTILINE | re.DOTALL)
    assert block is not None, "pyproject.toml has no dependencies list"
    return re.findall(r'"([^"]+)"', block.group(1))


def cache_dir() -> Path:
    """Where the venvs live: ``REPORTDB_TTNN_ENVS`` or ``~/.cache/reportdb-ttnn-envs``."""
    return Path(os.environ.get("REPORTDB_TTNN_ENVS", Path.home() / ".cache" / "reportdb-ttnn-envs"))


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold the cache's lock: concurrent test runs build a venv once, never half of it twice."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def cached_venv(name: str, interpreter: Path, requirements: list[str], what: str) -> Path:
    """The python of venv ``name`` in the cache, with ``requirements`` pip-installed; built on first use.

    ``name`` must change whenever what the venv should hold changes (callers put the pinned versions
    and a hash of the interpreter and requirements in it). ``what`` names the install in messages.
    Raises ``EnvUnavailable`` when pip cannot download, ``EnvBuildError`` on any other failure; a
    failed build leaves nothing behind.
    """
    cache = cache_dir()
    venv = cache / name
    python = venv / "bin" / "python"
    with _locked(cache):
        if not (venv / ".ready").exists():
            shutil.rmtree(venv, ignore_errors=True)
            try:
                made = subprocess.run([str(interpreter), "-m", "venv", str(venv)], capture_output=True, text=True)
                problem = made.stderr.strip()[-2000:] if made.returncode != 0 else ""
            except OSError as exc:
                problem = str(exc)
            if problem:
                shutil.rmtree(venv, ignore_errors=True)
                raise EnvBuildError(f"cannot make a venv with {interpreter}: {problem}")
            proc = subprocess.run(
                [str(python), "-m", "pip", "install", "--disable-pip-version-check", *requirements],
                capture_output=True, text=True, timeout=3600,
            )
            if proc.returncode != 0:
                output = proc.stdout[-3000:] + proc.stderr[-3000:]
                shutil.rmtree(venv, ignore_errors=True)
                lines = [line for line in output.strip().splitlines() if line.strip()]
                if _DOWNLOAD_ERRORS.search(output):
                    raise EnvUnavailable(f"cannot install {what}: {lines[-1] if lines else 'pip failed'}")
                raise EnvBuildError(f"installing {what} failed:\n{output}")
            (venv / ".ready").write_text("\n".join(requirements) + "\n")
    return python


def build_ttnn_env(ttnn_version: str, python_minor: str) -> TtnnEnv:
    """The cached venv with ``ttnn==ttnn_version`` and this checkout of reportdb on CPython ``python_minor``."""
    if not sys.platform.startswith("linux"):
        raise EnvUnavailable(f"ttnn {ttnn_version} wheels exist for Linux x86-64 only")
    interpreter = find_interpreter(python_minor)
    if interpreter is None or not interpreter.exists():
        raise EnvUnavailable(f"no CPython {python_minor} here (set REPORTDB_PYTHON{python_minor.replace('.', '')}); "
                             f"ttnn {ttnn_version} needs it")
    deps = _dependencies()
    tag = hashlib.sha256(" ".join([str(interpreter), str(ROOT), *deps]).encode()).hexdigest()[:8]
    python = cached_venv(f"ttnn-{ttnn_version}-py{python_minor}-{tag}", interpreter,
                         [f"ttnn=={ttnn_version}", "-e", str(ROOT)], f"ttnn {ttnn_version} (CPython {python_minor})")
    if ttnn_version.startswith("0.6"):
        Path(SFPI).mkdir(parents=True, exist_ok=True)  # these wheels only check that it exists at import
    return TtnnEnv(python, ttnn_version)


def ttnn_env(ttnn_version: str, python_minor: str) -> TtnnEnv:
    """``build_ttnn_env`` for a test: skips (saying why) when the interpreter is absent or the wheel cannot
    be downloaded; any other install failure fails the test."""
    try:
        return build_ttnn_env(ttnn_version, python_minor)
    except EnvUnavailable as exc:
        pytest.skip(str(exc))
    except EnvBuildError as exc:
        pytest.fail(str(exc))
