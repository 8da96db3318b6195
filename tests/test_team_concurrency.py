"""The team store under concurrency and crashes, with real processes: 8 pushers of overlapping reports at once, a
push killed with SIGKILL and rerun, a delete while a push that shares its chunks runs, a reader during pushes."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import numpy as np
import pytest

from pg_server import chunk_keys, dump, make_report, shared_arrays, start_pusher, store_count
import reportdb
from reportdb import team
from reportdb.errors import ReportNotFoundError

pytestmark = [pytest.mark.process, pytest.mark.service]

def test_eight_concurrent_pushers_of_overlapping_reports(team_url: str, tmp_path: Path) -> None:
    shared = shared_arrays(4)
    reports = [make_report(tmp_path / f"r{i}", seed=i, shared=shared[: 2 + i % 3], own=2) for i in range(8)]
    procs = [start_pusher(tmp_path, r, team_url, r.name, batch=128 << 10, jobs=1 + i % 2) for i, r in enumerate(reports)]
    outputs = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0 and '"created": true' in out, err
        outputs.append(out)
    assert sorted(r.name for r in team.list_reports(team_url)) == sorted(r.name for r in reports), outputs
    distinct = set().union(*(chunk_keys(r / "db.sqlite") for r in reports))
    assert store_count(team_url, "SELECT COUNT(*) FROM team_chunk") == len(distinct)  # each content stored once
    for r in reports:
        back = Path(team.pull(team_url, r.name, tmp_path / "back" / r.name).path)
        assert dump(back) == dump(r / "db.sqlite")


def test_sigkill_mid_push_leaves_nothing_visible_and_a_rerun_completes(team_url: str, tmp_path: Path) -> None:
    report = make_report(tmp_path / "big", seed=3, own=8)
    killed = start_pusher(tmp_path, report, team_url, "big", batch=256 << 10, mode="kill")
    killed.communicate(timeout=120)
    assert killed.returncode == -signal.SIGKILL
    assert team.list_reports(team_url) == []
    with pytest.raises(ReportNotFoundError):
        reportdb.open(team.report_url(team_url, "big"))
    kept = store_count(team_url, "SELECT COUNT(*) FROM team_chunk")
    total = len(chunk_keys(report / "db.sqlite"))
    assert 0 < kept < total  # the committed batch stayed
    rerun = team.push(report, team_url, name="big")
    assert rerun.created and rerun.chunks_uploaded == total - kept  # only what was still missing
    assert dump(Path(team.pull(team_url, "big", tmp_path / "back").path)) == dump(report / "db.sqlite")


def test_delete_during_a_push_that_shares_chunks_loses_nothing(team_url: str, tmp_path: Path) -> None:
    shared = shared_arrays(4, shape=(256, 256))
    first = make_report(tmp_path / "first", seed=1, shared=shared, own=1)
    second = make_report(tmp_path / "second", seed=2, shared=shared, own=6)
    team.push(first, team_url)
    pusher = start_pusher(tmp_path, second, team_url, "second", batch=96 << 10, mode="slow", pause=0.2)
    assert pusher.stdout is not None
    assert pusher.stdout.readline().strip() == "batch"  # the push has references and a batch committed
    gone = team.delete(team_url, "first")  # meanwhile: its chunks that "second" shares must stay
    out, err = pusher.communicate(timeout=180)
    assert pusher.returncode == 0, err
    only_first = chunk_keys(first / "db.sqlite") - chunk_keys(second / "db.sqlite")
    assert gone.chunks_collected == len(only_first)
    back = Path(team.pull(team_url, "second", tmp_path / "back").path)
    assert dump(back) == dump(second / "db.sqlite")
    assert reportdb.verify(back).ok
    assert store_count(team_url, "SELECT COUNT(*) FROM team_chunk") == len(chunk_keys(second / "db.sqlite"))


def test_a_reader_during_pushes(team_url: str, tmp_path: Path) -> None:
    shared = shared_arrays(3)
    base = make_report(tmp_path / "base", seed=0, shared=shared)
    team.push(base, team_url)
    others = [make_report(tmp_path / f"o{i}", seed=10 + i, shared=shared, own=3) for i in range(3)]
    procs = [start_pusher(tmp_path, r, team_url, r.name, batch=64 << 10) for r in others]
    errors: list[BaseException] = []
    expected = {t: reportdb.open(base).tensor(t) for t in (1, 2, 3, 100, 101)}

    def read() -> None:
        try:
            while any(p.poll() is None for p in procs):
                with reportdb.open(team.report_url(team_url, "base")) as remote:
                    for t, want in expected.items():
                        np.testing.assert_array_equal(remote.tensor(t), want)
                names = {r.name for r in team.list_reports(team_url)}
                assert "base" in names and names <= {"base", "o0", "o1", "o2"}
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
    reader.join(timeout=60)
    assert not errors, errors
    assert len(team.list_reports(team_url)) == 4


@pytest.mark.parametrize("other_commits", [True, False], ids=["other-commits", "other-rolls-back"])
def test_a_chunk_being_stored_by_another_push_is_waited_for_then_skipped_or_stored(
    team_url: str, tmp_path: Path, other_commits: bool
) -> None:
    """Another push holds one of our chunks inserted but not committed (invisible to our look-up of what is stored):
    our insert of it waits, then skips it once the other commits, or stores it once the other rolls back. Either way
    the store holds it once, nothing deadlocks, and the report comes back exact."""
    import sqlite3

    import psycopg

    team.push(make_report(tmp_path / "first", seed=7, own=1), team_url)  # creates the store's tables
    report = make_report(tmp_path / "r", seed=8, own=2)
    db = report / "db.sqlite"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as src:
        has_codec = any(r[1] == "codec" for r in src.execute("PRAGMA table_info(rdb_chunk)"))
        chunks = src.execute(f"SELECT digest, {'codec' if has_codec else 'NULL'}, crc32, nbytes, data FROM rdb_chunk"
                             ).fetchall()
    digest, codec, crc32, nbytes, data = chunks[len(chunks) // 2]
    before = store_count(team_url, "SELECT COUNT(*) FROM team_chunk")
    with psycopg.connect(team_url) as other:
        other.execute("INSERT INTO team_chunk (digest, codec, crc32, nbytes, data) VALUES (%s, %s, %s, %s, %s)",
                      (digest, codec or "", crc32, nbytes, data))  # its transaction stays open
        results: list[object] = []
        pushing = threading.Thread(target=lambda: results.append(team.push(report, team_url, name="r")))
        pushing.start()
        waited = False
        for _ in range(400):  # until the push's insert waits for the other's transaction (at most ~20 s)
            waited = bool(store_count(team_url, "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                                                " AND datname = current_database()"))
            if waited or not pushing.is_alive():
                break
            pushing.join(timeout=0.05)
        assert waited, results
        if other_commits:
            other.commit()
        else:
            other.rollback()
        pushing.join(timeout=60)
    assert not pushing.is_alive() and len(results) == 1
    pushed = results[0]
    assert isinstance(pushed, team.PushResult) and pushed.created
    assert pushed.chunks_uploaded == len(chunks) - (1 if other_commits else 0)
    assert store_count(team_url, "SELECT COUNT(*) FROM team_chunk") == before + len(chunk_keys(db))
    assert dump(Path(team.pull(team_url, "r", tmp_path / "back").path)) == dump(db)
