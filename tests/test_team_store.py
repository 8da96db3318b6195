"""The team store on a real PostgreSQL server: push/pull round trips of every real fixture report, idempotence and
deduplication, garbage collection, hostile names and URLs, a server that goes away mid-push."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from conftest import fixture_roots
from pg_server import chunk_keys, dump, make_report, shared_arrays, start_server, store_count
import reportdb
from reportdb import team
from reportdb.errors import InvalidArgumentError, ReportNotFoundError, OutputPathError

pytestmark = [pytest.mark.process, pytest.mark.service]

MIGRATED = ["ttnn-0.62.2-bin", "ttnn-0.64.5-report-tensorbin"]


def _fixture_reports() -> list[tuple[str, Path]]:
    """Every real report of the fixture roots: legacy folders (migrated in the test) and report databases of every
    schema (pushed as they are)."""
    found = []
    for root in fixture_roots():
        for name in MIGRATED:
            if (root / name / "report" / "db.sqlite").is_file():
                found.append((f"{root.parent.name}/{name}", root / name / "report"))
        for db in sorted((root / "report-schemas").glob("*.sqlite")):
            found.append((f"{root.parent.name}/{db.name}", db))
    return found


FIXTURE_REPORTS = _fixture_reports()


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The fixture reports as report databases: legacy folders migrated (one of them also zstd-compressed), report
    databases copied."""
    out = {}
    base = tmp_path_factory.mktemp("team-fixtures")
    for i, (key, src) in enumerate(FIXTURE_REPORTS):
        if src.is_dir():
            dst = base / f"r{i}"
            reportdb.migrate(src, dst)
            out[key] = dst / "db.sqlite"
            if key.endswith(MIGRATED[0]) and "zstd" not in out:
                reportdb.migrate(src, base / "zstd", compression="zstd")
                out["zstd"] = base / "zstd" / "db.sqlite"
        else:
            (base / f"r{i}").mkdir()
            out[key] = base / f"r{i}" / "db.sqlite"
            shutil.copyfile(src, out[key])
    return out


def _tensors(db: Path) -> dict[tuple[int, int], list[np.ndarray]]:
    with reportdb.open(db) as report:
        return {key: [a for _, a in report.shards(*key)] for key in report.tensor_keys()}


@pytest.mark.parametrize("key", [k for k, _ in FIXTURE_REPORTS] + ["zstd"])
def test_round_trip_of_every_fixture_report(migrated: dict[str, Path], team_url: str, tmp_path: Path, key: str) -> None:
    if key not in migrated:
        pytest.skip("no zstd-compressed fixture made")
    src = migrated[key]
    pushed = team.push(src, team_url, name=key)
    assert pushed.created and pushed.chunks_uploaded == pushed.chunks
    result = team.pull(team_url, key, tmp_path / "back")
    back = Path(result.path)
    assert dump(back) == dump(src)  # every table, index, row, rowid and storage class, chunk bytes included
    assert _tensors(back).keys() == _tensors(src).keys()
    for k, shards in _tensors(src).items():
        for a, b in zip(shards, _tensors(back)[k]):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    verified = reportdb.verify(back)
    assert verified.ok, verified.problems
    with reportdb.open(back) as report:
        assert report.check_store() == []


def test_push_is_idempotent_and_chunks_are_shared(team_url: str, tmp_path: Path) -> None:
    shared = shared_arrays(3)
    a = make_report(tmp_path / "a", seed=1, shared=shared)
    b = make_report(tmp_path / "b", seed=2, shared=shared)
    first = team.push(a, team_url)
    assert first.created and first.name == "a" and first.chunks_uploaded == first.chunks > 0
    again = team.push(a, team_url)
    assert not again.created and again.chunks_uploaded == 0 and again.digest == first.digest
    n_chunks = store_count(team_url, "SELECT COUNT(*) FROM team_chunk")
    assert n_chunks == len(chunk_keys(a / "db.sqlite"))
    other = team.push(b, team_url)  # shares three tensors: only its own chunks travel
    assert other.created
    own = chunk_keys(b / "db.sqlite") - chunk_keys(a / "db.sqlite")
    assert other.chunks_uploaded == len(own) < other.chunks
    assert store_count(team_url, "SELECT COUNT(*) FROM team_chunk") == n_chunks + len(own)
    copy = team.push(a, team_url, name="a-again")  # the same content under another name: no chunk stored again
    assert copy.created and copy.chunks_uploaded == 0
    assert sorted(r.name for r in team.list_reports(team_url)) == ["a", "a-again", "b"]


def test_a_different_report_under_a_taken_name_is_refused(team_url: str, tmp_path: Path) -> None:
    team.push(make_report(tmp_path / "x", seed=1), team_url, name="nightly")
    with pytest.raises(reportdb.errors.ReportExistsError, match="different report is stored under this name"):
        team.push(make_report(tmp_path / "y", seed=2), team_url, name="nightly")


def test_delete_collects_only_unshared_chunks(team_url: str, tmp_path: Path) -> None:
    shared = shared_arrays(2)
    a = make_report(tmp_path / "a", seed=1, shared=shared)
    b = make_report(tmp_path / "b", seed=2, shared=shared)
    team.push(a, team_url)
    team.push(b, team_url)
    only_a = chunk_keys(a / "db.sqlite") - chunk_keys(b / "db.sqlite")
    before = store_count(team_url, "SELECT COUNT(*) FROM team_chunk")
    gone = team.delete(team_url, "a")
    assert gone.chunks_collected == len(only_a) > 0
    assert store_count(team_url, "SELECT COUNT(*) FROM team_chunk") == before - len(only_a)
    assert [r.name for r in team.list_reports(team_url)] == ["b"]
    back = Path(team.pull(team_url, "b", tmp_path / "b-back").path)
    assert dump(back) == dump(b / "db.sqlite")
    assert reportdb.verify(back).ok
    with pytest.raises(ReportNotFoundError):
        team.delete(team_url, "a")
    with pytest.raises(ReportNotFoundError):
        team.pull(team_url, "a", tmp_path / "a-back")
    assert not (tmp_path / "a-back").exists()


def test_listing_filters_and_history(team_url: str, tmp_path: Path) -> None:
    for i in range(3):
        team.push(make_report(tmp_path / f"run{i}", seed=i, own=4), team_url, name=f"nightly-{i}",
                  tags=["nightly"] if i else ["manual"])
    listed = team.list_reports(team_url)
    assert [r.name for r in listed] == ["nightly-2", "nightly-1", "nightly-0"]  # newest first
    assert listed[0].n_operations == 3 and listed[0].n_tensors == 4 and listed[0].logical_bytes == 4 * 128 * 256 * 4
    assert [r.name for r in team.list_reports(team_url, tag="nightly")] == ["nightly-2", "nightly-1"]
    assert [r.name for r in team.list_reports(team_url, name="ly-1")] == ["nightly-1"]
    assert team.list_reports(team_url, since="2999-01-01") == []
    with pytest.raises(InvalidArgumentError, match="since"):
        team.list_reports(team_url, since="yesterday")
    runs = team.history(team_url, "ttnn.op2")
    assert [(h.report, h.tensor_id, h.kind) for h in runs] == [(f"nightly-{i}", 102, "local") for i in range(3)]
    assert [h.actual_pcc for h in runs] == pytest.approx([0.999 - i * 1e-4 for i in range(3)])
    assert [h.report for h in team.history(team_url, "ttnn.op2", limit=2)] == ["nightly-1", "nightly-2"]
    assert team.history(team_url, "ttnn.nothing") == []


def test_hostile_report_and_table_names(team_url: str, tmp_path: Path) -> None:
    folder = make_report(tmp_path / "r", seed=3)
    weird_table = 'we"ird\'; DROP TABLE team_chunk; --'
    with sqlite3.connect(folder / "db.sqlite") as conn:
        conn.execute(f'CREATE TABLE "{weird_table.replace(chr(34), 2 * chr(34))}" ("co""l" TEXT, [b c] INTEGER, d)')
        conn.execute(f'INSERT INTO "{weird_table.replace(chr(34), 2 * chr(34))}" VALUES (?, ?, ?)', ("x'\"", 7, b"\0\1"))
        conn.execute("INSERT INTO operations (operation_id, name) VALUES (99, ?)", ("'); DELETE FROM team_report; --",))
    name = "x'); DROP TABLE team_report; --\"q/ü"
    assert team.push(folder, team_url, name=name).created
    assert [r.name for r in team.list_reports(team_url)] == [name]
    back = Path(team.pull(team_url, name, tmp_path / "back").path)
    assert dump(back) == dump(folder / "db.sqlite")
    with reportdb.open(team.report_url(team_url, name)) as remote:
        assert remote.tensor_ids() == [100, 101]
    assert team.history(team_url, "'); DELETE FROM team_report; --") == []
    team.delete(team_url, name)
    assert team.list_reports(team_url) == []
    for bad in ("", "a\nb", "x" * 201):
        with pytest.raises(InvalidArgumentError, match="report name"):
            team.push(folder, team_url, name=bad)


def test_urls_without_a_database_or_a_server(tmp_path: Path, team_url: str) -> None:
    folder = make_report(tmp_path / "r", seed=1, own=1)
    for url in ("postgresql://localhost", "postgresql://localhost/", "postgres://user:secret@localhost"):
        with pytest.raises(InvalidArgumentError, match="names no database") as info:
            team.push(folder, url)
        assert "secret" not in str(info.value)
    with pytest.raises(InvalidArgumentError, match="not a PostgreSQL URL"):
        team.list_reports("mysql://localhost/db")
    with pytest.raises(reportdb.errors.TeamStoreError, match="cannot connect to the team store") as refused:
        team.list_reports(f"postgresql://u:secret@/db?host={tmp_path}")  # no server listens there
    assert "secret" not in str(refused.value)
    with pytest.raises(ReportNotFoundError):
        reportdb.open(team.report_url(team_url, "nothing"))
    with pytest.raises(InvalidArgumentError, match="read only"):
        reportdb.open(team.report_url(team_url, "nothing"), "a")


def test_pull_never_overwrites(team_url: str, tmp_path: Path) -> None:
    folder = make_report(tmp_path / "r", seed=1, own=1)
    team.push(folder, team_url)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "db.sqlite").write_bytes(b"mine")
    with pytest.raises(OutputPathError, match="already exists"):
        team.pull(team_url, "r", tmp_path / "taken")
    assert (tmp_path / "taken" / "db.sqlite").read_bytes() == b"mine"
    assert sorted(p.name for p in (tmp_path / "taken").iterdir()) == ["db.sqlite"]


def test_server_gone_mid_push_leaves_nothing_visible(tmp_path: Path) -> None:
    """The server is stopped (immediate mode: connections cut) after the first batch: a clear error; once it is
    back, nothing of the push is visible, and a rerun completes."""
    import importlib

    push_mod = importlib.import_module("reportdb.team.push")
    server = start_server()
    try:
        url = server.create_database()
        folder = make_report(tmp_path / "r", seed=5, own=6)
        old = push_mod.BATCH_BYTES
        push_mod.BATCH_BYTES = 64 << 10

        def stop_server(done: int, total: int) -> None:
            if done:
                server.stop("immediate")

        try:
            with pytest.raises(reportdb.errors.TeamStoreError, match="went away") as info:
                team.push(folder, url, progress=stop_server)
        finally:
            push_mod.BATCH_BYTES = old
        assert "nothing partial is visible" in str(info.value)
        server.start()
        assert team.list_reports(url) == []
        with pytest.raises(ReportNotFoundError):
            team.pull(url, "r", tmp_path / "back")
        rerun = team.push(folder, url)
        # chunks confirmed before the server went are not sent again; uploads in flight may have sent them all by
        # then (the stop comes from the first batch's progress call), so the rerun may upload none
        assert rerun.created and 0 <= rerun.chunks_uploaded < rerun.chunks
        assert dump(Path(team.pull(url, "r", tmp_path / "back").path)) == dump(folder / "db.sqlite")
    finally:
        server.close()


def test_store_schema_also_creates_on_sqlite(tmp_path: Path) -> None:
    """The store's tables are one SQLAlchemy definition; it compiles and creates on SQLite too."""
    from sqlalchemy import create_engine, inspect

    from reportdb.team import schema

    engine = create_engine(f"sqlite:///{tmp_path / 'store.sqlite'}")
    schema.metadata.create_all(engine)
    assert set(inspect(engine).get_table_names()) == {t.name for t in schema.metadata.sorted_tables}
    engine.dispose()


def test_a_chunk_that_lies_about_its_address_is_never_shared(team_url: str, tmp_path: Path) -> None:
    """A report whose chunk bytes do not hash to their address (crc32 made to match) is refused before those bytes
    reach the shared store, where other reports with that address would read them."""
    import zlib

    from reportdb.errors import CorruptionError

    folder = make_report(tmp_path / "liar", seed=9, own=1)
    with sqlite3.connect(folder / "db.sqlite") as conn:
        chunk_id, data = conn.execute("SELECT id, data FROM rdb_chunk ORDER BY id LIMIT 1").fetchone()
        forged = bytes(len(data))
        conn.execute("UPDATE rdb_chunk SET data = ?, crc32 = ? WHERE id = ?", (forged, zlib.crc32(forged), chunk_id))
    with pytest.raises(CorruptionError, match="blake3 address"):
        team.push(folder, team_url)
    assert team.list_reports(team_url) == []
    assert store_count(team_url, "SELECT COUNT(*) FROM team_chunk WHERE data = decode(repeat('00', 32768), 'hex')") == 0


def test_views_and_triggers_are_left_out_and_named(team_url: str, tmp_path: Path) -> None:
    """reportdb runs no report-supplied SQL: a report's views and triggers do not travel (the push says so); its
    tables and indexes do, exactly."""
    folder = make_report(tmp_path / "r", seed=4, own=1)
    with sqlite3.connect(folder / "db.sqlite") as conn:
        conn.execute("CREATE VIEW busy AS SELECT * FROM operations")
        conn.execute("CREATE TRIGGER spy AFTER INSERT ON operations BEGIN DELETE FROM tensors; END")
        conn.execute("CREATE INDEX ix_custom ON operations (name)")
    pushed = team.push(folder, team_url)
    assert sorted(pushed.left_out) == ["trigger spy", "view busy"]
    back = Path(team.pull(team_url, "r", tmp_path / "back").path)
    with sqlite3.connect(back) as conn:
        kinds = {name: kind for kind, name in conn.execute("SELECT type, name FROM sqlite_master")}
    assert "busy" not in kinds and "spy" not in kinds and kinds["ix_custom"] == "index"
    original = dump(folder / "db.sqlite")
    original["schema"] = [s for s in original["schema"] if s[1] not in ("busy", "spy")]
    assert dump(back) == original


def test_a_chunk_table_named_in_other_case_travels_as_chunks(team_url: str, tmp_path: Path) -> None:
    """SQLite's names are case-insensitive: ``RDB_CHUNK`` is reportdb's chunk table to every reader, so a push must
    send it as checked chunks into the shared store, not as rows that no chunk check ever sees."""
    src = make_report(tmp_path / "src", seed=3)
    conn = sqlite3.connect(src / "db.sqlite", isolation_level=None)
    conn.execute("ALTER TABLE rdb_chunk RENAME TO renamed_tmp")  # SQLite refuses a rename to the same name
    conn.execute('ALTER TABLE renamed_tmp RENAME TO "RDB_CHUNK"')
    conn.close()
    pushed = team.push(src, team_url, name="upper")
    assert pushed.chunks == len(chunk_keys(src / "db.sqlite")) > 0
    assert store_count(team_url, "SELECT COUNT(*) FROM team_chunk") == pushed.chunks
    back = Path(team.pull(team_url, "upper", tmp_path / "back").path)
    verified = reportdb.verify(back)
    assert verified.ok, verified.problems
    with reportdb.open(src) as a, reportdb.open(back) as b:
        for tensor_id in a.tensor_ids():
            np.testing.assert_array_equal(a.tensor(tensor_id), b.tensor(tensor_id))
