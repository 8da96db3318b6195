"""Open-time schema decisions: new, legacy of every age, older reportdb, current, newer (refused)."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import select

import reportdb
from reportdb import models
from reportdb.errors import ReportDBError, ReportNotFoundError, SchemaError, SchemaTooNewError
from reportdb.store import schema
from reportdb.store.engine import connect, engine_for

from conftest import FIXTURES

LEGACY_DBS = {
    "visualizer-2024-09": FIXTURES / "report-schemas" / "visualizer_empty_2024-09.sqlite",
    "graph-report-3.5": FIXTURES / "report-schemas" / "ttnn_0.81.1_schema_3.5.sqlite",
    "ttnn-0.62.2-report": FIXTURES / "ttnn-0.62.2-bin" / "report" / "db.sqlite",
    "ttnn-0.64.5-report": FIXTURES / "ttnn-0.64.5-report-tensorbin" / "report" / "db.sqlite",
}


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _rows(path: Path, columns: dict[str, list[str]] | None = None) -> dict[str, tuple[list[str], list[tuple]]]:
    """Every table's rows (sorted), restricted to ``columns`` when given."""
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    out = {}
    for t in tables if columns is None else columns:
        cols = [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')] if columns is None else columns[t]
        quoted = ", ".join(f'"{c}"' for c in cols)
        out[t] = (cols, sorted(con.execute(f'SELECT {quoted} FROM "{t}"'), key=repr))
    con.close()
    return out


def test_new_file_gets_current_schema_wal_while_open_and_64k_pages(tmp_path: Path) -> None:
    """64 KiB pages while written; a small finished file gets 4 KiB pages (a page per table and index would make it
    megabytes), and 64 KiB pages again when it is written to once more."""
    path = tmp_path / "new.sqlite"
    with reportdb.open(path, "a") as report:
        assert report.schema_revision == schema.head_revision()
        con = sqlite3.connect(path)
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # while it is written
        assert con.execute("PRAGMA page_size").fetchone()[0] == 65536
        con.close()
        report.put_tensor(1, np.arange(3000, dtype=np.float32))
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA page_size").fetchone()[0] == 4096
    assert path.stat().st_size < 400_000
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # finished: one self-contained file
    assert con.execute("SELECT value FROM rdb_meta WHERE key='written_by'").fetchone()[0] == reportdb.__version__
    names = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
    assert "alembic_version" not in names and schema.VERSION_TABLE in names
    con.close()
    with reportdb.open(path, "a") as report:
        np.testing.assert_array_equal(report.tensor(1), np.arange(3000, dtype=np.float32))
        report.put_tensor(2, np.ones(10, np.float32))
        con = sqlite3.connect(path)
        assert con.execute("PRAGMA page_size").fetchone()[0] == 65536  # written again: full-speed pages
        con.close()
    with reportdb.open(path) as report:
        assert report.tensor_ids() == [1, 2] and report.verify_tensor(1) == 12000


def test_a_small_report_with_rowid_rows_is_repaged_keeping_its_rowids(tmp_path: Path) -> None:
    """Rows of a table without a declared key (the legacy report tables) are known by their rowids, which a VACUUM
    may renumber: such a file is rewritten with small pages keeping its rowids."""
    path = tmp_path / "r.sqlite"
    with reportdb.open(path, "a") as report, report.connection() as conn:
        conn.execute("CREATE TABLE notes (v TEXT)")
        conn.executemany("INSERT INTO notes(rowid, v) VALUES (?, ?)", [(5, "a"), (9, "b")])
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA page_size").fetchone()[0] == 4096
    assert con.execute("SELECT rowid, v FROM notes").fetchall() == [(5, "a"), (9, "b")]
    con.close()


def test_folder_path_means_its_db_sqlite(tmp_path: Path) -> None:
    with reportdb.open(tmp_path, "a") as report:
        assert report.path == tmp_path / "db.sqlite"


@pytest.mark.parametrize("name", sorted(LEGACY_DBS))
def test_legacy_report_read_as_is_then_upgraded_keeping_every_row(tmp_path: Path, name: str) -> None:
    src = tmp_path / "db.sqlite"
    shutil.copyfile(LEGACY_DBS[name], src)
    before_digest, before_rows, before_ddl = _digest(src), _rows(src), _report_ddl(src)
    with reportdb.open(tmp_path, "r") as report:
        assert report.schema_revision is None and report.tensor_ids() == []
        with pytest.raises(SchemaError, match="reportdb upgrade"):
            report.tensor_info(1)
    assert _digest(src) == before_digest
    with reportdb.open(tmp_path, "a") as report:
        assert report.schema_revision == schema.head_revision()
        report.put_tensor(1, np.arange(4.0))
    after = _rows(src, {t: cols for t, (cols, _) in before_rows.items()})
    assert after == before_rows
    # the report tables themselves are untouched: same tables, same DDL, so the visualizer's probes answer alike
    assert _report_ddl(src) == before_ddl
    # the ORM reads every legacy table through the columns every report age has
    with reportdb.open(tmp_path, "r") as report, report.session() as session:
        for model in models.REPORT_MODELS:
            if model.__tablename__ in before_rows:
                rows = session.scalars(select(model)).all()
                assert len(rows) == len(before_rows[model.__tablename__][1]), model.__tablename__
        cols, ops = before_rows.get("operations", ([], []))
        if ops:
            first = min(ops, key=lambda r: r[cols.index("operation_id")])
            op = session.scalars(select(models.Operation).order_by(models.Operation.operation_id)).first()
            assert op is not None and op.name == first[cols.index("name")]


def _report_ddl(path: Path) -> dict[str, str]:
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    ddl = {n: sql for n, sql in con.execute("SELECT name, sql FROM sqlite_master") if "rdb_" not in n and "reportdb_" not in n}
    con.close()
    return ddl


def test_new_report_gets_the_newest_report_tables(tmp_path: Path) -> None:
    with reportdb.open(tmp_path, "a") as report, report.session() as session:
        session.add(models.Operation(operation_id=1, name="ttnn.add", duration=0.5, rank=1))
        session.add(models.Tensor(tensor_id=3, shape="Shape([2])", dtype="DataType.BFLOAT16", size=4))
        session.commit()
        op = session.scalars(select(models.Operation)).one()
        assert (op.operation_id, op.rank) == (1, 1)
        assert session.scalars(select(models.Tensor)).one().rank == 0
    con = sqlite3.connect(tmp_path / "db.sqlite")
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {m.__tablename__ for m in models.REPORT_MODELS} - {"buffer_pages"} <= tables


def test_upgrade_values_identical_on_real_report(tmp_path: Path) -> None:
    shutil.copyfile(LEGACY_DBS["ttnn-0.62.2-report"], tmp_path / "db.sqlite")
    con = sqlite3.connect(tmp_path / "db.sqlite")
    before = {t: con.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in ("operations", "tensors", "operation_arguments", "local_tensor_comparison_records")}
    con.close()
    reportdb.open(tmp_path, "a").close()
    con = sqlite3.connect(tmp_path / "db.sqlite")
    for t, rows in before.items():
        width = len(rows[0])
        after = con.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall()
        assert [r[:width] for r in after] == rows, t


def test_older_reportdb_schema_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    conn = connect(path, readonly=False)
    schema.upgrade(engine_for(conn, readonly=False), target="0001")
    conn.execute("BEGIN IMMEDIATE")
    from reportdb.store import blobs

    conn.execute(
        "INSERT INTO rdb_tensor(tensor_id, rank, dtype, shape, nbytes, n_shards) VALUES (5, 0, 'float32', '[3]', 12, 1)"
    )
    ref = blobs.put_blob(conn, np.array([1, 2, 3], np.float32))
    conn.execute("INSERT INTO rdb_shard(tensor_pk, shard_index, mesh_coordinate, dtype, shape, blob_id) VALUES (1, 0, '[]', 'float32', '[3]', ?)", (ref.id,))
    conn.execute("COMMIT")
    conn.close()
    with reportdb.open(path, "r") as report:
        assert report.schema_revision == "0001"
        assert report.tensor(5).tolist() == [1, 2, 3]
        with pytest.raises(SchemaError, match="upgrade"):
            report.tensor_stats(5)
    with reportdb.open(path, "a") as report:
        assert report.schema_revision == schema.head_revision()
        assert report.tensor(5).tolist() == [1, 2, 3]


def test_current_schema_opens_without_change(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, np.zeros(2))
    digest = _digest(path)
    with reportdb.open(path, "a") as report:
        assert report.tensor_ids() == [1]
    with reportdb.open(path, "r") as report:
        assert report.tensor_ids() == [1]
    assert _digest(path) == digest


def test_newer_schema_is_refused_and_file_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, np.zeros(2))
    con = sqlite3.connect(path)
    con.execute(f"UPDATE {schema.VERSION_TABLE} SET version_num='9999'")
    con.execute("UPDATE rdb_meta SET value='7.1.0' WHERE key='written_by'")
    con.commit()
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    digest, mtime = _digest(path), path.stat().st_mtime_ns
    for mode in ("r", "a"):
        with pytest.raises(SchemaTooNewError, match=r"reportdb>=7\.1\.0"):
            reportdb.open(path, mode)
    assert _digest(path) == digest and path.stat().st_mtime_ns == mtime


def test_failed_upgrade_leaves_legacy_file_byte_for_byte(tmp_path: Path) -> None:
    """A legacy file whose names clash with reportdb's makes the upgrade fail midway (``rdb_tensor`` is created,
    then ``rdb_shard`` exists already): all is rolled back."""
    path = tmp_path / "db.sqlite"
    shutil.copyfile(LEGACY_DBS["ttnn-0.62.2-report"], path)
    path.chmod(0o644)
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE rdb_shard (x int)")
    con.commit()
    con.close()
    digest = _digest(path)
    with pytest.raises(SchemaError, match="rolled back"):
        reportdb.open(path, "a")
    assert _digest(path) == digest
    assert not Path(f"{path}-wal").exists()


def test_bad_paths_and_files(tmp_path: Path) -> None:
    with pytest.raises(ReportNotFoundError):
        reportdb.open(tmp_path / "missing.sqlite")
    with pytest.raises(ReportNotFoundError):
        reportdb.open(tmp_path / "no" / "such" / "dir" / "db.sqlite", "a")
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not a database" * 100)
    before = junk.read_bytes()
    for mode in ("r", "a"):
        with pytest.raises(ReportDBError, match="not a SQLite"):
            reportdb.open(junk, mode)
    assert junk.read_bytes() == before
    with pytest.raises(ReportDBError, match="mode"):
        reportdb.open(tmp_path / "x.sqlite", "w")  # type: ignore[arg-type]
    assert not (tmp_path / "x.sqlite").exists()


def test_upgrade_fills_statistics_of_tensors_stored_without_them(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    arr = np.array([[1.0, 2.0], [np.nan, 4.0]], np.float32)
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, arr, stats=False)
        with pytest.raises(ReportDBError, match="without statistics"):
            report.tensor_stats(1)
    assert reportdb.upgrade(path) == schema.head_revision()
    with reportdb.open(path) as report:
        s = report.tensor_stats(1)
    assert (s.count, s.nan_count, s.min, s.max) == (4, 1, 1.0, 4.0)
