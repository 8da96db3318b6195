"""``attach``: how long the report stays locked while the checked copy is written back into it (the write-back is one
SQLite backup under the report's exclusive lock: a ttnn writer still running waits that long, up to its 5 s busy
timeout), against the whole attach.

Usage: python benchmarks/bench_attach.py [--mib 256] [--tensors 64]

The report is ttnn 0.81.1's own (tests/data/report-schemas), its ``tensors`` table extended to list the values'
tensor ids; the values are float32 random (incompressible), written by the Writer. Nothing here is a test: on a
shared machine, read the ratio (the load it ran under is printed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import reportdb
from reportdb.ttnn import attach_values

SCHEMA_081 = ROOT / "tests" / "data" / "report-schemas" / "ttnn_0.81.1_schema_3.5.sqlite"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--tensors", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        folder = base / "report"
        folder.mkdir()
        shutil.copyfile(SCHEMA_081, folder / "db.sqlite")
        ids = list(range(1000, 1000 + args.tensors))
        with sqlite3.connect(folder / "db.sqlite") as conn:
            conn.executemany("INSERT INTO tensors (tensor_id) VALUES (?)", [(i,) for i in ids])
        elements = args.mib * (1 << 20) // 4 // args.tensors
        rng = np.random.default_rng(0)
        with reportdb.Writer(base / "values.sqlite", stats=False) as w:
            for i in ids:
                w.put_tensor(i, rng.standard_normal(elements, dtype=np.float32))
        locked: list[float] = []
        write_back = attach_values._write_back

        def timed(*a: object) -> bool:
            started = time.perf_counter()
            try:
                return write_back(*a)  # type: ignore[arg-type]
            finally:
                locked.append(time.perf_counter() - started)

        attach_values._write_back = timed  # type: ignore[assignment]
        started = time.perf_counter()
        result = attach_values.attach(base / "values.sqlite", folder)
        total = time.perf_counter() - started
        size = (folder / "db.sqlite").stat().st_size
        print(f"load {os.getloadavg()[0]:.1f}; attached {result.attached} tensors, {result.bytes_attached / 2**20:.0f} MiB,"
              f" report now {size / 2**20:.0f} MiB")
        print(f"attach {total:.2f} s; write-back (report locked, incl. fsync of the copy) {locked[-1]:.2f} s"
              f" = {100 * locked[-1] / total:.0f}%, {size / 2**20 / locked[-1]:.0f} MiB/s")


if __name__ == "__main__":
    main()
