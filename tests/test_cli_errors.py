"""What a CLI user meets with someone else's report: read-only looks, legacy folders, clear errors, closed pipes.

Every test runs the real command in a subprocess (``python -m reportdb ...``) on real fixtures or on files built here.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import reportdb

from conftest import FIXTURES

pytestmark = pytest.mark.process  # starts other processes: CI runs it, the fast tier leaves it out

LEGACY = FIXTURES / "ttnn-0.62.2-bin" / "report"
LEGACY_TENSOR_FILES = sum(1 for p in (LEGACY / "tensors").iterdir() if p.suffix in (".bin", ".tensorbin", ".pt"))


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reportdb", *args], capture_output=True, text=True, timeout=300,
        env=None if env is None else {**os.environ, **env},
    )


def one_line_error(out: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a failed command (asserting there is exactly one and no traceback)."""
    assert out.returncode != 0, out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    return lines[0]


def strict_json(text: str) -> Any:
    """Parse JSON as a strict reader would: NaN and Infinity are not JSON."""
    def refuse(name: str) -> None:
        raise AssertionError(f"non-standard JSON constant {name} in output")
    return json.loads(text, parse_constant=refuse)


def snapshot(folder: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under ``folder`` with its size, mtime (ns) and sha256, and the folder's own mtime."""
    files = {".": (0, folder.stat().st_mtime_ns, "")}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
        files[str(p.relative_to(folder))] = (st.st_size, st.st_mtime_ns, digest)
    return files


@pytest.fixture()
def legacy(tmp_path: Path) -> Path:
    """A writable copy of the real ttnn 0.62.2 report folder, nothing migrated."""
    dst = tmp_path / "legacy"
    shutil.copytree(LEGACY, dst)
    for p in [dst, *dst.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("migrated") / "report"
    reportdb.migrate(LEGACY, dst)
    return dst


def _writer_report(path: Path, records: list[tuple[int, int, float]] | None = None) -> Path:
    """A brand-new Writer report with tensors 1 (actual) and 2 (golden) and, if given, comparison records."""
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
    with reportdb.Writer(path) as w:
        w.put_tensor(1, x)
        w.put_tensor(2, x)
        w.put_tensor(3, x[::-1].copy() * 3 + 1)  # far from tensor 2
        w.put_tensor(4, np.where(x > 0.5, np.nan, x).astype(np.float32))  # NaN where 2 has numbers
        w.add_operation(1, "ttnn.relu", outputs=[1])
    if records:
        con = sqlite3.connect(path / "db.sqlite")
        con.executemany(
            "INSERT INTO local_tensor_comparison_records(tensor_id, golden_tensor_id, matches, desired_pcc, actual_pcc)"
            " VALUES (?, ?, 1, ?, 1.0)", records,
        )
        con.commit()
        con.close()
    return path


# --- compare --golden reads only ------------------------------------------------------------------------------


def test_compare_golden_on_a_legacy_original_changes_nothing(legacy: Path) -> None:
    before = snapshot(legacy)
    out = run("compare", str(legacy), "--golden")
    assert out.returncode == 3, out.stderr  # nothing compared is not a pass
    assert "tensor not stored" in out.stdout and "0 compared" in out.stdout
    assert f"{LEGACY_TENSOR_FILES} legacy tensor files" in out.stderr and "reportdb migrate" in out.stderr
    assert snapshot(legacy) == before


def test_compare_golden_store_on_a_legacy_original_is_refused_untouched(legacy: Path) -> None:
    before = snapshot(legacy)
    message = one_line_error(run("compare", str(legacy), "--golden", "--store"))
    assert "legacy report database" in message and "reportdb migrate" in message and "nothing was changed" in message
    assert snapshot(legacy) == before


def test_compare_golden_on_the_migrated_report_reads_only_and_fails_like_a_test_runner(migrated: Path) -> None:
    before = snapshot(migrated)
    text = run("compare", str(migrated), "--golden")
    assert text.returncode == 1, text.stderr  # the 0.62.2 run has records below their desired PCC
    assert "FAIL pcc" in text.stdout and "failed" in text.stdout.splitlines()[-2]
    figures = [t.split("e")[0] for t in text.stdout.split() if "." in t and t.replace(".", "", 1).replace("e-", "", 1).isdigit()]
    digits = [len(f.replace(".", "").lstrip("0")) for f in figures]
    assert digits and max(digits) <= 6  # figures to 6 significant digits, float32 ones too (not 0.03890492012659208)
    as_json = run("compare", str(migrated), "--golden", "--json")
    assert as_json.returncode == 1, as_json.stderr
    results = strict_json(as_json.stdout)["records"]  # printed in full despite the failing exit status
    con = sqlite3.connect(f"file:{LEGACY / 'db.sqlite'}?mode=ro", uri=True)
    records = sum(con.execute(f"SELECT COUNT(*) FROM {t}_tensor_comparison_records").fetchone()[0] for t in ("local", "global"))
    con.close()
    assert len(results) == records and any(r["metrics"] and not r["metrics"]["passed"] for r in results)
    assert snapshot(migrated) == before
    with reportdb.open(migrated) as report, report.connection() as conn:
        assert conn.execute("SELECT COUNT(*) FROM rdb_comparison").fetchone()[0] == 0


def test_compare_golden_store_keeps_results_in_a_reportdb_database(migrated: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    shutil.copytree(migrated, work)
    out = run("compare", str(work), "--golden", "--store")
    assert out.returncode == 1 and "(results stored)" in out.stdout, out.stderr
    with reportdb.open(work) as report, report.connection() as conn:
        assert conn.execute("SELECT COUNT(*) FROM rdb_comparison").fetchone()[0] > 0
    assert one_line_error(run("compare", str(work), str(work), "--store")).endswith("use it with --golden")


def test_compare_golden_without_records_says_nothing_to_compare(tmp_path: Path) -> None:
    report = _writer_report(tmp_path / "run")
    before = snapshot(report)
    out = run("compare", str(report), "--golden")  # exit 3: nothing was compared
    assert out.returncode == 3 and out.stdout.startswith("nothing to compare"), out.stdout + out.stderr
    as_json = run("compare", str(report), "--golden", "--json")
    assert as_json.returncode == 3 and strict_json(as_json.stdout)["records"] == [], as_json.stderr
    stored = run("compare", str(report), "--golden", "--store")
    assert stored.returncode == 3 and "nothing to compare" in stored.stdout, stored.stderr
    assert before.keys() == snapshot(report).keys()


def test_compare_golden_exit_code_follows_the_records(tmp_path: Path) -> None:
    passing = _writer_report(tmp_path / "pass", records=[(1, 2, 0.99)])
    out = run("compare", str(passing), "--golden")
    assert out.returncode == 0 and "1 passed, 0 failed" in out.stdout, out.stdout + out.stderr
    failing = _writer_report(tmp_path / "fail", records=[(1, 2, 0.99), (3, 2, 0.99), (4, 2, 0.99), (9, 2, 0.99)])
    as_json = run("compare", str(failing), "--golden", "--json")
    assert as_json.returncode == 1, as_json.stderr
    results = {r["tensor_id"]: r for r in strict_json(as_json.stdout)["records"]}
    assert set(results) == {1, 3, 4, 9}
    assert results[1]["metrics"]["passed"] and not results[3]["metrics"]["passed"]
    assert results[4]["metrics"]["nan_mismatches"] > 0 and results[9]["status"] == "tensor not stored"
    text = run("compare", str(failing), "--golden")
    assert text.returncode == 1 and "1 passed, 2 failed; 1 not compared" in text.stdout


def test_compare_runs_reads_only_and_exits_1_on_a_divergence(tmp_path: Path) -> None:
    a = _writer_report(tmp_path / "a")
    b = tmp_path / "b"
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
    with reportdb.Writer(b) as w:
        w.put_tensor(1, np.where(x > 0, np.inf, -x).astype(np.float32))
        w.add_operation(1, "ttnn.relu", outputs=[1])
    before = snapshot(a), snapshot(b)
    out = run("compare", str(a), str(b), "--json")
    assert out.returncode == 1, out.stderr
    assert strict_json(out.stdout)["first_divergence"]["operation_id_a"] == 1
    same = run("compare", str(a), str(a))
    assert same.returncode == 0 and "first divergence: none" in same.stdout, same.stderr
    assert (snapshot(a), snapshot(b)) == before


# --- legacy folders that were never migrated ----------------------------------------------------------------------


def test_legacy_folder_points_to_migrate_and_stays_untouched(legacy: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    before = snapshot(legacy)
    info = run("info", str(legacy))
    assert info.returncode == 0, info.stderr
    assert f"{LEGACY_TENSOR_FILES} legacy tensor files in {legacy} not migrated" in info.stdout
    assert f"reportdb migrate {legacy} -o NEW_FOLDER" in info.stdout and "upgrade" not in info.stdout
    summary = strict_json(run("info", str(legacy), "--json").stdout)
    assert summary["tensors"] == 0 and summary["legacy_files_not_migrated"] == LEGACY_TENSOR_FILES
    for args in (("ls", str(legacy)), ("ls", str(legacy), "--json")):
        out = run(*args)
        assert out.returncode == 0 and "reportdb migrate" in out.stderr and str(LEGACY_TENSOR_FILES) in out.stderr, out.stderr
    assert "reportdb migrate" in one_line_error(run("verify", str(legacy)))  # verifying nothing is not a pass
    plot = run("plot", str(legacy), "2", "-o", str(tmp_path / "t.png"))
    message = one_line_error(plot)
    assert plot.returncode == 1 and "no tensor 2" in message and f"reportdb migrate {legacy} -o NEW_FOLDER" in message
    assert not (tmp_path / "t.png").exists()
    shown = run("show", str(legacy / "tensors" / "2.bin"))
    assert shown.returncode == 0, shown.stderr
    assert snapshot(legacy) == before


def test_migrated_report_has_nothing_pending_and_stays_untouched(migrated: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    before = snapshot(migrated)
    info = run("info", str(migrated))
    assert info.returncode == 0 and "not migrated" not in info.stdout and "legacy" not in info.stdout, info.stdout
    assert strict_json(run("info", str(migrated), "--json").stdout)["legacy_files_not_migrated"] == 0
    for args in (("ls", str(migrated)), ("verify", str(migrated)), ("compare", str(migrated), str(migrated))):
        out = run(*args)
        assert out.returncode == 0 and out.stderr == "", out.stderr
    plot = run("plot", str(migrated), "2", "--against", "1000001", "-o", str(tmp_path / "t.svg"))
    assert plot.returncode == 0 and (tmp_path / "t.svg").read_bytes().lstrip().startswith(b"<?xml"), plot.stderr
    assert snapshot(migrated) == before


# --- smaller ones ---------------------------------------------------------------------------------------------


def test_plot_unknown_suffix_is_refused_before_any_work(migrated: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    message = one_line_error(run("plot", str(tmp_path / "no-such-report"), "2", "-o", str(tmp_path / "x.jpgx")))
    assert "unknown suffix '.jpgx'" in message and ".png" in message and ".svg" in message
    message = one_line_error(run("plot", str(migrated), "2", "-o", str(tmp_path / "nodir" / "x.png")))
    assert f"cannot write {tmp_path / 'nodir' / 'x.png'}: folder {tmp_path / 'nodir'} does not exist" == message.removeprefix("Error: ")
    assert list(tmp_path.iterdir()) == []


def test_convert_into_a_missing_folder_names_the_users_path(tmp_path: Path) -> None:
    target = tmp_path / "nodir" / "x.npy"
    message = one_line_error(run("convert", str(LEGACY / "tensors" / "2.bin"), "-o", str(target)))
    assert message == f"Error: cannot write {target}: folder {target.parent} does not exist"
    assert not target.parent.exists()


@pytest.mark.parametrize(
    "args",
    [("ls", "{m}"), ("ls", "{m}", "--json"), ("info", "{m}"), ("verify", "{m}", "--json"), ("compare", "{m}", "--golden", "--json"),
     ("show", str(LEGACY / "tensors" / "2.bin")), ("--help",)],
)
def test_closed_stdout_ends_quietly(migrated: Path, args: tuple[str, ...]) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command writes a byte: `reportdb ls | head` at its worst
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "reportdb", *(a.format(m=migrated) for a in args)],
            stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=300,
        )
    finally:
        os.close(write_end)
    if args == ("--help",):  # click's own output: any quiet non-zero status
        assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
        return
    assert (proc.returncode, proc.stderr) == (141, ""), proc.stderr


def test_head_on_a_long_listing_ends_quietly(tmp_path: Path) -> None:
    report = tmp_path / "many"
    with reportdb.Writer(report) as w:  # a listing far larger than a pipe's buffer, so head closes it mid-way
        for tensor_id in range(1500):
            w.put_tensor(tensor_id, np.zeros(4, np.float32))
    proc = subprocess.run(
        f"{shlex.quote(sys.executable)} -m reportdb ls {shlex.quote(str(report))} | head -n 2; exit ${{PIPESTATUS[0]}}",
        shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=300,
    )
    assert (proc.returncode, proc.stderr, len(proc.stdout.splitlines())) == (141, "", 2)


def _golden_with(report: Path, replacement: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``reportdb compare REPORT --golden ARGS`` in a subprocess whose ``reportdb.compare_golden`` is ``replacement``
    (the source of a function of that name), to reach the CLI's handling of what the library returns or raises."""
    code = (
        "import sys, numpy as np, reportdb\n" + replacement + "reportdb.compare_golden = replacement\n"
        "from reportdb.cli import main\n"
        f"sys.argv = ['reportdb', 'compare', {str(report)!r}, '--golden', *{list(args)!r}]\n"
        "main()\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)


def test_internal_error_is_one_line_and_debug_shows_the_traceback(tmp_path: Path) -> None:
    report = _writer_report(tmp_path / "run", records=[(1, 2, 0.99)])
    broken = "def replacement(*a, **k):\n    raise RuntimeError('first line\\nsecond line\\nthird line')\n"
    out = _golden_with(report, broken)
    assert one_line_error(out) == "Error: internal error RuntimeError: first line (set REPORTDB_DEBUG=1 for the traceback)"
    debug = _golden_with(report, broken, env={**os.environ, "REPORTDB_DEBUG": "1"})
    assert debug.returncode != 0 and "Traceback" in debug.stderr and "third line" in debug.stderr


def test_migrate_copies_triggers_only_when_asked(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(LEGACY, src, ignore=shutil.ignore_patterns("tensors"))
    (src / "db.sqlite").chmod(0o644)
    con = sqlite3.connect(src / "db.sqlite")
    con.execute("CREATE TRIGGER t_ops AFTER INSERT ON operations BEGIN DELETE FROM devices; END")
    con.commit()
    con.close()
    assert "--copy-triggers Also copy SRC's triggers" in " ".join(run("migrate", "--help").stdout.split())
    for flag, expected in (((), []), (("--copy-triggers",), ["t_ops"])):
        dst = tmp_path / f"dst{len(flag)}"
        out = run("migrate", str(src), "-o", str(dst), *flag)
        assert out.returncode == 0, out.stderr
        con = sqlite3.connect(f"file:{dst / 'db.sqlite'}?mode=ro", uri=True)
        assert [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='trigger'")] == expected
        con.close()


def test_migrate_summary_names_skipped_symlinks(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(LEGACY, src)
    for p in [src, *src.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    outside = tmp_path / "outside.bin"
    shutil.copy(LEGACY / "tensors" / "2.bin", outside)
    (src / "tensors" / "777.bin").symlink_to(outside)
    out = run("migrate", str(src), "-o", str(tmp_path / "dst"))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("skipped:"))
    assert lines[at] == "skipped:  1 (never followed, read or copied)", out.stdout
    assert lines[at + 1].startswith("  symlink tensors/777.bin: symbolic link to"), out.stdout


def test_json_output_is_strict_even_with_nonfinite_values(tmp_path: Path) -> None:
    report = _writer_report(tmp_path / "run", records=[(1, 2, 0.99)])
    nonfinite = (
        "from reportdb.analysis.culprits import GoldenComparison\n"
        "from reportdb.analysis.golden import GoldenResult\n"
        "from reportdb.numeric.metrics import Comparison\n"
        "def replacement(*a, **k):\n"
        "    m = Comparison((2,), (2,), 'float32', 'float32', 1e-5, 1e-8, 0.99, 0.02, pcc=float('nan'),"
        " max_abs_error=np.float32('inf'), ulp_mean=np.float64(2.5), passed=True)\n"
        "    record = GoldenResult('local', 1, 0, 2, 0.99, float('-inf'), None, m, 'compared', verdict='pass')\n"
        "    return GoldenComparison((record,), None, False)\n"
    )
    out = _golden_with(report, nonfinite, "--json")
    assert out.returncode == 0, out.stderr
    (result,) = strict_json(out.stdout)["records"]
    assert (result["tensor_id"], result["recorded_pcc"], result["status"]) == (1, None, "compared")
    metrics = result["metrics"]
    assert (metrics["pcc"], metrics["max_abs_error"], metrics["ulp_mean"], metrics["passed"]) == (None, None, 2.5, True)
    assert metrics["shape_a"] == [2] and metrics["notes"] == []


def test_table_figures_have_six_significant_digits_whatever_their_float_type() -> None:
    """numpy's float32 figures (a bfloat16 pair's errors) print like Python floats, not as their full repr."""
    from reportdb.cli.common import _num

    assert [_num(v) for v in (np.float32(0.03890492), 0.1234567891, np.float64(2.5e-7), 3, np.int64(5), None)] == [
        "0.0389049", "0.123457", "2.5e-07", "3", "5", "-"]
