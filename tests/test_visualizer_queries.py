"""ttnn-visualizer's own query layer gives the same answers on a legacy report and on its migration.

The PyPI package ``ttnn-visualizer`` pins many heavy dependencies, so it is not one of ours: the
tests run it from a venv of its own, built once and kept in the cache of ``ttnn_env.py`` (keyed by the
pinned version; or the python named by ``REPORTDB_TEST_VISUALIZER_PYTHON``), run every
``DatabaseQueries`` method there on a database and compare the JSON answers. Building that venv
downloads, so the tests are ``slow``; they skip, saying pip's error, only when pip cannot download.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES
import reportdb
from reportdb.legacy import migrate
from ttnn_env import EnvBuildError, EnvUnavailable, cached_venv

pytestmark = pytest.mark.slow

VISUALIZER_VERSION = "0.108.0"  # the query layer these tests were written against; a new one is a new venv
REPORTS = ["ttnn-0.62.2-bin", "ttnn-0.64.5-report-tensorbin"]
SCHEMAS = ["visualizer_empty_2024-09.sqlite", "ttnn_0.81.1_schema_3.5.sqlite"]

RUNNER = r'''
import dataclasses, enum, json, sqlite3, sys
from ttnn_visualizer.queries import DatabaseQueries

TABLES = ["operations", "operation_arguments", "captured_graph", "stack_traces", "source_files", "errors",
          "tensors", "device_tensors", "input_tensors", "output_tensors", "buffers", "buffer_pages",
          "buffer_chunks", "devices", "local_tensor_comparison_records", "global_tensor_comparison_records",
          "tensor_lifetime", "report_metadata"]


def plain(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return plain(value.value)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)) or hasattr(value, "__next__"):
        return [plain(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def answer(fn, *args, **kwargs):
    try:
        return plain(fn(*args, **kwargs))
    except Exception as exc:
        return {"error": type(exc).__name__, "message": str(exc)}


def main(path):
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    q = DatabaseQueries(connection=conn)
    ops = answer(q.query_operations)
    first = ops[0] if isinstance(ops, list) and ops else {}
    op_id = first.get("id", first.get("operation_id", 1))
    out = {}
    for name in sorted(n for n in dir(DatabaseQueries) if not n.startswith("_")):
        fn = getattr(q, name)
        if not callable(fn):
            continue
        if name == "get_source_file_by_id":
            out[name] = answer(fn, 1)
        elif name == "get_source_file_by_path":
            out[name] = answer(fn, "model.py")
        elif name == "get_source_file_path_if_present":
            out[name] = answer(fn, source_file_id=1)
        elif name == "query_next_buffer":
            out[name] = answer(fn, op_id, "0")
        elif name == "query_operation_ids_by_stack_trace":
            out[name] = answer(fn, "py")
        elif name in ("merge_rank_filter", "table_has_rank_column"):
            out[name] = {t: answer(fn, t, {}, 0) if name == "merge_rank_filter" else answer(fn, t) for t in TABLES}
        elif name == "query_tensor_comparisons":
            out[name] = [answer(fn, local=True), answer(fn, local=False), answer(fn, local=True, rank=0)]
        else:
            out[name] = answer(fn)
            if "rank" in fn.__code__.co_varnames[: fn.__code__.co_argcount]:
                out[name + "(rank=0)"] = answer(fn, rank=0)
            if "filters" in fn.__code__.co_varnames[: fn.__code__.co_argcount] and name in (
                "query_operations", "query_operation_arguments", "query_input_tensors", "query_output_tensors",
                "query_stack_traces", "query_buffers", "query_device_operations",
            ):
                out[name + "(operation_id)"] = answer(fn, {"operation_id": op_id})
    json.dump(out, sys.stdout, sort_keys=True)


main(sys.argv[1])
'''


@pytest.fixture(scope="session")
def visualizer_python() -> str:
    """A python with ``ttnn-visualizer`` installed from PyPI, built once and reused across runs."""
    given = os.environ.get("REPORTDB_TEST_VISUALIZER_PYTHON")
    if given:
        return given
    interpreter = Path(sys.executable)
    minor = f"{sys.version_info.major}.{sys.version_info.minor}"
    tag = hashlib.sha256(f"{sys.base_prefix} {sys.version}".encode()).hexdigest()[:8]
    try:
        python = cached_venv(f"ttnn-visualizer-{VISUALIZER_VERSION}-py{minor}-{tag}", interpreter,
                             [f"ttnn-visualizer=={VISUALIZER_VERSION}"], f"ttnn-visualizer {VISUALIZER_VERSION}")
    except EnvUnavailable as exc:
        pytest.skip(str(exc))
    except EnvBuildError as exc:
        pytest.fail(str(exc))
    return str(python)


@pytest.fixture(scope="session")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("visualizer-runner") / "run_queries.py"
    path.write_text(RUNNER)
    return path


def answers(python: str, runner: Path, db: Path) -> dict:
    """Every DatabaseQueries answer on ``db``, as JSON data."""
    result = subprocess.run([python, str(runner), str(db)], capture_output=True, text=True, timeout=600, cwd=runner.parent)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def assert_same_answers(before: dict, after: dict) -> None:
    assert sorted(before) == sorted(after)
    different = [name for name in before if before[name] != after[name]]
    assert not different, {name: (before[name], after[name]) for name in different}


@pytest.mark.parametrize("folder", REPORTS)
def test_visualizer_answers_unchanged_by_migration(folder: str, tmp_path: Path, visualizer_python: str, runner: Path) -> None:
    src = FIXTURES / folder / "report"
    migrate(src, tmp_path / "out")
    before = answers(visualizer_python, runner, src / "db.sqlite")
    after = answers(visualizer_python, runner, tmp_path / "out" / "db.sqlite")
    assert before["query_tensors"] and before["query_operations"]  # the comparison is not vacuous
    assert_same_answers(before, after)


def test_visualizer_answers_unchanged_in_place(tmp_path: Path, visualizer_python: str, runner: Path) -> None:
    src = FIXTURES / REPORTS[1] / "report"
    work = tmp_path / "report"
    shutil.copytree(src, work)
    for path in [work, *work.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    before = answers(visualizer_python, runner, work / "db.sqlite")
    migrate(work, remove_legacy_files=True)
    assert not (work / "tensors").exists()
    assert_same_answers(before, answers(visualizer_python, runner, work / "db.sqlite"))


@pytest.mark.parametrize("schema", SCHEMAS)
def test_visualizer_answers_unchanged_for_schema_fixtures(
    schema: str, tmp_path: Path, visualizer_python: str, runner: Path
) -> None:
    src = tmp_path / "legacy"
    src.mkdir()
    shutil.copyfile(FIXTURES / "report-schemas" / schema, src / "db.sqlite")
    migrate(src, tmp_path / "out")
    assert_same_answers(
        answers(visualizer_python, runner, src / "db.sqlite"), answers(visualizer_python, runner, tmp_path / "out" / "db.sqlite")
    )


@pytest.mark.parametrize("folder", REPORTS)
def test_visualizer_answers_unchanged_by_upgrade(folder: str, tmp_path: Path, visualizer_python: str, runner: Path) -> None:
    """`reportdb upgrade` adds reportdb's tables only: every visualizer answer stays the same."""
    db = tmp_path / "db.sqlite"
    shutil.copyfile(FIXTURES / folder / "report" / "db.sqlite", db)
    before = answers(visualizer_python, runner, db)
    reportdb.upgrade(tmp_path)
    assert_same_answers(before, answers(visualizer_python, runner, db))


def _errors(answers: dict) -> set[str]:
    return {name for name, value in answers.items() if isinstance(value, dict) and "error" in value}


def test_visualizer_reads_a_report_the_writer_made(tmp_path: Path, visualizer_python: str, runner: Path) -> None:
    """A run recorded through the Writer reads in the visualizer as a report ttnn 0.81.1 writes itself does: every
    query that answers on ttnn's own schema answers here too, with the rows written (quotes and all)."""
    memory_config = ("MemoryConfig(memory_layout=TensorMemoryLayout::INTERLEAVED,buffer_type=BufferType::DRAM,"
                     "shard_spec=std::nullopt)")
    rng = np.random.default_rng(0)
    with reportdb.Writer(tmp_path / "run", batch_seconds=0) as w:
        w.add_device(0, num_y_cores=10, num_x_cores=12, l1_num_banks=64, l1_bank_size=1364928, worker_l1_size=1499136)
        for op in (1, 2, 3):
            a, b = 10 * op, 10 * op + 1
            for t in (a, b):
                w.put_tensor(t, rng.standard_normal((1, 1, 32, 64)).astype(np.float32), memory_config=memory_config,
                             device_id=0, address=1024 * t, buffer_type=0, layout="TILE", ttnn_dtype="BFLOAT16")
            w.add_operation(op, "ttnn.add", duration=0.25 * op, arguments={"note": "it's \"quoted\"\n✓"},
                            stack_trace=f'File "model.py", line {op}', inputs=[a], outputs=[b])
            w.add_rows("buffers", [{"operation_id": op, "device_id": 0, "address": 1024 * a, "max_size_per_bank": 4096,
                                    "buffer_type": 0}])
            w.add_rows("buffer_chunks", [{"operation_id": op, "device_id": 0, "address": 1024 * a, "bank_id": 0, "core_x": 1,
                                          "core_y": 1, "chunk_address": 1024 * a, "chunk_size": 4096, "page_size": 2048,
                                          "num_pages": 2, "buffer_type": 0}])
        w.add_rows("local_tensor_comparison_records",
                   [{"tensor_id": 21, "golden_tensor_id": 11, "matches": 1, "desired_pcc": 0.99, "actual_pcc": 0.999}])
    ours = answers(visualizer_python, runner, tmp_path / "run" / "db.sqlite")
    shutil.copyfile(FIXTURES / "report-schemas" / "ttnn_0.81.1_schema_3.5.sqlite", tmp_path / "ttnn.sqlite")
    assert _errors(ours) <= _errors(answers(visualizer_python, runner, tmp_path / "ttnn.sqlite"))
    assert [(o["operation_id"], o["name"], o["duration"]) for o in ours["query_operations"]] == [
        (1, "ttnn.add", 0.25), (2, "ttnn.add", 0.5), (3, "ttnn.add", 0.75)]
    assert {a["value"] for a in ours["query_operation_arguments"]} == {"it's \"quoted\"\n✓"}
    tensors = {t["tensor_id"]: t for t in ours["query_tensors"]}
    assert sorted(tensors) == [10, 11, 20, 21, 30, 31]
    assert tensors[10]["shape"] == "Shape([1, 1, 32, 64])" and tensors[10]["dtype"] == "DataType.BFLOAT16"
    assert tensors[10]["memory_config"]["memory_layout"] == "TensorMemoryLayout::INTERLEAVED"
    assert [(c["producers"], c["consumers"]) for c in ours["query_producers_consumers"] if c["tensor_id"] == 11] == [([1], [])]
    assert len(ours["query_buffer_chunks"]) == 3 and len(ours["query_buffers"]) == 3 and ours["query_devices"]
    assert ours["query_tensor_comparisons"][0][0]["actual_pcc"] == 0.999


# --- the cached environment itself ----------------------------------------------------------------------


def test_env_that_cannot_download_skips_with_pips_error_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline (here: pip told to use no index), building the venv raises EnvUnavailable naming the package
    and pip's own error, and no half-built venv stays in the cache to be taken for a ready one."""
    monkeypatch.setenv("REPORTDB_TTNN_ENVS", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "no-wheels"))
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    with pytest.raises(EnvUnavailable, match=rf"cannot install ttnn-visualizer {VISUALIZER_VERSION}: .*ttnn-visualizer=={VISUALIZER_VERSION}"):
        cached_venv("visualizer-offline", Path(sys.executable), [f"ttnn-visualizer=={VISUALIZER_VERSION}"],
                    f"ttnn-visualizer {VISUALIZER_VERSION}")
    assert not (tmp_path / "cache" / "visualizer-offline").exists()


def test_ready_env_is_reused_without_running_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A venv with its .ready marker is returned as it is: no interpreter is run, nothing is installed."""
    monkeypatch.setenv("REPORTDB_TTNN_ENVS", str(tmp_path))
    (tmp_path / "made-before" / "bin").mkdir(parents=True)
    (tmp_path / "made-before" / ".ready").write_text("ttnn-visualizer==0.108.0\n")
    python = cached_venv("made-before", tmp_path / "no-such-python", ["ttnn-visualizer==0.108.0"], "ttnn-visualizer")
    assert python == tmp_path / "made-before" / "bin" / "python"
    with pytest.raises(EnvBuildError, match="cannot make a venv"):  # without the marker it is rebuilt, with that python
        cached_venv("not-ready", tmp_path / "no-such-python", ["ttnn-visualizer==0.108.0"], "ttnn-visualizer")
