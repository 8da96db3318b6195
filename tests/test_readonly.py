"""Reading a report needs no write access and changes nothing: the CLI's read commands and ``reportdb.open()`` run on
read-only copies (files 0444, folders 0555) as a user the permissions apply to, and on writable copies as root; no
byte or mtime of any file changes and no file appears.

Tests run as root here, which ignores permissions, so the reads run as ``nobody`` where it can run this Python, else
as root without any capability (``setpriv``: permission bits then apply to root as to anyone).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import reportdb

from conftest import FIXTURES

pytestmark = pytest.mark.process  # starts other processes: CI runs it, the fast tier leaves it out

LEGACY = FIXTURES / "ttnn-0.62.2-bin" / "report"


def _unprivileged() -> tuple[list[str], dict[str, Any]] | None:
    """How to run a command so that file permissions apply: (command prefix, subprocess.run arguments), or None."""
    if os.geteuid() != 0:
        return [], {}
    probe = [sys.executable, "-c", "import reportdb"]
    try:
        if subprocess.run(probe, user="nobody", capture_output=True, timeout=120).returncode == 0:
            return [], {"user": "nobody"}
    except (OSError, subprocess.SubprocessError):
        pass
    setpriv = shutil.which("setpriv")
    if setpriv:
        prefix = [setpriv, "--inh-caps=-all", "--bounding-set=-all", "--"]
        if subprocess.run(prefix + probe, capture_output=True, timeout=120).returncode == 0:
            return prefix, {}
    return None


@pytest.fixture(scope="module")
def reports() -> Iterator[Path]:
    """A folder (traversable by anyone) holding a migrated real report and a Writer-made one."""
    base = Path(tempfile.mkdtemp(prefix="reportdb-readonly-"))
    base.chmod(0o755)
    try:
        reportdb.migrate(LEGACY, base / "migrated")
        (base / "written").mkdir()
        with reportdb.Writer(base / "written" / "db.sqlite") as writer:
            x = np.random.default_rng(0).standard_normal((32, 64)).astype(np.float32)
            writer.put_tensor(1, x, layout="TILE")
            writer.put_tensor(2, np.maximum(x, 0), role="output")
            writer.add_operation(1, "ttnn.relu", duration=0.001, inputs=[1], outputs=[2])
        yield base
    finally:
        for folder, _, _ in os.walk(base):
            os.chmod(folder, 0o755)
        shutil.rmtree(base)


def _copy(reports: Path, name: str, dst: Path, *, readonly: bool) -> Path:
    target = dst / name
    shutil.copytree(reports / name, target)
    if readonly:
        for folder, _, files in os.walk(target):
            for f in files:
                os.chmod(os.path.join(folder, f), 0o444)
        for folder, _, _ in sorted(os.walk(target), reverse=True):
            os.chmod(folder, 0o555)
    return target


def _state(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file and folder under ``folder``: size, mtime, content."""
    out = {}
    for p in sorted(folder.rglob("*")) + [folder]:
        st = p.stat()
        out[str(p.relative_to(folder))] = (st.st_size, st.st_mtime_ns, p.read_bytes() if p.is_file() else b"")
    return out


def _commands(report: Path, out: Path, tensor_id: int) -> dict[str, list[str]]:
    python = [sys.executable, "-m", "reportdb"]
    read_all = (
        "import reportdb, sys\n"
        "with reportdb.open(sys.argv[1]) as r:\n"
        "    r.summary()\n"
        "    for t, k in r.tensor_keys():\n"
        "        r.tensor_info(t, k); r.tensor(t, k); r.verify_tensor(t, k)\n"
        "    assert r.check_store() == []\n"
    )
    return {
        "info": python + ["info", str(report)],
        "ls": python + ["ls", str(report)],
        "verify": python + ["verify", str(report)],
        "compare --golden": python + ["compare", str(report), "--golden"],
        "plot": python + ["plot", str(report), str(tensor_id), "-o", str(out / f"{report.name}.png")],
        "open": [sys.executable, "-c", read_all, str(report)],
    }


def _run(command: list[str], prefix: list[str], kwargs: dict[str, Any], out: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", MPLCONFIGDIR=str(out), HOME=str(out))
    return subprocess.run(prefix + command, capture_output=True, text=True, timeout=600, cwd=out, env=env, **kwargs)


def _check_ran(command: str, result: subprocess.CompletedProcess[str]) -> None:
    """The command did its job: exit 0, or for ``compare --golden`` 1 (comparisons below threshold, which this
    real report has), with nothing on stderr."""
    ok = (0, 1) if command == "compare --golden" else (0,)
    assert result.returncode in ok and not result.stderr.strip(), f"{command}: {result.stdout}\n{result.stderr}"


CASES = [
    pytest.param("migrated", "info"), pytest.param("migrated", "ls"), pytest.param("migrated", "verify"),
    pytest.param("migrated", "compare --golden"), pytest.param("migrated", "plot"), pytest.param("migrated", "open"),
    pytest.param("written", "info"), pytest.param("written", "ls"), pytest.param("written", "verify"),
    pytest.param("written", "plot"), pytest.param("written", "open"),
]


def _first_tensor(report: Path) -> int:
    with reportdb.open(report) as r:
        return r.tensor_ids()[0]


@contextlib.contextmanager
def _unprivileged_workspace(mode: int) -> Iterator[tuple[list[str], dict[str, Any], Path]]:
    """How to run as a reader without write permission, and a folder of ``mode`` outside root's 0700 tmp (removed
    after, whatever modes the test left in it); skips where no such reader can be had."""
    how = _unprivileged()
    if how is None:
        pytest.skip("running as root, and neither `nobody` can run this Python nor `setpriv` can drop root's capabilities")
    work = Path(tempfile.mkdtemp(prefix="reportdb-ro-"))
    try:
        work.chmod(mode)
        yield how[0], how[1], work
    finally:
        for folder, _, _ in os.walk(work):
            os.chmod(folder, 0o777)
        shutil.rmtree(work)


@pytest.mark.parametrize("name, command", CASES)
def test_reads_without_write_permission_change_nothing(reports: Path, name: str, command: str) -> None:
    with _unprivileged_workspace(0o777) as (prefix, kwargs, work):
        out = work / "out"
        out.mkdir()
        out.chmod(0o777)
        report = _copy(reports, name, work, readonly=True)
        before = _state(report)
        result = _run(_commands(report, out, _first_tensor(reports / name))[command], prefix, kwargs, out)
        _check_ran(command, result)
        assert _state(report) == before


@pytest.mark.parametrize("name, command", CASES)
def test_reads_with_write_permission_change_nothing(reports: Path, tmp_path: Path, name: str, command: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    report = _copy(reports, name, tmp_path, readonly=False)
    before = _state(report)
    result = _run(_commands(report, out, _first_tensor(reports / name))[command], [], {}, out)
    _check_ran(command, result)
    assert _state(report) == before  # no -wal or -shm appeared, no mtime moved


def test_the_copies_really_are_read_only_for_the_reader(reports: Path) -> None:
    """The setup check: the unprivileged reader cannot create a file in a 0555 report folder."""
    with _unprivileged_workspace(0o755) as (prefix, kwargs, work):
        report = _copy(reports, "written", work, readonly=True)
        assert stat.S_IMODE(report.stat().st_mode) == 0o555
        probe = subprocess.run(prefix + [sys.executable, "-c", f"open({str(report / 'x')!r}, 'w')"],
                               capture_output=True, text=True, **kwargs)
        assert probe.returncode != 0 and "Permission denied" in probe.stderr

