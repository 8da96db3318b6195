"""``reportdb attach``: the values ``capture()`` recorded joined to the report ttnn 0.81+ wrote itself.

The report is ttnn 0.81.1's own database (``tests/data/report-schemas``, and one made in the test by a real ttnn 0.81.1
run with graph capture and ``capture()`` side by side); every report row must stay as it was, the values must read
back exactly, and a failed attach must leave the report's bytes untouched with no work file behind.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import reportdb
from conftest import FIXTURES
from reportdb.dtypes import numpy_dtype
from reportdb.ttnn import attach

SCHEMA_081 = FIXTURES / "report-schemas" / "ttnn_0.81.1_schema_3.5.sqlite"


def report_rows(db: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every ttnn table (not reportdb's own), sorted, to prove attach kept them."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        mine = [t for t in tables if not t.startswith(("rdb_", "reportdb_", "sqlite_"))]
        return {t: sorted(conn.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr) for t in mine}
    finally:
        conn.close()


def ttnn_report(tmp_path: Path) -> tuple[Path, list[int]]:
    """A copy of ttnn 0.81.1's own report in a folder, and the tensor ids it lists."""
    folder = tmp_path / "report"
    folder.mkdir()
    shutil.copyfile(SCHEMA_081, folder / "db.sqlite")
    conn = sqlite3.connect(folder / "db.sqlite")
    try:
        ids = [r[0] for r in conn.execute("SELECT tensor_id FROM tensors ORDER BY tensor_id")]
    finally:
        conn.close()
    assert ids, "the fixture report lists tensors"
    return folder, ids


def values_file(path: Path, ids: list[int], scale: float = 1.0) -> dict[int, np.ndarray]:
    """A values database as a Writer leaves it (bfloat16 with ttnn's spec), with one tensor the report lacks."""
    bfloat16 = numpy_dtype("bfloat16")
    arrays = {tid: (np.arange(2 * 40, dtype=np.float32).reshape(2, 40) * tid * scale).astype(bfloat16) for tid in ids + [10_000]}
    with reportdb.Writer(path) as w:
        for tid, array in arrays.items():
            w.put_tensor(tid, array, ttnn_dtype="DataType.BFLOAT16", layout="Layout.ROW_MAJOR")
    return arrays


def test_attach_stores_matched_values_and_keeps_every_report_row(tmp_path: Path) -> None:
    folder, ids = ttnn_report(tmp_path)
    arrays = values_file(tmp_path / "values.sqlite", ids)
    before = report_rows(folder / "db.sqlite")
    result = attach(tmp_path / "values.sqlite", folder)
    assert (result.attached, result.already_attached, result.unmatched) == (len(ids), 0, ((10_000, 0),))
    assert report_rows(folder / "db.sqlite") == before
    with reportdb.open(folder) as r:
        assert r.tensor_ids() == ids
        for tid in ids:
            np.testing.assert_array_equal(r.tensor(tid), arrays[tid])
            assert r.tensor_info(tid).spec.ttnn_dtype == "DataType.BFLOAT16"
        assert r.check_store() == []
    assert sorted(p.name for p in folder.iterdir()) == ["db.sqlite"]  # one file again, no work copy left


def test_attach_again_is_a_no_op_and_unmatched_stores_the_rest(tmp_path: Path) -> None:
    folder, ids = ttnn_report(tmp_path)
    values_file(tmp_path / "values.sqlite", ids)
    attach(tmp_path / "values.sqlite", folder)
    again = attach(tmp_path / "values.sqlite", folder)
    assert (again.attached, again.already_attached) == (0, len(ids))
    extra = attach(tmp_path / "values.sqlite", folder, unmatched=True)
    assert (extra.attached, extra.already_attached) == (1, len(ids))
    with reportdb.open(folder) as r:
        assert r.tensor_ids() == ids + [10_000]


def test_other_values_for_an_attached_tensor_are_refused_and_nothing_changes(tmp_path: Path) -> None:
    folder, ids = ttnn_report(tmp_path)
    values_file(tmp_path / "values.sqlite", ids)
    attach(tmp_path / "values.sqlite", folder)
    values_file(tmp_path / "other.sqlite", ids, scale=2.0)
    data = (folder / "db.sqlite").read_bytes()
    with pytest.raises(reportdb.errors.TensorExistsError, match="other values"):
        attach(tmp_path / "other.sqlite", folder)
    assert (folder / "db.sqlite").read_bytes() == data
    assert sorted(p.name for p in folder.iterdir()) == ["db.sqlite"]


def test_damaged_values_fail_cleanly_leaving_the_report_as_it_was(tmp_path: Path) -> None:
    folder, ids = ttnn_report(tmp_path)
    values_file(tmp_path / "values.sqlite", ids)
    conn = sqlite3.connect(tmp_path / "values.sqlite")
    with conn:
        conn.execute("UPDATE rdb_chunk SET data = zeroblob(length(data)) WHERE id = (SELECT MAX(id) FROM rdb_chunk)")
    conn.close()
    data = (folder / "db.sqlite").read_bytes()
    with pytest.raises(reportdb.errors.CorruptionError):
        attach(tmp_path / "values.sqlite", folder, unmatched=True)
    assert (folder / "db.sqlite").read_bytes() == data
    assert sorted(p.name for p in folder.iterdir()) == ["db.sqlite"]


def test_refusals_name_what_is_wrong(tmp_path: Path) -> None:
    folder, ids = ttnn_report(tmp_path)
    values_file(tmp_path / "values.sqlite", ids)
    with pytest.raises(reportdb.errors.InvalidArgumentError, match="both the values and the report"):
        attach(tmp_path / "values.sqlite", tmp_path / "values.sqlite")
    plain = tmp_path / "plain.sqlite"
    sqlite3.connect(plain).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises((reportdb.errors.NotAReportFolderError, reportdb.errors.NotAReportError), match="(?i)not a ttnn report"):
        attach(tmp_path / "values.sqlite", plain)
    with pytest.raises(reportdb.errors.ReportNotFoundError):
        attach(tmp_path / "missing.sqlite", folder)
    live = sqlite3.connect(folder / "db.sqlite")  # a run still writing: its commits sit in the WAL
    try:
        live.execute("PRAGMA journal_mode=WAL")
        with live:
            live.execute("INSERT INTO report_metadata (key, value) VALUES ('attach-test', 'x')")
        with pytest.raises(reportdb.errors.ReportLockedError, match="still being written"):
            attach(tmp_path / "values.sqlite", folder)
    finally:
        live.close()


def test_a_report_left_in_wal_mode_is_attached_and_finished_in_rollback_mode(tmp_path: Path) -> None:
    """The write-back goes into the report file itself: one left in WAL mode (no side files) is put back into
    rollback-journal mode first, as reportdb finishes every report."""
    folder, ids = ttnn_report(tmp_path)
    arrays = values_file(tmp_path / "values.sqlite", ids)
    conn = sqlite3.connect(folder / "db.sqlite")
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    conn.close()
    assert attach(tmp_path / "values.sqlite", folder).attached == len(ids)
    assert (folder / "db.sqlite").read_bytes()[18:20] == b"\x01\x01"  # rollback journal
    with reportdb.open(folder) as r:
        np.testing.assert_array_equal(r.tensor(ids[0]), arrays[ids[0]])
    assert sorted(p.name for p in folder.iterdir()) == ["db.sqlite"]


@pytest.mark.process
def test_cli_attach_prints_what_it_did_and_fails_in_one_line(tmp_path: Path) -> None:
    folder, ids = ttnn_report(tmp_path)
    values_file(tmp_path / "values.sqlite", ids)
    run = [sys.executable, "-m", "reportdb", "attach"]
    out = subprocess.run([*run, str(tmp_path / "values.sqlite"), str(folder), "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["attached"] == len(ids)
    bad = subprocess.run([*run, str(tmp_path / "nope.sqlite"), str(folder)], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1 and "nope.sqlite" in bad.stderr


#: ttnn's own way of writing its report: one sqlite3 connection kept open for the run (rollback journal, the module's
#: default 5 s busy timeout), one ``operations`` row committed every 20 ms. It commits ``first`` rows and says READY;
#: then, with a ``go`` file named, waits for it (connection open, no transaction) and commits ``then`` more rows; else
#: it commits until the file ``stop`` appears.
LIVE_WRITER = textwrap.dedent(
    """
    import pathlib, sqlite3, sys, time
    db, first, go, then, stop = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), pathlib.Path(sys.argv[5])
    conn = sqlite3.connect(db)
    committed = 0
    def commit():
        global committed
        conn.execute("INSERT INTO operations (operation_id, name) VALUES (?, 'live')", (100_000 + committed,))
        conn.commit()
        committed += 1
        time.sleep(0.02)
    try:
        for _ in range(first):
            commit()
        print("READY", flush=True)
        if go == "-":
            while not stop.exists():
                commit()
        else:
            while not pathlib.Path(go).exists():
                time.sleep(0.01)
            for _ in range(then):
                commit()
    finally:
        print("COMMITTED", committed, flush=True)
    """
)


def live_writer(tmp_path: Path, db: Path, first: int, go: Path | None = None, then: int = 0) -> "subprocess.Popen[str]":
    """The LIVE_WRITER process, once it has committed its first rows (it stops at the file ``tmp_path/stop``)."""
    script = tmp_path / "live_writer.py"
    script.write_text(LIVE_WRITER)
    proc = subprocess.Popen([sys.executable, str(script), str(db), str(first), str(go or "-"), str(then),
                             str(tmp_path / "stop")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
    return proc


def live_rows(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM operations WHERE name = 'live'").fetchone()[0])
    finally:
        conn.close()


def finished(proc: "subprocess.Popen[str]") -> int:
    """The rows the writer says it committed; it must have ended without an error."""
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "readonly" not in err, err
    return int(out.split("COMMITTED")[-1])


def cli_attach(values: Path, folder: Path) -> "subprocess.CompletedProcess[str]":
    return subprocess.run([sys.executable, "-m", "reportdb", "attach", str(values), str(folder), "--json"],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.process
def test_attach_racing_a_live_writer_loses_none_of_its_commits(tmp_path: Path) -> None:
    """A writer commits every 20 ms all the while attach works: attach either gets the report between two commits or
    refuses in one line, and every row the writer committed is in the file; the writer never fails."""
    folder, ids = ttnn_report(tmp_path)
    values_file(tmp_path / "values.sqlite", ids)
    writer = live_writer(tmp_path, folder / "db.sqlite", 10)
    try:
        out = cli_attach(tmp_path / "values.sqlite", folder)
    finally:
        (tmp_path / "stop").touch()
        committed = finished(writer)
    assert committed > 10 and live_rows(folder / "db.sqlite") == committed
    if out.returncode == 0:
        assert reportdb.verify(folder).ok and json.loads(out.stdout)["attached"] == len(ids)
    else:
        assert len(out.stderr.strip().splitlines()) == 1 and "written by another process" in out.stderr, out.stderr
        assert report_rows(folder / "db.sqlite").keys() == report_rows(SCHEMA_081).keys()  # no reportdb table came in
    assert sorted(p.name for p in folder.iterdir()) == ["db.sqlite"]


@pytest.mark.process
def test_attach_while_a_writer_holds_the_report_open_keeps_its_later_commits(tmp_path: Path) -> None:
    """The writer has the report open between two commits while attach runs (the case a file replaced under it
    breaks: its later commits went to the replaced file, then "attempt to write a readonly database"): attach
    succeeds, and the writer's later commits land in the report beside the attached values."""
    folder, ids = ttnn_report(tmp_path)
    arrays = values_file(tmp_path / "values.sqlite", ids)
    writer = live_writer(tmp_path, folder / "db.sqlite", 10, tmp_path / "go", 20)
    try:
        out = cli_attach(tmp_path / "values.sqlite", folder)
    finally:
        (tmp_path / "go").touch()
        committed = finished(writer)
    assert out.returncode == 0, out.stderr
    assert committed == 30 and live_rows(folder / "db.sqlite") == 30
    with reportdb.open(folder) as r:
        for tid in ids:
            np.testing.assert_array_equal(r.tensor(tid), arrays[tid])
    assert reportdb.verify(folder).ok


RUN_081 = textwrap.dedent(
    """
    import json, pathlib, sys, types
    import numpy as np
    import ttnn
    sys.modules.setdefault("torch", types.ModuleType("torch"))  # ttnn's operation decorator looks for torch.Tensor
    sys.modules["torch"].Tensor = type("Tensor", (), {})
    ttnn.tracer = types.SimpleNamespace(ENABLE_TRACER=False)
    import reportdb
    from reportdb.ttnn import capture

    out = pathlib.Path(sys.argv[1])
    ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NORMAL)
    with reportdb.Writer(out / "values.sqlite", store="all") as w, capture(w):
        a = ttnn.Tensor(np.random.default_rng(1).standard_normal((2, 40)).astype(np.float32),
                        data_type=ttnn.float32, layout=ttnn.ROW_MAJOR_LAYOUT)
        b = ttnn.to_layout(a, ttnn.TILE_LAYOUT)
        c = ttnn.to_layout(b, ttnn.ROW_MAJOR_LAYOUT)
    ttnn.graph.end_graph_capture_to_file(str(out / "capture.json"))
    ttnn.graph.import_report(str(out / "capture.json"), str(out / "report"))
    np.save(out / "c.npy", c.to_numpy())
    print("RESULT", json.dumps({"c": c.tensor_id}))
    """
)


@pytest.mark.slow
def test_a_real_ttnn_081_run_and_its_captured_values_become_one_report(tmp_path: Path) -> None:
    from ttnn_env import ttnn_env

    env = ttnn_env("0.81.1", "3.12")
    script = tmp_path / "run.py"
    script.write_text(RUN_081)
    proc = env.run(str(script), str(tmp_path), extra_env={"TTNN_CONFIG_OVERRIDES": '{"enable_fast_runtime_mode": false}'})
    c_id = json.loads([line for line in proc.stdout.splitlines() if line.startswith("RESULT ")][-1][7:])["c"]
    folder = tmp_path / "report"
    before = report_rows(folder / "db.sqlite")
    listed = {row[0] for row in before["tensors"]}
    result = attach(tmp_path / "values.sqlite", folder)
    assert result.attached == len(listed) and c_id in listed  # every tensor ttnn's report lists has its values now
    assert report_rows(folder / "db.sqlite") == before
    with reportdb.open(folder) as r:
        np.testing.assert_array_equal(r.tensor(c_id), np.load(tmp_path / "c.npy"))
        assert r.tensor_info(c_id).spec.ttnn_dtype is not None


@pytest.mark.process
def test_checking_the_report_keeps_this_process_lock_on_it(tmp_path: Path) -> None:
    """While attach holds the report's write lock (the write-back's first step), it checks the file has not changed:
    that check once opened and closed the report, and closing any descriptor of a file drops every POSIX lock the
    process holds on it, SQLite's included, so a live writer could commit in the middle of the write-back (its journal
    deleted under it, SQLITE_IOERR_DELETE_NOENT). Here another process must still find the file locked after it."""
    import os

    from reportdb.ttnn import attach_values

    db = tmp_path / "db.sqlite"
    with sqlite3.connect(db) as made:
        made.execute("CREATE TABLE t (x)")
    made.close()
    holder = sqlite3.connect(db, isolation_level=None)
    fd = os.open(db, os.O_RDONLY)
    try:
        holder.execute("BEGIN IMMEDIATE")  # this process's write lock, as the backup's first step holds one
        attach_values._file_state(db, fd)
        probe = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
            import sqlite3
            conn = sqlite3.connect({str(db)!r}, timeout=0, isolation_level=None)
            try:
                conn.execute("BEGIN IMMEDIATE")
                print("got the lock")
            except sqlite3.OperationalError as exc:
                print(exc)
        """)], capture_output=True, text=True, timeout=60)
        assert probe.stdout.strip() == "database is locked", probe.stdout + probe.stderr
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        os.close(fd)
