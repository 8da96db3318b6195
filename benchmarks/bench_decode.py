"""Decode throughput of ``load_tensor_file`` against ``np.load`` of the same values as ``.npy``.

Generates bfloat16 TILE (as ``.tensorbin`` and as a v5 ``.bin``, whose payload starts at an odd
offset), float32 ROW_MAJOR and BFLOAT8_B files with the tests' generator in a temporary directory,
then times each reader from a warm page cache (best of ``--repeat`` runs, wall clock and CPU time)
and prints MB/s of file bytes and the time ratio to ``np.load``. Run: ``python benchmarks/bench_decode.py [--mib 64 256]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import gen_legacy as gen  # noqa: E402
from reportdb.formats import load_tensor_file  # noqa: E402


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


def run(mib_sizes: list[int], repeat: int) -> None:
    """Generate, time and print one line per (format, size)."""
    rng = np.random.default_rng(0)
    print(f"{'case':30} {'MiB':>7} {'reportdb MB/s':>14} {'np.load MB/s':>13} {'ratio':>7}   (CPU-time: reportdb, np.load, ratio)")
    with tempfile.TemporaryDirectory() as tmp:
        for mib in mib_sizes:
            for name, writer, spec, shape in _cases(mib):
                values = rng.standard_normal(shape, dtype=np.float32)
                path = Path(tmp) / "tensor"
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
                print(
                    f"{name:30} {size / 2**20:7.1f} {size / ours[0] / 1e6:14.0f} "
                    f"{npy_size / base[0] / 1e6:13.0f} {ours[0] / base[0]:6.2f}x   "
                    f"({size / ours[1] / 1e6:.0f}, {npy_size / base[1] / 1e6:.0f}, {ours[1] / base[1]:.2f}x)"
                )
                path.unlink()
                npy.unlink()
                del values, decoded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, nargs="+", default=[16, 64, 256], help="file sizes in MiB")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (best is kept)")
    args = parser.parse_args()
    run(args.mib, args.repeat)


if __name__ == "__main__":
    main()
