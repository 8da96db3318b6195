"""Replay's rate against reading the report's tensors once (issue 26 asks for at least 0.5x), and its peak memory.

Run: ``python benchmarks/bench_replay.py [--mib 256] [--ops mix|eltwise]``. Writes a Writer report of a chain of
operations (bfloat16, 1M-element tensors: add, relu, multiply, softmax, layer_norm, gelu, matmul on 1024x1024 for
``mix``), then times reading every stored tensor once against ``reportdb.replay`` (references, metric vectors,
verdicts), best of ``--repeat`` warm replays (and the first), and reports the peak resident memory growth of the first
replay (bounded by one operation, not the report).
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

import ml_dtypes
import numpy as np

import reportdb
from reportdb.analysis import references

BF16 = ml_dtypes.bfloat16
CYCLE = {"mix": ["ttnn.add", "ttnn.relu", "ttnn.multiply", "ttnn.softmax", "ttnn.layer_norm", "ttnn.gelu", "ttnn.matmul"],
         "eltwise": ["ttnn.add", "ttnn.relu", "ttnn.multiply"]}


def write(path: Path, mib: int, kind: str) -> int:
    """A chain of operations whose outputs are their references rounded to bfloat16; returns the stored bytes."""
    rng = np.random.default_rng(0)
    shape = (1024, 1024)
    x = rng.standard_normal(shape).astype(BF16)
    stored, tensor_id = 0, 1
    with reportdb.Writer(path) as w:
        w.put_tensor(tensor_id, x)
        stored += x.nbytes
        op = 0
        while stored < mib << 20:
            op += 1
            name = CYCLE[kind][op % len(CYCLE[kind])]
            inputs = [(tensor_id, x)]
            if name in ("ttnn.add", "ttnn.multiply", "ttnn.matmul"):
                other = (rng.standard_normal(shape) / (32 if name == "ttnn.matmul" else 1)).astype(BF16)
                w.put_tensor(tensor_id + 1, other)
                inputs.append((tensor_id + 1, other))
                stored += other.nbytes
            out = references.compute(name, inputs, []).astype(BF16)
            out_id = tensor_id + len(inputs)
            w.put_tensor(out_id, out)
            stored += out.nbytes
            w.add_operation(op, name, inputs=[t for t, _ in inputs], outputs=[out_id])
            x, tensor_id = out, out_id + 1
            w.put_tensor(tensor_id, x)  # the next operation's input (the same values, as a device tensor)
            stored += x.nbytes
    return stored


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--ops", choices=sorted(CYCLE), default="mix")
    parser.add_argument("--repeat", type=int, default=3, help="replays timed after the first (best reported)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.sqlite"
        stored = write(path, options.mib, options.ops)
        reads = []
        for _ in range(options.repeat):
            with reportdb.open(path) as report:
                start = time.perf_counter()
                for tensor_id in report.tensor_ids():
                    report.tensor(tensor_id)
                reads.append(time.perf_counter() - start)
        read = min(reads)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        start = time.perf_counter()
        result = reportdb.replay(path)
        first = time.perf_counter() - start
        growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        runs = []
        for _ in range(options.repeat):  # warm: imports, thread pools and the file's pages no longer counted
            start, cpu = time.perf_counter(), time.process_time()
            reportdb.replay(path)
            runs.append((time.perf_counter() - start, time.process_time() - cpu))
        replayed = min(w for w, _ in runs)
        failed = len(result.failed)
        print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        print(f"{len(result.rows)} operations ({options.ops}), {stored / 2**20:.0f} MiB of tensors, {failed} failed")
        print(f"read every tensor once: {read:.2f} s ({stored / 2**20 / read:.0f} MiB/s), best of {options.repeat}")
        print(f"replay: {replayed:.2f} s ({stored / 2**20 / replayed:.0f} MiB/s, CPU {min(c for _, c in runs):.2f} s), "
              f"{read / replayed:.2f}x the read rate, best of {options.repeat} after a first replay of {first:.2f} s; "
              f"peak RSS growth {growth / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
