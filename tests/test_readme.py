"""The README's commands and Python examples run as written, on real fixture data, each in a subprocess.

Every fenced ``bash`` and ``python`` block of README.md is either run here or named in :data:`ELSEWHERE` with the
reason and the test that covers it instead (a block needing ttnn, a PostgreSQL server or a browser). A new block
that is neither fails this test, so the README cannot gain an example that nothing runs.

The blocks run in order in one scratch folder that is also ``$HOME``: ``generated/ttnn/reports/1234`` is a copy of
the ttnn 0.64.5 report fixture (``.tensorbin`` files, a 2-device tensor 17), so the main job's ``migrate ... -o
~/reports/1234`` makes the ``reports/1234`` the Python example opens. ``reportdb`` on ``PATH`` is this checkout's.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import reportdb

from conftest import FIXTURES, ROOT

pytestmark = pytest.mark.process

#: Blocks run elsewhere, by a distinctive piece of their text: why not here, and where instead.
ELSEWHERE = {
    'pip install -e ".[test]"': "the set-up and the full test run themselves",
    "python -m pytest --fast": "the fast tier itself",
    "reportdb.ttnn.capture(w)": "needs ttnn and a model: tests/test_ttnn_integration.py (slow) runs capture()",
    "reportdb attach values.sqlite": "needs values captured in a ttnn 0.81 run: tests/test_attach.py",
    "reportdb serve": "a server and a browser: tests/test_web_browser.py (service)",
    "from ttnn_visualizer.app import create_app": "needs ttnn-visualizer 0.108: tests/test_web_visualizer.py (slow)"
                                                  " mounts the blueprint in its create_app() this way",
    "reportdb push reports/1234 postgresql://": "a PostgreSQL server: tests/test_team_store.py (service)",
    "--chunks s3://lab-reports": "PostgreSQL and an S3 server: tests/test_team_objects.py (service)",
}

#: What a block assumes exists around it, given before it runs (its own lines run as written).
CONTEXT = {
    "app.register_blueprint": "import reportdb\nfrom flask import Flask\napp = Flask('readme')\n",
    "reportdb.make_repro(": "import reportdb\n",  # the example goes on from the replay block before it
}


def readme_blocks() -> list[tuple[str, str]]:
    """Every fenced bash and python block of README.md, in order: (language, text)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [(lang, body) for lang, body in re.findall(r"^```(bash|python)\n(.*?)^```", text, re.S | re.M)]


def _elsewhere(body: str) -> str | None:
    return next((why for key, why in ELSEWHERE.items() if key in body), None)


def scratch(folder: Path) -> Path:
    """The scratch folder the blocks run in: the legacy report the main job migrates."""
    shutil.copytree(FIXTURES / "ttnn-0.64.5-report-tensorbin" / "report", folder / "generated/ttnn/reports/1234")
    return folder


@pytest.fixture()
def home(tmp_path: Path) -> Path:
    """The scratch folder and ``$HOME``, with a ``reportdb`` command of this checkout in its ``bin``."""
    scratch(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "reportdb"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m reportdb "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return tmp_path


def test_every_block_is_run_here_or_named_elsewhere() -> None:
    blocks = readme_blocks()
    assert len(blocks) >= 8
    for key in ELSEWHERE:
        assert sum(key in body for _, body in blocks) == 1, f"ELSEWHERE names a block the README no longer has: {key}"
    assert sum(_elsewhere(body) is None for _, body in blocks) >= 4


def run_readme(home: Path, python: str, bin_dir: Path, pythonpath: str | None) -> None:
    """Run every block not named in :data:`ELSEWHERE`, in order, in ``home`` (also ``$HOME``) with ``bin_dir`` first
    on ``PATH`` and Python blocks run by ``python``; fail with each failing block and its stderr, then check what the
    main job made."""
    env = {"HOME": str(home), "PATH": f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin", "LANG": "C.UTF-8"}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    ran, failed = 0, []
    for lang, body in readme_blocks():
        if _elsewhere(body) is not None:
            continue
        if lang == "bash":
            command = [shutil.which("bash") or "/bin/bash", "-euo", "pipefail", "-c", body]
        else:
            prelude = "".join(code for key, code in CONTEXT.items() if key in body)
            command = [python, "-c", prelude + body]
        out = subprocess.run(command, cwd=home, env=env, capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            failed.append(f"{body}--- stderr:\n{out.stderr}")
        ran += 1
    assert not failed, "README blocks failed:\n\n" + "\n\n".join(failed)
    assert ran >= 4
    assert (home / "reports/1234/db.sqlite").is_file() and (home / "t17.npz").is_file()
    with reportdb.open(home / "reports/run") as report:
        assert report.tensor_ids() == [1, 2]
    assert (home / "repro-1" / "test_repro.py").is_file()  # made from the Writer example's operation


def test_the_readme_runs_as_written(home: Path) -> None:
    run_readme(home, sys.executable, home / "bin", str(ROOT))
