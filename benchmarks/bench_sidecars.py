"""Comparison-records and tensor-lifetime sidecars read into a report: parse-and-check rate and import rate.

Usage: python benchmarks/bench_sidecars.py [--records 100000]

The sidecars are written like ttnn 0.81's (``json.dump`` of its dict: records of the shape
``tests/data/ttnn-0.81.1-comparison`` holds), for ``--records`` outputs: one local and one global record, one golden
tensor row each, one lifetime row. The report is an empty SQLite file (the tables are created with ttnn's DDL); a
second import finds every row present (the usual case: ttnn imported the sidecar itself). Nothing here is a test: on
a shared machine, read the rates with the load printed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reportdb.legacy.sidecars import import_sidecars, read_sidecars


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    n = parser.parse_args().records
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        record = {"matches": True, "desired_pcc": 0.9999989867210388, "actual_pcc": 0.99999}
        tensor = {"shape": "torch.Size([32, 64])", "dtype": "torch.bfloat16", "layout": "torch.strided", "memory_config": None,
                  "device_id": None, "address": None, "buffer_type": None, "storage_type": "HOST"}
        comparison = {
            "version": 1,
            "local_tensor_comparison_records": [dict(record, tensor_id=i, golden_tensor_id=n + 2 * i) for i in range(n)],
            "global_tensor_comparison_records": [dict(record, tensor_id=i, golden_tensor_id=n + 2 * i + 1) for i in range(n)],
            "tensors": [dict(tensor, tensor_id=n + i) for i in range(2 * n)],
        }
        lifetime = [{"tensor_id": i, "producer_operation_id": i, "last_use_operation_id": i + 1, "deallocate_operation_id": None,
                     "producer_source_file": "/model/model.py", "producer_source_line": 10 + i % 50,
                     "last_use_source_file": "/model/model.py", "last_use_source_line": 11 + i % 50, "rank": 0}
                    for i in range(n)]
        paths = [folder / "graph_capture.comparison_records.json", folder / "graph_capture.tensor_lifetime.json"]
        paths[0].write_text(json.dumps(comparison))
        paths[1].write_text(json.dumps(lifetime, indent=2))
        size = sum(p.stat().st_size for p in paths)
        t0 = time.perf_counter()
        cars = read_sidecars(paths)
        t1 = time.perf_counter()
        conn = sqlite3.connect(folder / "db.sqlite", isolation_level=None)
        conn.execute("BEGIN")
        done = import_sidecars(conn, cars)
        conn.execute("COMMIT")
        t2 = time.perf_counter()
        conn.execute("BEGIN")
        again = import_sidecars(conn, cars, write=False)
        conn.execute("ROLLBACK")
        t3 = time.perf_counter()
        conn.close()
    rows = sum(done.added.values())
    print(f"load {os.getloadavg()[0]:.1f}; {n} outputs: {size / 2**20:.1f} MiB of sidecars, {rows} rows")
    print(f"read and check: {t1 - t0:.2f} s ({size / 2**20 / (t1 - t0):.0f} MiB/s)")
    print(f"import:         {t2 - t1:.2f} s ({rows / (t2 - t1):,.0f} rows/s)")
    print(f"all present:    {t3 - t2:.2f} s ({sum(again.already_present.values()) / (t3 - t2):,.0f} rows/s)")
    print(f"peak memory:    {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB (the process)")


if __name__ == "__main__":
    main()
