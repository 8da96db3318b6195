"""Per-tensor cost of storing through ``reportdb.Writer`` against one file per tensor, as reports did.

Baselines: ``torch.save`` of one ``.pt`` per tensor (how reports kept torch tensors; needs torch) and
``ttnn.dump_tensor`` of one ``.tensorbin`` per tensor (needs a ttnn wheel; run in its own venv and
given here with ``--ttnn-python``, or found in the venvs ``tests/ttnn_env.py`` caches). In the ttnn
venv the writer stores the same ``ttnn.Tensor`` objects (conversion included), so that ratio compares
like with like. Random normal values (incompressible), float32 or (``--dtype bfloat16``) bfloat16, ttnn's
usual activation dtype (there as TILE tensors), 4 KiB to 64 MiB; each cell is the best of
``--repeat`` runs of a whole sequence (writer: puts, flush and close, so every commit is counted).

Columns: the default writer (statistics on, ``durable``: SQLite fsyncs at every WAL checkpoint, which
neither baseline does), the writer with ``durable=False`` (``synchronous=OFF``: still safe against a crashed
or killed process, as the baselines' page-cache writes are; not against power loss), and with ``stats=False,
durable=False`` too. "put() alone" compares the time spent inside ``put_tensor`` (the model thread's
cost; the background thread's writing, which the totals count through close(), is left out). The
"in a run" column is the time storing adds to a simulated run: the model thread sleeps ``op_seconds`` per
tensor (a device op and its read-back: 200 µs, or the tensor at 2 GB/s, ``--produce-gbps``), as it would while waiting for the
device, and the column compares (run time with storing - run time without) / tensors, close() included.
Run: ``python benchmarks/bench_writer.py [--sizes 4K,64K,1M,16M,64M] [--budget 256M] [--repeat 2]``.
Ratios are baseline time / writer time: above 1 means the writer is faster.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def label(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


def count_for(nbytes: int, budget: int) -> int:
    """How many tensors of this size one run stores: the byte budget, at least 3 and at most 2000."""
    return max(3, min(2000, budget // nbytes))


def best(run: Callable[[Path], Callable[[], None]], repeat: int) -> float:
    """Fastest of ``repeat`` runs, each into a fresh folder (the OS keeps files cached: warm, like a run).

    ``run(folder)`` prepares (for the writer: opens the report, a once-per-run cost) and returns the
    timed part.
    """
    times = []
    for _ in range(repeat):
        folder = Path(tempfile.mkdtemp(prefix="bench-writer-"))
        try:
            timed = run(folder)
            start = time.perf_counter()
            timed()
            times.append(time.perf_counter() - start)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return min(times)


def writer_run(
    tensors: list[Any], put_seconds: list[float] | None = None, **options: Any
) -> Callable[[Path], Callable[[], None]]:
    """Open a Writer untimed; time every put, the final flush and close (all commits included).

    ``put_seconds`` collects, per run, the time spent inside ``put_tensor`` alone: the cost on the model's
    thread, while the background thread writes (which close() then waits for, and the total counts).
    """
    import reportdb

    def prepare(folder: Path) -> Callable[[], None]:
        w = reportdb.Writer(folder, **options)

        def timed() -> None:
            start = time.perf_counter()
            for tid, t in enumerate(tensors):
                w.put_tensor(tid, t)
            if put_seconds is not None:
                put_seconds.append(time.perf_counter() - start)
            w.close()

        return timed

    return prepare


#: The production rate of the in-run column, bytes per second (``--produce-gbps``).
PRODUCE_RATE = 2e9


def op_seconds(nbytes: int) -> float:
    """The simulated model time per tensor in the in-run column: a device op and the read-back of its output,
    200 µs at least, else the tensor's bytes at :data:`PRODUCE_RATE` (host reads of device memory: 2 GB/s). The model
    thread sleeps meanwhile, as it would waiting for the device, so other threads can run. Above the writer's own
    sustained rate (about 0.5-0.7 GB/s for 64 MiB tensors here) the column measures its throughput, not what it adds
    to the model thread: ``--produce-gbps 0.4`` measures the latter."""
    return max(200e-6, nbytes / PRODUCE_RATE)


def in_run(store: Callable[[int, Any], None], finish: Callable[[], None], tensors: list[Any], gap: float) -> float:
    """Seconds per tensor that storing adds to a run whose ops take ``gap`` each: (run with store - run without) / n."""
    start = time.perf_counter()
    for _ in tensors:
        time.sleep(gap)
    bare = time.perf_counter() - start
    start = time.perf_counter()
    for tid, t in enumerate(tensors):
        time.sleep(gap)
        store(tid, t)
    finish()
    return max(0.0, time.perf_counter() - start - bare) / len(tensors)


def in_run_writer(tensors: list[Any], gap: float, repeat: int) -> float:
    import reportdb

    times = []
    for _ in range(repeat):
        folder = Path(tempfile.mkdtemp(prefix="bench-writer-"))
        try:
            w = reportdb.Writer(folder)
            times.append(in_run(w.put_tensor, w.close, tensors, gap))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return min(times)


def in_run_files(save: Callable[[Any, Path], None], tensors: list[Any], ext: str, gap: float, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        folder = Path(tempfile.mkdtemp(prefix="bench-writer-"))
        try:
            times.append(in_run(lambda tid, t: save(t, folder / f"{tid}.{ext}"), lambda: None, tensors, gap))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return min(times)


def files_run(save: Callable[[Any, Path], None], tensors: list[Any], ext: str) -> Callable[[Path], Callable[[], None]]:
    def prepare(folder: Path) -> Callable[[], None]:
        def timed() -> None:
            for tid, t in enumerate(tensors):
                save(t, folder / f"{tid}.{ext}")

        return timed

    return prepare


def in_run_count(n: int, gap: float) -> int:
    """Tensors in the in-run column: at most 1 s of simulated ops per run (and at least 3 tensors)."""
    return max(3, min(n, int(1.0 / gap)))


def arrays(nbytes: int, n: int, dtype: str = "float32") -> list[np.ndarray]:
    """``n`` random normal arrays of ``nbytes`` each, float32 or bfloat16 (ml_dtypes), shaped (rows, 32)."""
    rng = np.random.default_rng(nbytes)
    if dtype == "bfloat16":
        import ml_dtypes

        return [rng.standard_normal(nbytes // 2, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(-1, 32) for _ in range(n)]
    return [rng.standard_normal(nbytes // 4, dtype=np.float32).reshape(-1, 32) for _ in range(n)]


def torch_tensor(array: np.ndarray) -> Any:
    """The same values as a torch tensor (bfloat16 through an int16 view: torch.from_numpy refuses ml_dtypes)."""
    import torch

    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def measure_numpy(sizes: list[int], budget: int, repeat: int, dtype: str) -> dict[int, dict[str, float]]:
    """Writer (stats on and off) and torch.save, seconds per tensor, in this interpreter."""
    try:
        import torch
    except ImportError:
        torch = None
    out: dict[int, dict[str, float]] = {}
    for nbytes in sizes:
        n = count_for(nbytes, budget)
        data = arrays(nbytes, n, dtype)
        puts: list[float] = []
        row = {
            "writer": best(writer_run(data, puts), repeat) / n,
            "writer_nosync": best(writer_run(data, durable=False), repeat) / n,
            "writer_fast": best(writer_run(data, stats=False, durable=False), repeat) / n,
        }
        row["writer_put"] = min(puts) / n
        gap = op_seconds(nbytes)
        row["writer_in_run"] = in_run_writer(data[: in_run_count(n, gap)], gap, repeat)
        if torch is not None:
            torch_data = [torch_tensor(a) for a in data]
            row["torch_save"] = best(files_run(torch.save, torch_data, "pt"), repeat) / n
            row["torch_in_run"] = in_run_files(torch.save, torch_data[: in_run_count(n, gap)], "pt", gap, repeat)
        out[nbytes] = row
        print(f"  numpy {label(nbytes)} x{n}: {json.dumps({k: round(v * 1e6, 1) for k, v in row.items()})} us", flush=True)
    return out


def measure_ttnn(sizes: list[int], budget: int, repeat: int, dtype: str) -> dict[int, dict[str, float]]:
    """Inside a ttnn venv: ttnn.dump_tensor per file against the writer storing the same ttnn tensors."""
    import ttnn

    out: dict[int, dict[str, float]] = {}
    for nbytes in sizes:
        n = count_for(nbytes, budget)
        if dtype == "bfloat16":  # as ttnn keeps activations: bfloat16 in 32x32 tiles
            tensors = [ttnn.Tensor(a.astype(np.float32), data_type=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT)
                       for a in arrays(nbytes, n, dtype)]
        else:
            tensors = [ttnn.Tensor(a, data_type=ttnn.float32, layout=ttnn.ROW_MAJOR_LAYOUT) for a in arrays(nbytes, n)]

        puts: list[float] = []
        row = {
            "dump_tensor": best(files_run(lambda t, p: ttnn.dump_tensor(str(p), t), tensors, "tensorbin"), repeat) / n,
            "writer_ttnn": best(writer_run(tensors, puts), repeat) / n,
            "writer_ttnn_nosync": best(writer_run(tensors, durable=False), repeat) / n,
            "writer_ttnn_fast": best(writer_run(tensors, stats=False, durable=False), repeat) / n,
        }
        row["writer_ttnn_put"] = min(puts) / n
        gap = op_seconds(nbytes)
        count = in_run_count(n, gap)
        row["writer_ttnn_in_run"] = in_run_writer(tensors[:count], gap, repeat)
        row["dump_in_run"] = in_run_files(lambda t, p: ttnn.dump_tensor(str(p), t), tensors[:count], "tensorbin", gap, repeat)
        out[nbytes] = row
        print(f"  ttnn {label(nbytes)} x{n}: {json.dumps({k: round(v * 1e6, 1) for k, v in row.items()})} us",
              file=sys.stderr, flush=True)
    return out


def ttnn_python(explicit: str | None) -> str | None:
    if explicit:
        return explicit
    cache = os.environ.get("REPORTDB_TTNN_ENVS", str(Path.home() / ".cache" / "reportdb-ttnn-envs"))
    # The newest ready one: each change of reportdb's dependencies makes a venv of its own (tests/ttnn_env.py).
    ready = [p for p in glob.glob(f"{cache}/ttnn-0.8*-py3.12-*/bin/python") if Path(p).parent.parent.joinpath(".ready").exists()]
    return max(ready, key=lambda p: Path(p).parent.parent.joinpath(".ready").stat().st_mtime) if ready else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="4K,64K,1M,16M,64M")
    parser.add_argument("--budget", default="256M", help="bytes stored per size and method (at least 3 tensors)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                        help="bfloat16: numpy/torch bfloat16, and ttnn bfloat16 TILE tensors (ttnn's usual activations)")
    parser.add_argument("--ttnn-python", help="python of a venv with ttnn (default: the cached 0.81 test venv)")
    parser.add_argument("--ttnn-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--produce-gbps", type=float, default=2.0,
                        help="the simulated model's production rate in the in-run column (GB/s; 2: device read-back)")
    args = parser.parse_args()
    global PRODUCE_RATE
    PRODUCE_RATE = args.produce_gbps * 1e9
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    budget = parse_size(args.budget)
    if args.ttnn_child:
        print("RESULT", json.dumps(measure_ttnn(sizes, budget, args.repeat, args.dtype)), flush=True)  # ttnn logs to stdout too
        return
    for name in list(os.environ):
        if name.startswith("REPORTDB_"):
            del os.environ[name]  # defaults only: the figures describe the default configuration
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, {os.cpu_count()} CPUs, {args.dtype}; seconds per tensor")
    results = {int(k): v for k, v in measure_numpy(sizes, budget, args.repeat, args.dtype).items()}
    python = ttnn_python(args.ttnn_python)
    if python:
        proc = subprocess.run(
            [python, __file__, "--ttnn-child", "--sizes", args.sizes, "--budget", args.budget, "--repeat", str(args.repeat),
             "--dtype", args.dtype, "--produce-gbps", str(args.produce_gbps)],
            capture_output=True, text=True,
            env={**os.environ, "TT_METAL_MOCK_CLUSTER_DESC_PATH": str(ROOT.parent / "shared/tools/mock-cluster/wormhole_N150.yaml")},
        )
        if proc.returncode == 0:
            result = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
            for size, row in json.loads(result[len("RESULT "):]).items():
                results[int(size)].update(row)
        else:
            print(f"ttnn run failed:\n{proc.stderr[-2000:]}")
    else:
        print("no ttnn venv: dump_tensor column left out (pass --ttnn-python)")
    header = ["size", "writer", "torch.save", "ratio", "writer(ttnn)", "dump_tensor", "ratio",
              "ratios with durable=False", "with stats=False, durable=False", "put() alone: torch, ttnn",
              "in a run: torch, ttnn"]
    print(" | ".join(header))
    for nbytes in sizes:
        r = results[nbytes]

        def us(key: str) -> str:
            return f"{r[key] * 1e6:10.1f} us" if key in r else "         -   "

        def ratio(base: str, ours: str) -> str:
            return f"{r[base] / r[ours]:5.2f}x" if base in r and ours in r else "   - "

        nosync = f"torch {ratio('torch_save', 'writer_nosync')}, ttnn {ratio('dump_tensor', 'writer_ttnn_nosync')}"
        nostats = f"torch {ratio('torch_save', 'writer_fast')}, ttnn {ratio('dump_tensor', 'writer_ttnn_fast')}"
        put_only = f"{ratio('torch_save', 'writer_put')}, {ratio('dump_tensor', 'writer_ttnn_put')}"
        in_a_run = f"{ratio('torch_in_run', 'writer_in_run')}, {ratio('dump_in_run', 'writer_ttnn_in_run')}"
        print(f"{label(nbytes):>7} | {us('writer')} | {us('torch_save')} | {ratio('torch_save', 'writer')} | "
              f"{us('writer_ttnn')} | {us('dump_tensor')} | {ratio('dump_tensor', 'writer_ttnn')} | {nosync} | {nostats} | "
              f"{put_only} | {in_a_run}")


if __name__ == "__main__":
    main()
