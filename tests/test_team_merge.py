"""``merge``: a real 2-rank pair written by the Writer from two processes becomes one report with rank columns,
tensors deduplicated, nothing dropped; conflicting values are reported."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import reportdb
from reportdb import team
from reportdb.errors import InvalidArgumentError, OutputPathError

WRITER = r'''
import sys
import numpy as np
import reportdb
path, rank = sys.argv[1], int(sys.argv[2])
weights = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)  # the same on every host
x = np.random.default_rng(rank).standard_normal((32, 64)).astype(np.float32)
with reportdb.Writer(path, rank=rank) as w:
    w.put_tensor(1, weights, layout="TILE")
    w.put_tensor(2, x)
    w.put_tensor(3, x @ weights, role="output")
    w.add_operation(1, "ttnn.matmul", duration=0.001 * (rank + 1), arguments={"rank": str(rank)},
                    stack_trace='File "model.py", line 3', inputs=[2, 1], outputs=[3])
'''


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two per-rank reports, each written by the Writer in its own process (as two hosts would)."""
    base = tmp_path_factory.mktemp("ranks")
    script = base / "writer.py"
    script.write_text(WRITER)
    paths = [base / f"rank{r}" for r in range(2)]
    for p in paths:
        p.mkdir()
    procs = [subprocess.Popen([sys.executable, str(script), str(p / "db.sqlite"), str(r)], stderr=subprocess.PIPE, text=True)
             for r, p in enumerate(paths)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    return paths


@pytest.mark.process
def test_merge_of_a_two_rank_pair(pair: list[Path], tmp_path: Path) -> None:
    result = team.merge(pair, tmp_path / "merged")
    assert result.ranks == {str(p / "db.sqlite"): r for r, p in enumerate(pair)}
    merged = Path(result.output)
    with reportdb.open(merged) as report:
        assert report.tensor_keys() == [(1, 0), (2, 0), (3, 0), (1, 1), (2, 1), (3, 1)]
        for rank, p in enumerate(pair):
            with reportdb.open(p) as original:
                for t in (1, 2, 3):
                    np.testing.assert_array_equal(report.tensor(t, rank), original.tensor(t, rank))
        assert report.verify_tensor(1, 1) > 0 and report.check_store() == []
    assert result.stored_bytes < result.logical_bytes  # the replicated weights are stored once
    with sqlite3.connect(merged) as conn:
        ops = conn.execute("SELECT operation_id, name, duration, rank FROM operations ORDER BY rank").fetchall()
        assert ops == [(1, "ttnn.matmul", 0.001, 0), (1, "ttnn.matmul", 0.002, 1)]
        for table in ("operation_arguments", "stack_traces", "input_tensors", "output_tensors"):
            ranks = [r for (r,) in conn.execute(f"SELECT rank FROM {table} ORDER BY rank")]
            assert ranks and set(ranks) == {0, 1}, table
            assert ranks.count(0) == ranks.count(1), table  # nothing dropped on either side
        args = conn.execute("SELECT value, rank FROM operation_arguments WHERE name = 'rank' ORDER BY rank").fetchall()
        assert args == [("0", 0), ("1", 1)]


def test_merge_refuses_duplicate_ranks_and_existing_output(tmp_path: Path) -> None:
    reports = []
    for i in range(2):
        folder = tmp_path / f"r{i}"
        folder.mkdir()
        with reportdb.open(folder, "a") as r:
            r.put_tensor(1, np.ones(4, np.float32) * i)
        reports.append(folder)
    with pytest.raises(InvalidArgumentError, match="same rank"):
        team.merge(reports, tmp_path / "out")  # both hold rank 0 tensors only
    assert not (tmp_path / "out").exists()
    result = team.merge(reports, tmp_path / "out", ranks=[0, 1])
    with reportdb.open(result.output) as merged:
        np.testing.assert_array_equal(merged.tensor(1, 1), np.ones(4, np.float32))
    with pytest.raises(OutputPathError, match="already exists"):
        team.merge(reports, tmp_path / "out", ranks=[0, 1])


def test_merge_of_legacy_reports_adds_rank_and_reports_conflicts(tmp_path: Path) -> None:
    """Tables without ``rank`` (a 2024 report) get it; source files and metadata that differ are reported."""
    reports = []
    for i in range(2):
        folder = tmp_path / f"legacy{i}"
        folder.mkdir()
        with sqlite3.connect(folder / "db.sqlite") as conn:
            conn.execute("CREATE TABLE operations (operation_id int, name text, duration float)")
            conn.execute("CREATE TABLE custom_table (a text)")  # unknown to reportdb: kept, with a rank
            conn.execute("CREATE TABLE source_files (id INTEGER PRIMARY KEY, path TEXT UNIQUE, contents TEXT)")
            conn.execute("CREATE TABLE stack_traces (operation_id int, stack_trace text, source_file_id int)")
            conn.execute("INSERT INTO operations VALUES (1, 'ttnn.add', ?)", (0.5 + i,))
            conn.execute("INSERT INTO custom_table VALUES (?)", (f"host{i}",))
            conn.execute("INSERT INTO source_files VALUES (?, 'model.py', ?)", (5 + i, f"v{i}"))
            conn.execute("INSERT INTO stack_traces VALUES (1, 'trace', ?)", (5 + i,))
        reports.append(folder)
    result = team.merge(reports, tmp_path / "out")
    assert any("model.py" in c for c in result.conflicts)
    with sqlite3.connect(result.output) as conn:
        assert conn.execute("SELECT name, duration, rank FROM operations ORDER BY rank").fetchall() == [
            ("ttnn.add", 0.5, 0), ("ttnn.add", 1.5, 1)]
        assert conn.execute("SELECT a, rank FROM custom_table ORDER BY rank").fetchall() == [("host0", 0), ("host1", 1)]
        (source_id,) = conn.execute("SELECT id FROM source_files WHERE path = 'model.py'").fetchone()
        assert [r for (r,) in conn.execute("SELECT source_file_id FROM stack_traces")] == [source_id, source_id]
