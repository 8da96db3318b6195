"""Isolated replay on several threads: the same rows, in the same order, as on one; memory in flight within the
budget."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import reportdb
from reportdb.analysis import references
from reportdb.analysis.replay_parallel import SharedReads, default_workers, replay_isolated

BF16 = ml_dtypes.bfloat16
CYCLE = ("ttnn.add", "ttnn.relu", "ttnn.multiply", "ttnn.softmax", "ttnn.matmul", "ttnn.gelu")


def make_many(path: Path, count: int = 48) -> set[int]:
    """``count`` operations of a chain, each output its reference rounded to bfloat16, every seventh one with a wrong
    tile; also one without a reference and one whose input is not stored. Returns the ids of the wrong ones."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((64, 64)).astype(BF16)
    wrong: set[int] = set()
    with reportdb.Writer(path) as w:
        w.put_tensor(1, x)
        tensor_id = 1
        for op in range(1, count + 1):
            name = CYCLE[op % len(CYCLE)]
            inputs = [(tensor_id, x)]
            if name in ("ttnn.add", "ttnn.multiply", "ttnn.matmul"):
                other = (rng.standard_normal((64, 64)) / 8).astype(BF16)
                w.put_tensor(tensor_id + 1, other)
                inputs.append((tensor_id + 1, other))
            out = references.compute(name, inputs, []).astype(np.float32)
            if op % 7 == 0:
                out[:32, :32] += 1.0
                wrong.add(op)
            out_id = tensor_id + len(inputs)
            w.put_tensor(out_id, out.astype(BF16))
            w.add_operation(op, name, inputs=[t for t, _ in inputs], outputs=[out_id])
            x, tensor_id = out.astype(BF16), out_id
        w.add_operation(count + 1, "ttnn.frobnicate", inputs=[tensor_id], outputs=[tensor_id + 1])
        w.add_operation(count + 2, "ttnn.relu", inputs=[10_000], outputs=[tensor_id + 2])
    return wrong


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[int]]:
    path = tmp_path_factory.mktemp("parallel") / "many.sqlite"
    return path, make_many(path)


def test_four_workers_give_the_rows_of_one(many: tuple[Path, set[int]]) -> None:
    path, wrong = many
    one = reportdb.replay(path, workers=1)
    four = reportdb.replay(path, workers=4)
    small = reportdb.replay(path, workers=4, budget=1)  # one operation in flight at a time
    dump = [json.dumps(r.to_dict()["rows"], sort_keys=True) for r in (one, four, small)]
    assert dump[0] == dump[1] == dump[2]
    assert [r.operation_id for r in four.rows] == list(range(1, 51))
    assert {r.operation_id for r in four.failed} == wrong
    assert (four.operations, four.compared, four.not_compared) == (50, 48, {"no_reference": 1, "missing_inputs": 1})


def test_budget_bounds_what_is_in_flight() -> None:
    """No more than the budget's bytes run at once; an operation above the whole budget runs alone; rows come in the
    given order whatever order the threads finish in."""
    lock = threading.Lock()
    peaks: dict[int, int]
    held, alone_ok = [0], []
    peaks = {}
    costs = {op: 30 if op != 5 else 500 for op in range(12)}
    started = {op: threading.Event() for op in range(12)}

    def run(op: int) -> list[int]:
        with lock:
            held[0] += costs[op]
            peaks[op] = held[0]
            if op == 5:
                alone_ok.append(held[0] == 500)
        started[op].set()
        if op % 2 == 0 and op + 1 in started:  # even operations finish after the next one has started, when it can
            started[op + 1].wait(timeout=0.2)
        with lock:
            held[0] -= costs[op]
        return [op]

    rows = list(replay_isolated(list(range(12)), run, costs.__getitem__, workers=4, budget=100))
    assert rows == list(range(12)) and alone_ok == [True]
    assert max(v for op, v in peaks.items() if op != 5) <= 100 < max(peaks.values())
    assert max(held) == 0 and 1 <= default_workers() <= 8


def test_bad_worker_counts_are_refused(many: tuple[Path, set[int]]) -> None:
    with pytest.raises(reportdb.ReportDBError, match="at least one worker"):
        reportdb.replay(many[0], workers=0)


def test_shared_reads_read_a_tensor_once_for_its_readers(many: tuple[Path, set[int]]) -> None:
    """A tensor read twice in a replay is read from the report once, kept read-only for its second reader and dropped
    after it; one read once, or past the limit, is not kept; stored ids come from one query."""
    path, _ = many
    with reportdb.open(path) as report:
        reads = SharedReads(report, 0, [2, 2, 3], limit=1 << 20)
        assert reads.has(2) and not reads.has(10_000) and reads.elements(2) == 64 * 64
        first = reads.tensor(2)
        assert not first.flags.writeable and reads._bytes == first.nbytes
        assert reads.tensor(2) is first and reads._kept == {} and reads._bytes == 0
        assert reads.tensor(3).flags.writeable and reads._kept == {}  # its only read: not kept
        np.testing.assert_array_equal(first, report.tensor(2))
        tight = SharedReads(report, 0, [2, 2], limit=100)  # 8 KiB do not fit 100 bytes: read again
        assert tight.tensor(2) is not tight.tensor(2) and tight._kept == {}


def test_workers_hold_blas_to_their_share_of_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each BLAS library numpy loaded runs at most cores // workers threads while the workers run (and as it did
    after): 4 cores and 2 workers give 2 threads, 2 cores and 4 workers 1."""
    from threadpoolctl import threadpool_info

    def blas() -> list[int]:
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    before = blas()
    if not before:
        pytest.skip("numpy loaded no BLAS library threadpoolctl knows")
    import reportdb.analysis.replay_parallel as parallel

    for cores, workers, expected in ((4, 2, 2), (2, 4, 1)):
        monkeypatch.setattr(parallel.os, "cpu_count", lambda: cores)
        seen = list(replay_isolated(range(4), lambda op: [blas()], lambda op: 1, workers=workers))
        assert seen == [[expected] * len(before)] * 4
        assert blas() == before
