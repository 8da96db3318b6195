"""``reportdb repro``: one operation as a folder whose test fails exactly when the operation fails its policy, run
from a copy elsewhere with reportdb made unimportable."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import reportdb
from test_replay import make_chain

ROOT = Path(__file__).resolve().parents[1]
# pytest in the copied folder with reportdb unimportable: the folder needs only numpy, ml_dtypes and pytest
RUN = "import sys; sys.modules['reportdb'] = None; import pytest; sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider']))"


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("repro") / "chain.sqlite"
    make_chain(path)
    return path


def run_copy(folder: Path, elsewhere: Path) -> subprocess.CompletedProcess[str]:
    """Copy the folder elsewhere and run its test there, with none of this checkout on the path."""
    copy = shutil.copytree(folder, elsewhere / "copy")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    return subprocess.run([sys.executable, "-c", RUN], cwd=copy, capture_output=True, text=True, env=env, timeout=300)


def test_folder_contents(chain: Path, tmp_path: Path) -> None:
    folder = reportdb.make_repro(chain, 1, tmp_path / "r1")
    names = {p.name for p in folder.iterdir()}
    assert {"input0.npy", "input1.npy", "input2.npy", "device_output.npy", "reference_output.npy", "arguments.json",
            "policy.json", "repro.json", "README.md", "test_repro.py", "references"} <= names
    meta = json.loads((folder / "repro.json").read_text())
    assert meta["operation"] == "ttnn.linear" and meta["inputs"][0]["dtype"] == "bfloat16"
    assert meta["inputs"][0]["ttnn_dtype"] == "DataType.BFLOAT16" and meta["reportdb_verdict"]["passed"] is True
    assert ["bias", meta["arguments"][0][1]] == meta["arguments"][0] and len((folder / "README.md").read_text().splitlines()) == 2


def test_refusals(chain: Path, tmp_path: Path) -> None:
    with pytest.raises(reportdb.errors.InvalidArgumentError, match="unsupported_arguments.*frobnicate"):
        reportdb.make_repro(chain, 6, tmp_path / "r6")
    with pytest.raises(reportdb.errors.InvalidArgumentError, match="no operation 42"):
        reportdb.make_repro(chain, 42, tmp_path / "r42")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(reportdb.errors.OutputPathError):
        reportdb.make_repro(chain, 1, tmp_path / "full")
    assert not (tmp_path / "r6").exists() and [p.name for p in tmp_path.iterdir()] == ["full"]


@pytest.mark.process
@pytest.mark.parametrize("op_id, passes", [(3, False), (2, True), (4, True)])
def test_copied_folder_fails_exactly_when_the_op_fails(chain: Path, tmp_path: Path, op_id: int, passes: bool) -> None:
    cli = subprocess.run([sys.executable, "-m", "reportdb", "repro", str(chain), str(op_id), "-o", str(tmp_path / "r")],
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)
    assert cli.returncode == 0, cli.stderr
    proc = run_copy(tmp_path / "r", tmp_path / "elsewhere")
    assert (proc.returncode == 0) == passes, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "2 passed" in proc.stdout if passes else "1 failed, 1 passed" in proc.stdout
    assert "1 skipped" in proc.stdout and "ttnn is not importable here" in proc.stdout  # the op's own run, and why


@pytest.mark.slow
@pytest.mark.process
def test_copied_folder_runs_in_a_venv_with_only_numpy_ml_dtypes_and_pytest(chain: Path, tmp_path: Path) -> None:
    """The issue's check as written: a venv holding numpy, ml_dtypes and pytest and nothing else runs the copies."""
    from ttnn_env import EnvBuildError, EnvUnavailable, cached_venv

    minor = f"{sys.version_info.major}{sys.version_info.minor}"
    try:
        python = cached_venv(f"repro-py{minor}-numpy-ml_dtypes-pytest", Path(sys.executable).resolve(),
                             ["numpy", "ml_dtypes", "pytest"], "numpy, ml_dtypes and pytest")
    except EnvUnavailable as exc:
        pytest.skip(str(exc))
    except EnvBuildError as exc:
        pytest.fail(str(exc))
    for op_id, passes in ((3, False), (1, True)):
        folder = reportdb.make_repro(chain, op_id, tmp_path / f"r{op_id}")
        copy = shutil.copytree(folder, tmp_path / "elsewhere" / f"r{op_id}")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        proc = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=copy, capture_output=True,
                              text=True, env=env, timeout=300)
        assert (proc.returncode == 0) == passes, proc.stdout[-3000:] + proc.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.process
def test_in_the_ttnn_env_without_a_device_the_run_of_the_op_is_skipped_with_its_reason(chain: Path, tmp_path: Path) -> None:
    """ttnn 0.81.1 importable, no Tenstorrent device: the reference tests pass or fail as before, the op's own run is
    skipped and pytest prints why."""
    from ttnn_env import MOCK_CLUSTER, EnvBuildError, EnvUnavailable, cached_venv, find_interpreter

    interpreter = find_interpreter("3.12")
    if interpreter is None or not interpreter.exists() or not sys.platform.startswith("linux"):
        pytest.skip("ttnn 0.81.1 wheels need CPython 3.12 on Linux x86-64")
    try:
        python = cached_venv("ttnn-0.81.1-pytest-py3.12", interpreter, ["ttnn==0.81.1", "ml_dtypes", "pytest"],
                             "ttnn 0.81.1 with pytest")
    except EnvUnavailable as exc:
        pytest.skip(str(exc))
    except EnvBuildError as exc:
        pytest.fail(str(exc))
    for op_id, passes in ((3, False), (1, True)):
        folder = reportdb.make_repro(chain, op_id, tmp_path / f"r{op_id}")
        copy = shutil.copytree(folder, tmp_path / "elsewhere" / f"r{op_id}")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "TT_METAL"))}
        env["TT_METAL_MOCK_CLUSTER_DESC_PATH"] = str(MOCK_CLUSTER)  # ttnn imports; still no device to run on
        proc = subprocess.run([str(python), "-m", "pytest", "-p", "no:cacheprovider"], cwd=copy, capture_output=True,
                              text=True, env=env, timeout=600)
        out = proc.stdout
        assert (proc.returncode == 0) == passes, out[-3000:] + proc.stderr[-2000:]
        assert "1 skipped" in out and "no Tenstorrent device here" in out, out[-3000:]
        assert "ttnn is not importable" not in out
