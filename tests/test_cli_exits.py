"""Honest exit statuses and clear messages on the command line (issue #33): usage errors exit 2, a replay that
compared nothing exits 3 and every replay says how much it compared, tables whose columns never run together, and
the hints that name a command that works.

Every CLI test runs the real command in a subprocess (``python -m reportdb ...``) on reports built here or on the
project's fixtures.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import reportdb
from reportdb import Distribution, Placement

from conftest import FIXTURES

LEGACY = FIXTURES / "ttnn-0.62.2-bin" / "report"
BF16 = ml_dtypes.bfloat16


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reportdb", *args], capture_output=True, text=True, timeout=300)


def one_line(out: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a command (asserting there is exactly one and no traceback)."""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    return lines[0]


def columns(line: str) -> list[str]:
    """A table line's cells: columns stand at least two spaces apart, so two spaces split them."""
    return re.split(r"\s{2,}", line.strip())


def summary(tensor_id: int) -> str:
    """A tensor argument as ttnn 0.81's graph report records it."""
    return f"ttnn.Tensor(shape=Shape([32, 64]), dtype=DataType.BFLOAT16, layout=Layout.TILE, tensor_id={tensor_id})"


def make_replayable(path: Path, *, first_argument: str = "0") -> Path:
    """Five operations: 1 relu right, 2 relu whose output is the negated input (float32: a 10-digit ULP distance,
    max abs error with 6 digits), 3 frobnicate (no reference), 4 softmax with an argument no reference reads, 5 a
    multiply whose second input is not stored. ``first_argument`` names op 1's argument: anything but "0" is one
    no reference reads, so a chain breaks at op 1 and never reaches op 2."""
    x = np.random.default_rng(3).uniform(0.5, 5.5, (32, 64)).astype(np.float32)
    with reportdb.Writer(path) as w:
        for tensor_id, array in ((1, x), (2, x), (3, -x), (4, x), (5, x)):
            w.put_tensor(tensor_id, array)
        w.add_operation(1, "ttnn.relu", inputs=[1], outputs=[2], arguments={first_argument: summary(1)})
        w.add_operation(2, "ttnn.relu", inputs=[2], outputs=[3], arguments={"0": summary(2)})
        w.add_operation(3, "ttnn.frobnicate", inputs=[3], outputs=[4], arguments={"dim": "3", "0": summary(3)})
        w.add_operation(4, "ttnn.softmax", inputs=[4], outputs=[5], arguments={"dim": "-1", "frobnicate": "2"})
        w.add_operation(5, "ttnn.multiply", inputs=[5, 99], outputs=[6])
    return path


@pytest.fixture(scope="module")
def replayable(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_replayable(tmp_path_factory.mktemp("replay") / "ops.sqlite")


# --- usage errors exit 2, in one line ---------------------------------------------------------------------------


@pytest.mark.process
@pytest.mark.parametrize("args, message", [
    (("compare", "{r}"), "give one report with --golden, or two reports A B"),
    (("compare", "{r}", "{r}", "--golden"), "give one report with --golden, or two reports A B"),
    (("compare", "{r}", "{r}", "--store"), "--store keeps golden comparison results: use it with --golden"),
    (("locate", "{r}", "2"), "give --golden (with --kind local or global) or --against ID or PATH:ID"),
    (("locate", "{r}", "2", "--golden", "--against", "1"), "give --golden (with --kind local or global) or --against"),
    (("locate", "{r}", "2", "--against", "1", "--kind", "local"), "--kind picks the comparison record of --golden"),
    (("locate", "{r}", "2", "--golden", "--device", "a,b"), "--device takes a mesh coordinate such as 0,2, not 'a,b'"),
    (("locate", "{r}", "2", "--against", "x"), "--against takes ID or PATH:ID, not 'x'"),
])
def test_usage_errors_exit_2_in_one_line(replayable: Path, args: tuple[str, ...], message: str) -> None:
    out = run(*(a.format(r=replayable) for a in args))
    assert out.returncode == 2 and out.stdout == "", out.stderr
    assert one_line(out).startswith(f"Error: {message}")


@pytest.mark.process
def test_help_and_readme_state_the_exit_statuses() -> None:
    helped = run("replay", "--help").stdout
    assert "3 when nothing failed because nothing was compared" in " ".join(helped.split())
    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8").split())
    assert "`replay` exits 3 when it compared nothing" in readme


# --- replay says how much it compared, and exits 3 when nothing was ---------------------------------------------


@pytest.mark.process
def test_replay_says_how_many_operations_were_compared(replayable: Path) -> None:
    out = run("replay", str(replayable))
    assert out.returncode == 1, out.stderr  # op 2 fails
    assert out.stdout.splitlines()[-1] == (
        "compared 2 of 5 operations (1 no_reference, 1 unsupported_arguments, 1 missing_inputs); 1 failed")
    assert "first failure: operation 2 ttnn.relu" in out.stdout


@pytest.mark.process
def test_replay_of_nothing_compared_exits_3(tmp_path: Path) -> None:
    legacy = run("replay", str(LEGACY))  # values never migrated: every operation misses its inputs
    assert legacy.returncode == 3, legacy.stderr
    assert legacy.stdout.splitlines()[-1] == "compared 0 of 12 operations (12 missing_inputs); 0 failed"
    assert legacy.stderr.splitlines()[-1] == "reportdb: compared 0 of 12 operations: nothing was compared (exit status 3)"
    assert "reportdb migrate" in legacy.stderr
    as_json = run("replay", str(LEGACY), "--json")
    assert as_json.returncode == 3 and len(json.loads(as_json.stdout)["rows"]) == 12, as_json.stderr


@pytest.mark.process
def test_replay_of_no_matching_operation_exits_3(replayable: Path) -> None:
    out = run("replay", str(replayable), "--ops", "x*")
    assert out.returncode == 3
    assert out.stdout.splitlines() == ["first failure: none", "compared 0 of 0 operations; 0 failed"]
    assert one_line(out) == "reportdb: no operation matches --ops 'x*': nothing was compared (exit status 3)"


@pytest.mark.process
def test_a_chain_that_never_reaches_the_culprit_exits_3(tmp_path: Path) -> None:
    report = make_replayable(tmp_path / "broken.sqlite", first_argument="frobnicate")
    isolated = run("replay", str(report), "--ops", "ttnn.relu")
    assert isolated.returncode == 1 and "compared 1 of 2 operations (1 unsupported_arguments); 1 failed" in isolated.stdout
    chained = run("replay", str(report), "--ops", "ttnn.relu", "--chain")
    assert chained.returncode == 3, chained.stdout + chained.stderr
    assert "first failure: none" in chained.stdout
    assert "compared 0 of 2 operations (1 unsupported_arguments, 1 missing_inputs); 0 failed" in chained.stdout


@pytest.mark.process
def test_replay_of_a_missing_report_prints_nothing_before_its_error(tmp_path: Path) -> None:
    out = run("replay", str(tmp_path / "nonexistent"))
    assert out.returncode == 1 and out.stdout == ""
    assert "no such report" in one_line(out)


# --- tables: columns two spaces apart, whatever the values ------------------------------------------------------


@pytest.mark.process
def test_replay_table_columns_stand_apart(replayable: Path) -> None:
    lines = run("replay", str(replayable)).stdout.splitlines()
    assert columns(lines[0]) == ["op", "name", "status", "pcc", "max abs err", "ulp max", "result"]
    wrong = next(line for line in lines if line.split()[0] == "2")
    op, name, status, pcc, max_err, ulp, result = columns(wrong)
    assert (op, name, status, result) == ("2", "ttnn.relu", "compared", "FAIL " + result[5:])
    assert float(pcc) == pytest.approx(-1) and float(max_err) > 1 and int(ulp) >= 10 ** 9  # 10 digits


@pytest.mark.process
def test_locate_devices_table_columns_stand_apart(tmp_path: Path) -> None:
    """Each device's fit scale is a small negative number: 12 characters beside the max abs error column."""
    golden = np.random.default_rng(2).standard_normal((1, 1, 32, 128)).astype(np.float32)
    shards = [((0, c), (golden[..., c * 64:(c + 1) * 64] * -1.2345e-5).astype(BF16)) for c in range(2)]
    path = tmp_path / "mesh.sqlite"
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, shards=shards, layout="TILE", ttnn_dtype="BFLOAT16",
                          distribution=Distribution((1, 2), (Placement("replicate"), Placement("shard", 3))))
        report.put_tensor(2, golden)
    out = run("locate", str(path), "1", "--against", "2")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    at = lines.index("devices:")
    assert columns(lines[at + 1]) == ["device", "pcc", "max abs err", "fit scale", "fit offset", "mismatches", "verdict"]
    expected = {d.coordinate: d for d in reportdb.locate(path, 1, against=2).devices}
    for line in lines[at + 2:at + 4]:
        device, pcc, max_err, scale, offset, mismatches, verdict = columns(line)
        entry = expected[tuple(int(c) for c in device.split(","))]
        assert float(scale) == pytest.approx(entry.fit_scale, rel=1e-5) and float(scale) < 0
        assert float(offset) == pytest.approx(entry.fit_offset, rel=1e-5)
        assert float(max_err) == pytest.approx(entry.max_abs_error, rel=1e-5) and int(mismatches) == entry.mismatches
    tiles = lines.index("worst tiles:")
    assert columns(lines[tiles + 1]) == ["tile", "rows", "cols", "max abs err", "mismatches", "device"]


# --- hints that name what works ---------------------------------------------------------------------------------


@pytest.mark.process
def test_info_on_a_lone_legacy_database_suggests_what_works(tmp_path: Path) -> None:
    lone = tmp_path / "lone.sqlite"
    shutil.copyfile(LEGACY / "db.sqlite", lone)
    out = run("info", str(lone))
    assert out.returncode == 0, out.stderr
    line = next(line for line in out.stdout.splitlines() if line.startswith("legacy report:"))
    command = re.search(r"`(.*)`", line)
    assert command is not None and "reportdb migrate" not in line
    done = subprocess.run(command.group(1).replace("reportdb ", f"{sys.executable} -m reportdb "), shell=True,
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    with reportdb.open(tmp_path / "NEW.sqlite") as made:
        assert made.schema_revision is not None  # a reportdb report now
    assert lone.read_bytes() == (LEGACY / "db.sqlite").read_bytes()  # the original untouched
    store = run("compare", str(lone), "--golden", "--store")
    assert "cp " in one_line(store) and "reportdb upgrade" in store.stderr and "reportdb migrate" not in store.stderr


@pytest.mark.process
@pytest.mark.parametrize("what", ["database", "folder"])
def test_show_on_a_report_points_to_info_and_ls(tmp_path: Path, what: str) -> None:
    with reportdb.Writer(tmp_path / "run") as w:
        w.put_tensor(1, np.zeros(4, np.float32))
    target = tmp_path / "run" / "db.sqlite" if what == "database" else tmp_path / "run"
    out = run("show", str(target))
    assert out.returncode == 1
    message = one_line(out)
    assert f"reportdb info {target}" in message and f"reportdb ls {target}" in message, message


@pytest.mark.process
def test_convert_help_says_bfloat16_is_widened() -> None:
    helped = " ".join(run("convert", "--help").stdout.split())
    assert "bfloat16 and float8 values widened to float32" in helped


@pytest.mark.process
def test_a_rerun_of_an_in_place_migrate_says_it_did_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "report"
    shutil.copytree(LEGACY, folder)
    for p in [folder, *folder.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    first = run("migrate", str(folder))
    assert first.returncode == 0 and "tables:" in first.stdout, first.stderr
    again = run("migrate", str(folder))
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [
        f"{folder}: already migrated in place; nothing to do (an earlier run stored 36 tensors: "
        f"`reportdb info {folder}` describes the report)"]
    removing = run("migrate", str(folder), "--remove-legacy-files")
    assert removing.returncode == 0 and "removed 36 legacy tensor files" in removing.stdout, removing.stderr
    assert not [p for p in folder.rglob("*") if p.suffix in (".bin", ".pt")]


@pytest.mark.process
@pytest.mark.parametrize("command", ["migrate", "attach"])
def test_a_sidecar_that_is_a_folder_is_one_clear_line(tmp_path: Path, command: str) -> None:
    (tmp_path / "sidecars").mkdir()
    values = tmp_path / "values.sqlite"
    with reportdb.Writer(values) as w:
        w.put_tensor(1, np.zeros(4, np.float32))
    args = [str(LEGACY), "-o", str(tmp_path / "out")] if command == "migrate" else [str(values), str(LEGACY)]
    out = run(command, *args, "--sidecar", str(tmp_path / "sidecars"))
    assert out.returncode == 1
    assert one_line(out).startswith(f"Error: --sidecar {tmp_path / 'sidecars'}: is a folder; give a ttnn")
    assert not (tmp_path / "out").exists()


# --- the library ------------------------------------------------------------------------------------------------


def test_locate_takes_paths_as_its_siblings_do(tmp_path: Path) -> None:
    x = np.linspace(-1, 1, 64 * 64, dtype=np.float32).reshape(64, 64)
    with reportdb.Writer(tmp_path / "a") as w:
        w.put_tensor(1, x.astype(BF16))
        w.put_tensor(2, x)
    with reportdb.Writer(tmp_path / "b") as w:
        w.put_tensor(7, x)
    con = sqlite3.connect(tmp_path / "a" / "db.sqlite")
    con.execute("INSERT INTO local_tensor_comparison_records(tensor_id, golden_tensor_id, matches, desired_pcc, "
                "actual_pcc) VALUES (1, 2, 1, 0.99, 1.0)")
    con.commit()
    con.close()
    by_path = reportdb.locate(tmp_path / "a", 1, golden="local")
    by_name = reportdb.locate(str(tmp_path / "a"), 1, against=(str(tmp_path / "b"), 7))
    with reportdb.open(tmp_path / "a") as a, reportdb.open(tmp_path / "b") as b:
        opened = reportdb.locate(a, 1, against=(b, 7))
    assert by_path.golden == "local golden tensor 2" and by_name.golden.startswith("tensor 7 of ")
    assert by_path.max_abs_error == by_name.max_abs_error == opened.max_abs_error > 0


@pytest.mark.process
def test_compare_runs_json_describes_a_as_a_and_b_as_b(tmp_path: Path) -> None:
    x = np.linspace(-1, 1, 32 * 32, dtype=np.float32).reshape(32, 32)
    for name, array in (("a", x), ("b", x.astype(BF16))):
        with reportdb.Writer(tmp_path / name) as w:
            w.put_tensor(1, x)
            w.put_tensor(2, array)
            w.add_operation(1, "ttnn.relu", inputs=[1], outputs=[2])
    out = run("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json")
    (row,) = json.loads(out.stdout)["rows"]
    assert (row["tensor_a"], row["metrics"]["dtype_a"], row["metrics"]["dtype_b"]) == (2, "float32", "bfloat16")
    result = reportdb.compare_runs(tmp_path / "a", tmp_path / "b")
    assert result.rows[0].metrics is not None and result.rows[0].metrics.dtype_a == "float32"


def test_compare_runs_shapes_name_their_runs(tmp_path: Path) -> None:
    for name, shape in (("a", (32, 32)), ("b", (32, 64))):
        with reportdb.Writer(tmp_path / name) as w:
            w.put_tensor(1, np.zeros(shape, np.float32))
            w.put_tensor(2, np.ones(shape, np.float32))
            w.add_operation(1, "ttnn.relu", inputs=[1], outputs=[2])
    (row,) = reportdb.compare_runs(tmp_path / "a", tmp_path / "b").rows
    assert row.metrics is not None and (row.metrics.shape_a, row.metrics.shape_b) == ((32, 32), (32, 64))
    assert row.shape == (32, 32) and row.verdict == "diverges"
