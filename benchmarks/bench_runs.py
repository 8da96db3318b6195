"""Run against run (``reportdb.compare_runs``, every output judged by the policy): throughput and peak memory on two
reports of ``--ops`` bfloat16 outputs of ``--mib`` MiB each, run B with noise and one flipped block.

Run: ``python benchmarks/bench_runs.py [--ops 8] [--mib 16] [--baseline CHECKOUT ...]``. The comparison
runs in a fresh process (``PYTHONPATH`` = this checkout, then the baseline's) so its peak RSS (``ru_maxrss``) is its
own; it prints MiB/s of stored values read (both runs), the peak RSS (which counts the pages of the report files
SQLite maps, reclaimable) and the peak anonymous memory (sampled every 10 ms: what the comparison itself holds)
beside the size of one report. Memory is bounded when the anonymous peak stays flat as ``--ops`` grows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ml_dtypes
import numpy as np

import reportdb

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import json, resource, sys, threading, time
import reportdb

peak_anon = [0]
done = threading.Event()

def sample():  # anonymous memory (heap, numpy buffers); RSS also counts the report files' mmap'ed pages
    while not done.is_set():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    peak_anon[0] = max(peak_anon[0], int(line.split()[1]))
        time.sleep(0.01)

threading.Thread(target=sample, daemon=True).start()
import ml_dtypes, reportdb.analysis.runs, reportdb.numeric.metrics  # imports that load on first use: not timed
start = time.perf_counter()
with reportdb.open(sys.argv[1]) as a, reportdb.open(sys.argv[2]) as b:  # open reports: older APIs take no paths
    result = reportdb.compare_runs(a, b)
seconds = time.perf_counter() - start
done.set()
print(json.dumps({"seconds": seconds, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "anon_mib": peak_anon[0] / 1024, "rows": len(result.rows),
                  "first": getattr(result.first_divergence, "operation_id_a", None)}))
"""

def make_runs(folder: Path, ops: int, mib: int) -> tuple[Path, Path]:
    """Two Writer reports of ``ops`` chained bfloat16 outputs of ``mib`` MiB each; B's output ops//2 has a flipped
    block, the others small noise."""
    rng = np.random.default_rng(0)
    rows = (mib << 20) // (2 * 4096)
    paths = folder / "a", folder / "b"
    writers = [reportdb.Writer(p) for p in paths]
    for op in range(1, ops + 1):
        base = rng.standard_normal((rows, 4096), dtype=np.float32)
        other = base + np.float32(1e-3) * rng.standard_normal((rows, 4096), dtype=np.float32)
        if op == ops // 2 + 1:
            other[: rows // 4, :1024] *= -1
        for w, values in zip(writers, (base, other)):
            w.put_tensor(op, values.astype(ml_dtypes.bfloat16), ttnn_dtype="BFLOAT16")
            w.add_operation(op, f"ttnn.op{op}", outputs=[op])
    for w in writers:
        w.close()
    return paths


def measure(checkout: Path, a: Path, b: Path) -> dict[str, float]:
    """One compare_runs of ``checkout``'s code in a fresh process: seconds, peak RSS, rows."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run([sys.executable, "-c", CHILD, str(a), str(b)], capture_output=True, text=True, env=env,
                         check=True, timeout=3600, cwd=a.parent)  # cwd: not this checkout's reportdb
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ops", type=int, default=8)
    parser.add_argument("--mib", type=int, default=16, help="MiB of bfloat16 values per output")
    parser.add_argument("--baseline", type=Path, nargs="*", default=[],
                        help="other checkouts to measure the same way (today's compare, an earlier one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        a, b = make_runs(Path(tmp), args.ops, args.mib)
        print(f"wrote two runs of {args.ops} x {args.mib} MiB in {time.perf_counter() - start:.1f} s")
        values_mib = 2 * args.ops * args.mib
        print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        for label, checkout in (("this", ROOT), *((f"{path}", path) for path in args.baseline)):
            got = measure(checkout, a, b)
            print(f"{label:9} {got['seconds']:7.2f} s  {values_mib / got['seconds']:8.1f} MiB/s  peak RSS "
                  f"{got['rss_mib']:7.1f} MiB, anonymous {got['anon_mib']:6.1f} MiB (one run: {args.ops * args.mib} MiB)"
                  f"  rows {got['rows']}  "
                  f"first divergence: op {got['first']}")


if __name__ == "__main__":
    main()
