"""ttnn-visualizer's own query layer after the team store: a pulled report gives every answer the pushed one gives,
and a merged multi-rank report shows each rank's operations through the visualizer's rank filter.

The visualizer runs from the cached venv of ``test_visualizer_queries.py`` (built once, ``slow``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES
from test_visualizer_queries import REPORTS, answers, runner, visualizer_python  # fixtures
import reportdb
from reportdb import team

pytestmark = [pytest.mark.slow, pytest.mark.process, pytest.mark.service]

RANKS = r'''
import json, sqlite3, sys
from ttnn_visualizer.queries import DatabaseQueries
q = DatabaseQueries(connection=sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True))
out = {"ranks": q.query_operation_ranks()}
for rank in (0, 1):
    out[str(rank)] = [[o.id if hasattr(o, "id") else o.operation_id, o.name] for o in
                      q.query_operations(q.merge_rank_filter("operations", {}, rank))]
json.dump(out, sys.stdout)
'''


@pytest.mark.parametrize("name", REPORTS)
def test_visualizer_answers_the_same_after_pull(name: str, team_url: str, tmp_path: Path, visualizer_python: str,
                                                runner: Path) -> None:
    reportdb.migrate(FIXTURES / name / "report", tmp_path / "pushed")
    team.push(tmp_path / "pushed", team_url, name=name)
    pulled = Path(team.pull(team_url, name, tmp_path / "pulled").path)
    assert answers(visualizer_python, runner, pulled) == answers(visualizer_python, runner, tmp_path / "pushed" / "db.sqlite")


def test_visualizer_reads_the_ranks_of_a_merged_report(tmp_path: Path, visualizer_python: str) -> None:
    folders = []
    for rank in range(2):
        folder = tmp_path / f"rank{rank}"
        folder.mkdir()
        with reportdb.Writer(folder / "db.sqlite", rank=rank) as w:
            w.put_tensor(1, np.full((4, 4), rank, np.float32))
            w.add_operation(1, "ttnn.add", outputs=[1])
            w.add_operation(2, f"ttnn.only_on_rank{rank}")
        folders.append(folder)
    merged = team.merge(folders, tmp_path / "merged")
    script = tmp_path / "ranks.py"
    script.write_text(RANKS)
    result = subprocess.run([visualizer_python, str(script), merged.output], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["ranks"] == [0, 1]
    assert seen["0"] == [[1, "ttnn.add"], [2, "ttnn.only_on_rank0"]]
    assert seen["1"] == [[1, "ttnn.add"], [2, "ttnn.only_on_rank1"]]
