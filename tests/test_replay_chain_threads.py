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


def test_a_chain_judged_on_threads_gives_the_rows_of_one(many: tuple[Path, set[int]]) -> None:
    """The default budget lets outputs wait to be judged on the judging thread; a budget of one byte judges each at
    once (and reads one tensor ahead at a time): the same rows."""
    path, wrong = many
    threaded = reportdb.replay(path, chain=True)
    one = reportdb.replay(path, chain=True, budget=1)
    assert rows_json(threaded) == rows_json(one)
    assert [r.operation_id for r in threaded.rows] == list(range(1, 51))
    first = min(wrong)  # the chain fails from the first planted fault on (its error carried on)
    assert min(r.operation_id for r in threaded.failed) == first and threaded.failed_outputs == one.failed_outputs
    full = reportdb.replay(path, chain=True, full_stats=True)
    assert rows_json(full) == rows_json(reportdb.replay(path, chain=True, full_stats=True, budget=1))


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


def settled(ahead: ReadAhead, ready: set[int]) -> bool:
    """Whether the read-ahead thread reached ``ready`` (waited for a few seconds) and then stopped there: nothing
    else read while it waits for room (or for its plan's end)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and set(ahead._ready) != ready:
        time.sleep(0.005)
    time.sleep(0.05)
    return set(ahead._ready) == ready and ahead._reading is None


def whole(*ids: int) -> list[tuple[int, bool]]:
    return [(t, True) for t in ids]


def test_read_ahead_reads_in_order_within_its_limit_and_stops(many: tuple[Path, set[int]]) -> None:
    """Reads run in the order given while what waits to be taken fits the limit (one at least); a tensor read twice
    is kept until its second reader; one asked before the thread reached it is read at once and skipped; close()
    stops the thread."""
    path, _ = many
    size = 4 * 64 * 64  # each tensor of the report as float32
    with reportdb.open(path) as report:
        ahead = ReadAhead(report, 0, whole(2, 4, 2, 7, 9, 10_000), limit=2 * size)  # 10_000 is not stored
        try:
            assert settled(ahead, {2, 4})
            two = ahead.tensor(2)
            assert not two.flags.writeable and settled(ahead, {2, 4})  # kept for its second read
            assert ahead.tensor(2) is two and settled(ahead, {4, 7})
            assert ahead._ahead_bytes <= 2 * size
            assert ahead.tensor(3).flags.writeable  # not planned: read when asked
        finally:
            ahead.close()
        assert not ahead._thread.is_alive() and ahead._ready == {}
        one = ReadAhead(report, 0, whole(2, 4, 7), limit=1)  # nothing fits: one read ahead at a time
        try:
            assert settled(one, {2})
            assert one.tensor(4).flags.writeable  # asked before the thread reached it: read now, skipped later
            one.tensor(2)
            assert settled(one, {7})
        finally:
            one.close()
        passed = ReadAhead(report, 0, whole(2, 4, 7, 9), limit=3 * size)
        try:
            assert settled(passed, {2, 4, 7})
            passed.tensor(4)  # the chain never took 2 (its operation stopped before reading it): dropped
            assert settled(passed, {7, 9}) and passed._ahead_bytes == 2 * size
        finally:
            passed.close()


def test_read_ahead_fills_the_metadata_cache_and_hands_on_errors(many: tuple[Path, set[int]],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Metadata-only entries are read into the cache (no values read); a read that failed on the thread raises for
    the reader that asks for it."""
    path, _ = many
    with reportdb.open(path) as report:
        ahead = ReadAhead(report, 0, [(3, False), (5, False)], limit=1 << 20)
        try:
            assert settled(ahead, set()) and set(ahead._infos) == {3, 5}
        finally:
            ahead.close()

        def broken(self: Reads, tensor_id: int) -> np.ndarray:
            raise reportdb.ReportDBError(f"tensor {tensor_id} is damaged")

        monkeypatch.setattr(Reads, "tensor", broken)
        failing = ReadAhead(report, 0, whole(2), limit=1 << 20)
        try:
            assert settled(failing, {2})
            with pytest.raises(reportdb.ReportDBError, match="tensor 2 is damaged"):
                failing.tensor(2)
        finally:
            failing.close()


def test_read_ahead_leaves_device_shards_to_the_per_device_reads(tmp_path: Path) -> None:
    from test_replay_collectives import make_mesh_report

    path = tmp_path / "mesh.sqlite"
    make_mesh_report(path)
    with reportdb.open(path) as report:
        sharded = [t for t in report.tensor_ids() if len(report.tensor_info(t).shards) > 1]
        single = {t for t in report.tensor_ids() if len(report.tensor_info(t).shards) == 1}
        ahead = ReadAhead(report, 0, whole(*sharded, *single), limit=1 << 30)
        try:
            assert sharded and settled(ahead, single)
        finally:
            ahead.close()


def test_judged_in_order_keeps_the_order_and_its_limit() -> None:
    """Steps come back in the order given; the steps waiting hold no more than the limit's bytes (one step at
    least: the caller waits for the oldest beyond it); an error is raised at its place; close() drops the steps not
    started."""
    started: list[int] = []
    gate = threading.Event()

    def step(i: int, wait: bool = False) -> Callable[[], list[Any]]:
        def run() -> list[Any]:
            started.append(i)
            if wait:
                gate.wait(5)
            return [i]
        return run

    judging = JudgedInOrder(100)
    try:
        got = list(judging.add(step(0, wait=True), 40)) + list(judging.add(step(1), 40))
        assert got == [] and judging.held == 80  # within the limit: nothing waited for yet
        threading.Timer(0.2, gate.set).start()
        t0 = time.monotonic()
        got = list(judging.add(step(2), 40))  # 120 bytes would wait: the caller waits for step 0
        assert got == [0] and judging.held == 80 and time.monotonic() - t0 < 4
        assert list(judging.add(step(3), 500)) == [1, 2]  # larger than the limit: waits alone
        assert list(judging.rest()) == [3] and judging.held == 0
    finally:
        judging.close()
    assert started == [0, 1, 2, 3]

    def fail() -> list[Any]:
        raise reportdb.ReportDBError("broken step")

    judging = JudgedInOrder(10)
    try:
        list(judging.add(step(0), 5))
        list(judging.add(fail, 5))
        with pytest.raises(reportdb.ReportDBError, match="broken step"):
            list(judging.add(step(2), 10))  # waits for both before it: the failure raises
    finally:
        judging.close()

    gate.clear()
    judging = JudgedInOrder(100)
    list(judging.add(step(10, wait=True), 1))
    list(judging.add(step(11), 1))  # queued behind step 10 on the one judging thread
    time.sleep(0.05)
    threading.Timer(0.1, gate.set).start()
    judging.close()  # a consumer that stopped early: step 11 never starts, step 10 is waited for
    assert 10 in started and 11 not in started


def test_judged_in_order_without_a_limit_runs_each_step_at_once() -> None:
    judging = JudgedInOrder(0)
    try:
        assert list(judging.add(lambda: [1], 10)) == [1] and judging.pool is None and judging.blas is None
    finally:
        judging.close()
