"""ttnn-visualizer's own query layer gives the same answers on a legacy report and on its migration.

The PyPI package ``ttnn-visualizer`` pins many heavy dependencies, so it is not one of ours: the
test builds a separate venv once per session (or uses the python named by
``REPORTDB_TEST_VISUALIZER_PYTHON``), runs every ``DatabaseQueries`` method there on a database
and compares the JSON answers. It skips only when pip cannot install the package.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES
import reportdb
from reportdb.migration import migrate

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
def visualizer_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A python with ``ttnn-visualizer`` installed from PyPI, built once per session."""
    given = os.environ.get("REPORTDB_TEST_VISUALIZER_PYTHON")
    if given:
        return given
    venv = tmp_path_factory.mktemp("ttnn-visualizer-venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    result = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "ttnn-visualizer"], capture_output=True, text=True, timeout=1800
    )
    if result.returncode != 0:
        pytest.skip(f"pip could not download/install ttnn-visualizer from PyPI: {result.stderr.strip()[-800:]}")
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
