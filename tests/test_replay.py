"""reportdb.replay / ``reportdb replay``: each operation's reference on its stored device inputs against its output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import reportdb
from conftest import FIXTURES
from test_visualizer_queries import answers as visualizer_answers
from test_visualizer_queries import runner, visualizer_python  # fixtures of the visualizer's venv

BF16 = ml_dtypes.bfloat16
ROOT = Path(__file__).resolve().parents[1]


def summary(tensor_id: int) -> str:
    """A tensor argument as ttnn 0.81's graph report records it."""
    return f"ttnn.Tensor(shape=Shape([32, 64]), dtype=DataType.BFLOAT16, layout=Layout.TILE, tensor_id={tensor_id})"


def bf16(x: np.ndarray) -> np.ndarray:
    """A device result: the exact value rounded to bfloat16."""
    return np.asarray(x, dtype=np.float32).astype(BF16)


def make_chain(path: Path) -> None:
    """A report of seven operations whose device outputs are their references rounded to bfloat16, except op 3
    (softmax), whose output has one 32x32 tile wrong; op 4 consumes that wrong output. Ops 5-7 cannot be compared:
    no reference, an argument not understood, an input not stored."""
    rng = np.random.default_rng(5)
    x = bf16(rng.standard_normal((32, 64)))
    w = bf16(rng.standard_normal((64, 64)) / 8)
    bias = bf16(rng.standard_normal((1, 64)))
    y1 = bf16(x.astype(np.float32) @ w.astype(np.float32) + bias.astype(np.float32))
    y2 = bf16(np.maximum(y1.astype(np.float32), 0))
    e = np.exp(y2.astype(np.float64) - y2.astype(np.float64).max(axis=-1, keepdims=True))
    y3 = (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)
    y3[:, 32:] = y3[:, 32:][::-1]  # the device's bug: one tile of the output comes from the wrong rows
    y3 = bf16(y3)
    r = bf16(rng.standard_normal((32, 64)) / 1000)  # small beside the softmax: op 3's error dominates op 4's output
    y4 = bf16(y3.astype(np.float32) + r.astype(np.float32))
    with reportdb.Writer(path) as w_:
        for tensor_id, array in ((1, x), (2, w), (3, bias), (4, y1), (5, y2), (6, y3), (7, r), (8, y4), (9, y4), (10, y4)):
            w_.put_tensor(tensor_id, array, ttnn_dtype="BFLOAT16", layout="TILE")
        w_.add_operation(1, "ttnn.linear", inputs=[1, 2, 3], outputs=[4],
                         arguments={"bias": summary(3), "memory_config": "DRAM", "0": summary(1), "1": summary(2)})
        w_.add_operation(2, "ttnn.relu", inputs=[4], outputs=[5], arguments={"0": summary(4)})
        w_.add_operation(3, "ttnn.softmax", inputs=[5], outputs=[6], arguments={"dim": "-1", "0": summary(5)})
        w_.add_operation(4, "ttnn.add", inputs=[6, 7], outputs=[8], arguments={"0": summary(6), "1": summary(7)})
        w_.add_operation(5, "ttnn.frobnicate", inputs=[8], outputs=[9], arguments={"dim": "3", "0": summary(8)})
        w_.add_operation(6, "ttnn.softmax", inputs=[8], outputs=[10], arguments={"dim": "-1", "frobnicate": "2"})
        w_.add_operation(7, "ttnn.multiply", inputs=[8, 99], outputs=[11])


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("replay") / "chain.sqlite"
    make_chain(path)
    return path


def test_only_the_wrong_operation_fails(chain: Path) -> None:
    result = reportdb.replay(chain)
    by_id = {r.operation_id: r for r in result.rows}
    assert [r.operation_id for r in result.rows] == [1, 2, 3, 4, 5, 6, 7]
    assert [(i, by_id[i].status, by_id[i].passed) for i in (1, 2, 3, 4)] == [
        (1, "compared", True), (2, "compared", True), (3, "compared", False), (4, "compared", True)]
    assert result.first_failure is by_id[3] and result.failed == (by_id[3],)
    assert by_id[3].metrics is not None and by_id[3].metrics.pcc < 0.99 and by_id[3].failed
    assert by_id[4].metrics is not None and by_id[4].metrics.max_abs_error <= 2 ** -7 * 4  # on its device input: fine
    assert by_id[1].dtype == "BFLOAT16" and by_id[1].output_tensor_id == 4
    assert (by_id[5].status, by_id[5].passed) == ("no_reference", None)
    assert (by_id[6].status, by_id[6].unsupported) == ("unsupported_arguments", ("frobnicate",))
    assert by_id[7].status == "missing_inputs" and "99" in by_id[7].detail


def test_ops_glob_and_policy(chain: Path, tmp_path: Path) -> None:
    only = reportdb.replay(chain, ops="ttnn.soft*")
    assert [r.operation_id for r in only.rows] == [3, 6]
    lenient = tmp_path / "policy.toml"
    lenient.write_text('[[rules]]\nop = "ttnn.softmax"\npcc = 0.0\n')
    assert reportdb.replay(chain, policy=lenient).first_failure is None


def test_a_correct_report_has_no_failure(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    a, b = bf16(rng.standard_normal((4, 32, 32))), bf16(rng.standard_normal((4, 32, 32)))
    with reportdb.Writer(tmp_path / "ok.sqlite") as w:
        w.put_tensor(1, a)
        w.put_tensor(2, b)
        w.put_tensor(3, bf16(a.astype(np.float32) @ b.astype(np.float32)))
        w.add_operation(1, "ttnn.matmul", inputs=[1, 2], outputs=[3])
    result = reportdb.replay(tmp_path / "ok.sqlite")
    assert [(r.status, r.passed) for r in result.rows] == [("compared", True)] and result.first_failure is None


def test_fixture_reports_are_replayed_without_guessing() -> None:
    """The fixture reports were written by ttnn's own report module with stand-in argument texts (``arg0``): replay
    names those arguments instead of guessing what they were, and reports operations without a reference."""
    folder = FIXTURES / "ttnn-0.62.2-bin" / "report"
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*")}
    result = reportdb.replay(folder)
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*")} == before  # read only
    assert len(result.rows) == 12
    assert {r.status for r in result.rows} <= {"unsupported_arguments", "missing_inputs", "no_reference"}
    assert all("0" in r.unsupported for r in result.rows if r.status == "unsupported_arguments")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "reportdb", "replay", *args], capture_output=True, text=True, env=env,
                          timeout=300)


@pytest.mark.process
def test_cli_table_json_and_exit_status(chain: Path, tmp_path: Path) -> None:
    table = _cli(str(chain))
    assert table.returncode == 1, table.stderr
    assert "first failure: operation 3 ttnn.softmax" in table.stdout
    assert "frobnicate" in table.stdout and "no_reference" in table.stdout
    data = json.loads(_cli(str(chain), "--json").stdout)
    assert data["first_failure"]["operation_id"] == 3
    assert [r["status"] for r in data["rows"]][:4] == ["compared"] * 4
    assert data["rows"][0]["metrics"]["pcc"] > 0.99
    ok = _cli(str(chain), "--ops", "ttnn.relu")
    assert ok.returncode == 0 and "first failure: none" in ok.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text("[[rules]]\nop = 3\n")
    refused = _cli(str(chain), "--policy", str(bad))
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1 and "bad.toml" in refused.stderr


def test_store_keeps_references_as_local_records(chain: Path, tmp_path: Path) -> None:
    report = tmp_path / "stored.sqlite"
    report.write_bytes(chain.read_bytes())
    first = reportdb.replay(report, store=True)
    again = reportdb.replay(report, store=True)  # a rerun reuses the references it stored
    with reportdb.open(report) as rep, rep.connection() as conn:
        rows = conn.execute("SELECT tensor_id, golden_tensor_id, passed, metrics FROM rdb_comparison WHERE kind='replay'"
                            " ORDER BY tensor_id").fetchall()
        local = conn.execute("SELECT tensor_id, golden_tensor_id, matches FROM local_tensor_comparison_records"
                             " ORDER BY tensor_id").fetchall()
        assert [(r[0], r[2]) for r in rows] == [(4, 1), (5, 1), (6, 0), (8, 1)]
        assert [tuple(r) for r in local] == [(r[0], r[1], r[2]) for r in rows]
        assert all(g > 10 for _, g, _, _ in rows) and len(rep.tensor_ids()) == 10 + 4
        assert json.loads(rows[2][3])["replay"]["operation"] == "ttnn.softmax"
        np.testing.assert_array_equal(rep.tensor(rows[0][1]), rep.tensor(rows[0][1]).astype(np.float32))
    assert [r.passed for r in first.rows] == [r.passed for r in again.rows]
    golden = reportdb.compare_golden(report)  # compare --golden reads the stored records back
    local_results = {r.tensor_id: r for r in golden.records if r.kind == "local"}
    assert {t: r.status for t, r in local_results.items()} == {4: "compared", 5: "compared", 6: "compared", 8: "compared"}
    assert [local_results[t].verdict for t in (4, 5, 6, 8)] == ["pass", "pass", "fail", "pass"]


def test_store_refuses_a_legacy_original(tmp_path: Path) -> None:
    legacy = FIXTURES / "ttnn-0.62.2-bin" / "report"
    before = (legacy / "db.sqlite").read_bytes()
    with pytest.raises(reportdb.errors.ReadOnlyError, match="migrate"):
        reportdb.replay(legacy, store=True)
    assert (legacy / "db.sqlite").read_bytes() == before


def test_chain_gives_global_errors(chain: Path, tmp_path: Path) -> None:
    """Chained from the model's inputs, op 3's wrong output also fails op 4 (a victim), where isolated replay passes
    op 4 on its device input; ttnn's global records receive the chain with --store."""
    result = reportdb.replay(chain, chain=True)
    by_id = {r.operation_id: r for r in result.rows}
    assert [(i, by_id[i].status, by_id[i].passed) for i in (1, 2, 3, 4)] == [
        (1, "compared", True), (2, "compared", True), (3, "compared", False), (4, "compared", False)]
    assert result.first_failure is by_id[3]
    assert by_id[6].status == "unsupported_arguments" and by_id[7].status == "missing_inputs"
    only = reportdb.replay(chain, chain=True, ops="ttnn.add")  # the chain still runs through every operation
    assert [(r.operation_id, r.passed) for r in only.rows] == [(4, False)]
    report = tmp_path / "stored.sqlite"
    report.write_bytes(chain.read_bytes())
    reportdb.replay(report, chain=True, store=True)
    with reportdb.open(report) as rep, rep.connection() as conn:
        rows = conn.execute("SELECT tensor_id, matches FROM global_tensor_comparison_records ORDER BY tensor_id").fetchall()
        assert [tuple(r) for r in rows] == [(4, 1), (5, 1), (6, 0), (8, 0)]
        assert conn.execute("SELECT count(*) FROM rdb_comparison WHERE kind='replay_chain'").fetchone()[0] == 4


@pytest.mark.slow
@pytest.mark.process
def test_stored_replay_reads_in_ttnn_visualizer(chain: Path, tmp_path: Path, visualizer_python: str, runner: Path) -> None:
    """ttnn-visualizer's own query layer lists the stored replay results as the report's local and global records."""
    report = tmp_path / "stored.sqlite"
    report.write_bytes(chain.read_bytes())
    reportdb.replay(report, store=True)
    reportdb.replay(report, store=True, chain=True)
    local, global_, _ = visualizer_answers(visualizer_python, runner, report)["query_tensor_comparisons"]
    assert sorted((r["tensor_id"], r["matches"]) for r in local) == [(4, True), (5, True), (6, False), (8, True)]
    assert sorted((r["tensor_id"], r["matches"]) for r in global_) == [(4, True), (5, True), (6, False), (8, False)]
    assert all(r["golden_tensor_id"] > 10 and r["actual_pcc"] is not None for r in local + global_)


def make_multi_output(path: Path) -> dict[str, np.ndarray]:
    """Operations with several outputs: a split whose second piece is wrong, a QKV head split whose three outputs are
    right (its input the split's right first piece), and a split whose report lists an output its reference has not."""
    rng = np.random.default_rng(9)
    x = bf16(rng.standard_normal((1, 32, 96)))
    first, second = x[..., :48], x[..., 48:]
    wrong = second.copy()
    wrong[0, 0, :8] = bf16(wrong[0, 0, :8].astype(np.float32) + 3.0)
    fused = np.concatenate([first, first], axis=-1)  # 96 = (2 heads + 2 * 1 kv head) * 24
    q = fused[..., :48].reshape(1, 32, 2, 24).transpose(0, 2, 1, 3)
    kv = fused[..., 48:].reshape(1, 32, 2, 24)
    k, v = kv[..., :1, :].transpose(0, 2, 3, 1), kv[..., 1:, :].transpose(0, 2, 1, 3)
    with reportdb.Writer(path) as w:
        for tensor_id, array in ((1, x), (2, first), (3, wrong), (4, fused), (5, q), (6, k), (7, v), (8, first), (9, second)):
            w.put_tensor(tensor_id, np.ascontiguousarray(array), ttnn_dtype="BFLOAT16", layout="TILE")
        w.add_operation(1, "ttnn.split", inputs=[1], outputs=[2, 3], arguments={"0": summary(1), "1": "48", "dim": "-1"})
        w.add_operation(2, "ttnn.transformer.split_query_key_value_and_split_heads", inputs=[4], outputs=[5, 6, 7],
                        arguments={"0": summary(4), "num_heads": "2", "num_kv_heads": "1"})
        w.add_operation(3, "ttnn.split", inputs=[1], outputs=[8, 9, 10], arguments={"0": summary(1), "1": "48", "dim": "2"})
    return {"q": q, "k": k, "v": v}


def test_every_output_of_an_operation_is_compared(tmp_path: Path) -> None:
    make_multi_output(tmp_path / "multi.sqlite")
    result = reportdb.replay(tmp_path / "multi.sqlite")
    rows = [(r.operation_id, r.output_index, r.output_tensor_id, r.status, r.passed) for r in result.rows]
    assert rows == [
        (1, 0, 2, "compared", True), (1, 1, 3, "compared", False),
        (2, 0, 5, "compared", True), (2, 1, 6, "compared", True), (2, 2, 7, "compared", True),
        (3, 0, 8, "compared", True), (3, 1, 9, "compared", True), (3, 2, 10, "no_reference", None),
    ]
    first = result.first_failure
    assert first is not None and (first.operation_id, first.output_index) == (1, 1) and result.failed == (first,)
    assert "2 output(s)" in result.rows[-1].detail


def test_stored_multi_output_results_are_read_back_per_output(tmp_path: Path) -> None:
    make_multi_output(tmp_path / "multi.sqlite")
    reportdb.replay(tmp_path / "multi.sqlite", store=True)
    with reportdb.open(tmp_path / "multi.sqlite") as r, r.connection() as conn:
        rows = conn.execute("SELECT tensor_id, passed, json_extract(metrics, '$.replay.output_index') FROM rdb_comparison"
                            " WHERE kind='replay' ORDER BY tensor_id").fetchall()
    assert rows == [(2, 1, 0), (3, 0, 1), (5, 1, 0), (6, 1, 1), (7, 1, 2), (8, 1, 0), (9, 1, 1)]
