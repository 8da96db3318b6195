"""What reportdb's guards against hostile reports cost, and what they bound, in one short run.

Usage: python benchmarks/bench_hostile.py [--repeat 7]

Cases: ``files.check_files`` (the stat of the database and lstat of its side files before every open); 2000 small
tensor reads through one Report with the connection's authorizer (``printf``/``format`` denied in the report's SQL)
and with it removed; a view computing ``printf('%.*c', 999000000, 'x')`` read as it is (no guard: one SQLite step) and
through a reportdb connection (denied when prepared); a 10-element window of an 8 GiB tensor made of one zstd frame
declaring 1 GiB, referenced 8 times (peak RSS of a child process, VmHWM). Medians of interleaved runs. Nothing here is a test.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import reportdb
from reportdb.store import files


def _median(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    return statistics.median(fn() for _ in range(repeat))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    repeat = parser.parse_args().repeat
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "db.sqlite"
        with reportdb.open(path, "a") as report, report.batch():
            for i in range(2000):
                report.put_tensor(i, np.full(256, i, np.float32))

        def check() -> float:
            t = time.perf_counter()
            for _ in range(1000):
                files.check_files(path)
            return (time.perf_counter() - t) / 1000 * 1e6

        def reads(authorizer: bool) -> float:
            with reportdb.open(path) as report:
                if not authorizer:
                    report._conn.set_authorizer(None)
                t = time.perf_counter()
                for i in range(2000):
                    report.tensor(i)
                return (time.perf_counter() - t) / 2000 * 1e6

        print(f"check_files before an open: {_median(check, repeat):.1f} us")
        pairs = [(reads(True), reads(False)) for _ in range(repeat)]
        print(f"small read: {statistics.median(a for a, _ in pairs):.1f} us with the authorizer, "
              f"{statistics.median(b for _, b in pairs):.1f} us without")
        con = sqlite3.connect(path)
        con.execute("CREATE VIEW evil AS SELECT printf('%.*c', 999000000, 'x') AS x")
        con.commit()
        t = time.perf_counter()
        con.execute("SELECT length(x) FROM evil").fetchall()
        print(f"printf view, plain sqlite3: {time.perf_counter() - t:.1f} s in one step")
        con.close()
        with reportdb.open(path) as report, report.connection() as conn:
            t = time.perf_counter()
            try:
                conn.execute("SELECT length(x) FROM evil").fetchall()
            except reportdb.ReportDBError as exc:
                print(f"printf view, reportdb: {type(exc).__name__} after {(time.perf_counter() - t) * 1e3:.2f} ms")
        from test_hostile_memory import bomb_report

        bomb = bomb_report(Path(tmp) / "bomb.sqlite")
        hwm = "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0])"  # KiB; not inherited
        code = f"import numpy as np, reportdb\nr = reportdb.open({str(bomb)!r})\nr.tensor(4, window=np.s_[:10])\n{hwm}"
        base = f"import numpy as np, reportdb\nr = reportdb.open({str(bomb)!r})\n{hwm}"
        env = {"PYTHONPATH": str(ROOT)}
        peak = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env).stdout)
        idle = int(subprocess.run([sys.executable, "-c", base], capture_output=True, text=True, env=env).stdout)
        print(f"10-element window of an 8 GiB tensor of 1 GiB frames: peak RSS {peak / 1024:.0f} MiB "
              f"({(peak - idle) / 1024:.0f} MiB over an open report)")


if __name__ == "__main__":
    main()
