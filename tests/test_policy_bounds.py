"""Tolerance policies are bounded wherever they come from: a policy file is a regular file of bounded size (a FIFO
or a device is refused without blocking), a policy holds a bounded number of rules with globs of bounded length,
each glob compiled once by its rule (never into fnmatch's process-wide cache), and whatever is wrong is one
PolicyError: in the API, as one line and a non-zero exit in the CLI, as a 400 for a policy pasted into the page,
whose kept pasted policies are bounded in count and text."""

from __future__ import annotations

import fnmatch
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import ml_dtypes
import numpy as np
import pytest

import reportdb
from reportdb import web
from reportdb.analysis.policy import MAX_GLOB_CHARS, MAX_POLICY_BYTES, MAX_RULES, Policy, PolicyError
from reportdb.web.context import Settings

ROOT = Path(__file__).resolve().parents[1]
RULE = '[[rules]]\nop = "ttnn.*"\npcc = 0.9\n'

#: Policy texts each refused, with a word of the error's message.
BAD_TEXTS: dict[str, tuple[str, str]] = {
    "too many rules": (RULE * (MAX_RULES + 1), "rules, more than"),
    "glob too long": ('[[rules]]\nop = "ttnn.' + "*a" * MAX_GLOB_CHARS + '"\npcc = 0.9\n', "glob of"),
    "deep arrays": ("x = " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
    "deep inline tables": ("x = " + "{y = " * 3000 + "1" + "}" * 3000 + "\n", "nested too deeply"),
    "4,300 digits": (RULE + "atol = " + "9" * 4300 + "\n", "atol must be a finite number"),
    "4,301 digits": (RULE + "atol = " + "9" * 4301 + "\n", "cannot be read"),
}


def make_report(path: Path) -> Path:
    """A report of one relu whose output is its reference rounded to bfloat16."""
    x = np.linspace(-2, 2, 32 * 32, dtype=np.float32).reshape(32, 32).astype(ml_dtypes.bfloat16)
    y = np.maximum(x.astype(np.float32), 0).astype(ml_dtypes.bfloat16)
    with reportdb.Writer(path) as writer:
        writer.put_tensor(1, x, ttnn_dtype="BFLOAT16", layout="TILE")
        writer.put_tensor(2, y, ttnn_dtype="BFLOAT16", layout="TILE")
        writer.add_operation(1, "ttnn.relu", inputs=[1], outputs=[2], arguments={"0": "tensor_id=1"})
    return path


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_report(tmp_path_factory.mktemp("policy-bounds") / "tiny.sqlite")


def _fifo(folder: Path) -> Path:
    path = folder / "policy.toml"
    os.mkfifo(path)
    return path


def _oversized(folder: Path) -> Path:
    path = folder / "policy.toml"
    path.write_text(RULE + "#" * MAX_POLICY_BYTES + "\n")
    return path


def _text(name: str) -> Callable[[Path], Path]:
    def write(folder: Path) -> Path:
        path = folder / "policy.toml"
        path.write_text(BAD_TEXTS[name][0])
        return path

    return write


#: Policy files each refused, with a word of the error's message.
BAD_FILES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "fifo": (_fifo, "not a regular file"),
    "/dev/zero": (lambda folder: Path("/dev/zero"), "not a regular file"),
    "directory": (lambda folder: folder, "not a regular file"),
    "oversized": (_oversized, "larger than"),
    **{name: (_text(name), word) for name, (_, word) in BAD_TEXTS.items()},
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_policy_file_is_a_policy_error(tmp_path: Path, case: str) -> None:
    make, word = BAD_FILES[case]
    path = make(tmp_path)
    with pytest.raises(PolicyError, match=word) as info:
        Policy.load(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.process
@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_replay_refuses_a_bad_policy_file_in_one_line(tmp_path: Path, report: Path, case: str) -> None:
    make, word = BAD_FILES[case]
    path = make(tmp_path)
    run = subprocess.run([sys.executable, "-m", "reportdb", "replay", str(report), "--policy", str(path)],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)  # a FIFO hung here for ever
    assert run.returncode != 0 and not run.stdout, (run.stdout, run.stderr)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and word in lines[0] and "Traceback" not in run.stderr, run.stderr


@pytest.mark.process
def test_serve_refuses_a_fifo_policy_without_hanging(tmp_path: Path, report: Path) -> None:
    fifo = _fifo(tmp_path)
    run = subprocess.run([sys.executable, "-m", "reportdb", "serve", str(report), "--port", "0", "--policy", str(fifo)],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert run.returncode != 0 and "not a regular file" in run.stderr and len(run.stderr.strip().splitlines()) == 1


def test_a_policy_text_is_bounded_too() -> None:
    with pytest.raises(PolicyError, match="more than"):
        Policy.parse(RULE + "#" * MAX_POLICY_BYTES + "\n", source="given")


def test_a_symlink_to_a_policy_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "real.toml").write_text(RULE)
    (tmp_path / "link.toml").symlink_to(tmp_path / "real.toml")
    assert Policy.load(tmp_path / "link.toml").criteria_for("ttnn.add", "BFLOAT16").pcc == 0.9


def test_a_policy_at_its_bounds_is_read(tmp_path: Path) -> None:
    glob = "ttnn." + "?" * (MAX_GLOB_CHARS - 5)
    path = tmp_path / "full.toml"
    path.write_text(RULE * (MAX_RULES - 1) + f'[[rules]]\nop = "{glob}"\npcc = 0.5\n')
    policy = Policy.load(path)
    assert len(policy.rules) == MAX_RULES and policy.rules[-1].op == glob


def _fnmatch_cache_use() -> tuple[int, int]:
    """The hits and misses of fnmatch's process-wide cache of compiled globs (a functools.lru_cache)."""
    info = getattr(fnmatch, "_compile_pattern").cache_info()
    return info.hits, info.misses


def test_each_glob_is_compiled_once_not_into_fnmatchs_cache() -> None:
    rules = (f'[[rules]]\nop = "ttnn.op{i}_*"\ndtype = "BFLOAT16"\npcc = 0.9\n' for i in range(50))
    policy = Policy.parse("".join(rules))
    before = _fnmatch_cache_use()
    for i in range(2000):
        policy.rule_for(f"ttnn.op{i % 60}_{i}", "BFLOAT16")
    assert _fnmatch_cache_use() == before
    assert policy.rule_for("ttnn.op7_x", "BFLOAT16") is policy.rules[7]
    assert policy.rule_for("ttnn.op7_x", "FLOAT32") is None and policy.rule_for(None, "BFLOAT16") is None


# --- the page -------------------------------------------------------------------------------------------------------


@pytest.fixture()
def client(report: Path) -> Any:
    app = web.create_app([report])
    yield app.test_client()
    app.extensions["reportdb"].close()


def _pasted(client: Any) -> list[str]:
    listed = client.get("api/policies").get_json()["policies"]
    return [p["name"] for p in listed if p["name"].startswith("pasted-")]


@pytest.mark.parametrize("case", sorted(BAD_TEXTS))
def test_a_bad_pasted_policy_is_a_400_in_one_line(client: Any, case: str) -> None:
    text, word = BAD_TEXTS[case]
    assert len(text) <= Settings.MAX_PASTED_CHARS  # refused for what it holds, not for its length
    answer = client.post("api/policies", data=text)
    error = answer.get_json()["error"]
    assert answer.status_code == 400 and "\n" not in error and word in error, error
    assert _pasted(client) == []


def test_pasted_policies_kept_are_bounded_in_count(client: Any, report: Path) -> None:
    names = []
    before = _fnmatch_cache_use()
    for i in range(100):
        answer = client.post("api/policies", data=f'[[rules]]\nop = "ttnn.relu{i}*"\npcc = 0.{i:02d}\n')
        assert answer.status_code == 200
        names.append(answer.get_json()["name"])
        one = client.get(f"api/reports/tiny/tensors/2?policy={names[-1]}")  # judged: the glob is matched
        assert one.status_code == 200 and one.get_json()["policy"]["operation"] == "ttnn.relu"
    assert _pasted(client) == names[-Settings.MAX_PASTED:]
    assert _fnmatch_cache_use() == before  # no glob went into fnmatch's cache, where dropped ones would stay
    assert client.get(f"api/reports/tiny/tensors/2?policy={names[0]}").status_code == 400  # dropped: say so


def test_pasted_policies_kept_are_bounded_in_text(client: Any) -> None:
    per_paste = 60_000
    names = []
    for i in range(100):
        text = f'[[rules]]\nop = "ttnn.op{i}"\npcc = 0.9\n'
        answer = client.post("api/policies", data=text + "#" * (per_paste - len(text) - 1) + "\n")
        assert answer.status_code == 200
        names.append(answer.get_json()["name"])
    assert _pasted(client) == names[-(Settings.MAX_PASTED_TOTAL_CHARS // per_paste):]


def test_a_chosen_pasted_policy_is_the_last_dropped(client: Any) -> None:
    names = [client.post("api/policies", data=f"[[rules]]\npcc = 0.{i:02d}\n").get_json()["name"]
             for i in range(Settings.MAX_PASTED)]
    assert client.get(f"api/reports/tiny/tensors/2?policy={names[0]}").status_code == 200  # in use
    client.post("api/policies", data="[[rules]]\npcc = 0.5\n")
    kept = _pasted(client)
    assert names[0] in kept and names[1] not in kept and len(kept) == Settings.MAX_PASTED
