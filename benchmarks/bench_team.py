"""The team store on a local PostgreSQL server (started here in a temporary folder, as the tests start it).

Usage: python benchmarks/bench_team.py [--big-mib 512] [--nightly 20] [--listing 1000] [--fsync] [--jobs 2]

Cases:
- push and pull of a report of large float32 tensors (random: incompressible), in MB/s, against copying the report
  file (the limit on this disk) and against a naive ``INSERT`` per chunk through psycopg (what a hand-written
  uploader does);
- stored bytes of ``--nightly`` runs of one model whose tensors are 90% identical from run to run, pushed to one
  store, against the same runs as separate SQLite files;
- ``reports`` and ``history`` latency with ``--listing`` metadata-sized reports pushed.
The server runs with ``fsync=off`` unless ``--fsync`` (a real server syncs its WAL at commit). Nothing here is a test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import reportdb  # noqa: E402
from reportdb import team  # noqa: E402
from pg_server import PgServer, pg_bin  # noqa: E402


def _size_of(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size


def _store_bytes(url: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        return int(conn.execute("SELECT pg_database_size(current_database())").fetchone()[0])


def _naive_push(db: Path, url: str) -> float:
    """One INSERT per chunk (parameters bound, text protocol), one transaction: seconds."""
    import sqlite3

    import psycopg

    t0 = time.perf_counter()
    src = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS naive (digest bytea PRIMARY KEY, data bytea)")
        conn.execute("ALTER TABLE naive ALTER COLUMN data SET STORAGE EXTERNAL")
        for digest, data in src.execute("SELECT digest, data FROM rdb_chunk"):
            conn.execute("INSERT INTO naive VALUES (%s, %s) ON CONFLICT DO NOTHING", (digest, data))
        conn.commit()
    src.close()
    return time.perf_counter() - t0


def _raw_copy(db: Path, url: str) -> tuple[float, float]:
    """The server's own limits on these bytes: one binary COPY of every chunk (already in memory) into a bytea table
    like the store's, and one COPY of them back out, received and dropped: seconds of each."""
    import sqlite3

    import psycopg

    src = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    chunks = [bytes(r[0]) for r in src.execute("SELECT data FROM rdb_chunk")]
    src.close()
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE raw (k int8 PRIMARY KEY, data bytea)")
        conn.execute("ALTER TABLE raw ALTER COLUMN data SET STORAGE EXTERNAL")
        conn.commit()
        t0 = time.perf_counter()
        with conn.cursor().copy("COPY raw (k, data) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["int8", "bytea"])
            for i, data in enumerate(chunks):
                copy.write_row((i, data))
        conn.commit()
        copy_in = time.perf_counter() - t0
        t0 = time.perf_counter()
        with conn.cursor().copy("COPY (SELECT k, data FROM raw ORDER BY k) TO STDOUT (FORMAT BINARY)") as copy:
            for _ in copy:
                pass
        conn.commit()
    return copy_in, time.perf_counter() - t0


def big(server: PgServer, tmp: Path, mib: int, jobs: int, repeat: int = 3) -> None:
    rng = np.random.default_rng(0)
    folder = tmp / "big"
    folder.mkdir()
    per = 64 << 20
    with reportdb.open(folder, "a") as report:
        for i in range(max(1, (mib << 20) // per)):
            report.put_tensor(i, rng.standard_normal(per // 4).astype(np.float32), stats=False)
    db = folder / "db.sqlite"
    nbytes = db.stat().st_size
    mb = nbytes / 1e6
    t0 = time.perf_counter()
    shutil.copyfile(db, tmp / "copy.sqlite")
    with open(tmp / "copy.sqlite", "rb+") as f:  # a pull syncs its file too
        os.fsync(f.fileno())
    copy_s = time.perf_counter() - t0
    push_t, push1_t, naive_t, pull_t, in_t, out_t = [], [], [], [], [], []  # type: ignore[var-annotated]
    for attempt in range(repeat):  # alternating, each on a fresh database: drift and neighbours hit all alike
        copy_in, copy_out = _raw_copy(db, server.create_database())
        in_t.append(copy_in)
        out_t.append(copy_out)
        t0 = time.perf_counter()
        team.push(folder, server.create_database(), name="big", jobs=1)
        push1_t.append(time.perf_counter() - t0)
        url = server.create_database()
        t0 = time.perf_counter()
        pushed = team.push(folder, url, name="big", jobs=jobs)
        push_t.append(time.perf_counter() - t0)
        naive_t.append(_naive_push(db, server.create_database()))
        t0 = time.perf_counter()
        team.pull(url, "big", tmp / f"pulled{attempt}")
        pull_t.append(time.perf_counter() - t0)
        shutil.rmtree(tmp / f"pulled{attempt}")
    t0 = time.perf_counter()
    again = team.push(folder, url, name="big")
    again_s = time.perf_counter() - t0
    push_s, push1_s, naive_s, pull_s, in_s, out_s = (statistics.median(t) for t in (push_t, push1_t, naive_t, pull_t,
                                                                                   in_t, out_t))
    print(f"report of {mb:.0f} MB, {pushed.chunks} chunks (medians of {repeat} runs; load {os.getloadavg()[0]:.1f})")
    print(f"  file copy + fsync   {mb / copy_s:8.0f} MB/s")
    print(f"  raw COPY in         {mb / in_s:8.0f} MB/s   (the server's ingest limit: bytes in memory, no checks)")
    print(f"  raw COPY out        {mb / out_s:8.0f} MB/s   (the server's send limit: received, not written)")
    print(f"  push (jobs=1)       {mb / push1_s:8.0f} MB/s   ({push1_s:.2f} s; raw COPY in/push time ratio {in_s / push1_s:.2f})")
    print(f"  push (jobs={jobs})       {mb / push_s:8.0f} MB/s   ({push_s:.2f} s; copy/push time ratio {copy_s / push_s:.2f})")
    print(f"  naive INSERT/chunk  {mb / naive_s:8.0f} MB/s   (push is {naive_s / push_s:.2f}x faster)")
    print(f"  push again          {again_s * 1e3:8.0f} ms     (idempotent: {again.chunks_uploaded} chunks sent)")
    print(f"  pull                {mb / pull_s:8.0f} MB/s   ({pull_s:.2f} s; copy/pull time ratio {copy_s / pull_s:.2f};"
          f" raw COPY out/pull {out_s / pull_s:.2f})")


def nightly(server: PgServer, tmp: Path, runs: int) -> None:
    """``runs`` nightly reports of 20 tensors of 1 MiB each, 18 of them identical across runs (weights, inputs)."""
    rng = np.random.default_rng(1)
    fixed = [rng.standard_normal(1 << 18).astype(np.float32) for _ in range(18)]
    url = server.create_database()
    before = _store_bytes(url)
    files = 0
    for run in range(runs):
        folder = tmp / f"nightly{run}"
        folder.mkdir()
        with reportdb.open(folder, "a") as report:
            for i, array in enumerate(fixed):
                report.put_tensor(i, array)
            for i in (18, 19):
                report.put_tensor(i, rng.standard_normal(1 << 18).astype(np.float32))
        files += _size_of(folder)
        team.push(folder, url, name=f"nightly-{run}")
    stored = _store_bytes(url) - before
    print(f"{runs} nightly runs, 20 MiB of tensors each, 90% identical across runs")
    print(f"  {runs} SQLite files     {files / 1e6:8.1f} MB")
    print(f"  one team store      {stored / 1e6:8.1f} MB   ({files / stored:.1f}x smaller)")


def listing(server: PgServer, tmp: Path, count: int) -> None:
    """``count`` metadata-sized reports (3 operations with golden records, one small tensor) pushed, then the
    latency of ``list_reports`` and ``history``."""
    from pg_server import make_report

    url = server.create_database()
    template = make_report(tmp / "tiny", seed=0, own=1, shape=(4, 4), operations=3)
    import sqlite3

    t0 = time.perf_counter()
    for i in range(count):
        folder = tmp / f"tiny{i}"
        folder.mkdir()
        shutil.copyfile(template / "db.sqlite", folder / "db.sqlite")
        with sqlite3.connect(folder / "db.sqlite") as conn:  # a different content each time
            conn.execute("UPDATE local_tensor_comparison_records SET actual_pcc = ?", (0.99 + i * 1e-6,))
        team.push(folder, url, name=f"run-{i:04d}", tags=["nightly"])
    push_s = time.perf_counter() - t0

    def timed(fn) -> float:  # type: ignore[no-untyped-def]
        fn()
        samples = []
        for _ in range(7):
            t = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t)
        return statistics.median(samples) * 1e3

    print(f"{count} small reports pushed in {push_s:.1f} s ({push_s / count * 1e3:.0f} ms each)")
    print(f"  reports (all)        {timed(lambda: team.list_reports(url)):8.1f} ms")
    print(f"  reports --tag --name {timed(lambda: team.list_reports(url, tag='nightly', name='run-09')):8.1f} ms")
    print(f"  history --op         {timed(lambda: team.history(url, 'ttnn.op2')):8.1f} ms  "
          f"({len(team.history(url, 'ttnn.op2'))} rows)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big-mib", type=int, default=512)
    parser.add_argument("--nightly", type=int, default=20)
    parser.add_argument("--listing", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--fsync", action="store_true")
    args = parser.parse_args()
    bin_dir = pg_bin()
    if bin_dir is None:
        sys.exit("no PostgreSQL server binaries (initdb): apt-get install postgresql")
    server = PgServer(bin_dir)
    try:
        server.start(fsync=args.fsync)
        with tempfile.TemporaryDirectory() as tmp:
            if args.big_mib:
                big(server, Path(tmp), args.big_mib, args.jobs)
            if args.nightly:
                nightly(server, Path(tmp), args.nightly)
            if args.listing:
                listing(server, Path(tmp), args.listing)
    finally:
        server.close()


if __name__ == "__main__":
    main()
