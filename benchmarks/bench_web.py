"""The web API (issue 13) through a real ``reportdb serve`` process, against what a user does today: load the tensors
with numpy and draw them with matplotlib.

Usage: python benchmarks/bench_web.py [--big 67108864] [--pair 16777216] [--report-mib 1024] [--repeat 5]

A report is made in a temporary folder: one float32 tensor of ``--big`` elements shaped [1, 1, H, W], a golden
pair of ``--pair`` elements each (the actual = golden + noise, a local comparison record linking them), and as many
8 MiB tensors (each the output of an operation of its own) as bring the file to ``--report-mib``, plus the .npy files
of the first three for the peer. The server runs as a subprocess on a loopback port; every request goes over HTTP (urllib),
warm (each case runs once before it is timed), medians of interleaved runs. Cases and their peers:

* first page load: ``/``, its two assets, ``api/reports`` and the first page of ``operations`` (no peer);
* heatmap of the big tensor as a 1024 x 1024 PNG, against ``np.load`` + matplotlib ``imshow`` + ``savefig`` (1024 px);
* a 64 x 64 value window (JSON) in the middle of the big tensor, against ``np.load(mmap_mode="r")`` and a slice;
* ``compare-tensor`` on the pair (a new rtol each run, so no cached answer is reused), against ``np.load`` of both,
  ``np.corrcoef``, the max absolute error and ``np.isclose``;
* the pair's absolute-error heatmap as a 1024 x 1024 PNG, against ``np.load`` of both + ``|a - g|`` + imshow + savefig.

The server's peak resident memory (VmHWM) is read from /proc at the end, beside the tensors' sizes: it streams by
chunks, so a heatmap never holds the whole tensor. Nothing here is a test.
"""

from __future__ import annotations

import argparse
import math
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable

import numpy as np

import reportdb


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=600) as response:
        return response.read()


def _interleaved(cases: dict[str, Callable[[int], object]], repeat: int) -> dict[str, float]:
    """Median milliseconds of each case (called with the run's number), the cases taking turns."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    for fn in cases.values():
        fn(0)  # warm
    for i in range(1, repeat + 1):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            fn(i)
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def _plot(values: np.ndarray, out: Path) -> None:
    """What a user runs today: imshow of the 2-D view, saved as a 1024 x 1024 pixel PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10.24, 10.24), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.imshow(values.reshape(-1, values.shape[-1]), aspect="auto", interpolation="nearest")
    fig.savefig(out, format="png")


def _status_mib(pid: int, key: str) -> float:
    """A memory figure of /proc/PID/status (``VmHWM``, ``RssAnon``...) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return math.nan


class _AnonPeak(threading.Thread):
    """The largest anonymous resident memory (RssAnon: the process's own allocations, not the report's pages it has
    memory-mapped, which VmHWM counts too) of a process, sampled every few milliseconds until stopped."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.done = pid, 0.0, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.005):
            self.peak = max(self.peak, _status_mib(self.pid, "RssAnon"))


def make_report(root: Path, big: int, pair: int, report_mib: int = 0) -> Path:
    """The report (about ``report_mib`` MiB) and the peer's .npy files (big.npy, actual.npy, golden.npy) in ``root``."""
    rng = np.random.default_rng(0)
    width = 1 << int(math.log2(math.isqrt(big)))
    big_array = rng.standard_normal((1, 1, big // width, width), dtype=np.float32)
    pair_width = 1 << int(math.log2(math.isqrt(pair)))
    golden = rng.standard_normal((1, 1, pair // pair_width, pair_width), dtype=np.float32)
    actual = golden + np.float32(1e-3) * rng.standard_normal(golden.shape, dtype=np.float32)
    for name, array in (("big", big_array), ("actual", actual), ("golden", golden)):
        np.save(root / f"{name}.npy", array)
    report = root / "report"
    report.mkdir()
    with reportdb.open(report, "a") as db:
        db.put_tensor(1, big_array)
        db.put_tensor(2, actual)
        db.put_tensor(3, golden)
        with db.batch(), db.connection() as conn:
            conn.execute("INSERT INTO operations(operation_id, name, duration) VALUES (1, 'ttnn.matmul', 0.1)")
            conn.executemany("INSERT INTO output_tensors(operation_id, output_index, tensor_id) VALUES (1, ?, ?)",
                             [(0, 1), (1, 2)])
            conn.execute("INSERT INTO local_tensor_comparison_records(tensor_id, golden_tensor_id, matches, desired_pcc,"
                         " actual_pcc) VALUES (2, 3, 1, 0.99, 0.99999)")
        filler = rng.standard_normal((1, 1, 1024, 2048), dtype=np.float32)
        fillers = max(0, (report_mib << 20) - (big + 2 * pair) * 4) // filler.nbytes
        for i in range(fillers):
            db.put_tensor(100 + i, filler + np.float32(i))  # content of its own (identical chunks are stored once)
        with db.batch(), db.connection() as conn:
            conn.executemany("INSERT INTO operations(operation_id, name, duration) VALUES (?, 'ttnn.add', 0.01)",
                             [(2 + i,) for i in range(fillers)])
            conn.executemany("INSERT INTO output_tensors(operation_id, output_index, tensor_id) VALUES (?, 0, ?)",
                             [(2 + i, 100 + i) for i in range(fillers)])
    return report


def bench(root: Path, big: int, pair: int, report_mib: int, repeat: int) -> None:
    report = make_report(root, big, pair, report_mib)
    size_mib = (report / "db.sqlite").stat().st_size / 2**20
    server = subprocess.Popen([sys.executable, "-m", "reportdb", "serve", str(report)], stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline() if server.stdout else ""
        url = line[line.index("http://") :].split()[0]
        anon = _AnonPeak(server.pid)
        anon.start()
        meta = _get(url + "api/reports/report/tensors/1")
        h, w = (int(v) for v in __import__("json").loads(meta)["shape"][2:])
        out = root / "peer.png"
        ours = _interleaved({
            "page": lambda i: [_get(url + p) for p in ("", "static/app.js", "static/app.css", "api/reports",
                                                        "api/reports/report/operations")],
            "heatmap": lambda i: _get(url + "api/reports/report/tensors/1/heatmap?width=1024&height=1024"),
            "window": lambda i: _get(url + f"api/reports/report/tensors/1/values?slice=0,0,{h // 2}:{h // 2 + 64},"
                                           f"{w // 2}:{w // 2 + 64}"),
            "compare": lambda i: _get(url + f"api/compare-tensor/local/2?rtol={1e-5 + i * 1e-9}"),
            "error heatmap": lambda i: _get(url + f"api/compare-tensor/local/2/heatmap?error=abs&width=1024&height=1024"
                                                  f"&rtol={1e-5 + i * 1e-9}"),
        }, repeat)

        def peer_compare(i: int) -> None:
            a, g = np.load(root / "actual.npy"), np.load(root / "golden.npy")
            np.corrcoef(a.ravel(), g.ravel())
            np.abs(a - g).max()
            np.isclose(a, g, rtol=1e-5, atol=1e-8).sum()

        peers = _interleaved({
            "heatmap": lambda i: _plot(np.load(root / "big.npy"), out),
            "window": lambda i: np.array(np.load(root / "big.npy", mmap_mode="r")[0, 0, h // 2 : h // 2 + 64,
                                                                                  w // 2 : w // 2 + 64]),
            "compare": peer_compare,
            "error heatmap": lambda i: _plot(np.abs(np.load(root / "actual.npy") - np.load(root / "golden.npy")), out),
        }, repeat)
        anon.done.set()
        anon.join()
        peak = _status_mib(server.pid, "VmHWM")
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=60)
    print(f"report {size_mib:,.0f} MiB: big tensor {big:,} float32 [1, 1, {h}, {w}] ({big * 4 / 2**20:,.0f} MiB), "
          f"pair 2 x {pair:,} float32; {repeat} runs, medians, over HTTP on loopback")
    for name, ms in ours.items():
        peer = peers.get(name)
        against = f" | numpy+matplotlib {peer:9,.1f} ms ({peer / ms:.3g}x)" if peer is not None else ""
        print(f"{name:<14} reportdb serve {ms:9,.1f} ms{against}")
    print(f"server peak RSS {peak:,.0f} MiB, of which its own allocations (RssAnon, sampled) at most {anon.peak:,.0f} MiB; "
          f"the rest is the report's pages it memory-maps (the big tensor alone is {big * 4 / 2**20:,.0f} MiB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big", type=int, default=64 << 20, help="elements of the big tensor (default 64M)")
    parser.add_argument("--pair", type=int, default=16 << 20, help="elements of each tensor of the pair (default 16M)")
    parser.add_argument("--report-mib", type=int, default=1024, help="size of the report file (default 1 GiB)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-web-") as tmp:
        bench(Path(tmp), args.big, args.pair, args.report_mib, args.repeat)


if __name__ == "__main__":
    main()
