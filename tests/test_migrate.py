"""Legacy report folder migration: real reports with and without -o, schema fixtures, problem files,
interruption at several points followed by a rerun, and the CLI."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from click.testing import CliRunner

import reportdb
from conftest import FIXTURES, ROOT, assert_values_equal
from reportdb.cli import cli
from reportdb.legacy import (
    PARTIAL_NAME,
    MigrationError,
    NotAReportFolderError,
    UnreadableTensorFileError,
    migrate,
    verify,
)
from reportdb.legacy.importer import merge_metadata
from reportdb.spec import TensorSpec

REPORTS = ["ttnn-0.62.2-bin", "ttnn-0.64.5-report-tensorbin"]
SCHEMAS = ["visualizer_empty_2024-09.sqlite", "ttnn_0.81.1_schema_3.5.sqlite"]


def tree_hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file below ``folder``, by relative path."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def writable_copy(src: Path, dst: Path) -> Path:
    """A copy of a (read-only) fixture folder that the test may change."""
    shutil.copytree(src, dst)
    for path in [dst, *dst.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dst


def table_dump(db: Path) -> dict[str, tuple[str, list[tuple]]]:
    """Every non-reportdb table: its DDL and its rows with rowids, in rowid order."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        out = {}
        for name, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"):
            if not name.startswith(("rdb_", "reportdb_")):
                key = "1" if "WITHOUT ROWID" in sql.upper() else "rowid"
                out[name] = (sql, conn.execute(f'SELECT {key}, * FROM "{name}" ORDER BY {key}, 2').fetchall())
        indexes = conn.execute("SELECT name, tbl_name, sql FROM sqlite_master WHERE type IN ('index', 'view', 'trigger')")
        out["indexes"] = ("", sorted((r for r in indexes if not r[1].startswith(("rdb_", "reportdb_"))), key=str))
        return out
    finally:
        conn.close()


def expected_values(folder: str) -> dict[int, list[np.ndarray]]:
    """``report_expected``: tensor id -> the expected array(s) (one per shard for multi-device files)."""
    out: dict[int, list[np.ndarray]] = {}
    for path in sorted((FIXTURES / folder / "report_expected").glob("*.npy")):
        parts = path.name.split(".")
        out.setdefault(int(parts[0]), []).append((parts[1] if len(parts) == 3 else "", np.load(path)))  # type: ignore[arg-type]
    return {k: [a for _, a in sorted(v, key=lambda t: int(t[0][5:] or 0))] for k, v in out.items()}


def assert_report_values(db: Path, folder: str) -> None:
    """Every tensor of ``report_expected`` reads back equal, shard by shard."""
    expected = expected_values(folder)
    with reportdb.open(db) as report:
        assert sorted(report.tensor_ids()) == sorted(expected)
        for tensor_id, arrays in expected.items():
            if len(arrays) == 1:
                assert_values_equal(report.tensor(tensor_id), arrays[0])
            else:
                shards = report.shards(tensor_id)
                assert len(shards) == len(arrays)
                for (_, actual), want in zip(shards, arrays):
                    assert_values_equal(actual, want)


def log_kinds(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return dict(conn.execute("SELECT kind, COUNT(*) FROM rdb_migration_log GROUP BY kind").fetchall())
    finally:
        conn.close()


# --- real reports ------------------------------------------------------------------------------------


@pytest.mark.parametrize("jobs", [1, pytest.param(2, marks=pytest.mark.process)])  # 2: worker processes
@pytest.mark.parametrize("folder", REPORTS)
def test_migrate_real_report_to_new_folder(folder: str, jobs: int, tmp_path: Path) -> None:
    src = FIXTURES / folder / "report"
    before = tree_hashes(src)
    summary = migrate(src, tmp_path / "out", jobs=jobs)
    out = tmp_path / "out"
    assert tree_hashes(src) == before
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "db.sqlite"]
    assert (out / "config.json").read_bytes() == (src / "config.json").read_bytes()
    assert table_dump(out / "db.sqlite") == table_dump(src / "db.sqlite")
    assert_report_values(out / "db.sqlite", folder)
    files = len(list((src / "tensors").iterdir()))
    assert summary.tensors.imported == summary.tensors.stored == files
    assert summary.verified.ok and summary.verified.tensors == files
    assert summary.problem_count == 0 and not summary.resumed
    assert summary.bytes.after == (out / "db.sqlite").stat().st_size
    kinds = log_kinds(out / "db.sqlite")
    assert kinds["tensor"] == files and kinds["summary"] == 1 and kinds["verified"] == 1
    assert kinds["table"] == len(summary.tables)
    assert verify(out, against=src).compared == files


def test_golden_tensors_are_linked(tmp_path: Path) -> None:
    src = FIXTURES / "ttnn-0.62.2-bin" / "report"
    summary = migrate(src, tmp_path / "out")
    with reportdb.open(tmp_path / "out") as report:
        info = report.tensor_info(1000001)
        assert info.source["format"] == "pt"
        assert {"table": "local_tensor_comparison_records", "tensor_id": 2} in info.source["golden_of"]
        assert report.tensor_info(10).spec.ttnn_dtype == "BFLOAT16"
        assert report.tensor_info(10).source["legacy_row"]["dtype"] == "DataType.BFLOAT16"
    assert summary.tensors.golden_linked == 8
    # goldens named by comparison records that the legacy writer never dumped are listed, not invented
    assert {g["tensor_id"] for g in summary.problems["golden_without_file"]} == {100003, 100006, 100009, 100012}
    assert summary.problems["missing_files"] == ()


@pytest.mark.parametrize("folder", REPORTS)
def test_migrate_in_place(folder: str, tmp_path: Path) -> None:
    work = writable_copy(FIXTURES / folder / "report", tmp_path / "report")
    legacy_tables = table_dump(work / "db.sqlite")
    tensors_before = tree_hashes(work / "tensors")
    summary = migrate(work)
    assert summary.in_place and summary.verified.ok
    assert sorted(p.name for p in work.iterdir()) == ["config.json", "db.sqlite", "tensors"]
    assert tree_hashes(work / "tensors") == tensors_before  # kept without --remove-legacy-files
    assert table_dump(work / "db.sqlite") == legacy_tables
    assert_report_values(work / "db.sqlite", folder)
    again = migrate(work, remove_legacy_files=True)  # a rerun after success only removes the files
    assert again.already_migrated and again.legacy_files_removed == len(tensors_before)
    assert not (work / "tensors").exists()
    assert_report_values(work / "db.sqlite", folder)
    assert verify(work).ok


@pytest.mark.process
def test_in_place_with_remove_legacy_files(tmp_path: Path) -> None:
    work = writable_copy(FIXTURES / REPORTS[0] / "report", tmp_path / "report")
    summary = migrate(work, remove_legacy_files=True, jobs=2)
    assert summary.verified_against_legacy.ok and summary.verified_against_legacy.compared == 36
    assert summary.legacy_files_removed == 36 and not (work / "tensors").exists()
    assert_report_values(work / "db.sqlite", REPORTS[0])


@pytest.mark.parametrize("schema", SCHEMAS)
def test_migrate_report_schema_fixtures(schema: str, tmp_path: Path) -> None:
    src = tmp_path / "legacy"
    src.mkdir()
    shutil.copyfile(FIXTURES / "report-schemas" / schema, src / "db.sqlite")
    before = tree_hashes(src)
    summary = migrate(src, tmp_path / "out")
    assert tree_hashes(src) == before
    assert table_dump(tmp_path / "out" / "db.sqlite") == table_dump(src / "db.sqlite")
    assert summary.tensors.stored == 0 and summary.problem_count == 0
    with reportdb.open(tmp_path / "out") as report:
        assert report.schema_revision == report.summary().schema_head


def test_rowids_unknown_tables_and_indexes_are_kept(tmp_path: Path) -> None:
    src = writable_copy(FIXTURES / REPORTS[0] / "report", tmp_path / "report")
    conn = sqlite3.connect(src / "db.sqlite")
    conn.executescript(
        """CREATE TABLE my_notes (k text UNIQUE, v blob, n real);
        INSERT INTO my_notes VALUES ('a', x'00ff', 1.5), ('b', NULL, NULL), ('c', 'text', 3);
        DELETE FROM my_notes WHERE k='b';
        CREATE TABLE keyed (id INTEGER PRIMARY KEY AUTOINCREMENT, x int);
        INSERT INTO keyed(id, x) VALUES (7, 1), (42, 2);
        CREATE TABLE wr (a int PRIMARY KEY, b text) WITHOUT ROWID;
        INSERT INTO wr VALUES (1, 'x');
        CREATE INDEX idx_ops_name ON operations(name);
        CREATE VIEW op_names AS SELECT name FROM operations;
        DELETE FROM operation_arguments WHERE rowid % 3 = 0;"""
    )
    conn.commit()
    conn.close()
    migrate(src, tmp_path / "out")
    assert table_dump(tmp_path / "out" / "db.sqlite") == table_dump(src / "db.sqlite")
    conn = sqlite3.connect(tmp_path / "out" / "db.sqlite")
    assert conn.execute("SELECT COUNT(*) FROM op_names").fetchone()[0] == 12
    assert conn.execute("SELECT seq FROM sqlite_sequence WHERE name='keyed'").fetchone()[0] == 42
    conn.close()


def test_tables_larger_than_a_copy_batch_keep_every_row_and_rowid(tmp_path: Path) -> None:
    """Rows are copied in batches by rowid: gaps, the smallest rowid, an INTEGER PRIMARY KEY and a WITHOUT ROWID
    table across several batches all come out as they were."""
    src = writable_copy(FIXTURES / REPORTS[0] / "report", tmp_path / "report")
    conn = sqlite3.connect(src / "db.sqlite")
    conn.execute("CREATE TABLE big (v text)")
    conn.executemany("INSERT INTO big(rowid, v) VALUES (?, ?)", [(-(1 << 63), "min"), *((3 * i, str(i)) for i in range(10_000))])
    conn.execute("CREATE TABLE ipk (id INTEGER PRIMARY KEY, v int)")
    conn.executemany("INSERT INTO ipk VALUES (?, ?)", [(i * 7 - 20_000, i) for i in range(9_000)])
    conn.execute("CREATE TABLE wr (a text PRIMARY KEY, b int) WITHOUT ROWID")
    conn.executemany("INSERT INTO wr VALUES (?, ?)", [(f"k{i}", i) for i in range(5_000)])
    conn.commit()
    conn.close()
    summary = migrate(src, tmp_path / "out")
    assert summary.tables["big"] == 10_001 and summary.tables["ipk"] == 9_000 and summary.tables["wr"] == 5_000
    assert table_dump(tmp_path / "out" / "db.sqlite") == table_dump(src / "db.sqlite")


# --- problem files ---------------------------------------------------------------------------------


def damaged_report(tmp_path: Path) -> Path:
    """The 0.62.2 report with an unreadable file (7), a missing file (9), an orphan (999) and a stray file."""
    work = writable_copy(FIXTURES / REPORTS[0] / "report", tmp_path / "report")
    tensors = work / "tensors"
    (tensors / "7.bin").write_bytes((tensors / "7.bin").read_bytes()[:100])
    (tensors / "9.bin").unlink()
    shutil.copyfile(tensors / "5.bin", tensors / "999.bin")
    (tensors / "notes.txt").write_text("not a tensor")
    return work


@pytest.mark.process
def test_unreadable_orphan_and_missing_files_are_reported(tmp_path: Path) -> None:
    src = damaged_report(tmp_path)
    before = tree_hashes(src)
    summary = migrate(src, tmp_path / "out", jobs=2)
    assert tree_hashes(src) == before
    problems = summary.problems
    assert [p["tensor_id"] for p in problems["orphan_files"]] == [999]
    assert problems["missing_files"] == ({"tensor_id": 9, "rank": 0},)
    assert sorted(p["path"] for p in problems["unreadable_files"]) == ["tensors/7.bin", "tensors/notes.txt"]
    assert "FormatError" in next(p["error"] for p in problems["unreadable_files"] if p["path"] == "tensors/7.bin")
    assert summary.problem_count == 4
    db = tmp_path / "out" / "db.sqlite"
    kinds = log_kinds(db)
    assert (kinds["orphan_file"], kinds["missing_file"], kinds["unreadable_file"]) == (1, 1, 2)
    with reportdb.open(db) as report:
        assert not report.has_tensor(7) and not report.has_tensor(9)
        assert report.has_tensor(999) and report.has_tensor(8)
        np.testing.assert_array_equal(report.tensor(999), report.tensor(5))


def test_strict_stops_at_an_unreadable_file(tmp_path: Path) -> None:
    src = damaged_report(tmp_path)
    with pytest.raises(UnreadableTensorFileError, match="7.bin"):
        migrate(src, tmp_path / "out", strict=True)
    assert not (tmp_path / "out" / "db.sqlite").exists()  # only the resumable partial file is left
    assert (tmp_path / "out" / PARTIAL_NAME).exists()


def test_remove_legacy_files_keeps_unreadable_ones(tmp_path: Path) -> None:
    src = damaged_report(tmp_path)
    summary = migrate(src, remove_legacy_files=True)
    assert summary.legacy_files_removed == 35  # 36 - missing 9 - unreadable 7 + orphan 999
    assert sorted(p.name for p in (src / "tensors").iterdir()) == ["7.bin", "notes.txt"]


def test_errors_are_clear_and_touch_nothing(tmp_path: Path) -> None:
    with pytest.raises(NotAReportFolderError, match="no such report folder"):
        migrate(tmp_path / "nope")
    with pytest.raises(NotAReportFolderError, match="no db.sqlite"):
        migrate(tmp_path)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "db.sqlite").write_text("not sqlite")
    with pytest.raises(reportdb.ReportDBError, match="not a readable SQLite"):
        migrate(tmp_path / "bad", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    src = FIXTURES / REPORTS[0] / "report"
    migrate(src, tmp_path / "done")
    with pytest.raises(MigrationError, match="already exists"):
        migrate(src, tmp_path / "done")
    with pytest.raises(MigrationError, match="in-place migration only"):
        migrate(src, tmp_path / "other", remove_legacy_files=True)


def test_metadata_merge_fills_gaps_from_the_row() -> None:
    row = {
        "shape": "ttnn.Shape([1, 1, 1[32], 64])",
        "dtype": "DataType::BFLOAT8_B",
        "layout": "Layout::TILE",
        "memory_config": "MemoryConfig(memory_layout=TensorMemoryLayout::HEIGHT_SHARDED,buffer_type=BufferType::L1,"
        "shard_spec=ShardSpec(grid={[(x=0,y=0) - (x=7,y=7)]},shape={32, 64},orientation=ShardOrientation::ROW_MAJOR,halo=0))",
    }
    merged = merge_metadata(TensorSpec(), row)
    assert merged.ttnn_dtype == "BFLOAT8_B" and merged.layout == "TILE"
    assert merged.logical_shape == (1, 1, 1, 64) and merged.padded_shape == (1, 1, 32, 64)
    assert merged.memory_config["memory_layout"] == "HEIGHT_SHARDED"
    assert merged.memory_config["shard_spec"]["shape"] == [32, 64]
    from_file = TensorSpec(ttnn_dtype="FLOAT32", layout="ROW_MAJOR")
    assert merge_metadata(from_file, row).ttnn_dtype == "FLOAT32"  # the file wins
    torch_row = {"dtype": "torch.float32", "layout": "torch.strided", "shape": "torch.Size([2, 3])"}
    merged = merge_metadata(TensorSpec(), torch_row)
    assert merged.ttnn_dtype is None and merged.layout is None and merged.logical_shape == (2, 3)


# --- interruption ------------------------------------------------------------------------------------


def _count(db: Path, sql: str) -> int:
    """A value read from the partial file without disturbing the writer; -1 while it is not readable yet."""
    if not db.exists():
        return -1
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.1)
        try:
            return int(conn.execute(sql).fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return -1


def _count_after_kill(db: Path, sql: str) -> int:
    """A value read from a killed migration's partial file, as the rerun will find it.

    A read-write connection, because SIGKILL may leave a hot journal that only a writer can roll back
    (a read-only one fails on it, which once counted 36 stored tensors as none); 0 when no file is left.
    """
    if not db.exists():
        return 0
    conn = sqlite3.connect(db)
    try:
        if conn.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'rdb_tensor'").fetchone()[0] == 0:
            return 0  # killed before the tables were made
        return int(conn.execute(sql).fetchone()[0])
    finally:
        conn.close()


KILL_POINTS: dict[str, Callable[[Path], bool]] = {
    "partial file created": lambda p: p.exists(),
    "tables copied": lambda p: _count(p, "SELECT COUNT(*) FROM rdb_meta WHERE key='migration_source'") == 1,
    "5 tensors stored": lambda p: _count(p, "SELECT COUNT(*) FROM rdb_tensor") >= 5,
    "20 tensors stored": lambda p: _count(p, "SELECT COUNT(*) FROM rdb_tensor") >= 20,
    "verified": lambda p: _count(p, "SELECT COUNT(*) FROM rdb_migration_log WHERE kind='verified'") >= 1,
}


#: Seconds a stepped migrate runs between two looks at where it is.
STEP_SECONDS = 0.002


def run_stepped(args: list[str], until: Callable[[int], bool]) -> bool:
    """Run ``reportdb migrate`` in small steps and SIGKILL it once ``until(pid)`` holds; False when it finished first
    (a point only a few milliseconds wide, as "verified", can fall between two looks on a loaded machine).

    The migrate and its workers (a process group of their own) run for :data:`STEP_SECONDS`, are stopped
    (SIGSTOP), and ``until`` looks at them (the partial file, their processes) while nothing moves; so a point
    between two steps of the migration is met without any hook in reportdb slowing it down. Wall time passes while it
    is stopped, so its time-based commits come at every few files, as in a long migration."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "reportdb", "migrate", *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            os.killpg(proc.pid, signal.SIGSTOP)
            if until(proc.pid):
                return True
            if proc.poll() is not None:
                return False
            assert time.monotonic() < deadline
            os.killpg(proc.pid, signal.SIGCONT)
            time.sleep(STEP_SECONDS)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        try:  # the workers, stopped with it, go on only to notice that it is gone
            os.killpg(proc.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def run_and_kill(args: list[str], partial: Path, point: Callable[[Path], bool]) -> bool:
    """SIGKILL a ``reportdb migrate`` once ``point`` holds for its partial file; False when it finished first."""
    return run_stepped(args, lambda pid: point(partial))


@pytest.mark.process
@pytest.mark.parametrize("point", sorted(KILL_POINTS))
def test_killed_migration_leaves_source_and_reruns(point: str, tmp_path: Path) -> None:
    folder = REPORTS[0]
    src = FIXTURES / folder / "report"
    before = tree_hashes(src)
    out = tmp_path / "out"
    for _ in range(5):  # a narrow point missed: the same migration again from nothing
        shutil.rmtree(out, ignore_errors=True)
        if run_and_kill([str(src), "-o", str(out)], out / PARTIAL_NAME, KILL_POINTS[point]):
            break
    else:
        pytest.fail(f"migrate finished before the kill point {point!r} in 5 runs")
    assert tree_hashes(src) == before
    assert not (out / "db.sqlite").exists()
    stored_before_rerun = _count_after_kill(out / PARTIAL_NAME, "SELECT COUNT(*) FROM rdb_tensor")
    summary = migrate(src, out)
    assert tree_hashes(src) == before
    assert summary.tensors.already_stored == stored_before_rerun  # not decoded again
    assert summary.tensors.stored == 36 and summary.verified.ok
    assert not (out / PARTIAL_NAME).exists()
    assert table_dump(out / "db.sqlite") == table_dump(src / "db.sqlite")
    assert_report_values(out / "db.sqlite", folder)


@pytest.mark.process
@pytest.mark.parametrize("point", ["tables copied", "20 tensors stored"])
def test_killed_in_place_migration_leaves_source_and_reruns(point: str, tmp_path: Path) -> None:
    folder = REPORTS[1]
    work = writable_copy(FIXTURES / folder / "report", tmp_path / "report")
    before = tree_hashes(work)
    assert run_and_kill([str(work), "--jobs", "2"], work / PARTIAL_NAME, KILL_POINTS[point]), "migrate finished first"
    after = tree_hashes(work)
    assert {k: v for k, v in after.items() if not k.startswith(PARTIAL_NAME)} == before
    stored_before_rerun = _count_after_kill(work / PARTIAL_NAME, "SELECT COUNT(*) FROM rdb_tensor")
    result = subprocess.run(
        [sys.executable, "-m", "reportdb", "migrate", str(work), "--json"],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), check=True,
    )
    summary = json.loads(result.stdout)
    assert summary["resumed"] and summary["tensors"]["already_stored"] == stored_before_rerun
    assert sorted(p.name for p in work.iterdir()) == ["config.json", "db.sqlite", "tensors"]
    assert_report_values(work / "db.sqlite", folder)


# --- CLI ---------------------------------------------------------------------------------------------------


@pytest.mark.process
def test_cli_migrate_json_and_verify(tmp_path: Path) -> None:
    src = FIXTURES / REPORTS[1] / "report"
    runner = CliRunner()
    result = runner.invoke(cli, ["migrate", str(src), "-o", str(tmp_path / "out"), "--json", "--jobs", "2"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["tensors"]["by_format"] == {"pt": 10, "tensorbin": 24}
    assert summary["rows_copied"] == sum(summary["tables"].values()) > 0
    assert summary["bytes"]["before"] > 0 and summary["bytes"]["after"] > 0
    result = runner.invoke(cli, ["verify", str(tmp_path / "out"), "--against", str(src)])
    assert result.exit_code == 0 and "34 compared" in result.output
    result = runner.invoke(cli, ["migrate", str(tmp_path / "missing")])
    assert result.exit_code == 1 and "no such report folder" in result.output and "Traceback" not in result.output


def test_destination_named_as_a_database_file_is_refused(tmp_path: Path) -> None:
    """``-o r.sqlite`` used to make a folder named r.sqlite; migrate writes a folder, so a file name is refused."""
    src = FIXTURES / REPORTS[0] / "report"
    for name in ("r.sqlite", "r.db", "R.SQLITE3"):
        result = CliRunner().invoke(cli, ["migrate", str(src), "-o", str(tmp_path / name)])
        assert result.exit_code == 1 and "migrate writes a report folder" in result.output, result.output
        assert f"such as {tmp_path / Path(name).stem}" in result.output and "Traceback" not in result.output
        assert not (tmp_path / name).exists()
    assert sorted(tmp_path.iterdir()) == []


def test_strict_stop_names_the_tensor_file_to_fix_and_the_partial_file_to_delete(tmp_path: Path) -> None:
    """The --strict message named "that file" twice, for the unreadable tensor file and the partial database."""
    src = writable_copy(FIXTURES / REPORTS[0] / "report", tmp_path / "src")
    bad = src / "tensors" / "5.bin"
    bad.write_bytes(bad.read_bytes()[:40])
    result = CliRunner().invoke(cli, ["migrate", str(src), "-o", str(tmp_path / "out"), "--strict"])
    assert result.exit_code == 1, result.output
    assert "that file" not in result.output
    assert "fix or remove the tensor file 5.bin" in result.output and f"delete {PARTIAL_NAME} to give up" in result.output


def test_cli_verify_fails_on_a_damaged_chunk(tmp_path: Path) -> None:
    migrate(FIXTURES / REPORTS[0] / "report", tmp_path / "out")
    db = tmp_path / "out" / "db.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("UPDATE rdb_chunk SET data = zeroblob(length(data)) WHERE id = (SELECT MIN(id) FROM rdb_chunk)")
    conn.commit()
    conn.close()
    result = CliRunner().invoke(cli, ["verify", str(db)])
    assert result.exit_code == 1
    assert verify(db).problems[0].error.startswith("CorruptionError")


@pytest.mark.process
def test_killed_parallel_migration_leaves_no_worker_behind(tmp_path: Path) -> None:
    """Decode workers end with the migrate process, even when it is killed with SIGKILL."""
    workers: list[int] = []

    def started(pid: int) -> bool:
        workers[:] = _children(pid)
        return bool(workers)

    assert run_stepped([str(FIXTURES / "ttnn-0.62.2-bin" / "report"), "-o", str(tmp_path / "out"), "--jobs", "2"], started)
    assert workers, "the migration never started its workers"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_alive(pid) for pid in workers):
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in workers)


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().split()[2] if Path(f"/proc/{pid}/stat").exists() else "X"
    return state != "Z"


@pytest.mark.process
def test_decode_workers_import_neither_sqlalchemy_nor_the_rest_of_the_migration() -> None:
    """A ``--jobs N`` worker imports ``reportdb.legacy.decode`` (through the package): that must stay light, so the
    package loads its other modules lazily; the second import shows the check can tell."""
    code = (
        "import sys, reportdb.legacy.decode\n"
        "print(sorted(m for m in sys.modules if m.startswith(('sqlalchemy', 'alembic', 'reportdb.report', "
        "'reportdb.legacy.'))))\n"
        "import reportdb.legacy\n"
        "reportdb.legacy.migrate\n"
        "print('reportdb.report' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["['reportdb.legacy.decode']", "True"]
