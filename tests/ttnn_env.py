"""Cached virtual environments with real ttnn wheels, for the integration tests.

ttnn wheels exist for CPython 3.10 and 3.12 on Linux x86-64 only, so each wheel gets its own venv made
with the matching interpreter (found as ``REPORTDB_PYTHON310``/``REPORTDB_PYTHON312``, in pyenv, or on
PATH). The venvs live in ``REPORTDB_TTNN_ENVS`` (default ``~/.cache/reportdb-ttnn-envs``) and are
reused across runs; a venv counts only once its ``.ready`` marker exists. reportdb is installed
there in editable mode from this checkout (its ``migrations`` folder maps to ``reportdb.migrations``,
which a plain ``PYTHONPATH`` cannot express), so the venv always runs the code under test.

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
MOCK_CLUSTER = ROOT.parent / "shared" / "tools" / "mock-cluster" / "wormhole_N150.yaml"
_DOWNLOAD_ERRORS = re.compile(
    r"No matching distribution|Could not find a version|Failed to establish a new connection|"
    r"Connection (?:refused|reset|aborted)|Read timed out|Temporary failure in name resolution|"
    r"HTTPError|ProxyError|SSLError|Network is unreachable",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class TtnnEnv:
    """A ready venv: its interpreter and the environment to run scripts with."""

    python: Path
    ttnn_version: str

    def run(self, *args: str, timeout: float = 600, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run the venv's python with reportdb importable from the checkout; fail the test on a non-zero exit.

        The working directory is the first argument's folder (the test's own): ttnn writes runtime
        files into the current directory.
        """
        env = {k: v for k, v in os.environ.items() if not k.startswith(("REPORTDB_", "PYTHON", "TTNN_"))}
        env["TT_METAL_MOCK_CLUSTER_DESC_PATH"] = str(MOCK_CLUSTER)
        env.update(extra_env or {})
        proc = subprocess.run(
            [str(self.python), *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=Path(args[0]).parent
        )
        if proc.returncode != 0:
            pytest.fail(f"ttnn {self.ttnn_version} script failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")
        return proc


def _interpreter(minor: str) -> Path | None:
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


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def ttnn_env(ttnn_version: str, python_minor: str) -> TtnnEnv:
    """The cached venv with ``ttnn==ttnn_version`` on CPython ``python_minor``; created on first use.

    Skips (saying why) when the interpreter is absent or the wheel cannot be downloaded; any other
    install failure fails the test.
    """
    if not sys.platform.startswith("linux"):
        pytest.skip(f"ttnn {ttnn_version} wheels exist for Linux x86-64 only")
    interpreter = _interpreter(python_minor)
    if interpreter is None or not interpreter.exists():
        pytest.skip(f"no CPython {python_minor} here (set REPORTDB_PYTHON{python_minor.replace('.', '')}); "
                    f"ttnn {ttnn_version} needs it")
    deps = _dependencies()
    tag = hashlib.sha256(" ".join([str(interpreter), str(ROOT), *deps]).encode()).hexdigest()[:8]
    cache = Path(os.environ.get("REPORTDB_TTNN_ENVS", Path.home() / ".cache" / "reportdb-ttnn-envs"))
    venv = cache / f"ttnn-{ttnn_version}-py{python_minor}-{tag}"
    python = venv / "bin" / "python"
    with _locked(cache):
        if not (venv / ".ready").exists():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([str(interpreter), "-m", "venv", str(venv)], check=True, capture_output=True)
            proc = subprocess.run(
                [str(python), "-m", "pip", "install", "--disable-pip-version-check", f"ttnn=={ttnn_version}", "-e", str(ROOT)],
                capture_output=True, text=True, timeout=3600,
            )
            if proc.returncode != 0:
                output = proc.stdout[-3000:] + proc.stderr[-3000:]
                shutil.rmtree(venv, ignore_errors=True)
                if _DOWNLOAD_ERRORS.search(output):
                    pytest.skip(f"the ttnn=={ttnn_version} wheel (CPython {python_minor}) could not be downloaded: "
                                f"{output.strip().splitlines()[-1]}")
                pytest.fail(f"installing ttnn=={ttnn_version} failed:\n{output}")
            (venv / ".ready").write_text(f"ttnn=={ttnn_version}\n")
    if ttnn_version.startswith("0.6"):
        Path(SFPI).mkdir(parents=True, exist_ok=True)  # these wheels only check that it exists at import
    return TtnnEnv(python, ttnn_version)
