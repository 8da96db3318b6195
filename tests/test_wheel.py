"""The built wheel, installed non-editable in a fresh virtual environment outside the checkout, is the package a user
gets: it holds every module, every command runs from it, and the README's examples run against it.

An editable install puts the source tree on the path, so a subpackage the wheel leaves out is invisible to every
other test (it happened: the wheel lacked ``reportdb.analysis.references``, and replay and repro failed for users).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT
from test_readme import run_readme, scratch
from test_replay import make_chain

pytestmark = [pytest.mark.slow, pytest.mark.process]

#: Source files the package ships, by suffix: modules, the page's files, the typing marker, alembic's template.
SHIPPED = (".py", ".js", ".css", ".html", ".typed", ".mako")


class Installed:
    """The wheel and the virtual environment it is installed in (with the ``web`` extra the README uses)."""

    def __init__(self, wheel: Path, env_dir: Path) -> None:
        self.wheel = wheel
        self.bin = env_dir / "bin"
        self.python = str(self.bin / "python")

    def run(self, args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """A command of the venv's ``bin`` (``reportdb``, ``python``), with nothing of this checkout on the path."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        command = [str(self.bin / args[0]), *args[1:]]
        return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("wheel")
    dist = base / "dist"
    # built from a copy: setuptools leaves build/lib in the tree it builds, and a module deleted from the checkout
    # would live on there and ship in the next wheel
    source = base / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".mypy_cache"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q", "-w", str(dist)], check=True, timeout=600
    )
    wheel = next(dist.glob("reportdb-*.whl"))
    env_dir = base / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    pip = [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", f"{wheel}[web]"]
    subprocess.run(pip, check=True, timeout=900)
    return Installed(wheel, env_dir)


def test_the_wheel_holds_every_file_of_the_package(installed: Installed) -> None:
    inside = set(zipfile.ZipFile(installed.wheel).namelist())
    sources = {
        f"{inside_name}/{p.relative_to(ROOT / folder).as_posix()}"
        for folder, inside_name in (("reportdb", "reportdb"), ("migrations", "reportdb/migrations"))
        for p in (ROOT / folder).rglob("*")
    }
    shipped = {s for s in sources if s.endswith(SHIPPED) and "__pycache__" not in s}
    assert "reportdb/analysis/references/__init__.py" in shipped
    assert not shipped - inside, f"missing from the wheel: {sorted(shipped - inside)}"


def test_installed_wheel_opens_and_upgrades_a_report(installed: Installed, tmp_path: Path) -> None:
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
    out = installed.run(["python", "-c", script], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0006"
    cli = installed.run(["reportdb", "info", str(report)], cwd=tmp_path)
    assert cli.returncode == 0 and "operations" in cli.stdout, cli.stderr


def test_every_command_runs_from_the_installed_wheel(installed: Installed, tmp_path: Path) -> None:
    listing = installed.run(["reportdb", "--help"], cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    commands = re.findall(r"^  ([a-z][a-z-]*)\s", listing.stdout.split("Commands:", 1)[1], re.M)
    assert {"migrate", "replay", "repro", "serve", "verify"} <= set(commands)
    for command in commands:
        out = installed.run(["reportdb", command, "--help"], cwd=tmp_path)
        assert out.returncode == 0 and "Usage:" in out.stdout, (command, out.stderr)
    chain = tmp_path / "chain.sqlite"
    make_chain(chain)  # op 3's output has one wrong tile: replay and repro find it
    runs = {  # what each should exit with (README): 1 where a check fails (op 3), 0 where all is well
        "replay": (["reportdb", "replay", str(chain)], 1),
        "replay --chain": (["reportdb", "replay", str(chain), "--chain"], 1),
        "repro": (["reportdb", "repro", str(chain), "3", "-o", str(tmp_path / "repro-3")], 0),
        "op": (["reportdb", "op", str(chain), "3"], 0),
        "verify": (["reportdb", "verify", str(chain)], 0),
        "ls": (["reportdb", "ls", str(chain)], 0),
        "locate": (["reportdb", "locate", str(chain), "6", "--against", f"{chain}:5"], 0),
    }
    for what, (args, code) in runs.items():
        out = installed.run(args, cwd=tmp_path)
        assert "internal error" not in out.stderr and "Traceback" not in out.stderr, (what, out.stderr)
        assert out.returncode == code, (what, out.returncode, out.stdout[-2000:], out.stderr)
    assert (tmp_path / "repro-3" / "test_repro.py").is_file()
    script = f"""
import reportdb
result = reportdb.replay({str(chain)!r})
print([r.operation_id for r in result.rows if r.passed is False])
print(reportdb.make_repro({str(chain)!r}, 3, {str(tmp_path / 'api-repro')!r}))
"""
    api = installed.run(["python", "-c", script], cwd=tmp_path)
    assert api.returncode == 0, api.stderr
    assert api.stdout.splitlines()[0] == "[3]"


def test_the_readme_runs_against_the_installed_wheel(installed: Installed, tmp_path: Path) -> None:
    run_readme(scratch(tmp_path), installed.python, installed.bin, None)
