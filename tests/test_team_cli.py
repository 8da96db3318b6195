"""The team-store commands as a user runs them: ``reportdb push/reports/history/pull/delete/merge`` in a subprocess
against a real server; errors are one line and a non-zero exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pg_server import dump, make_report
import reportdb

pytestmark = [pytest.mark.process, pytest.mark.service]


def _cli(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "reportdb", *args], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, REPORTDB_DEBUG=""))
    if ok:
        assert result.returncode == 0, result.stderr
    return result


def test_push_list_history_pull_delete(team_url: str, tmp_path: Path) -> None:
    folder = make_report(tmp_path / "run1", seed=1)
    pushed = json.loads(_cli("push", str(folder), team_url, "--tag", "nightly", "--json").stdout)
    assert pushed["created"] and pushed["name"] == "run1"
    assert "nothing sent" in _cli("push", str(folder), team_url).stdout
    listed = json.loads(_cli("reports", team_url, "--json", "--tag", "nightly").stdout)
    assert [r["name"] for r in listed] == ["run1"] and listed[0]["n_tensors"] == 2
    assert "run1" in _cli("reports", team_url).stdout
    history = json.loads(_cli("history", team_url, "--op", "ttnn.op1", "--json").stdout)
    assert [(h["report"], h["tensor_id"]) for h in history] == [("run1", 101)]
    assert "run1" in _cli("history", team_url, "--op", "ttnn.op1").stdout
    _cli("pull", team_url, "run1", "-o", str(tmp_path / "back"))
    assert dump(tmp_path / "back" / "db.sqlite") == dump(folder / "db.sqlite")
    assert _cli("verify", str(tmp_path / "back")).returncode == 0
    assert "deleted 'run1'" in _cli("delete", team_url, "run1").stdout
    assert json.loads(_cli("reports", team_url, "--json").stdout) == []


def test_errors_are_one_line(team_url: str, tmp_path: Path) -> None:
    folder = make_report(tmp_path / "r", seed=1, own=1)
    cases = [
        (("push", str(folder), "postgresql://localhost"), "names no database"),
        (("pull", team_url, "missing", "-o", str(tmp_path / "x")), "no report 'missing'"),
        (("delete", team_url, "missing"), "no report 'missing'"),
        (("reports", f"postgresql://u:hunter2@/db?host={tmp_path}"), "cannot connect to the team store"),
        (("push", str(tmp_path / "nothing"), team_url), "no such report"),
    ]
    for args, message in cases:
        result = _cli(*args, ok=False)
        assert result.returncode == 1, (args, result.stderr)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and message in lines[0], (args, result.stderr)
        assert "hunter2" not in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "x").exists()


def test_merge_command(tmp_path: Path) -> None:
    import numpy as np

    folders = []
    for rank in range(2):
        folder = tmp_path / f"rank{rank}"
        folder.mkdir()
        with reportdb.open(folder, "a") as r:
            r.put_tensor(1, np.full(8, rank, np.float32), rank=rank)
        folders.append(folder)
    out = json.loads(_cli("merge", *map(str, folders), "-o", str(tmp_path / "all"), "--json").stdout)
    assert out["ranks"] == {str(f / "db.sqlite"): r for r, f in enumerate(folders)} and out["tensors"] == 2
    same = _cli("merge", str(folders[0]), str(folders[0]), "-o", str(tmp_path / "bad"), ok=False)
    assert same.returncode == 1 and "same rank" in same.stderr


def test_pull_pinned_to_the_digest_push_printed(team_url: str, tmp_path: Path) -> None:
    """A store proves itself consistent, not honest: the digest push printed pins the content, so a report replaced
    under the same name is refused, nothing written."""
    first, other = make_report(tmp_path / "a", seed=1, own=1), make_report(tmp_path / "b", seed=2, own=1)
    printed = _cli("push", str(first), team_url, "--name", "run").stdout
    digest = printed.split("content digest ", 1)[1].split()[0]
    assert len(digest) == 64
    pulled = json.loads(_cli("pull", team_url, "run", "-o", str(tmp_path / "ok"), "--digest", digest, "--json").stdout)
    assert pulled["digest"] == digest and dump(tmp_path / "ok" / "db.sqlite") == dump(first / "db.sqlite")
    _cli("delete", team_url, "run")
    _cli("push", str(other), team_url, "--name", "run")  # other content under the same name
    for pin, message in ((digest, "not the " + digest), ("abc", "64 hex digits")):
        result = _cli("pull", team_url, "run", "-o", str(tmp_path / "no"), "--digest", pin, ok=False)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 1 and len(lines) == 1 and message in lines[0], result.stderr
        assert not (tmp_path / "no").exists()
