"""``team.history(..., policy=...)``: the stored metric vectors of a team store judged by a tolerance policy, on a
real PostgreSQL server; and ``judge_stored`` on the vectors ``compare --golden --store`` keeps."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import reportdb
from reportdb import team
from reportdb.analysis.policy import Policy, judge_stored

from pg_server import make_report


def _report_with_goldens(folder: Path) -> Path:
    """make_report's three operations, goldens stored: op1's close to its output, op2's its negation; op3's absent."""
    make_report(folder, seed=1, own=4)
    with reportdb.open(folder, "a") as report:
        rng = np.random.default_rng(9)
        out1, out2 = report.tensor(101), report.tensor(102)
        report.put_tensor(201, out1 + rng.standard_normal(out1.shape).astype(np.float32) * 1e-4)
        report.put_tensor(202, -out2)
        reportdb.compare_golden(report, store=True)
    return folder


def test_judge_stored_vectors(tmp_path: Path) -> None:
    folder = _report_with_goldens(tmp_path / "r")
    with reportdb.open(folder) as report, report.connection() as conn:
        stored = {t: json.loads(m) for t, m in conn.execute("SELECT tensor_id, metrics FROM rdb_comparison")}
    assert set(stored) == {101, 102}
    assert judge_stored(None, stored[101], "ttnn.op1").passed  # type: ignore[union-attr]
    failed = judge_stored(None, stored[102], "ttnn.op2")
    assert failed is not None and failed.failed == ("pcc", "sqnr_db", "tile_sqnr_db")
    lenient = Policy.from_dict({"rules": [{"op": "ttnn.op2", "pcc": -1.0, "sqnr_db": -100.0}]})
    assert judge_stored(lenient, stored[102], "ttnn.op2").passed  # type: ignore[union-attr]
    other_tolerances = Policy.from_dict({"rules": [{"op": "*", "rtol": 0.5}]})
    assert judge_stored(other_tolerances, stored[101], "ttnn.op1") is None  # counted at other tolerances: not judged


@pytest.mark.process
@pytest.mark.service
def test_history_judged_by_a_policy(team_url: str, tmp_path: Path) -> None:
    team.push(_report_with_goldens(tmp_path / "r"), team_url, name="run")
    plain = {h.operation_id: h for h in team.history(team_url, "ttnn.op2")}
    assert plain[2].verdict is None and plain[2].metrics is not None  # no policy given: as before
    policy_file = tmp_path / "p.toml"
    policy_file.write_text('[[rules]]\nop = "ttnn.op2"\npcc = -1\n')
    (judged,) = team.history(team_url, "ttnn.op2", policy=Policy.default())
    assert (judged.verdict, judged.failed) == ("fail", ("pcc", "sqnr_db", "tile_sqnr_db"))
    (lenient,) = team.history(team_url, "ttnn.op2", policy=policy_file)
    assert (lenient.verdict, lenient.failed) == ("pass", ())  # a matching rule replaces the dtype defaults whole
