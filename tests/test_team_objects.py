"""The team store with chunk bytes in object storage (``push --chunks s3://BUCKET/PREFIX``), against moto's S3
server over HTTP on 127.0.0.1 and a real PostgreSQL: objects content-addressed and shared, the store remembering its
bucket, every object checked on the way back (tampered, truncated, missing: a clear error and nothing written),
``verify`` naming the damaged reports, and garbage collection of objects that cannot race a push."""

from __future__ import annotations

import errno
import importlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pg_server import PgServer, chunk_keys, dump, make_report, shared_arrays, start_pusher, store_count
from s3_server import S3Server
import reportdb
from reportdb import team
from reportdb.errors import CorruptionError, InvalidArgumentError, MissingObjectError, ObjectStoreError
from reportdb.team import objects

pytestmark = [pytest.mark.process, pytest.mark.service]


def _bucket(s3_url: str) -> tuple[str, str]:
    bucket, _, prefix = s3_url[5:].partition("/")
    return bucket, prefix.strip("/") + "/"


def _objects(s3_server: S3Server, s3_url: str) -> dict[str, bytes]:
    """Every object under the store's prefix, by its name under the prefix."""
    bucket, prefix = _bucket(s3_url)
    client = s3_server.client()
    names = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
             for o in page.get("Contents", [])]
    return {n[len(prefix):]: client.get_object(Bucket=bucket, Key=n)["Body"].read() for n in names}


def _names(db: Path) -> set[str]:
    return {objects.key_name(*k) for k in chunk_keys(db)}


def test_push_pull_and_open_through_object_storage(team_url: str, s3_url: str, s3_server: S3Server,
                                                   tmp_path: Path) -> None:
    shared = shared_arrays(2)
    first = make_report(tmp_path / "first", seed=1, shared=shared)
    second = make_report(tmp_path / "second", seed=2, shared=shared)
    pushed = team.push(first, team_url, name="first", chunks=s3_url, jobs=3)
    assert pushed.created and pushed.chunks_uploaded == len(chunk_keys(first / "db.sqlite"))
    stored = _objects(s3_server, s3_url)
    assert set(stored) == _names(first / "db.sqlite")  # content-addressed: one object per distinct chunk
    assert store_count(team_url, "SELECT COUNT(*) FROM team_chunk") == 0  # no chunk bytes in PostgreSQL
    assert store_count(team_url, "SELECT COUNT(*) FROM team_object") == len(stored)

    again = team.push(second, team_url, name="second")  # no flag: the store remembers its bucket
    shared_keys = chunk_keys(first / "db.sqlite") & chunk_keys(second / "db.sqlite")
    assert shared_keys and again.chunks_uploaded == len(chunk_keys(second / "db.sqlite") - shared_keys)
    assert set(_objects(s3_server, s3_url)) == _names(first / "db.sqlite") | _names(second / "db.sqlite")
    assert not team.push(second, team_url, name="second").created  # idempotent: nothing sent

    for name, report in (("first", first), ("second", second)):
        back = Path(team.pull(team_url, name, tmp_path / "back" / name).path)
        assert dump(back) == dump(report / "db.sqlite")
        assert reportdb.verify(back).ok
    with reportdb.open(team.report_url(team_url, "second")) as remote:
        for i, array in enumerate(shared):
            np.testing.assert_array_equal(remote.tensor(i + 1), array)
        assert remote.check_store() == []
    assert {r.name for r in team.list_reports(team_url)} == {"first", "second"}
    assert len(team.history(team_url, "ttnn.op1")) == 2
    checked = team.verify(team_url)
    assert checked.ok and checked.reports == 2 and checked.chunks == len(_objects(s3_server, s3_url))
    assert checked.chunks_in == s3_url + "/"


def test_the_store_keeps_one_location(team_url: str, s3_url: str, pg_server: PgServer, tmp_path: Path) -> None:
    report = make_report(tmp_path / "r", seed=3)
    team.push(report, team_url, name="r", chunks=s3_url)
    with pytest.raises(InvalidArgumentError, match="leave --chunks out"):
        team.push(report, team_url, name="r2", chunks=s3_url + "-elsewhere")
    assert team.push(report, team_url, name="r3", chunks=s3_url + "/").chunks_uploaded == 0  # the same, written otherwise
    in_pg = pg_server.create_database()  # a store keeping its chunks in PostgreSQL cannot move them
    team.push(report, in_pg, name="r")
    with pytest.raises(InvalidArgumentError, match="keeps its chunks in PostgreSQL"):
        team.push(report, in_pg, name="r2", chunks=s3_url)
    assert store_count(in_pg, "SELECT value::int FROM team_meta WHERE key = 'schema_version'") == 1
    assert store_count(team_url, "SELECT value::int FROM team_meta WHERE key = 'schema_version'") == 2
    for bad in ("s3://", "s3://B/x", "http://bucket/x", "s3://bucket/a//x"):
        with pytest.raises(InvalidArgumentError, match="chunks location"):
            team.push(report, pg_server.create_database(), name="bad", chunks=bad)


@pytest.mark.parametrize("damage", ["tampered", "truncated", "missing"])
def test_a_damaged_object_fails_the_pull_and_verify_names_the_report(
    team_url: str, s3_url: str, s3_server: S3Server, tmp_path: Path, damage: str
) -> None:
    shared = shared_arrays(1)
    hit = make_report(tmp_path / "hit", seed=5, shared=shared)
    spared = make_report(tmp_path / "spared", seed=6, shared=shared)
    team.push(hit, team_url, name="hit", chunks=s3_url)
    team.push(spared, team_url, name="spared")
    own = sorted(_names(hit / "db.sqlite") - _names(spared / "db.sqlite"))
    bucket, prefix = _bucket(s3_url)
    client = s3_server.client()
    victim = prefix + own[0]
    data = client.get_object(Bucket=bucket, Key=victim)["Body"].read()
    if damage == "tampered":  # same size, one byte flipped
        client.put_object(Bucket=bucket, Key=victim, Body=data[:100] + bytes([data[100] ^ 1]) + data[101:])
    elif damage == "truncated":
        client.put_object(Bucket=bucket, Key=victim, Body=data[:-1])
    else:
        client.delete_object(Bucket=bucket, Key=victim)

    expected = MissingObjectError if damage == "missing" else CorruptionError
    words = {"tampered": "crc32", "truncated": "bytes, not the", "missing": "missing from the bucket"}[damage]
    out = tmp_path / "out"
    with pytest.raises(expected, match=words):
        team.pull(team_url, "hit", out)
    assert not out.exists()  # nothing left at the output
    with reportdb.open(team.report_url(team_url, "hit")) as remote, pytest.raises(expected):
        for tensor_id in (100, 101):
            remote.tensor(tensor_id)
    assert dump(Path(team.pull(team_url, "spared", tmp_path / "spared-back").path)) == dump(spared / "db.sqlite")

    checked = team.verify(team_url)
    assert not checked.ok and [d.name for d in checked.damaged] == ["hit"]
    (report,) = checked.damaged
    assert (report.missing, report.changed) == ((1, 0) if damage == "missing" else (0, 1))
    assert team.verify(team.report_url(team_url, "spared")).ok

    team.push(hit, team_url, name="hit again")  # its row still names the object: pushing again uploads nothing
    assert [d.name for d in team.verify(team_url, repair=True).damaged] == ["hit", "hit again"]
    assert team.push(hit, team_url, name="hit restored").chunks_uploaded == 1  # the row forgotten: uploaded anew
    assert team.verify(team_url).ok
    assert dump(Path(team.pull(team_url, "hit", out).path)) == dump(hit / "db.sqlite")


def test_delete_takes_the_objects_only_it_used(team_url: str, s3_url: str, s3_server: S3Server, tmp_path: Path) -> None:
    shared = shared_arrays(2)
    first = make_report(tmp_path / "first", seed=7, shared=shared)
    second = make_report(tmp_path / "second", seed=8, shared=shared)
    team.push(first, team_url, name="first", chunks=s3_url)
    team.push(second, team_url, name="second")
    gone = team.delete(team_url, "first")
    only_first = _names(first / "db.sqlite") - _names(second / "db.sqlite")
    assert gone.chunks_collected == len(only_first)
    assert set(_objects(s3_server, s3_url)) == _names(second / "db.sqlite")
    assert store_count(team_url, "SELECT COUNT(*) FROM team_object") == len(_names(second / "db.sqlite"))
    team.delete(team_url, "second")
    assert _objects(s3_server, s3_url) == {} and store_count(team_url, "SELECT COUNT(*) FROM team_object") == 0


def test_collect_takes_objects_nothing_names_after_the_grace(team_url: str, s3_url: str, s3_server: S3Server,
                                                             tmp_path: Path) -> None:
    report = make_report(tmp_path / "r", seed=9)
    team.push(report, team_url, name="r", chunks=s3_url)
    bucket, prefix = _bucket(s3_url)
    client = s3_server.client()
    orphan = objects.key_name(b"\x01" * 32, "", 0)  # as a push killed between its upload and its commit leaves
    client.put_object(Bucket=bucket, Key=prefix + orphan, Body=b"x" * 10)
    client.put_object(Bucket=bucket, Key=prefix + "notes.txt", Body=b"not ours")  # no chunk's name: never touched
    assert team.collect(team_url).objects == 0  # within the grace period
    assert team.collect(team_url, grace=0).objects == 1
    left = _objects(s3_server, s3_url)
    assert orphan not in left and "notes.txt" in left and set(left) - {"notes.txt"} == _names(report / "db.sqlite")
    assert team.verify(team_url).ok
    with pytest.raises(InvalidArgumentError, match="grace"):
        team.collect(team_url, grace=-1)


def test_unreachable_or_refusing_object_storage_is_a_clear_error(team_url: str, s3_url: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    report = make_report(tmp_path / "r", seed=10)
    with pytest.raises(ObjectStoreError, match="check that the bucket exists"):
        team.push(report, team_url, name="r", chunks="s3://no-such-bucket-here/x")
    assert team.list_reports(team_url) == []
    team.push(report, team_url, name="r2", chunks=s3_url)  # the store did not take the bucket that was not there
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    fresh = make_report(tmp_path / "fresh", seed=11)
    with pytest.raises(ObjectStoreError, match="AWS_ENDPOINT_URL"):
        team.push(fresh, team_url, name="fresh")
    with pytest.raises(ObjectStoreError, match="AWS_ENDPOINT_URL"):
        team.pull(team_url, "r2", tmp_path / "out")
    assert [r.name for r in team.list_reports(team_url)] == ["r2"] and not (tmp_path / "out").exists()


def _cli(*args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "reportdb", *args], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, REPORTDB_DEBUG=""))
    assert result.returncode == code, result.stderr
    return result


def test_the_commands_with_object_storage(team_url: str, s3_url: str, s3_server: S3Server, tmp_path: Path) -> None:
    """``push --chunks`` once, then every command without a flag; ``verify URL`` names a damaged report (exit 1),
    ``gc`` collects what nothing names; the credentials and endpoint reach the CLI through the AWS_* variables."""
    folder = make_report(tmp_path / "run1", seed=12)
    pushed = json.loads(_cli("push", str(folder), team_url, "--chunks", s3_url, "-j", "3", "--json").stdout)
    assert pushed["created"] and pushed["chunks_uploaded"] == len(chunk_keys(folder / "db.sqlite"))
    assert "nothing sent" in _cli("push", str(folder), team_url).stdout
    _cli("pull", team_url, "run1", "-o", str(tmp_path / "back"))
    assert dump(tmp_path / "back" / "db.sqlite") == dump(folder / "db.sqlite")
    checked = json.loads(_cli("verify", team_url, "--json").stdout)
    assert checked["ok"] and checked["reports"] == 1 and checked["chunks_in"] == s3_url + "/"

    bucket, prefix = _bucket(s3_url)
    s3_server.client().delete_object(Bucket=bucket, Key=prefix + sorted(_names(folder / "db.sqlite"))[0])
    damaged = _cli("verify", team_url, code=1)
    assert "damaged: 'run1': 1 chunks missing" in damaged.stderr
    failed = _cli("pull", team_url, "run1", "-o", str(tmp_path / "again"), code=1)
    assert len(failed.stderr.strip().splitlines()) == 1 and "missing from the bucket" in failed.stderr
    assert not (tmp_path / "again").exists()
    assert "push those reports again" in _cli("verify", team_url, "--repair", code=1).stderr
    _cli("push", str(folder), team_url, "--name", "run1-again")
    assert _cli("verify", team_url).returncode == 0

    _cli("delete", team_url, "run1")
    s3_server.client().put_object(Bucket=bucket, Key=prefix + objects.key_name(b"\x02" * 32, "", 0), Body=b"orphan")
    swept = json.loads(_cli("gc", team_url, "--grace-hours", "0", "--json").stdout)
    assert swept["objects"] == 1
    assert set(_objects(s3_server, s3_url)) == _names(folder / "db.sqlite")


def test_sigkill_mid_push_leaves_the_store_consistent_and_a_rerun_completes(
    team_url: str, s3_url: str, s3_server: S3Server, tmp_path: Path
) -> None:
    team.push(make_report(tmp_path / "first", seed=13, own=1), team_url, name="first", chunks=s3_url)
    report = make_report(tmp_path / "big", seed=14, own=8)
    killed = start_pusher(tmp_path, report, team_url, "big", batch=256 << 10, mode="kill")
    killed.communicate(timeout=120)
    assert killed.returncode == -signal.SIGKILL
    assert [r.name for r in team.list_reports(team_url)] == ["first"]
    rows = store_count(team_url, "SELECT COUNT(*) FROM team_object")
    assert rows <= len(_objects(s3_server, s3_url))  # every row names an object (objects first, rows after)
    assert team.verify(team_url).ok
    total = len(chunk_keys(report / "db.sqlite"))
    rerun = team.push(report, team_url, name="big")
    assert rerun.created and 0 < rerun.chunks_uploaded < total  # the committed batch is not sent again
    assert dump(Path(team.pull(team_url, "big", tmp_path / "back").path)) == dump(report / "db.sqlite")
    assert team.verify(team_url).ok


@pytest.mark.slow
def test_a_push_killed_at_any_moment_leaves_the_store_consistent(
    team_url: str, s3_url: str, s3_server: S3Server, tmp_path: Path
) -> None:
    """SIGKILL at moments spread over a push of a fresh report (importing, uploading, between an upload and its
    commit, publishing), each report its own: after each kill no row names an absent or changed object and no
    half-pushed report is listed; a rerun of each then completes and the report comes back whole."""
    import time

    team.push(make_report(tmp_path / "first", seed=15, own=1), team_url, name="first", chunks=s3_url)
    reports = {}
    for i, delay in enumerate((0.3, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.2)):
        reports[f"r{i}"] = report = make_report(tmp_path / f"r{i}", seed=30 + i, own=8)
        pusher = start_pusher(tmp_path, report, team_url, f"r{i}", batch=64 << 10)
        time.sleep(delay)
        pusher.kill()
        pusher.communicate(timeout=120)
        assert {r.name for r in team.list_reports(team_url)} <= {"first", *reports}
        assert store_count(team_url, "SELECT COUNT(*) FROM team_object") <= len(_objects(s3_server, s3_url))
        assert team.verify(team_url).ok, delay
    for name, report in reports.items():
        team.push(report, team_url, name=name)
        assert dump(Path(team.pull(team_url, name, tmp_path / "back" / name).path)) == dump(report / "db.sqlite")
    assert team.verify(team_url).ok


def test_gc_racing_pushes_never_deletes_an_object_a_push_needs(
    team_url: str, s3_url: str, s3_server: S3Server, tmp_path: Path
) -> None:
    """Deletes of reports (each collecting the objects no reference names) and garbage collection of unnamed
    objects, run over and over while pushes of reports sharing those objects upload and publish: every report
    published comes back whole, and the bucket ends holding exactly the objects the remaining reports name."""
    shared = shared_arrays(4, shape=(128, 128))
    base = make_report(tmp_path / "base", seed=20, shared=shared, own=1)
    team.push(base, team_url, name="base-0", chunks=s3_url)
    pushers = [make_report(tmp_path / f"p{i}", seed=21 + i, shared=shared[i % 2:], own=3) for i in range(3)]
    procs = [start_pusher(tmp_path, r, team_url, r.name, batch=96 << 10, mode="slow", pause=0.2) for r in pushers]
    rounds = 0
    try:
        while any(p.poll() is None for p in procs) or rounds < 3:
            rounds += 1  # base's objects, shared with the pushes, lose their last published reference, then return
            team.delete(team_url, f"base-{rounds - 1}")
            team.collect(team_url, grace=0)
            team.push(base, team_url, name=f"base-{rounds}")
    finally:
        outputs = [p.communicate(timeout=180) for p in procs]
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0 and '"created": true' in out, err
    assert rounds >= 3
    assert team.verify(team_url).ok
    team.delete(team_url, f"base-{rounds}")
    team.collect(team_url, grace=0)
    for r in pushers:
        back = Path(team.pull(team_url, r.name, tmp_path / "back" / r.name).path)
        assert dump(back) == dump(r / "db.sqlite")
    assert team.verify(team_url).ok
    assert set(_objects(s3_server, s3_url)) == set().union(*(_names(r / "db.sqlite") for r in pushers))


def test_a_killed_push_left_for_a_day_is_collected_with_its_objects(team_url: str, s3_url: str, s3_server: S3Server,
                                                                    tmp_path: Path) -> None:
    import psycopg

    shared = shared_arrays(1)
    old = make_report(tmp_path / "old", seed=30, shared=shared)
    keeper = make_report(tmp_path / "keeper", seed=31, shared=shared)
    team.push(old, team_url, name="old", chunks=s3_url)
    with psycopg.connect(team_url) as conn:  # what a push killed 25 hours ago leaves: a staging row, its objects
        conn.execute("UPDATE team_report SET state = 'staging', pushed_at = now() - interval '25 hours'")
    assert team.push(keeper, team_url, name="keeper").stale_collected == 1
    assert set(_objects(s3_server, s3_url)) == _names(keeper / "db.sqlite")  # the old one's own objects are gone
    assert dump(Path(team.pull(team_url, "keeper", tmp_path / "back").path)) == dump(keeper / "db.sqlite")


def test_the_file_is_synced_beside_the_writing_and_a_failed_sync_fails_the_pull(
    team_url: str, s3_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pull syncs its file as it grows on a thread beside the one writing it: every sync is waited for before the
    file is used, and one that fails fails the pull with nothing left at the output."""
    pull_mod = importlib.import_module("reportdb.team.pull")
    report = make_report(tmp_path / "r", seed=9)
    team.push(report, team_url, name="r", chunks=s3_url)
    monkeypatch.setattr(pull_mod, "SYNC_BYTES", 1)  # a sync after every chunk whose sync before it is done
    synced: list[int] = []
    real = os.fdatasync

    def counted(fd: int) -> None:
        real(fd)
        synced.append(fd)

    monkeypatch.setattr(os, "fdatasync", counted)
    back = team.pull(team_url, "r", tmp_path / "back")
    assert synced and dump(Path(back.path)) == dump(report / "db.sqlite")

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing)
    out = tmp_path / "out"
    with pytest.raises(OSError, match="Input/output error"):
        team.pull(team_url, "r", out)
    assert not out.exists() and {p.name for p in tmp_path.iterdir()} == {"r", "back"}


def test_a_stored_size_out_of_bounds_is_refused_before_any_fetch(team_url: str, s3_url: str, tmp_path: Path) -> None:
    """The store's rows are someone else's data too: an object size its chunk's row does not allow is refused
    before it sizes a read (a row saying 1 TiB must not make a pull wait for, or allocate, a terabyte)."""
    import psycopg

    report = make_report(tmp_path / "r", seed=32)
    team.push(report, team_url, name="r", chunks=s3_url)
    with psycopg.connect(team_url) as conn:
        conn.execute("UPDATE team_object SET stored = %s WHERE ctid = (SELECT min(ctid) FROM team_object)", (1 << 40,))
    with pytest.raises(CorruptionError, match="holds 1099511627776 bytes"):
        team.pull(team_url, "r", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    damaged = team.verify(team_url)
    assert [d.name for d in damaged.damaged] == ["r"] and "does not fit" in damaged.damaged[0].first


def test_verify_of_a_store_keeping_chunks_in_postgresql(team_url: str, tmp_path: Path) -> None:
    import psycopg

    shared = shared_arrays(1)
    hit = make_report(tmp_path / "hit", seed=33, shared=shared)
    spared = make_report(tmp_path / "spared", seed=34, shared=shared)
    team.push(hit, team_url, name="hit")
    team.push(spared, team_url, name="spared")
    clean = team.verify(team_url)
    assert clean.ok and clean.chunks_in == "postgresql" and clean.chunks == len(
        chunk_keys(hit / "db.sqlite") | chunk_keys(spared / "db.sqlite"))
    digest, codec, crc32 = sorted(chunk_keys(hit / "db.sqlite") - chunk_keys(spared / "db.sqlite"))[0]
    with psycopg.connect(team_url) as conn:  # one byte of a chunk only "hit" uses, changed in the store
        conn.execute("UPDATE team_chunk SET data = set_byte(data, 7, get_byte(data, 7) # 1) WHERE digest = %s"
                     " AND codec = %s AND crc32 = %s", (digest, codec, crc32))
    damaged = team.verify(team_url)
    assert [(d.name, d.missing, d.changed) for d in damaged.damaged] == [("hit", 0, 1)]
    assert "crc32" in damaged.damaged[0].first
    assert team.verify(team.report_url(team_url, "spared")).ok
    team.verify(team_url, repair=True)
    assert team.push(hit, team_url, name="hit again").chunks_uploaded == 1  # forgotten, so uploaded anew
    assert team.verify(team_url).ok


MEASURED = r'''
import json, os, sys, threading, time
from reportdb import team
highest = [0]
def anon():  # this process's anonymous memory: the report file's pages SQLite maps (page cache) are not counted
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) << 10 for line in status if line.startswith("RssAnon:"))
def sample():
    while True:
        highest[0] = max(highest[0], anon())
        time.sleep(0.002)
threading.Thread(target=sample, daemon=True).start()
time.sleep(0.05)
base = highest[0]
team.push(sys.argv[1], os.environ["STORE_URL"], name="big", jobs=2, chunks=os.environ["CHUNKS"])
pushed, highest[0] = highest[0], 0
team.pull(os.environ["STORE_URL"], "big", sys.argv[2])
print(json.dumps({"base": base, "push": pushed, "pull": highest[0]}))
'''


@pytest.mark.slow
def test_push_and_pull_memory_does_not_follow_the_report_size(team_url: str, s3_url: str, tmp_path: Path) -> None:
    """A 768 MiB report goes through object storage in a child process whose anonymous memory grows by a bound set
    by what is in flight, not by the report: a push holds jobs x PUTS_PER_JOB chunks (8 of 4 MiB here), a pull
    FETCH_AHEAD (16) and its writer's queue (8), each with the client's buffers (about 80 and 200 MiB measured, the
    same at half the size)."""
    folder = tmp_path / "big"
    folder.mkdir()
    rng = np.random.default_rng(40)
    with reportdb.open(folder, "a") as report:
        for i in range(12):
            report.put_tensor(i, rng.standard_normal(16 << 20).astype(np.float32), stats=False)
    script = tmp_path / "measured.py"
    script.write_text(MEASURED)
    out = subprocess.run([sys.executable, str(script), str(folder), str(tmp_path / "back")], capture_output=True,
                         text=True, timeout=600, env=dict(os.environ, STORE_URL=team_url, CHUNKS=s3_url))
    assert out.returncode == 0, out.stderr
    peaks = json.loads(out.stdout)
    assert peaks["push"] - peaks["base"] < 160 << 20 and peaks["pull"] - peaks["base"] < 320 << 20, peaks
    assert dump(tmp_path / "back" / "db.sqlite") == dump(folder / "db.sqlite")


def test_credentials_region_and_endpoint_from_an_aws_config_profile(
    team_url: str, s3_url: str, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No AWS_* credentials or endpoint in the environment: a profile of an ``~/.aws/config``-style file gives them
    (``AWS_CONFIG_FILE``, ``AWS_PROFILE``), as botocore reads it for any S3 service."""
    config = tmp_path / "aws-config"
    config.write_text(f"[profile lab]\nregion = us-east-1\nendpoint_url = {s3_server.endpoint}\n"
                      "aws_access_key_id = test\naws_secret_access_key = test\n")
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_PROFILE", "lab")
    folder = make_report(tmp_path / "r", seed=41)
    _cli("push", str(folder), team_url, "--chunks", s3_url)
    _cli("pull", team_url, "r", "-o", str(tmp_path / "back"))
    assert dump(tmp_path / "back" / "db.sqlite") == dump(folder / "db.sqlite")
    assert set(_objects(s3_server, s3_url)) == _names(folder / "db.sqlite")
