"""Read paths an interactive viewer, a notebook and the CLI take, against what a user has without reportdb, in one run.

Usage: python benchmarks/bench_read.py [--big-mib 1024] [--small-count 10000] [--repeat 15]

Cases (warm page cache, medians of interleaved runs; ratios are peer time / reportdb time, above 1 means
reportdb is faster): a 4 KiB row slice of a large float32 tensor; a 64x64 window of the last two axes of a
[1,1,8192,8192] tensor; one 4 KiB tensor; 10k 4 KiB tensors in a loop; a 64 MiB tensor whole; ``reportdb info``,
``ls`` and ``--help`` as commands; the size of a report of two small tensors. Peers: ``np.load`` (with
``mmap_mode="r"`` for windows, opened once like the report), safetensors' ``safe_open`` where installed, ``sqlite3``
for the CLI. Windows read the middle of the tensor again and again, as a viewer does: the first read checks the 4 KiB
blocks it touches against their crc32s (schema 0005's block crcs) and the Report remembers them, so repeats read only
their bytes (``windows.VerifiedBlocks``); the "new ... each time" rows read blocks not read before, checking each (a
viewer's first look at each place it pans to; the peer reads a new place too), and "first read" forgets what was
checked before each read. A window of the same square tensor stored as 2x4 device
shards reads one shard. Nothing here is a test.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

import reportdb


def _interleaved(cases: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Median microseconds of each case, the cases taking turns so drift hits them alike."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    for fn in cases.values():
        fn()  # warm
    for _ in range(repeat):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) * 1e6 for name, t in times.items()}


def _row(label: str, ours: float, peers: dict[str, float]) -> None:
    ratios = ", ".join(f"{name} {t:,.1f} us ({t / ours:.3g}x)" for name, t in peers.items())
    print(f"{label:<44} reportdb {ours:>11,.1f} us | {ratios}")


def _safetensors_file(path: Path, name: str, array: np.ndarray) -> bool:
    try:
        from safetensors.numpy import save_file
    except ImportError:
        return False
    save_file({name: array}, str(path))
    return True


def bench(root: Path, big_mib: int, small_count: int, repeat: int) -> None:
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores (timings on a shared machine are noisy: "
          "compare the ratios of one run)")
    rng = np.random.default_rng(0)
    db = root / "report"
    db.mkdir()
    big = rng.standard_normal((big_mib << 8, 1024), dtype=np.float32)  # rows of 4 KiB
    square = rng.standard_normal((1, 1, 8192, 8192), dtype=np.float32)
    medium = rng.standard_normal(16 << 20, dtype=np.float32)  # 64 MiB
    small = rng.standard_normal((small_count, 1024), dtype=np.float32)
    with reportdb.open(db, "a") as report:
        report.put_tensor(1, big, stats=False)
        report.put_tensor(2, square, stats=False)
        report.put_tensor(4, shards=[((r, c), np.ascontiguousarray(square[0, 0, r * 4096 : (r + 1) * 4096, c * 2048 : (c + 1) * 2048]))
                                     for r in range(2) for c in range(4)], stats=False,
                          distribution=reportdb.Distribution((2, 4), (reportdb.Placement("shard", 0), reportdb.Placement("shard", 1))))
        report.put_tensor(3, medium, stats=False)
        with report.batch():
            for i in range(small_count):
                report.put_tensor(100 + i, small[i], stats=False)
    npy = root / "npy"
    npy.mkdir()
    np.save(npy / "big.npy", big)
    np.save(npy / "square.npy", square)
    np.save(npy / "medium.npy", medium)
    for i in range(small_count):
        np.save(npy / f"{i}.npy", small[i])
    has_st = _safetensors_file(root / "big.safetensors", "big", big)
    _safetensors_file(root / "small.safetensors", "small", small[0])
    del big, square, medium

    # Every side opens its file once, as a viewer would: the Report, the np.load memory maps, safetensors' handle.
    big_map = np.load(npy / "big.npy", mmap_mode="r")
    square_map = np.load(npy / "square.npy", mmap_mode="r")
    with reportdb.open(db) as report, contextlib.ExitStack() as handles:
        middle = (big_mib << 8) // 2
        cases: dict[str, Callable[[], object]] = {
            "ours": lambda: report.tensor(1, rows=slice(middle, middle + 1)),
            "np.load mmap": lambda: np.array(big_map[middle : middle + 1]),
        }
        if has_st:
            from safetensors import safe_open

            big_st = handles.enter_context(safe_open(str(root / "big.safetensors"), framework="numpy"))
            cases["safetensors get_slice"] = lambda: big_st.get_slice("big")[middle : middle + 1]
        t = _interleaved(cases, repeat)
        _row(f"4 KiB row slice of a {big_mib} MiB tensor", t.pop("ours"), t)
        rows_ahead = iter(range(middle + 1, big_mib << 8))

        def new_row() -> np.ndarray:
            row = next(rows_ahead)
            return report.tensor(1, rows=slice(row, row + 1))

        t = _interleaved({"ours": new_row, "np.load mmap": lambda: np.array(big_map[middle : middle + 1])}, repeat)
        _row("  the same, a new row each time", t.pop("ours"), t)

        def window() -> np.ndarray:
            return report.tensor(2, window=(0, 0, slice(4000, 4064), slice(4000, 4064)))

        t = _interleaved({
            "ours": window,
            "np.load mmap": lambda: np.array(square_map[0, 0, 4000:4064, 4000:4064]),
        }, repeat)
        _row("64x64 window of [1,1,8192,8192]", t.pop("ours"), t)
        places, peer_places = iter(range(64, 8192 - 64, 64)), iter(range(64, 8192 - 64, 64))

        def new_window() -> np.ndarray:
            at = next(places)
            return report.tensor(2, window=(0, 0, slice(at, at + 64), slice(4000, 4064)))

        def peer_new_window() -> np.ndarray:
            at = next(peer_places)
            return np.array(square_map[0, 0, at : at + 64, 4000:4064])

        # 60 places at least (of the 125 there are): a new place's time varies with the kernel's cost of mapping the
        # file's pages in (a chunk's first window also maps the pages SQLite walks to reach it), 15 were too few.
        t = _interleaved({"ours": new_window, "np.load mmap": peer_new_window}, min(max(repeat, 60), 120))
        _row("  the same, a new place each time", t.pop("ours"), t)

        t = _interleaved({
            "ours": lambda: report.tensor(4, window=(slice(4000, 4064), slice(4000, 4064))),
            "np.load mmap": lambda: np.array(square_map[0, 0, 4000:4064, 4000:4064]),
        }, repeat)
        _row("the same window, tensor in 2x4 device shards", t.pop("ours"), t)

        cases = {"ours": lambda: report.tensor(100), "np.load": lambda: np.load(npy / "0.npy")}
        if has_st:
            def st_small() -> np.ndarray:
                with safe_open(str(root / "small.safetensors"), framework="numpy") as f:
                    return f.get_tensor("small")

            cases["safetensors safe_open"] = st_small
        t = _interleaved(cases, repeat * 20)
        _row("one 4 KiB tensor", t.pop("ours"), t)

        t = _interleaved({
            "ours": lambda: [report.tensor(100 + i) for i in range(small_count)],
            "np.load": lambda: [np.load(npy / f"{i}.npy") for i in range(small_count)],
        }, max(3, repeat // 5))
        _row(f"{small_count} 4 KiB tensors in a loop", t.pop("ours"), t)

        t = _interleaved({"ours": lambda: report.tensor(3), "np.load": lambda: np.load(npy / "medium.npy")}, repeat)
        _row("64 MiB float32 whole", t.pop("ours"), t)

        def first_read() -> np.ndarray:
            report._verified.clear()  # a benchmark may look inside: forget what was checked, as a new Report would
            return report.tensor(3)

        t = _interleaved({"ours": first_read, "np.load": lambda: np.load(npy / "medium.npy")}, repeat)
        _row("  the same, first read (every crc)", t.pop("ours"), t)

    tiny = root / "tiny"
    tiny.mkdir()
    with reportdb.open(tiny, "a") as report:
        report.put_tensor(1, small[0])
        report.put_tensor(2, small[1])
    command = [sys.executable, "-m", "reportdb"]
    sql = [sys.executable, "-c", "import sqlite3,sys; sqlite3.connect(sys.argv[1]).execute('select count(*) from rdb_tensor').fetchone()",
           str(tiny / "db.sqlite")]
    run: Callable[[list[str]], Callable[[], object]] = lambda args: lambda: subprocess.run(args, check=True, capture_output=True)
    t = _interleaved({
        "info": run([*command, "info", str(tiny)]),
        "ls": run([*command, "ls", str(tiny)]),
        "--help": run([*command, "--help"]),
        "python + sqlite3 count": run(sql),
    }, max(3, repeat // 3))
    peer = t.pop("python + sqlite3 count")
    for name, value in t.items():
        _row(f"`reportdb {name}`" + ("" if name == "--help" else " on a 2-tensor report"), value, {"python + sqlite3 count": peer})
    size = sum(f.stat().st_size for f in tiny.iterdir())
    print(f"{'report of two 4 KiB tensors':<44} {size:,} bytes on disk ({size / (2 * small[0].nbytes):.1f}x the values)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big-mib", type=int, default=1024)
    parser.add_argument("--small-count", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="reportdb-bench-read-", dir=os.environ.get("BENCH_DIR")))
    try:
        bench(root, args.big_mib, args.small_count, args.repeat)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
