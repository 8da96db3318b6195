"""Throughput of compare() (the full metric vector) against its peers on the same pair: np.corrcoef (PCC alone) and
np.allclose (the allclose count alone), optionally against another checkout's compare() measured the same way.

Run: ``python benchmarks/bench_compare.py [--sizes 1,16] [--repeat 3] [--baseline /path/to/other/checkout]
[--rounds 1] [--kinds float32,bfloat16,bf16-vs-f32] [--width 0]`` (millions of elements; float32 pairs, bfloat16 pairs
and bfloat16 against a float32 reference, as replay compares; ``--width W`` shapes each pair as rows of W elements,
as a tensor's last dim, 0 keeps it flat). Prints elements/s of compare() and its time as a ratio of each peer's
(``x corrcoef`` 2.0: compare takes twice np.corrcoef's time), best of ``--repeat`` after a warm-up; the baseline's
compare() runs in a fresh process with ``PYTHONPATH`` set to it, ``--rounds`` times alternating with this checkout's
(the best of all rounds on each side), so a load that comes and goes weighs on both. CPU time (all threads) is
printed beside wall time: the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("float32", "bfloat16", "bf16-vs-f32")


def best(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """The fastest wall time of ``repeat`` calls, and the least CPU time (all threads) of them."""
    wall, cpu = float("inf"), float("inf")
    for _ in range(repeat):
        start, used = time.perf_counter(), time.process_time()
        fn()
        wall, cpu = min(wall, time.perf_counter() - start), min(cpu, time.process_time() - used)
    return wall, cpu


def pair(kind: str, millions: int, width: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The actual and golden arrays of one case: a golden of normal values, the actual 1% off; rows of ``width``
    elements when it is not 0."""
    rng = np.random.default_rng(0)
    golden = rng.standard_normal(millions << 20, dtype=np.float32)
    actual = golden + np.float32(0.01) * rng.standard_normal(golden.size, dtype=np.float32)
    if width:
        golden, actual = golden.reshape(-1, width), actual.reshape(-1, width)
    if kind == "float32":
        return actual, golden
    if kind == "bfloat16":
        return actual.astype(ml_dtypes.bfloat16), golden.astype(ml_dtypes.bfloat16)
    return actual.astype(ml_dtypes.bfloat16), golden


def measure_compare(sizes: list[int], repeat: int, kinds: list[str], width: int) -> dict[str, tuple[float, float]]:
    """``{"kind/millions": (wall, cpu)}`` of this process's reportdb.compare."""
    from reportdb.numeric.metrics import compare

    out = {}
    for millions in sizes:
        for kind in kinds:
            a, b = pair(kind, millions, width)
            compare(a[:4], b[:4])
            out[f"{kind}/{millions}"] = best(lambda: compare(a, b), repeat)
    return out


def fastest(*runs: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """The least wall and the least CPU time of each case over several runs."""
    return {k: (min(r[k][0] for r in runs), min(r[k][1] for r in runs)) for k in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1,16", help="comma-separated sizes in millions (Mi) of elements")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="another checkout whose compare() to measure the same way")
    parser.add_argument("--rounds", type=int, default=1, help="baseline and this checkout alternated this often")
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated pairs among " + ", ".join(KINDS))
    parser.add_argument("--width", type=int, default=0, help="shape each pair as rows of this many elements")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    kinds = args.kinds.split(",")
    if args.child:
        print(json.dumps(measure_compare(sizes, args.repeat, kinds, args.width)))
        return
    baselines, runs = [], []
    for _ in range(max(1, args.rounds)):
        if args.baseline is not None:
            env = {**os.environ, "PYTHONPATH": str(args.baseline)}
            command = [sys.executable, __file__, "--child", "--sizes", args.sizes, "--repeat", str(args.repeat),
                       "--kinds", args.kinds, "--width", str(args.width)]
            run = subprocess.run(command, capture_output=True, text=True, env=env, check=True, cwd="/")
            baselines.append(json.loads(run.stdout.strip().splitlines()[-1]))
        runs.append(measure_compare(sizes, args.repeat, kinds, args.width))
    baseline = fastest(*baselines) if baselines else {}
    ours = fastest(*runs)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; best of {args.repeat} x {args.rounds} "
          f"rounds; width {args.width or 'flat'}")
    print(f"{'pair':12} {'Mi':>3} {'compare M/s':>11} {'wall ms':>8} {'CPU ms':>7} {'x corrcoef':>10} "
          f"{'x allclose':>10}"
          f"{'  baseline wall / CPU ms (speed-up)' if baseline else ''}")
    for millions in sizes:
        for kind in kinds:
            a, b = pair(kind, millions, args.width)
            fa, fb = a.astype(np.float32).reshape(-1), b.astype(np.float32).reshape(-1)
            corr, _ = best(lambda: np.corrcoef(fa, fb), args.repeat)
            close, _ = best(lambda: np.allclose(fa, fb, rtol=1e-2, atol=1e-2), args.repeat)
            wall, cpu = ours[f"{kind}/{millions}"]
            line = (f"{kind:12} {millions:>3} {a.size / wall / 1e6:>11.1f} {wall * 1e3:>8.0f} {cpu * 1e3:>7.0f} "
                    f"{wall / corr:>10.2f} {wall / close:>10.2f}")
            if baseline:
                b_wall, b_cpu = baseline[f"{kind}/{millions}"]
                line += (f"  {b_wall * 1e3:8.0f} / {b_cpu * 1e3:6.0f} "
                         f"(x{b_wall / wall:.2f} wall, x{b_cpu / cpu:.2f} CPU)")
            print(line, flush=True)


if __name__ == "__main__":
    main()
