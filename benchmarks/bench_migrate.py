"""Migration throughput (MB/s of legacy tensor bytes) and the size of the migrated database.

Run: ``python benchmarks/bench_migrate.py [--gib 1.0] [--shape 1,1,2048,4096] [--jobs 1,2] [--no-stats] [--workdir DIR]``.
Generates a legacy
report folder of bfloat16 TILE tensors (half ``.bin`` v5, half ``.tensorbin``, distinct random values
so nothing deduplicates) with a 2024-schema ``db.sqlite``, then migrates it with ``-o`` once per
``--jobs`` value and prints seconds, MB/s, peak RSS of the migrating process and sizes. The page cache
is warm (the files were just written), which is the case a rerun or a fast SSD sees.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ml_dtypes
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from gen_legacy import Spec, write_tensorbin, write_v5

SCHEMA = ROOT.parent / "shared" / "fixtures" / "report-schemas" / "visualizer_empty_2024-09.sqlite"
SHAPE = (1, 1, 2048, 4096)  # 16 MiB of bfloat16 per tensor


def generate(folder: Path, total_bytes: int, shape: tuple[int, ...] = SHAPE) -> int:
    """Write a legacy report folder holding at least ``total_bytes`` of tensor files; return their bytes."""
    tensors = folder / "tensors"
    tensors.mkdir(parents=True)
    shutil.copyfile(SCHEMA, folder / "db.sqlite")
    (folder / "config.json").write_text(json.dumps({"enable_detailed_tensor_report": True, "report_name": "bench"}))
    rng = np.random.default_rng(0)
    spec = Spec("BFLOAT16", tile=(32, 32))
    conn = sqlite3.connect(folder / "db.sqlite")
    written = 0
    tensor_id = 0
    while written < total_bytes:
        tensor_id += 1
        values = rng.standard_normal(shape, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
        path = tensors / (f"{tensor_id}.bin" if tensor_id % 2 else f"{tensor_id}.tensorbin")
        if tensor_id % 2:
            write_v5(path, values, spec)
        else:
            write_tensorbin(path, [((0, 0), values)], spec, mesh_shape=[1, 1])
        conn.execute(
            "INSERT INTO tensors VALUES (?, ?, 'DataType.BFLOAT16', 'Layout.TILE', NULL, NULL, NULL, NULL)",
            (tensor_id, f"Shape({list(shape)})"),
        )
        written += path.stat().st_size
    conn.commit()
    conn.close()
    return written


CHILD = """
import json, resource, sys, time
from reportdb.legacy import migrate
start = time.perf_counter()
summary = migrate(sys.argv[1], sys.argv[2], jobs=int(sys.argv[3]), stats=sys.argv[4] == "1")
print(json.dumps({"seconds": time.perf_counter() - start, "summary": summary.to_dict(),
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "children_peak_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gib", type=float, default=1.0, help="legacy tensor bytes to generate, in GiB")
    parser.add_argument("--shape", default="1,1,2048,4096", help="shape of every tensor (the default: 16 MiB of bfloat16; "
                        "1,1,32,64 makes 4 KiB tensors, the many small ones of a typical report)")
    parser.add_argument("--jobs", default="1,2", help="comma-separated --jobs values to measure")
    parser.add_argument("--no-stats", action="store_true", help="also measure with per-tensor statistics off")
    parser.add_argument("--workdir", type=Path, default=None, help="where to generate (default: a temp dir)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-migrate-", dir=args.workdir))
    try:
        src = work / "legacy"
        start = time.perf_counter()
        tensor_bytes = generate(src, int(args.gib * (1 << 30)), tuple(int(d) for d in args.shape.split(",")))
        files = len(list((src / "tensors").iterdir()))
        print(f"generated {files} files, {tensor_bytes / 1e6:.0f} MB in {time.perf_counter() - start:.1f} s")
        print(f"{'stats':>5} {'jobs':>4} {'seconds':>8} {'MB/s':>7} {'tensors/s':>10} {'peak RSS MiB':>13} {'worker RSS MiB':>15} {'db MB':>8} {'legacy MB':>10}")
        runs = [(stats, int(j)) for stats in ((True, False) if args.no_stats else (True,)) for j in args.jobs.split(",")]
        for stats, jobs in runs:
            out = work / f"out-{jobs}"
            result = subprocess.run(
                [sys.executable, "-c", CHILD, str(src), str(out), str(jobs), "1" if stats else "0"],
                capture_output=True, text=True, check=True,
            )
            data = json.loads(result.stdout)
            summary = data["summary"]
            legacy = summary["bytes"]["before"]
            print(
                f"{'on' if stats else 'off':>5} {jobs:>4} {data['seconds']:>8.2f} {tensor_bytes / 1e6 / data['seconds']:>7.0f} "
                f"{files / data['seconds']:>10.0f} {data['peak_rss_mib']:>13.0f} "
                f"{data['children_peak_rss_mib']:>15.0f} {summary['bytes']['after'] / 1e6:>8.1f} {legacy / 1e6:>10.1f}"
            )
            shutil.rmtree(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
