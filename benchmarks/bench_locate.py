"""Speed of ``reportdb.locate`` on a large tensor against its golden, and of its per-tile error map alone.

Run: ``python benchmarks/bench_locate.py [--millions 64] [--repeat 3] [--sharded]``. Stores a bfloat16 TILE tensor of
``--millions`` Mi elements (8192 columns) and its float32 golden in a temporary report, then times:

* ``locate``: ``reportdb.locate(report, 1, against=2)`` end to end from the file (a fresh Report each run: metadata,
  reads of every window of both tensors with their crc checks, the per-tile and, with ``--sharded``, per-core
  reductions, mismatches at the policy's tolerances);
* ``tile map``: the same pass over the two arrays in memory (no file reads: the error, per-tile reduction and
  mismatch counts alone), what the map costs once the values are at hand;
* ``reading the windows``: the same windows of both tensors read one thread alone, without any arithmetic: the
  store's share;
* peak RSS growth during ``locate`` (memory bounded: it must stay near the windows' size, not the tensors').

Best and median wall time of ``--repeat`` runs, and the best CPU time (all threads). The machine is shared: the
1-minute load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

import ml_dtypes
import numpy as np

import reportdb
from reportdb.analysis.grids import shard_layout
from reportdb.analysis.locate import LocateResult
from reportdb.analysis.scan import scan, windows


def timed(fn, repeat: int) -> list[tuple[float, float]]:  # type: ignore[no-untyped-def]
    """(wall, CPU) seconds of each of ``repeat`` calls (CPU: this process's threads together)."""
    runs = []
    for _ in range(repeat):
        start, cpu = time.perf_counter(), time.process_time()
        fn()
        runs.append((time.perf_counter() - start, time.process_time() - cpu))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--millions", type=int, default=64, help="Mi elements of the tensor (default 64)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sharded", action="store_true", help="give the tensor a block-sharded memory config (8x8 cores)")
    args = parser.parse_args()
    cols = 8192
    rows = (args.millions << 20) // cols
    rng = np.random.default_rng(0)
    golden = rng.standard_normal((rows, cols), dtype=np.float32)
    actual = golden.astype(ml_dtypes.bfloat16)
    actual[rows // 2 : rows // 2 + 32, 4096:4128] += 1  # one wrong tile
    mc = None
    if args.sharded:
        mc = {"memory_layout": "BLOCK_SHARDED", "buffer_type": "L1", "nd_shard_spec": None,
              "shard_spec": {"grid": [[[0, 0], [7, 7]]], "shape": [rows // 8, cols // 8], "orientation": "ROW_MAJOR"}}
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        path = Path(tmp) / "bench.sqlite"
        start = time.perf_counter()
        with reportdb.open(path, "a") as report:
            report.put_tensor(1, actual, layout="TILE", ttnn_dtype="BFLOAT16", memory_config=mc)
            report.put_tensor(2, golden)
        print(f"stored {rows}x{cols} bfloat16 + float32 golden in {time.perf_counter() - start:.1f} s")

        def run_locate() -> LocateResult:
            with reportdb.open(path) as report:
                return reportdb.locate(report, 1, against=2)

        result = run_locate()  # warm-up (imports, thread pools, page cache)
        assert result.worst_tiles[0].tile == (rows // 64, 128), result.worst_tiles[0]
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        located = timed(run_locate, args.repeat)
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        layout = shard_layout(mc, (rows, cols), (32, 32))
        rtol, atol = result.rtol, result.atol

        def tile_map() -> None:
            scan(lambda w: actual[w], lambda w: golden[w], (rows, cols), (actual.dtype, golden.dtype), (32, 32),
                 layout, rtol=rtol, atol=atol, pcc=None)

        tile_map()
        mapped = timed(tile_map, args.repeat)
        boxes = windows((rows, cols), (32, 32))

        def read_only() -> None:
            with reportdb.open(path) as report:
                for axes, _ in boxes:
                    window = tuple(slice(a, b) for a, b in axes)
                    report.tensor(1, window=window)
                    report.tensor(2, window=window)

        read = timed(read_only, args.repeat)
    load = os.getloadavg()[0]
    n = rows * cols
    print(f"{n / 1e6:.0f}M elements ({n >> 20} Mi), {'block-sharded 8x8' if args.sharded else 'interleaved'}, "
          f"load average {load:.2f} on {os.cpu_count()} CPUs")
    for name, runs in (("locate (from the file)", located), ("tile map (in memory)", mapped),
                       ("reading the windows", read)):
        wall = [w for w, _ in runs]
        print(f"  {name:<24} best {min(wall) * 1e3:7.0f} ms   median {statistics.median(wall) * 1e3:7.0f} ms   "
              f"CPU {min(c for _, c in runs) * 1e3:7.0f} ms")
    print(f"  peak RSS growth during locate runs: {(rss1 - rss0) / 1024:.0f} MiB (after the warm-up's peak)")


if __name__ == "__main__":
    main()
