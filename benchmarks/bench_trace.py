"""What a profiling run pays for a complete, durable report: reportdb's Writer against one file per tensor.

A simulated model thread replays a trace of operations, each with arguments, input links and one output tensor, in
a realistic mix of sizes (by default 90% 4-64 KiB activations, 9% 256 KiB-1 MiB, 1% 16-64 MiB; float32 normal
values, incompressible). Each contender stores every output and the operations, and the clock stops when the
report is **on disk**: the Writer's ``close()`` and the baselines' last file, each followed by one ``os.sync()``
(the same for all, so a report that survives a crash is what is timed, not page-cache writes). Baselines: one
``.npy`` per tensor (``np.save``) and one ``.pt`` per tensor (``torch.save``, when torch is installed), with the
operations in a SQLite table written in one transaction at the end (the cheapest way a legacy report could keep
them). ``ttnn.dump_tensor`` is timed per tensor by ``bench_writer.py`` (it needs ttnn's own venv). The Writer runs
twice: by default (a rollback journal, as one process writes alone) and with ``wal=True`` (WAL from the start).

Columns: wall seconds to a durable report; the model thread's own seconds inside store calls; process CPU seconds
(all threads; bytes per CPU second is the issue's measure of cost on a machine whose disk is fast); ratios
baseline / reportdb (above 1: reportdb is faster). Every tensor is stamped with its index every 1 MiB so no chunk
repeats (the Writer deduplicates equal chunks, which would flatter it). ``--trace-bytes`` sets the trace's size;
give more than the page cache's dirty limit (printed) to see the disk, not memory. The disk's own sequential
write + fsync bandwidth is measured first, as the physical limit.

``--mix large`` makes every output a 64 MiB tensor: the issue's bytes per CPU second for large tensors (with ``--durable
0``), against the baselines' in the same run. ``--contenders`` runs some of them (names as printed, comma-separated).

Run: ``python benchmarks/bench_trace.py [--trace-bytes 512M] [--durable 1] [--stats 1] [--repeat 3] [--mix large]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

STAMP = 1 << 18  # float32 elements between stamps: 1 MiB, so every 4 MiB chunk holds several


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


@dataclass(frozen=True)
class Op:
    """One operation of the trace: its id, name, the ids of its inputs and the size of its one output."""

    op_id: int
    name: str
    inputs: tuple[int, ...]
    nbytes: int


def make_trace(total: int, seed: int = 7, mix: str = "model") -> list[Op]:
    """Operations until their outputs add up to ``total`` bytes, sizes drawn from the mix above (``mix="large"``: every
    output 64 MiB)."""
    rng = np.random.default_rng(seed)
    ops: list[Op] = []
    done = 0
    names = ("ttnn.matmul", "ttnn.add", "ttnn.softmax", "ttnn.layer_norm", "ttnn.relu", "ttnn.reshape")
    while done < total:
        pick = rng.random()
        if mix == "large":
            nbytes = 64 << 20
        elif pick < 0.90:
            nbytes = int(rng.integers(1, 17)) * 4096
        elif pick < 0.99:
            nbytes = int(rng.integers(64, 257)) * 4096
        else:
            nbytes = int(rng.integers(16, 65)) << 20
        op_id = len(ops) + 1
        inputs = tuple(int(i) for i in rng.integers(max(1, op_id - 8), op_id + 1, size=min(2, op_id)) if i < op_id)
        ops.append(Op(op_id, names[op_id % len(names)], inputs, nbytes))
        done += nbytes
    return ops


class Producer:
    """The model's outputs: fresh float32 arrays cut from a random pool, each stamped so no 1 MiB repeats."""

    def __init__(self, largest: int) -> None:
        self.pool = np.random.default_rng(3).standard_normal(largest // 4 + STAMP, dtype=np.float32)

    def output(self, op: Op) -> np.ndarray:
        n = op.nbytes // 4
        start = (op.op_id * 977) % STAMP
        array = self.pool[start:start + n].copy()  # a new buffer, as a device read-back gives
        array[::STAMP] = op.op_id
        return array.reshape(-1, 32)


def run_trace(ops: list[Op], producer: Producer, store: Callable[[Op, np.ndarray], None], finish: Callable[[], None]) -> dict[str, float]:
    """Replay the trace through ``store``; wall time until ``finish`` and ``os.sync`` are done, time inside
    ``store`` (the model thread's cost) and process CPU time."""
    cpu0, wall0 = time.process_time(), time.perf_counter()
    inside = 0.0
    for op in ops:
        array = producer.output(op)
        t = time.perf_counter()
        store(op, array)
        inside += time.perf_counter() - t
    finish()
    os.sync()
    return {"wall": time.perf_counter() - wall0, "inside": inside, "cpu": time.process_time() - cpu0}


def writer_contender(folder: Path, durable: bool, stats: bool, wal: bool = False) -> tuple[Callable[[Op, np.ndarray], None], Callable[[], None]]:
    import reportdb

    w = reportdb.Writer(folder, durable=durable, stats=stats, wal=wal)

    def store(op: Op, array: np.ndarray) -> None:
        w.put_tensor(op.op_id, array, role="output")
        w.add_operation(op.op_id, op.name, duration=1e-4, arguments={"memory_config": "DRAM"},
                        inputs=list(op.inputs), outputs=[op.op_id])

    return store, w.close


def files_contender(folder: Path, save: Callable[[np.ndarray, Path], None], ext: str) -> tuple[Callable[[Op, np.ndarray], None], Callable[[], None]]:
    """One file per tensor, the operations kept in memory and written to SQLite in one transaction at the end."""
    (folder / "tensors").mkdir(parents=True)
    rows: list[tuple[Any, ...]] = []

    def store(op: Op, array: np.ndarray) -> None:
        save(array, folder / "tensors" / f"{op.op_id}.{ext}")
        rows.append((op.op_id, op.name, 1e-4, ",".join(map(str, op.inputs))))

    def finish() -> None:
        conn = sqlite3.connect(folder / "db.sqlite")
        with conn:
            conn.execute("CREATE TABLE operations (operation_id INTEGER PRIMARY KEY, name TEXT, duration REAL, inputs TEXT)")
            conn.executemany("INSERT INTO operations VALUES (?, ?, ?, ?)", rows)
        conn.close()

    return store, finish


def disk_bandwidth(folder: Path, nbytes: int) -> float:
    """Sequential write + fsync of one file in 4 MiB writes, bytes per second: the physical limit here."""
    block = np.random.default_rng(1).bytes(4 << 20)
    path = folder / "bandwidth.bin"
    start = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(max(1, nbytes // len(block))):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
    seconds = time.perf_counter() - start
    path.unlink()
    return max(1, nbytes // len(block)) * len(block) / seconds


def dirty_limit() -> str:
    """The kernel's dirty page-cache limit, as configured (bytes, or a ratio of memory)."""
    try:
        dirty_bytes = int(Path("/proc/sys/vm/dirty_bytes").read_text())
        if dirty_bytes:
            return f"{dirty_bytes >> 20} MiB"
        return f"{Path('/proc/sys/vm/dirty_ratio').read_text().strip()}% of available memory"
    except OSError:
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trace-bytes", default="512M")
    parser.add_argument("--durable", type=int, default=1)
    parser.add_argument("--stats", type=int, default=1)
    parser.add_argument("--dir", default=None, help="where to write (default: a temporary folder)")
    parser.add_argument("--mix", choices=["model", "large"], default="model",
                        help="output sizes: a model's mix (default) or every output 64 MiB")
    parser.add_argument("--contenders", default=None, help="comma-separated names of the contenders to run (default: all)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs per contender, alternating; each column is from the run of least wall time (a "
                             "loaded machine varies 2x between single runs)")
    args = parser.parse_args()
    total = parse_size(args.trace_bytes)
    ops = make_trace(total, mix=args.mix)
    total = sum(op.nbytes for op in ops)  # the trace overshoots the asked size by its last tensor
    producer = Producer(max(op.nbytes for op in ops))
    base = Path(tempfile.mkdtemp(prefix="bench-trace-", dir=args.dir))
    sizes = np.array([op.nbytes for op in ops])
    print(f"trace: {len(ops)} operations, {sizes.sum() / 2**20:.0f} MiB ({(sizes <= 65536).sum()} of 4-64 KiB, "
          f"{(sizes >= 16 << 20).sum()} of 16-64 MiB); dirty page-cache limit {dirty_limit()}; load {os.getloadavg()[0]:.2f}")
    bandwidth = disk_bandwidth(base, min(total, 1 << 30))
    print(f"disk: sequential write + fsync {bandwidth / 1e6:.0f} MB/s")

    contenders: dict[str, Callable[[Path], tuple[Callable[[Op, np.ndarray], None], Callable[[], None]]]] = {
        "reportdb Writer": lambda d: writer_contender(d, bool(args.durable), bool(args.stats)),
        "reportdb Writer wal=True": lambda d: writer_contender(d, bool(args.durable), bool(args.stats), wal=True),
        "np.save per tensor": lambda d: files_contender(d, lambda a, p: np.save(p, a), "npy"),
    }
    try:
        import torch

        contenders["torch.save per tensor"] = lambda d: files_contender(d, lambda a, p: torch.save(torch.from_numpy(a), p), "pt")
    except ImportError:
        print("torch is not installed: no torch.save column")
    if args.contenders:
        chosen = [name.strip() for name in args.contenders.split(",")]
        unknown = [name for name in chosen if name not in contenders]
        if unknown or "reportdb Writer" not in chosen:
            parser.error(f"--contenders: give 'reportdb Writer' and any of {sorted(contenders)}; unknown: {unknown}")
        contenders = {name: contenders[name] for name in chosen}
    results: dict[str, dict[str, float]] = {}
    try:
        for _ in range(max(1, args.repeat)):
            for name, make in contenders.items():
                folder = base / name.replace(" ", "-")
                store, finish = make(folder)
                result = run_trace(ops, producer, store, finish)
                if name not in results or result["wall"] < results[name]["wall"]:
                    results[name] = result
                shutil.rmtree(folder, ignore_errors=True)
                os.sync()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    ours = results["reportdb Writer"]
    print(f"\n{'contender':25} {'wall s':>8} {'MB/s':>7} {'in store s':>10} {'CPU s':>7} {'MB/CPU s':>9} {'wall ratio':>10} {'model-thread ratio':>18}")
    for name, r in results.items():
        print(f"{name:25} {r['wall']:8.2f} {total / r['wall'] / 1e6:7.0f} {r['inside']:10.2f} {r['cpu']:7.2f} "
              f"{total / r['cpu'] / 1e6:9.0f} {r['wall'] / ours['wall']:10.2f} {r['inside'] / ours['inside']:18.2f}")
    print(f"\nreportdb's durable report at {total / ours['wall'] / bandwidth:.2f}x of the disk's write + fsync bandwidth; "
          f"load at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
