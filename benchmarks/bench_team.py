"""The team store on a local PostgreSQL server (started here in a temporary folder, as the tests start it).

Usage: python benchmarks/bench_team.py [--big-mib 512] [--repeat 3] [--jobs 2] [--mode both] [--no-fsync]
                                       [--nightly 20] [--listing 1000] [--s3-mib 1024] [--s3-jobs 4]
                                       [--s3-pin shared|disjoint|both]

Cases:
- push and pull of a report of large float32 tensors (random: incompressible), in MB/s, against copying the report
  file (the limit on this disk), against the server's own limits (one binary COPY of the chunks already in memory
  in, and out), and against a naive ``INSERT`` per chunk through psycopg (what a hand-written uploader does). Two
  ways, each contender alternating with the others on a fresh database:
  ``fresh``: every timed case starts after a ``CHECKPOINT`` (a push arriving at a server with no writes pending:
  the usual case of a team server, whose checkpoints come every few minutes), and
  ``sustained``: the cases back to back, each paying at random for the checkpoints the WAL of the earlier ones
  forces (``max_wal_size`` 1 GB; a server ingesting without pause);
- stored bytes of ``--nightly`` runs of one model whose tensors are 90% identical from run to run, pushed to one
  store, against the same runs as separate SQLite files;
- ``reports`` and ``history`` latency with ``--listing`` metadata-sized reports pushed;
- push and pull of a ``--s3-mib`` report with its chunks in object storage (``push --chunks``: moto's S3 server, run
  as its own process on 127.0.0.1), against boto3's own put and get of the same chunk bytes (already in memory,
  nothing checked, received bytes dropped, or written into a file and synced) to the same server with as many
  requests in flight, in MB/s and as ratios, with the CPU seconds of client and server. Each side starts on an empty
  server and the sides alternate which goes first; ``--s3-pin disjoint`` gives the server half the cores and the
  client the other half (a server that does not take the client's cores).
The server keeps a normal install's durability (``fsync=on``) unless ``--no-fsync``. Nothing here is a test: on a
shared machine, compare the ratios of one run (each block prints the load it ran under).
"""

from __future__ import annotations

import argparse
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import reportdb
from reportdb import team
from pg_server import PgServer, pg_bin


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


def _raw_copy(db: Path, url: str, settle: Callable[[], None]) -> tuple[float, float]:
    """The server's own limits on these bytes: one binary COPY of every chunk (already in memory) into a bytea table
    like the store's, and one COPY of them back out (after ``settle``), received and dropped: seconds of each."""
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
        settle()
        t0 = time.perf_counter()
        with conn.cursor().copy("COPY (SELECT k, data FROM raw ORDER BY k) TO STDOUT (FORMAT BINARY)") as copy:
            for _ in copy:
                pass
        conn.commit()
    return copy_in, time.perf_counter() - t0


def _drop(server: PgServer, urls: list[str]) -> None:
    """Drop benchmark databases (PostgreSQL 15's DROP DATABASE forces a checkpoint: in ``sustained`` mode only once
    its cases are done)."""
    import psycopg

    with psycopg.connect(server.url(), autocommit=True) as conn:
        for url in urls:
            conn.execute(f'DROP DATABASE "{url.split("?")[0].rsplit("/", 1)[1]}"')
    urls.clear()


def _settle(server: PgServer, fresh: bool) -> None:
    """Before a timed case in ``fresh`` mode: a CHECKPOINT, so that no case pays for the earlier cases' writes."""
    if fresh:
        import psycopg

        with psycopg.connect(server.url(), autocommit=True) as conn:
            conn.execute("CHECKPOINT")


def random_report(folder: Path, mib: int, *, seed: int) -> Path:
    """A report of ``mib`` MiB of random float32 tensors, 64 MiB each (incompressible, nothing shared)."""
    rng = np.random.default_rng(seed)
    folder.mkdir()
    per = 64 << 20
    with reportdb.open(folder, "a") as report:
        for i in range(max(1, (mib << 20) // per)):
            report.put_tensor(i, rng.standard_normal(per // 4).astype(np.float32), stats=False)
    return folder


def big(server: PgServer, tmp: Path, mib: int, jobs: int, repeat: int, modes: list[str]) -> None:
    folder = random_report(tmp / "big", mib, seed=0)
    db = folder / "db.sqlite"
    mb = db.stat().st_size / 1e6
    for mode in modes:
        fresh = mode == "fresh"
        made: list[str] = []

        def database() -> str:
            """A new database; in ``fresh`` mode the earlier ones are dropped first (a checkpoint)."""
            if fresh:
                _drop(server, made)
            made.append(server.create_database())
            return made[-1]

        times: dict[str, list[float]] = {k: [] for k in ("copy", "in", "out", "push1", "push", "naive", "pull")}
        for attempt in range(repeat):  # alternating, each on a fresh database: drift and neighbours hit all alike
            _settle(server, fresh)
            t0 = time.perf_counter()
            shutil.copyfile(db, tmp / "copy.sqlite")
            with open(tmp / "copy.sqlite", "rb+") as f:  # a pull syncs its file too
                os.fsync(f.fileno())
            times["copy"].append(time.perf_counter() - t0)
            (tmp / "copy.sqlite").unlink()
            url = database()
            _settle(server, fresh)
            copy_in, copy_out = _raw_copy(db, url, lambda: _settle(server, fresh))
            times["in"].append(copy_in)
            times["out"].append(copy_out)
            url = database()
            _settle(server, fresh)
            t0 = time.perf_counter()
            team.push(folder, url, name="big", jobs=1)
            times["push1"].append(time.perf_counter() - t0)
            url = database()
            _settle(server, fresh)
            naive_s = _naive_push(db, url)
            times["naive"].append(naive_s)
            url = database()
            _settle(server, fresh)
            t0 = time.perf_counter()
            pushed = team.push(folder, url, name="big", jobs=jobs)
            times["push"].append(time.perf_counter() - t0)
            _settle(server, fresh)
            t0 = time.perf_counter()
            team.pull(url, "big", tmp / "pulled")
            times["pull"].append(time.perf_counter() - t0)
            shutil.rmtree(tmp / "pulled")
        t0 = time.perf_counter()
        again = team.push(folder, url, name="big")
        again_s = time.perf_counter() - t0
        _drop(server, made)
        copy_s, in_s, out_s, push1_s, push_s, naive_s, pull_s = (statistics.median(times[k]) for k in times)
        print(f"{mode}: report of {mb:.0f} MB, {pushed.chunks} chunks (medians of {repeat} runs; load "
              f"{os.getloadavg()[0]:.1f}; fsync {'on' if server.fsync else 'off'})")
        print(f"  file copy + fsync   {mb / copy_s:8.0f} MB/s")
        print(f"  raw COPY in         {mb / in_s:8.0f} MB/s   (one binary COPY of the bytes in memory, no checks)")
        print(f"  raw COPY out        {mb / out_s:8.0f} MB/s   (the server's send limit: received, not written)")
        print(f"  push (jobs=1)       {mb / push1_s:8.0f} MB/s   ({push1_s:.2f} s; push/raw COPY in {in_s / push1_s:.2f})")
        print(f"  push (jobs={jobs})       {mb / push_s:8.0f} MB/s   ({push_s:.2f} s; push/raw COPY in {in_s / push_s:.2f},"
              f" push/file copy {copy_s / push_s:.2f})")
        print(f"  naive INSERT/chunk  {mb / naive_s:8.0f} MB/s   (push/naive {naive_s / push_s:.2f})")
        print(f"  push again          {again_s * 1e3:8.0f} ms     (idempotent: {again.chunks_uploaded} chunks sent)")
        print(f"  pull                {mb / pull_s:8.0f} MB/s   ({pull_s:.2f} s; pull/file copy {copy_s / pull_s:.2f};"
              f" pull/raw COPY out {out_s / pull_s:.2f})")


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


def _moto(port: int) -> "subprocess.Popen[bytes]":
    """moto's S3 server in its own process (its Python does not share this one's GIL), once it answers."""
    import urllib.request

    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=1)
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    sys.exit("moto's server did not start: pip install 'moto[server]'")


def _pin(pid: int | str, cores: set[int]) -> None:
    """Every thread of process ``pid`` (``"self"``: this one) on ``cores``; threads they start inherit it."""
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(task), cores)
        except ProcessLookupError:  # a thread that ended meanwhile
            pass


def _cpu(pid: int) -> float:
    """CPU seconds (user and system) process ``pid`` has used."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def objects_case(server: PgServer, tmp: Path, mib: int, jobs: int, repeat: int, pinned: bool) -> None:
    """Push and pull through object storage against the client's own put and get of the same bytes; ``pinned``: moto's
    server on one half of the cores and this process on the other (a server that does not share the client's cores)."""
    import socket
    import sqlite3
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    import boto3
    from botocore.config import Config

    import importlib

    push_mod = importlib.import_module("reportdb.team.push")  # the module (reportdb.team.push is the function)

    with socket.socket() as sock:  # a free port for the server's process
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_DEFAULT_REGION="us-east-1")
    moto = _moto(port)
    cores = sorted(os.sched_getaffinity(0))
    try:
        if pinned:
            half = max(1, len(cores) // 2)
            _pin(moto.pid, set(cores[:half]))
            _pin("self", set(cores[half:]) or set(cores))
        folder = random_report(tmp / "s3big", mib, seed=2)
        src = sqlite3.connect(f"file:{folder / 'db.sqlite'}?mode=ro", uri=True)
        chunks = [bytes(r[0]) for r in src.execute("SELECT data FROM rdb_chunk ORDER BY id")]
        src.close()
        total = sum(len(c) for c in chunks) / 1e6
        offsets = np.cumsum([0] + [len(c) for c in chunks]).tolist()
        flight = jobs * push_mod.PUTS_PER_JOB
        # boto3's defaults (since 1.36: a CRC32 computed and sent with each put, checked on each get where the
        # object has one), as a user's own script gets them
        client = boto3.client("s3", config=Config(max_pool_connections=flight + 4))
        times: dict[str, list[float]] = {k: [] for k in ("put", "get", "get_file", "push", "pull")}
        cpu: dict[str, list[tuple[float, float]]] = {k: [] for k in times}  # (client, server) CPU seconds

        def timed(name: str, work: Callable[[], object]) -> None:
            here, there = time.process_time(), _cpu(moto.pid)
            t0 = time.perf_counter()
            work()
            times[name].append(time.perf_counter() - t0)
            cpu[name].append((time.process_time() - here, _cpu(moto.pid) - there))

        def empty_server(bucket: str) -> None:
            """Each side starts on an empty server: what the other side stored does not weigh on its memory."""
            urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"))
            client.create_bucket(Bucket=bucket)

        def own(pool: ThreadPoolExecutor) -> None:
            empty_server("bench-raw")
            timed("put", lambda: list(pool.map(
                lambda i: client.put_object(Bucket="bench-raw", Key=f"c{i}", Body=chunks[i]), range(len(chunks)))))
            timed("get", lambda: list(pool.map(
                lambda i: len(client.get_object(Bucket="bench-raw", Key=f"c{i}")["Body"].read()), range(len(chunks)))))
            fd = os.open(tmp / "raw.bin", os.O_CREAT | os.O_WRONLY | os.O_TRUNC)

            def into_file() -> None:
                list(pool.map(lambda i: os.pwrite(fd, client.get_object(Bucket="bench-raw", Key=f"c{i}")["Body"].read(),
                                                  offsets[i]), range(len(chunks))))
                os.fsync(fd)

            timed("get_file", into_file)
            os.close(fd)
            (tmp / "raw.bin").unlink()

        def ours() -> None:
            empty_server("bench-team")
            url = server.create_database()
            timed("push", lambda: team.push(folder, url, name="big", jobs=jobs, chunks="s3://bench-team/chunks"))
            timed("pull", lambda: team.pull(url, "big", tmp / "s3pulled"))
            shutil.rmtree(tmp / "s3pulled")

        with ThreadPoolExecutor(flight) as pool:
            for attempt in range(repeat):  # the sides alternate which goes first: drift and neighbours hit both
                if attempt % 2 == 0:
                    own(pool)
                    ours()
                else:
                    ours()
                    own(pool)
        put_s, get_s, file_s, push_s, pull_s = (statistics.median(times[k]) for k in times)

        def used(name: str) -> str:
            mine, theirs = (statistics.median(c[i] for c in cpu[name]) for i in (0, 1))
            return f"CPU s: client {mine:4.1f}, server {theirs:4.1f}"

        where = (f"moto on cores {cores[:max(1, len(cores) // 2)]}, client on {cores[max(1, len(cores) // 2):]}"
                 if pinned else f"moto and client sharing cores {cores}")
        print(f"object storage (moto {endpoint}; {where}): report of {total:.0f} MB in {len(chunks)} chunks, {flight} "
              f"requests in flight (jobs={jobs}); medians of {repeat} runs; load {os.getloadavg()[0]:.1f}")
        print(f"  boto3 put_object    {total / put_s:8.0f} MB/s   ({used('put')})")
        print(f"  push --chunks       {total / push_s:8.0f} MB/s   (push/put {put_s / push_s:.2f}: reads, checks, confirms"
              f" each object and writes its rows; {used('push')})")
        print(f"  boto3 get_object    {total / get_s:8.0f} MB/s   (received bytes dropped; {used('get')})")
        print(f"  get into a file     {total / file_s:8.0f} MB/s   (each object written at its offset, then fsync; "
              f"{used('get_file')})")
        print(f"  pull                {total / pull_s:8.0f} MB/s   (pull/get into a file {file_s / pull_s:.2f}, pull/get "
              f"{get_s / pull_s:.2f}: checks every object and writes and syncs the report file; {used('pull')})")
    finally:
        if pinned:
            _pin("self", set(cores))
        moto.kill()
        moto.wait()
        shutil.rmtree(tmp / "s3big", ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big-mib", type=int, default=512)
    parser.add_argument("--nightly", type=int, default=20)
    parser.add_argument("--listing", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--mode", choices=("fresh", "sustained", "both"), default="both")
    parser.add_argument("--s3-mib", type=int, default=1024, help="size of the object-storage case's report (0: skip)")
    parser.add_argument("--s3-jobs", type=int, default=4, help="push --jobs of the object-storage case")
    parser.add_argument("--s3-pin", choices=("shared", "disjoint", "both"), default="shared",
                        help="the object-storage case with moto's server sharing the client's cores, on cores of its "
                             "own (half of them, the client on the other half), or both")
    parser.add_argument("--fsync", action=argparse.BooleanOptionalAction, default=True,
                        help="the server's fsync (on, as a normal install; --no-fsync measures without durability)")
    args = parser.parse_args()
    bin_dir = pg_bin()
    if bin_dir is None:
        sys.exit("no PostgreSQL server binaries (initdb): apt-get install postgresql")
    server = PgServer(bin_dir)
    try:
        server.start(fsync=args.fsync)
        with tempfile.TemporaryDirectory() as tmp:
            if args.big_mib:
                modes = ["fresh", "sustained"] if args.mode == "both" else [args.mode]
                big(server, Path(tmp), args.big_mib, args.jobs, args.repeat, modes)
            if args.nightly:
                nightly(server, Path(tmp), args.nightly)
            if args.listing:
                listing(server, Path(tmp), args.listing)
            if args.s3_mib:
                for pinned in {"shared": [False], "disjoint": [True], "both": [False, True]}[args.s3_pin]:
                    objects_case(server, Path(tmp), args.s3_mib, args.s3_jobs, args.repeat, pinned)
    finally:
        server.close()


if __name__ == "__main__":
    main()
