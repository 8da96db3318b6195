"""A plain chain on three threads: its references on the caller's, each output judged on a second while the next
references are computed, the tensors no operation made read ahead on a third. The rows, their order and the
verdicts are those of one thread; each stored tensor is read once; what is read ahead stays within its limit."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from test_replay_parallel import make_many

import reportdb
from reportdb.analysis import replay as replay_mod
from reportdb.analysis.replay import JudgedInOrder
from reportdb.analysis.replay_parallel import ReadAhead, Reads


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[int]]:
    path = tmp_path_factory.mktemp("chain") / "many.sqlite"
    return path, make_many(path)


def rows_json(result: reportdb.ReplayResult) -> str:
    return json.dumps(result.to_dict()["rows"], sort_keys=True)


def test_a_chain_judged_on_threads_gives_the_rows_of_one(many: tuple[Path, set[int]],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    path, wrong = many
    threaded = reportdb.replay(path, chain=True)
    monkeypatch.setattr(replay_mod, "JUDGING_AHEAD", 0)
    one = reportdb.replay(path, chain=True)
    assert rows_json(threaded) == rows_json(one)
    assert [r.operation_id for r in threaded.rows] == list(range(1, 51))
    first = min(wrong)  # the chain fails from the first planted fault on (its error carried on)
    assert min(r.operation_id for r in threaded.failed) == first and threaded.failed_outputs == one.failed_outputs
    full = reportdb.replay(path, chain=True, full_stats=True)
    monkeypatch.setattr(replay_mod, "JUDGING_AHEAD", 4)
    assert rows_json(full) == rows_json(reportdb.replay(path, chain=True, full_stats=True))


def test_a_chain_judges_only_the_operations_asked_for(many: tuple[Path, set[int]],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Operations outside ``ops`` run for their references (the chain needs them) but are not compared."""
    path, _ = many
    judged: Counter[str] = Counter()
    real = replay_mod.judged

    def counting(policy: Any, op: str, *args: Any, **kwargs: Any) -> Any:
        judged[op] += 1
        return real(policy, op, *args, **kwargs)

    monkeypatch.setattr(replay_mod, "judged", counting)
    some = reportdb.replay(path, chain=True, ops="ttnn.relu")
    assert set(judged) == {"ttnn.relu"} and judged["ttnn.relu"] == some.compared == 8
    everything = reportdb.replay(path, chain=True)
    relu = [r for r in everything.rows if r.name == "ttnn.relu"]
    assert json.dumps([r.to_dict() for r in some.rows], sort_keys=True) == json.dumps(
        [r.to_dict() for r in relu], sort_keys=True)


def test_a_chain_reads_each_stored_tensor_once(many: tuple[Path, set[int]], monkeypatch: pytest.MonkeyPatch) -> None:
    """The weights read ahead, each output read once to be judged: nothing read twice."""
    path, _ = many
    reads: Counter[int] = Counter()
    real = Reads.tensor

    def counting(self: Reads, tensor_id: int) -> np.ndarray:
        reads[tensor_id] += 1
        return real(self, tensor_id)

    monkeypatch.setattr(Reads, "tensor", counting)
    result = reportdb.replay(path, chain=True)
    with reportdb.open(path) as report:
        stored = set(report.tensor_ids())
    assert result.compared == 48 and set(reads) == stored  # the model's input and weights, and every output
    assert max(reads.values()) == 1


def test_read_ahead_reads_in_order_within_its_limit_and_stops(many: tuple[Path, set[int]]) -> None:
    """Reads start in the order given, while what waits to be taken fits the limit (one at least); a tensor read
    twice is kept until its second reader; close() drops the reads not started."""
    path, _ = many
    size = 4 * 64 * 64  # each tensor of the report as float32
    with reportdb.open(path) as report:
        ahead = ReadAhead(report, 0, [2, 4, 2, 7, 9, 10_000], limit=2 * size)
        try:
            assert list(ahead._ahead) == [2, 4] and list(ahead._plan) == [7, 9]  # 10_000 is not stored
            two = ahead.tensor(2)
            assert not two.flags.writeable and list(ahead._ahead) == [2, 4]  # kept for its second read
            assert ahead.tensor(2) is two and list(ahead._ahead) == [4, 7]
            assert ahead._ahead_bytes <= 2 * size
            assert ahead.tensor(3).flags.writeable  # not planned: read when asked
        finally:
            ahead.close()
        assert ahead._ahead == {} and not ahead._plan
        one = ReadAhead(report, 0, [2, 4, 7], limit=1)  # nothing fits: one read ahead at a time
        try:
            assert list(one._ahead) == [2]
            assert one.tensor(4).flags.writeable and list(one._ahead) == [2]  # 4 not ahead yet: read when asked
            one.tensor(2)
            assert list(one._ahead) == [4]
        finally:
            one.close()
        passed = ReadAhead(report, 0, [2, 4, 7, 9], limit=3 * size)
        try:
            assert list(passed._ahead) == [2, 4, 7]
            passed.tensor(4)  # the chain never took 2 (its operation stopped before reading it): dropped
            assert list(passed._ahead) == [7, 9] and passed._ahead_bytes == 2 * size
        finally:
            passed.close()


def test_read_ahead_leaves_device_shards_to_the_per_device_reads(tmp_path: Path) -> None:
    from test_replay_collectives import make_mesh_report

    path = tmp_path / "mesh.sqlite"
    make_mesh_report(path)
    with reportdb.open(path) as report:
        sharded = [t for t in report.tensor_ids() if len(report.tensor_info(t).shards) > 1]
        whole = [t for t in report.tensor_ids() if len(report.tensor_info(t).shards) == 1]
        ahead = ReadAhead(report, 0, sharded + whole, limit=1 << 30)
        try:
            assert sharded and set(ahead._ahead) == set(whole)
        finally:
            ahead.close()


def test_judged_in_order_keeps_the_order_and_its_window() -> None:
    """Steps come back in the order given; no more than ``ahead`` are pending (the caller waits for the oldest
    beyond them); an error is raised at its place; close() drops the steps not started."""
    started: list[int] = []
    gate = threading.Event()

    def step(i: int, wait: bool = False) -> Callable[[], list[Any]]:
        def run() -> list[Any]:
            started.append(i)
            if wait:
                gate.wait(5)
            return [i]
        return run

    judging = JudgedInOrder(2)
    try:
        got = list(judging.add(step(0, wait=True))) + list(judging.add(step(1)))
        assert got == []  # within the window: nothing waited for yet
        threading.Timer(0.2, gate.set).start()
        t0 = time.monotonic()
        got = list(judging.add(step(2)))  # three would wait: the caller waits for step 0
        assert got == [0] and time.monotonic() - t0 < 4
        assert list(judging.rest()) == [1, 2]
    finally:
        judging.close()
    assert started == [0, 1, 2]

    def fail() -> list[Any]:
        raise reportdb.ReportDBError("broken step")

    judging = JudgedInOrder(1)
    try:
        list(judging.add(step(0)))
        list(judging.add(fail))
        with pytest.raises(reportdb.ReportDBError, match="broken step"):
            list(judging.add(step(2)))
    finally:
        judging.close()

    gate.clear()
    judging = JudgedInOrder(3)
    list(judging.add(step(10, wait=True)))
    list(judging.add(step(11)))  # queued behind step 10 on the one judging thread
    time.sleep(0.05)
    threading.Timer(0.1, gate.set).start()
    judging.close()  # a consumer that stopped early: step 11 never starts, step 10 is waited for
    assert 10 in started and 11 not in started


def test_judged_in_order_without_a_window_runs_each_step_at_once() -> None:
    judging = JudgedInOrder(0)
    try:
        assert list(judging.add(lambda: [1])) == [1] and judging.pool is None and judging.blas is None
    finally:
        judging.close()
