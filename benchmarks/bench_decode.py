"""Decode throughput of ``load_tensor_file`` against ``np.load`` of the same values as ``.npy``.

Generates bfloat16 TILE (as ``.tensorbin`` and as a v5 ``.bin``, whose payload starts at an odd
offset), float32 ROW_MAJOR and BFLOAT8_B files with the tests' generator in a temporary directory,
then times each reader from a warm page cache (best of ``--repeat`` runs, wall clock and CPU time)
and prints MB/s of file bytes and the time ratio to ``np.load``. Where a ttnn 0.8x venv exists (the
one ``tests/ttnn_env.py`` caches, or ``--ttnn-python``), ``.tensorbin`` files are also loaded with
``ttnn.load_tensor`` and turned into a numpy array the way reportdb's ttnn adapter does (float32
through ``to_numpy``; bfloat16 and block floats through ``ttnn.to_dtype(float32)`` first, since
``to_numpy`` does not take them), which is what it takes to get at the values.
Run: ``python benchmarks/bench_decode.py [--mib 64 256]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

import gen_legacy as gen
from bench_writer import ttnn_python
from reportdb.formats import load_tensor_file

_TTNN_TIMER = """
import sys, time, ttnn
path, repeat = sys.argv[1], int(sys.argv[2])
best = float("inf")
for _ in range(repeat):
    t0 = time.perf_counter()
    t = ttnn.load_tensor(path)
    if t.dtype != ttnn.float32:
        t = ttnn.to_dtype(t, ttnn.float32)
    t.to_numpy()
    best = min(best, time.perf_counter() - t0)
print("RESULT", best, flush=True)
"""


def _ttnn_seconds(python: str | None, path: Path, repeat: int) -> float | None:
    """Best time of ``ttnn.load_tensor`` to numpy values in the ttnn venv, or None without one."""
    if python is None:
        return None
    env = {**os.environ, "TT_METAL_MOCK_CLUSTER_DESC_PATH": str(ROOT.parent / "shared/tools/mock-cluster/wormhole_N150.yaml")}
    proc = subprocess.run([python, "-c", _TTNN_TIMER, str(path), str(repeat)],
                          capture_output=True, text=True, env=env, cwd=path.parent)
    if proc.returncode != 0:
        print(f"  ttnn.load_tensor failed: {proc.stderr.strip().splitlines()[-1:]}")
        return None
    return float(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT ")).split()[1])


def _best(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Best wall-clock and best CPU time of ``repeat`` runs (CPU time is robust on a busy machine)."""
    walls, cpus = [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus)


def _cases(mib: int) -> list[tuple[str, str, gen.Spec, tuple[int, int]]]:
    """(name, writer, spec, shape) with about ``mib`` MiB of file data each."""
    cols = 4096
    bf16_rows = mib * 2**20 // (2 * cols) // 32 * 32
    f32_rows = mib * 2**20 // (4 * cols)
    bfp8_rows = mib * 2**20 // (1088 * cols // 1024) // 32 * 32
    return [
        ("bfloat16 TILE .tensorbin", "tensorbin", gen.Spec("BFLOAT16", (32, 32)), (bf16_rows, cols)),
        ("bfloat16 TILE v5 .bin", "v5", gen.Spec("BFLOAT16", (32, 32)), (bf16_rows, cols)),
        ("float32 ROW_MAJOR .tensorbin", "tensorbin", gen.Spec("FLOAT32", None), (f32_rows, cols)),
        ("BFLOAT8_B TILE .tensorbin", "tensorbin", gen.Spec("BFLOAT8_B", (32, 32)), (bfp8_rows, cols)),
    ]


def run(mib_sizes: list[int], repeat: int, ttnn: str | None) -> None:
    """Generate, time and print one line per (format, size)."""
    rng = np.random.default_rng(0)
    print(f"ttnn: {ttnn or 'no venv found, ttnn.load_tensor column left out'}")
    print(f"{'case':30} {'MiB':>7} {'reportdb MB/s':>14} {'np.load MB/s':>13} {'ratio':>7}   (CPU-time: reportdb, np.load, ratio)"
          "   [ttnn.load_tensor to numpy MB/s, reportdb speed-up]")
    with tempfile.TemporaryDirectory() as tmp:
        for mib in mib_sizes:
            for name, writer, spec, shape in _cases(mib):
                values = rng.standard_normal(shape, dtype=np.float32)
                path = Path(tmp) / ("tensor.tensorbin" if writer == "tensorbin" else "tensor.bin")
                if writer == "v5":
                    gen.write_v5(path, values, spec)
                else:
                    gen.write_tensorbin(path, [((0, 0), values)], spec)
                decoded = load_tensor_file(path).array
                npy = Path(tmp) / "tensor.npy"
                np.save(npy, decoded.view(np.uint16) if decoded.dtype.itemsize == 2 and decoded.dtype.kind == "V" else decoded)
                size = path.stat().st_size
                ours = _best(lambda: load_tensor_file(path).array, repeat)
                base = _best(lambda: np.load(npy), repeat)
                npy_size = npy.stat().st_size
                theirs = _ttnn_seconds(ttnn, path, repeat) if writer == "tensorbin" else None
                extra = "" if theirs is None else f"   [{size / theirs / 1e6:.0f}, {theirs / ours[0]:.2f}x]"
                print(
                    f"{name:30} {size / 2**20:7.1f} {size / ours[0] / 1e6:14.0f} "
                    f"{npy_size / base[0] / 1e6:13.0f} {ours[0] / base[0]:6.2f}x   "
                    f"({size / ours[1] / 1e6:.0f}, {npy_size / base[1] / 1e6:.0f}, {ours[1] / base[1]:.2f}x){extra}"
                )
                path.unlink()
                npy.unlink()
                del values, decoded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, nargs="+", default=[16, 64, 256], help="file sizes in MiB")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (best is kept)")
    parser.add_argument("--ttnn-python", help="python of a venv with ttnn 0.8x (default: the cached test venv)")
    args = parser.parse_args()
    run(args.mib, args.repeat, ttnn_python(args.ttnn_python))


if __name__ == "__main__":
    main()
