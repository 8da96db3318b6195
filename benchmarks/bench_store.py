"""Ingest and read throughput of the report store against one .npy file per tensor, in one run.

Usage: python benchmarks/bench_store.py [--large-mib 64] [--large-count 16] [--small-count 20000] [--zstd-mib 256]
Prints MB/s or tensors/s for each path and the reportdb/np.save ratios, then the compression ratio and write and
warm-read MB/s of compression="none" against "zstd" (``--zstd-mib 0`` skips it). Nothing here is a test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import reportdb


def _timed(fn) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench(large_mib: int, large_count: int, small_count: int, repeat: int) -> None:
    rng = np.random.default_rng(0)
    large = [rng.standard_normal(large_mib << 18).astype(np.float32) for _ in range(large_count)]  # distinct content
    small = rng.standard_normal((small_count, 1024)).astype(np.float32)  # 4 KiB each
    large_bytes = sum(a.nbytes for a in large)
    results: dict[str, list[float]] = {}

    for _ in range(repeat):
        root = Path(tempfile.mkdtemp(prefix="reportdb-bench-", dir=os.environ.get("BENCH_DIR")))
        try:
            db = root / "r.sqlite"
            npy = root / "npy"
            npy.mkdir()
            with reportdb.open(db, "a") as report:
                results.setdefault("large ingest reportdb", []).append(
                    large_bytes / _timed(lambda: [report.put_tensor(i, a, stats=False) for i, a in enumerate(large)])
                )
                results.setdefault("large ingest reportdb +stats", []).append(
                    large_bytes
                    / _timed(lambda: [report.put_tensor(10_000 + i, a) for i, a in enumerate(large)])
                )

                def put_small(offset: int, stats: bool) -> None:
                    with report.batch():
                        for i in range(small_count):
                            report.put_tensor(offset + i, small[i], stats=stats)

                results.setdefault("small ingest reportdb (tensors/s)", []).append(
                    small_count / _timed(lambda: put_small(100_000, False))
                )
                results.setdefault("small ingest reportdb +stats (tensors/s)", []).append(
                    small_count / _timed(lambda: put_small(200_000, True))
                )
                [report.tensor(i) for i in range(large_count)]  # warm: page cache and allocator, as for np.load below
                results.setdefault("large warm read reportdb", []).append(
                    large_bytes / _timed(lambda: [report.tensor(i) for i in range(large_count)])
                )
                results.setdefault("small read reportdb (tensors/s)", []).append(
                    small_count / _timed(lambda: [report.tensor(100_000 + i) for i in range(small_count)])
                )
                t0 = time.perf_counter()
                for i in range(200):
                    report.tensor_info(i % large_count)
                results.setdefault("metadata query, 64 MiB tensors (us)", []).append((time.perf_counter() - t0) / 200 * 1e6)
                t0 = time.perf_counter()
                for i in range(200):
                    report.tensor_info(100_000 + i)
                results.setdefault("metadata query, 4 KiB tensors (us)", []).append((time.perf_counter() - t0) / 200 * 1e6)

            def save_large() -> None:
                for i, a in enumerate(large):
                    with open(npy / f"{i}.npy", "wb") as f:
                        np.save(f, a)
                        f.flush()
                        os.fsync(f.fileno())

            results.setdefault("large ingest np.save+fsync", []).append(large_bytes / _timed(save_large))
            results.setdefault("large ingest np.save", []).append(
                large_bytes / _timed(lambda: [np.save(npy / f"b{i}.npy", a) for i, a in enumerate(large)])
            )
            results.setdefault("small ingest np.save (tensors/s)", []).append(
                small_count / _timed(lambda: [np.save(npy / f"s{i}.npy", small[i]) for i in range(small_count)])
            )
            [np.load(npy / f"{i}.npy") for i in range(large_count)]
            results.setdefault("large warm read np.load", []).append(
                large_bytes / _timed(lambda: [np.load(npy / f"{i}.npy") for i in range(large_count)])
            )
            results.setdefault("small read np.load (tensors/s)", []).append(
                small_count / _timed(lambda: [np.load(npy / f"s{i}.npy") for i in range(small_count)])
            )
        finally:
            shutil.rmtree(root, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"large: {large_count} x {large_mib} MiB float32; small: {small_count} x 4 KiB; median of {repeat}")
    for key, value in med.items():
        unit = "" if "(" in key else " MB/s"
        shown = value / 1e6 if unit else value
        print(f"  {key:<44} {shown:12.1f}{unit}")
    print("ratios (reportdb / np.save or np.load; >1 means reportdb is faster):")
    for ours, theirs in [
        ("large ingest reportdb", "large ingest np.save+fsync"),
        ("large ingest reportdb", "large ingest np.save"),
        ("small ingest reportdb (tensors/s)", "small ingest np.save (tensors/s)"),
        ("large warm read reportdb", "large warm read np.load"),
        ("small read reportdb (tensors/s)", "small read np.load (tensors/s)"),
    ]:
        print(f"  {ours} / {theirs}: {med[ours] / med[theirs]:.2f}")


def bench_zstd(mib: int, repeat: int) -> None:
    """compression="none" against "zstd" on ReLU'd bfloat16 activations (about half zeros) in 16 MiB tensors."""
    import ml_dtypes

    rng = np.random.default_rng(1)
    tensors = [
        np.maximum(rng.standard_normal(8 << 20, dtype=np.float32), 0).astype(ml_dtypes.bfloat16) for _ in range(mib // 16)
    ]
    nbytes = sum(a.nbytes for a in tensors)
    print(f"compression: {len(tensors)} x 16 MiB bfloat16 ReLU activations (about half zeros); median of {repeat}")
    for compression in ("none", "zstd"):
        rows: dict[str, list[float]] = {}
        for _ in range(repeat):
            root = Path(tempfile.mkdtemp(prefix="reportdb-bench-", dir=os.environ.get("BENCH_DIR")))
            try:
                with reportdb.open(root / "r.sqlite", "a", compression=compression) as report:
                    rows.setdefault("write MB/s", []).append(
                        nbytes / _timed(lambda: [report.put_tensor(i, a, stats=False) for i, a in enumerate(tensors)]) / 1e6
                    )
                    [report.tensor(i) for i in range(len(tensors))]  # warm the page cache
                    rows.setdefault("warm read MB/s", []).append(
                        nbytes / _timed(lambda: [report.tensor(i) for i in range(len(tensors))]) / 1e6
                    )
                    rows.setdefault("ratio", []).append(nbytes / report.summary().stored_bytes)
            finally:
                shutil.rmtree(root, ignore_errors=True)
        print(f"  {compression:<5}" + "".join(f"  {k} {statistics.median(v):8.2f}" for k, v in rows.items()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--large-mib", type=int, default=64)
    parser.add_argument("--large-count", type=int, default=16)
    parser.add_argument("--small-count", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--zstd-mib", type=int, default=256)
    args = parser.parse_args()
    bench(args.large_mib, args.large_count, args.small_count, args.repeat)
    if args.zstd_mib:
        bench_zstd(args.zstd_mib, args.repeat)
