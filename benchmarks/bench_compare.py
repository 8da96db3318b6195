"""Throughput of compare() (the full metric vector) and compute_stats() against np.corrcoef alone.

Run: ``python benchmarks/bench_compare.py [--sizes 1,16,64,256]`` (millions of elements). Prints elements/s
and the ratio to ``np.corrcoef`` on the same pair; best of ``--repeat`` runs after a warm-up on a small slice.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import ml_dtypes
import numpy as np

from reportdb.numeric.metrics import compare
from reportdb.numeric.stats import compute_stats


def best_seconds(fn: Callable[[], object], repeat: int) -> float:
    """The fastest of ``repeat`` timed calls."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1,16,64,256", help="comma-separated sizes in millions of elements")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'dtype':9} {'elements':>10} {'compare M/s':>12} {'corrcoef M/s':>13} {'ratio':>6} {'stats MB/s':>11}")
    for millions in (int(s) for s in args.sizes.split(",")):
        n = millions << 20
        golden = rng.standard_normal(n, dtype=np.float32)
        actual = golden + np.float32(0.01) * rng.standard_normal(n, dtype=np.float32)
        for name in ("float32", "bfloat16"):
            if name == "bfloat16":
                a, b = actual.astype(ml_dtypes.bfloat16), golden.astype(ml_dtypes.bfloat16)
            else:
                a, b = actual, golden
            compare(a[:4096], b[:4096])
            t_cmp = best_seconds(lambda: compare(a, b), args.repeat)
            t_corr = best_seconds(lambda: np.corrcoef(a.astype(np.float32), b.astype(np.float32)), args.repeat)
            t_stats = best_seconds(lambda: compute_stats(a), args.repeat)
            print(
                f"{name:9} {n:>10} {n / t_cmp / 1e6:>12.1f} {n / t_corr / 1e6:>13.1f} "
                f"{t_corr / t_cmp:>6.2f} {a.nbytes / t_stats / 1e6:>11.0f}",
                flush=True,
            )
        del golden, actual


if __name__ == "__main__":
    main()
