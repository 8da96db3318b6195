"""The writer against real processes and a real file: 8 ranks at once, and SIGKILL at any moment."""

from __future__ import annotations

import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import reportdb

pytestmark = pytest.mark.process  # starts other processes: CI runs it, the fast tier leaves it out

ROOT = Path(__file__).resolve().parents[1]

# Values are a function of (tensor_id, rank), so the parent can check them without being told.
COMMON = textwrap.dedent(
    """
    import sys
    import numpy as np
    import reportdb

    def value(tid, rank, n):
        return (np.arange(n, dtype=np.int64) * 31 + tid * 7 + rank).astype(np.float32)
    """
)

RANK_SCRIPT = COMMON + textwrap.dedent(
    """
    path, rank, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    sys.stdin.readline()  # every process waits here, so all open the brand-new file at once
    with reportdb.Writer(path, rank=rank, batch_items=7, batch_seconds=0, sync_bytes=32 << 10) as w:
        for tid in range(count):
            n = 16 if tid % 5 else 16 << 10  # every fifth tensor is large: written at once
            w.put_tensor(tid, value(tid, rank, n))
            w.add_operation(tid, f"op'{rank}\\"", arguments={"name": f"it's \\"{tid}\\"\\nünï"}, inputs=[tid],
                            outputs=[tid], stack_trace=f"rank {rank}")
            if tid % 11 == 0:
                w.flush()
    print("done", flush=True)
    """
)

KILL_SCRIPT = COMMON + textwrap.dedent(
    """
    path, rank, seed, durable = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
    rng = np.random.default_rng(seed)
    tid = 0  # a second life (seed % 10) appends after what the first stored: a finished report takes only an append
    if seed % 10:
        with reportdb.open(path) as r:
            tid = max(r.tensor_ids(rank), default=-1) + 1
    with reportdb.Writer(path, rank=rank, batch_items=5, batch_seconds=0.02, sync_bytes=256 << 10, durable=durable,
                         append=True) as w:
        print("ready", flush=True)
        while True:
            n = int(rng.choice([8, 1000, 300_000, 2_000_000]))
            w.put_tensor(tid, value(tid, rank, n))
            w.add_operation(tid, "op", outputs=[tid])
            if rng.random() < 0.3:
                w.flush()
                print(f"committed {tid} {n}", flush=True)  # everything up to tid is committed
            tid += 1
    """
)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    for name in list(env):
        if name.startswith("REPORTDB_"):
            del env[name]
    return env


def _value(tid: int, rank: int, n: int) -> np.ndarray:
    return (np.arange(n, dtype=np.int64) * 31 + tid * 7 + rank).astype(np.float32)


def _check_database(db: Path) -> None:
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()
    result = reportdb.verify(db)
    assert result.ok, result.problems


def test_eight_processes_append_to_one_new_report(tmp_path: Path) -> None:
    report = tmp_path / "report"
    count, ranks = 60, 8
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(report), str(rank), str(count)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
        )
        for rank in range(ranks)
    ]
    time.sleep(0.5)  # let every interpreter reach the start line
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    for rank, p in enumerate(procs):
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, f"rank {rank} failed:\n{err}"
        assert out.strip() == "done"
        assert "locked" not in err
    # The last writer to close put the file back into rollback-journal mode: db.sqlite alone is the whole report.
    finished = report / "db.sqlite"
    assert not Path(f"{finished}-wal").exists() and not Path(f"{finished}-shm").exists()
    with open(finished, "rb") as f:
        header = f.read(20)
    assert (header[18], header[19]) == (1, 1)  # 2 would be WAL
    db = tmp_path / "copied-alone" / "db.sqlite"
    db.parent.mkdir()
    shutil.copyfile(finished, db)
    _check_database(db)
    with reportdb.open(db) as r:
        assert len(r.tensor_keys()) == count * ranks
        for rank in range(ranks):
            assert r.tensor_ids(rank) == list(range(count))
            for tid in (0, 1, 5, count - 1):
                np.testing.assert_array_equal(r.tensor(tid, rank), _value(tid, rank, 16 if tid % 5 else 16 << 10))
    conn = sqlite3.connect(db)
    try:
        for table in ("operations", "operation_arguments", "stack_traces", "input_tensors", "output_tensors", "tensors"):
            counts = dict(conn.execute(f"SELECT rank, COUNT(*) FROM {table} GROUP BY rank").fetchall())
            assert counts == {rank: count for rank in range(ranks)}, table
        assert conn.execute("SELECT value FROM operation_arguments WHERE rank=3 AND operation_id=4").fetchall() == [
            ('it\'s "4"\nünï',)
        ]
        assert conn.execute("SELECT DISTINCT name FROM operations WHERE rank=2").fetchall() == [("op'2\"",)]
    finally:
        conn.close()


@pytest.mark.parametrize("round_", range(6))
def test_sigkill_keeps_every_committed_tensor(tmp_path: Path, round_: int) -> None:
    """Kill writers (two ranks on one file) at a random moment; whatever flush() returned for survives. Odd rounds
    with durable=False (synchronous=OFF: no fsync, still safe against a killed process), even ones with the
    default, whose WAL checkpoints run in a thread of their own (8 MiB tensors poke it). The file is in a rollback
    journal until the two ranks are seen writing at once, then in WAL: a kill may land in either mode."""
    report = tmp_path / "report"
    script = tmp_path / "kill.py"
    script.write_text(KILL_SCRIPT)
    rng = random.Random(round_)
    committed: dict[int, dict[int, int]] = {}
    for life in range(2):  # the second life appends to the database the first one left behind
        procs = {
            rank: subprocess.Popen(
                [sys.executable, str(script), str(report), str(rank), str(round_ * 10 + life), str(1 - round_ % 2)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
            )
            for rank in range(2)
        }
        for rank, p in procs.items():
            assert p.stdout is not None
            assert p.stdout.readline().strip() == "ready", p.stderr.read() if p.stderr else ""
        # Kill after a random number of commits of rank 0 (sometimes none), mid-write of whatever comes next.
        target = rng.choice([0, 1, 3, 8, 15])
        seen = 0
        lines: dict[int, list[str]] = {rank: [] for rank in procs}
        stdout0 = procs[0].stdout
        assert stdout0 is not None
        while seen < target:
            line = stdout0.readline()
            if not line:
                break
            lines[0].append(line)
            seen += 1
        time.sleep(rng.random() * 0.05)
        for p in procs.values():
            p.send_signal(signal.SIGKILL)
        for rank, p in procs.items():
            out, err = p.communicate(timeout=60)
            assert p.returncode == -signal.SIGKILL, err
            lines[rank].extend(out.splitlines())
        for rank, rank_lines in lines.items():
            done = committed.setdefault(rank, {})
            for line in rank_lines:
                _, tid, n = line.split()
                done[int(tid)] = int(n)
        db = report / "db.sqlite"
        _check_database(db)
        with reportdb.open(report) as r:
            for rank, done in committed.items():
                stored = set(r.tensor_ids(rank))
                for tid, n in done.items():
                    assert tid in stored, f"rank {rank}: committed tensor {tid} is missing"
                    np.testing.assert_array_equal(r.tensor(tid, rank), _value(tid, rank, n))
                # every tensor committed before the last reported one is there too
                if done:
                    assert set(range(max(done) + 1)) <= stored
