"""The leftovers of killed pushes nobody reran: ``reports --all`` shows them, and the next push or delete collects
those untouched for longer than the bound, with the chunks only they used, on a real PostgreSQL server."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from pg_server import chunk_keys, make_report, shared_arrays, store_count
import reportdb
from reportdb import team
from reportdb.errors import ConfigError, InvalidArgumentError

pytestmark = [pytest.mark.process, pytest.mark.service]


def _as_killed(url: str, name: str, hours: float) -> None:
    """Make report ``name`` what a push killed ``hours`` ago leaves: a staging row (with its chunk references and
    the chunks uploaded), last active then."""
    import psycopg  # here, not at import: only PostgreSQL tests need it (collection stays quick)
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE team_report SET state = 'staging', pushed_at = now() - %s WHERE name = %s",
                     (timedelta(hours=hours), name))


def test_stale_staging_rows_are_listed_and_collected_by_the_next_push(team_url: str, tmp_path: Path) -> None:
    shared = shared_arrays(2)
    old = make_report(tmp_path / "old", seed=1, shared=shared)
    recent = make_report(tmp_path / "recent", seed=2, shared=shared)
    keeper = make_report(tmp_path / "keeper", seed=3, shared=shared)
    team.push(old, team_url, name="killed long ago")
    team.push(recent, team_url, name="killed an hour ago")
    _as_killed(team_url, "killed long ago", 25)
    _as_killed(team_url, "killed an hour ago", 1)

    assert [r.name for r in team.list_reports(team_url)] == []  # neither is published
    staged = {r.name: r for r in team.list_reports(team_url, include_staging=True)}
    assert set(staged) == {"killed long ago", "killed an hour ago"} and {r.state for r in staged.values()} == {"staging"}

    pushed = team.push(keeper, team_url, name="keeper")
    assert pushed.stale_collected == 1
    assert {r.name for r in team.list_reports(team_url, include_staging=True)} == {"killed an hour ago", "keeper"}
    # the old one's own chunks are gone, the ones it shared with the others are not
    own = chunk_keys(old / "db.sqlite") - chunk_keys(recent / "db.sqlite") - chunk_keys(keeper / "db.sqlite")
    assert len(own) == 8  # two tensors of its own, 128 KiB each in 32 KiB chunks
    import psycopg
    with psycopg.connect(team_url) as conn:
        stored = {(bytes(d), c, crc) for d, c, crc in conn.execute("SELECT digest, codec, crc32 FROM team_chunk")}
    assert not own & stored and stored == chunk_keys(recent / "db.sqlite") | chunk_keys(keeper / "db.sqlite")
    with reportdb.open(team.report_url(team_url, "keeper")) as remote:
        for i, array in enumerate(shared):
            np.testing.assert_array_equal(remote.tensor(i + 1), array)
    assert reportdb.verify(team.pull(team_url, "keeper", tmp_path / "back").path).ok

    # a shorter bound, given or from the environment, takes the recent one too (on delete as well)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REPORTDB_TEAM_STALE_HOURS", "0.5")
        team.delete(team_url, "keeper")
    assert team.list_reports(team_url, include_staging=True) == []
    assert store_count(team_url, "SELECT COUNT(*) FROM team_chunk") == 0


def test_a_push_under_way_is_not_collected_and_a_rerun_resumes(team_url: str, tmp_path: Path) -> None:
    report = make_report(tmp_path / "r", seed=4)
    team.push(report, team_url, name="resumed")
    _as_killed(team_url, "resumed", 2)  # killed two hours ago: within the default day
    other = make_report(tmp_path / "other", seed=5)
    assert team.push(other, team_url, name="other").stale_collected == 0
    again = team.push(report, team_url, name="resumed")
    assert again.created and again.chunks_uploaded == 0  # resumed: every chunk was already there
    assert {r.name for r in team.list_reports(team_url)} == {"resumed", "other"}


def test_bad_bounds_are_refused(team_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = make_report(tmp_path / "r", seed=6)
    with pytest.raises(InvalidArgumentError, match="above zero"):
        team.push(report, team_url, stale_after=0)
    with pytest.raises(InvalidArgumentError, match="timedelta or a number"):
        team.push(report, team_url, stale_after="1 day")  # type: ignore[arg-type]
    monkeypatch.setenv("REPORTDB_TEAM_STALE_HOURS", "soon")
    with pytest.raises(ConfigError, match="REPORTDB_TEAM_STALE_HOURS"):
        team.push(report, team_url)
    assert store_count(team_url, "SELECT COUNT(*) FROM pg_tables WHERE tablename = 'team_report'") == 0
