"""A legacy report folder is someone else's: links, special files, triggers, a hostile schema, an incomplete
migration and a full disk, each built in tmp_path. The CLI cases run ``python -m reportdb`` as a subprocess, with a
generous bound on the time where the bug was a hang."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

import reportdb
from conftest import FIXTURES
from gen_legacy import write_v0
from reportdb.errors import QueryTimeoutError
from reportdb.legacy import (
    PARTIAL_NAME,
    MigrationWriteError,
    UnreadableTensorFileError,
    UnsafeFolderError,
    VerificationError,
    migrate,
    pending_legacy_files,
    verify,
)

REPORT = FIXTURES / "ttnn-0.62.2-bin" / "report"  # 36 tensor files, 4 goldens named without a file


def writable_copy(dst: Path, src: Path = REPORT) -> Path:
    """A copy of the (read-only) fixture report that the test may change."""
    shutil.copytree(src, dst)
    for path in [dst, *dst.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dst


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m reportdb ARGS``; a hang fails the test instead of the suite."""
    return subprocess.run([sys.executable, "-m", "reportdb", *args], capture_output=True, text=True, timeout=timeout)


def snapshot(folder: Path) -> dict[str, tuple[str, int, int, bytes]]:
    """Every entry below ``folder`` (links not followed): kind, size, mtime and, for a small file, its bytes."""
    out = {}
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        kind = "link" if path.is_symlink() else "dir" if path.is_dir() else "file" if path.is_file() else "other"
        data = path.read_bytes() if kind == "file" and st.st_size < 1 << 20 else b""
        out[str(path.relative_to(folder))] = (kind, st.st_size, st.st_mtime_ns, data)
    return out


def log_rows(db: Path, kind: str) -> list[dict[str, Any]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [json.loads(r[0]) for r in conn.execute("SELECT detail FROM rdb_migration_log WHERE kind=?", (kind,))]
    finally:
        conn.close()


def schema_objects(db: Path, kind: str) -> list[str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type=?", (kind,)))
    finally:
        conn.close()


# --- 1. symlinks and special files ----------------------------------------------------------------------


@pytest.mark.process
def test_remove_legacy_files_never_deletes_through_a_tensors_link(tmp_path: Path) -> None:
    outside = writable_copy(tmp_path / "elsewhere")  # someone else's tensors, reached through the link
    before = snapshot(outside)
    src = writable_copy(tmp_path / "report")
    shutil.rmtree(src / "tensors")
    (src / "tensors").symlink_to(outside / "tensors")
    result = run_cli("migrate", str(src), "--remove-legacy-files", "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert snapshot(outside) == before  # every file of the link's target is still there, unchanged
    assert (src / "tensors").is_symlink()
    assert summary["tensors"]["stored"] == 0 and summary["legacy_files_removed"] == 0
    assert {"kind": "symlink", "name": "tensors"} in [{k: e[k] for k in ("kind", "name")} for e in summary["skipped"]]
    assert [e["name"] for e in log_rows(src / "db.sqlite", "skipped")] == ["tensors"]


@pytest.mark.process
def test_links_and_special_files_beside_the_database_are_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key.pem").write_text("PRIVATE KEY")
    src = writable_copy(tmp_path / "report")
    (src / "key.pem").symlink_to(secret / "key.pem")
    (src / "home").symlink_to(secret)
    (src / "zeros.json").symlink_to("/dev/zero")
    os.mkfifo(src / "pipe.json")
    (src / "ranks").mkdir()
    (src / "ranks" / "config_rank1.json").write_text('{"rank": 1}')
    (src / "ranks" / "leak").symlink_to(secret / "key.pem")
    with open(src / "huge.bin", "wb") as handle:  # 100 GB, all hole
        handle.truncate(100 * 10**9)
    (src / "config_link.json").symlink_to(secret / "key.pem")  # config*.json is read for the dump setting
    (src / "tensors" / "5.bin").unlink()
    (src / "tensors" / "5.bin").symlink_to(REPORT / "tensors" / "5.bin")  # a tensor file through a link
    (src / "tensors" / "6.bin").unlink()
    os.mkfifo(src / "tensors" / "6.bin")
    before = snapshot(src)

    result = run_cli("migrate", str(src), "-o", str(tmp_path / "out"), "--json", timeout=60)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    out = tmp_path / "out"
    assert snapshot(src) == before
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == [
        "config.json", "db.sqlite", "huge.bin", "ranks", "ranks/config_rank1.json"
    ]
    assert not any(p.is_symlink() for p in out.rglob("*"))
    huge = (out / "huge.bin").stat()
    assert huge.st_size == 100 * 10**9 and huge.st_blocks * 512 < 1 << 20  # holes stay holes
    assert (out / "ranks" / "config_rank1.json").read_text() == '{"rank": 1}'
    skipped = {e["name"]: e["kind"] for e in summary["skipped"]}
    assert skipped == {
        "config_link.json": "symlink", "home": "symlink", "key.pem": "symlink", "pipe.json": "FIFO",
        "ranks/leak": "symlink", "tensors/5.bin": "symlink", "tensors/6.bin": "FIFO", "zeros.json": "symlink",
    }
    assert {e["name"] for e in log_rows(out / "db.sqlite", "skipped")} == set(skipped)
    with reportdb.open(out) as report:
        assert not report.has_tensor(5) and not report.has_tensor(6) and report.has_tensor(7)
    assert b"PRIVATE KEY" not in (out / "db.sqlite").read_bytes()


@pytest.mark.process
@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_database_that_is_a_link_or_a_fifo_is_refused(kind: str, tmp_path: Path) -> None:
    src = writable_copy(tmp_path / "report")
    (src / "db.sqlite").unlink()
    if kind == "symlink":
        (src / "db.sqlite").symlink_to(REPORT / "db.sqlite")
    else:
        os.mkfifo(src / "db.sqlite")
    for args in (["migrate", str(src), "-o", str(tmp_path / "out")], ["migrate", str(src / "db.sqlite")]):
        result = run_cli(*args, timeout=60)
        assert result.returncode == 1 and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        assert "not a regular file" in result.stderr
    assert not (tmp_path / "out" / "db.sqlite").exists()
    with pytest.raises(UnsafeFolderError):
        pending_legacy_files(src)


def test_pending_legacy_files(tmp_path: Path) -> None:
    src = writable_copy(tmp_path / "report")
    (src / "tensors" / "7.bin").write_bytes((REPORT / "tensors" / "7.bin").read_bytes()[:100])  # unreadable
    (src / "tensors" / "notes.txt").write_text("not a tensor")
    (src / "tensors" / "8.bin").unlink()
    (src / "tensors" / "8.bin").symlink_to(REPORT / "tensors" / "8.bin")
    pending = pending_legacy_files(src)
    assert len(pending) == 35 and "tensors/7.bin" in pending and "tensors/1000001.pt" in pending
    assert "tensors/8.bin" not in pending and "tensors/notes.txt" not in pending
    assert pending_legacy_files(src / "db.sqlite") == pending
    migrate(src, tmp_path / "out")
    assert pending_legacy_files(tmp_path / "out") == []  # -o never copies tensors/
    migrate(src)
    assert pending_legacy_files(src) == ["tensors/7.bin"]  # the unreadable file stays, not stored
    shutil.copyfile(src / "db.sqlite", tmp_path / "single.sqlite")
    assert pending_legacy_files(tmp_path / "single.sqlite") == []  # a one-file report has no tensors/


# --- 2. the source's triggers and schema ---------------------------------------------------------------------

SPIN = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c"


def hostile_schema(src: Path) -> None:
    """Triggers that never end when they fire (one on a table under reportdb's name, which a migration writes to),
    a view reading reportdb's tables and an audit trigger."""
    conn = sqlite3.connect(src / "db.sqlite")
    conn.executescript(
        f"""CREATE TABLE rdb_migration_log (id INTEGER PRIMARY KEY, run_id, created_at, kind, tensor_id, rank, path,
                                            message, detail);
        CREATE TRIGGER spin_log AFTER INSERT ON rdb_migration_log BEGIN {SPIN}; END;
        CREATE TRIGGER spin_ops AFTER INSERT ON operations BEGIN {SPIN}; END;
        CREATE TABLE audit (what TEXT);
        CREATE TRIGGER audit_tensors AFTER INSERT ON tensors BEGIN INSERT INTO audit VALUES ('tensor'); END;
        CREATE TRIGGER audit_rdb AFTER INSERT ON tensors BEGIN SELECT COUNT(*) FROM rdb_tensor; END;
        CREATE VIEW shards_view AS SELECT * FROM rdb_shard;
        CREATE VIEW op_names AS SELECT name FROM operations;"""
    )
    conn.commit()
    conn.close()


@pytest.mark.process
def test_source_triggers_are_not_copied_and_cannot_hang_migrate(tmp_path: Path) -> None:
    src = writable_copy(tmp_path / "report")
    hostile_schema(src)
    result = run_cli("migrate", str(src), "-o", str(tmp_path / "out"), "--json", timeout=60)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    db = tmp_path / "out" / "db.sqlite"
    assert schema_objects(db, "trigger") == []
    assert schema_objects(db, "view") == ["op_names"]
    skipped = {e["name"]: e["kind"] for e in summary["skipped"]}
    assert skipped == {
        "rdb_migration_log": "table", "shards_view": "view", "spin_log": "trigger", "spin_ops": "trigger",
        "audit_tensors": "trigger", "audit_rdb": "trigger",
    }
    assert summary["triggers_copied"] == [] and summary["tensors"]["stored"] == 36
    assert len(log_rows(db, "summary")) == 1  # reportdb's own log, not the source's table of that name
    with reportdb.open(db, "a") as report:  # a report with triggers would be refused for writing
        report.put_tensor(4242, np.zeros(3, np.float32))


def test_copy_triggers_creates_them_last(tmp_path: Path) -> None:
    src = writable_copy(tmp_path / "report")
    hostile_schema(src)
    conn = sqlite3.connect(src / "db.sqlite")
    conn.execute("INSERT INTO audit VALUES ('from the source')")
    conn.commit()
    conn.close()
    summary = migrate(src, tmp_path / "out", copy_triggers=True)
    db = tmp_path / "out" / "db.sqlite"
    assert schema_objects(db, "trigger") == ["audit_tensors", "spin_ops"]  # not those on or naming rdb_* tables
    assert summary.triggers_copied == ("spin_ops", "audit_tensors")
    assert {e.name for e in summary.skipped if e.kind == "trigger"} == {"spin_log", "audit_rdb"}
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT what FROM audit").fetchall() == [("from the source",)]  # no row fired it
    conn.execute("INSERT INTO tensors(tensor_id) VALUES (424242)")  # the trigger is live in the output
    assert conn.execute("SELECT COUNT(*) FROM audit").fetchone()[0] == 2
    conn.close()
    assert verify(db).ok


@pytest.mark.process
def test_a_schema_too_slow_to_copy_is_stopped(tmp_path: Path) -> None:
    """A CHECK constraint the copy evaluates per row (0.1 s each here, for 1000 rows) stops at the copy's time
    bound, lowered for the test, with a QueryTimeoutError, and leaves nothing behind."""
    src = writable_copy(tmp_path / "report")
    conn = sqlite3.connect(src / "db.sqlite")
    conn.execute("CREATE TABLE slow (x INTEGER)")
    conn.executemany("INSERT INTO slow VALUES (?)", [(i,) for i in range(1000)])
    conn.commit()
    conn.execute("PRAGMA writable_schema=ON")  # a CHECK added after the rows, as a hostile file can hold it
    check = "instr(printf('%.*c', 20000000 + x, 'a'), 'b') = 0"  # a 20 MB string per row, no constant folding
    conn.execute("UPDATE sqlite_master SET sql = ? WHERE name = 'slow'", (f"CREATE TABLE slow (x INTEGER CHECK ({check}))",))
    conn.commit()
    conn.close()
    code = (
        "import sys, reportdb.legacy.tables as t\n"
        "from reportdb.errors import QueryTimeoutError\n"
        "from reportdb.legacy import migrate\n"
        "t.COPY_SECONDS, t.COPY_SECONDS_PER_ROW = 1.0, 0.0\n"
        "try:\n    migrate(sys.argv[1], sys.argv[2])\n"
        "except QueryTimeoutError as exc:\n    print(exc)\n    sys.exit(3)\n"
    )
    result = subprocess.run([sys.executable, "-c", code, str(src), str(tmp_path / "out")], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 3, result.stderr
    assert "table 'slow'" in result.stdout and "hostile" in result.stdout
    assert not (tmp_path / "out" / PARTIAL_NAME).exists() and not (tmp_path / "out" / "db.sqlite").exists()
    assert issubclass(QueryTimeoutError, reportdb.ReportDBError)


# --- 3. verify proves completeness ----------------------------------------------------------------------------


@pytest.mark.process
def test_verify_against_names_files_not_stored(tmp_path: Path) -> None:
    src = writable_copy(tmp_path / "report")
    for name in ("7.bin", "8.bin"):
        (src / "tensors" / name).write_bytes(b"\0" * 64)
    migrate(src, tmp_path / "out")
    result = verify(tmp_path / "out", against=src)
    assert not result.ok and result.compared == 34
    assert sorted(p.path for p in result.problems) == ["tensors/7.bin", "tensors/8.bin"]
    cli = run_cli("verify", str(tmp_path / "out"), "--against", str(src))
    assert cli.returncode == 1 and "tensors/7.bin" in cli.stderr and "Traceback" not in cli.stderr


@pytest.mark.process
def test_verify_refuses_an_unmigrated_legacy_folder(tmp_path: Path) -> None:
    src = writable_copy(tmp_path / "report")
    before = snapshot(src)
    with pytest.raises(VerificationError, match="reportdb migrate"):
        verify(src)
    result = run_cli("verify", str(src))
    assert result.returncode == 1 and "reportdb migrate" in result.stderr and "Traceback" not in result.stderr
    assert snapshot(src) == before


DAMAGE = {
    "every chunk row deleted": "DELETE FROM rdb_chunk",
    "shards point at missing blobs": "DELETE FROM rdb_blob",
    "a chunk claims 1e12 bytes": "UPDATE rdb_chunk SET nbytes = 1000000000000 WHERE id = (SELECT MIN(id) FROM rdb_chunk)",
}


@pytest.mark.process
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_verify_fails_on_an_incomplete_store(damage: str, tmp_path: Path) -> None:
    migrate(REPORT, tmp_path / "out")
    db = tmp_path / "out" / "db.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA foreign_keys=OFF")
    conn.execute(DAMAGE[damage])
    conn.commit()
    conn.close()
    try:
        result = verify(db)
    except reportdb.ReportDBError:
        return  # refused as a whole, which is a failure too
    assert not result.ok and result.problems
    assert run_cli("verify", str(db)).returncode == 1


# --- 5. errors a user meets during migrate ------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 8 MiB tmpfs (needs root and mount)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)],
                                           capture_output=True).returncode != 0:
        pytest.skip("a full disk is simulated with a small tmpfs, which needs root and mount")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


@pytest.mark.process
def test_disk_full_is_one_clear_line_and_a_rerun_resumes(small_disk: Path, tmp_path: Path) -> None:
    src = writable_copy(tmp_path / "report")
    rng = np.random.default_rng(0)
    for tensor_id in range(500, 504):  # 4 x 4 MiB of incompressible values: more than the disk holds
        write_v0(src / "tensors" / f"{tensor_id}.bin", rng.standard_normal((1024, 1024)).astype(np.float32), "FLOAT32")
    out = small_disk / "out"
    result = run_cli("migrate", str(src), "-o", str(out))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "disk is full" in lines[0], result.stderr
    assert str(out / PARTIAL_NAME) in lines[0] and "run the same command again to resume" in lines[0]
    assert not (out / "db.sqlite").exists()
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    summary = migrate(src, out)
    assert summary.resumed and summary.tensors.stored == 40  # the tables copied before are reused
    assert verify(out, against=src).ok


@pytest.mark.process
def test_disk_full_error_class(small_disk: Path, tmp_path: Path) -> None:
    src = writable_copy(tmp_path / "report")
    values = np.random.default_rng(1).standard_normal((2048, 1024)).astype(np.float32)  # 8 MiB on an 8 MiB disk
    write_v0(src / "tensors" / "500.bin", values, "FLOAT32")
    with pytest.raises(MigrationWriteError, match="disk is full"):
        migrate(src, small_disk / "out")


def test_strict_failure_names_the_partial_file(tmp_path: Path) -> None:
    src = writable_copy(tmp_path / "report")
    (src / "tensors" / "7.bin").write_bytes(b"\0" * 64)
    with pytest.raises(UnreadableTensorFileError) as caught:
        migrate(src, tmp_path / "out", strict=True)
    assert str(tmp_path / "out" / PARTIAL_NAME) in str(caught.value) and "resume" in str(caught.value)


def test_remigrating_a_migrated_report_carries_its_tensors_over(tmp_path: Path) -> None:
    first = migrate(REPORT, tmp_path / "one")
    again = migrate(tmp_path / "one", tmp_path / "two")
    assert again.problems["missing_files"] == ()
    assert again.problems["golden_without_file"] == first.problems["golden_without_file"]
    assert again.tensors.carried_over == again.tensors.stored == 36
    assert again.problem_count == 0
    assert verify(tmp_path / "two", against=REPORT).ok


# --- 6. the source is read, never written ---------------------------------------------------------------------


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_source_is_byte_and_mtime_identical_after_migrate(journal: str, tmp_path: Path) -> None:
    src = writable_copy(tmp_path / "report")
    if journal == "wal":
        conn = sqlite3.connect(src / "db.sqlite")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("INSERT INTO devices(device_id) VALUES (77)")
        conn.commit()
        live = writable_copy(tmp_path / "live", src)  # the files as a live (or killed) writer leaves them
        conn.close()
        shutil.rmtree(src)
        live.rename(src)
        assert (src / "db.sqlite-shm").exists() and (src / "db.sqlite-wal").stat().st_size > 0
    before = snapshot(src)
    summary = migrate(src, tmp_path / "out")
    assert snapshot(src) == before
    assert summary.tensors.stored == 36
    if journal == "wal":  # the row only the WAL holds was read
        conn = sqlite3.connect(tmp_path / "out" / "db.sqlite")
        assert conn.execute("SELECT COUNT(*) FROM devices WHERE device_id=77").fetchone()[0] == 1
        conn.close()


def test_tables_under_reportdb_names_in_any_case_are_left_out_of_a_migration(tmp_path: Path) -> None:
    """SQLite's names ignore ASCII case: a legacy source's ``RDB_Tensor`` or ``Reportdb_Alembic_Version`` is reportdb's
    table to SQLite, so migrate leaves it out (and lists it) as it does ``rdb_tensor``, instead of copying it over the
    migration's own tables or taking the folder for a reportdb database."""
    src = writable_copy(tmp_path / "report")
    conn = sqlite3.connect(src / "db.sqlite")
    conn.executescript(
        "CREATE TABLE RDB_Tensor (tensor_id INTEGER, forged TEXT); INSERT INTO RDB_Tensor VALUES (2, 'x');"
        "CREATE TABLE Reportdb_Alembic_Version (version_num TEXT); INSERT INTO Reportdb_Alembic_Version VALUES ('0001');"
    )
    conn.commit()
    conn.close()
    summary = reportdb.migrate(src, tmp_path / "out")
    skipped = {e.name: e.kind for e in summary.skipped}
    assert skipped.get("RDB_Tensor") == "table" and skipped.get("Reportdb_Alembic_Version") == "table"
    assert summary.tensors.stored == 36
    assert reportdb.verify(tmp_path / "out").ok
