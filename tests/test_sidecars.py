"""ttnn 0.81's comparison-records and tensor-lifetime sidecars read by ``migrate`` and ``attach``.

The fixture ``tests/data/ttnn-0.81.1-comparison`` is a report folder as ttnn 0.81.1's own comparison mode and importer
left it (``tests/data/make/comparison_sidecars.py``): ``db.sqlite`` with the records ttnn imported itself, the
``graph_capture.comparison_records.json`` and ``graph_capture.tensor_lifetime.json`` sidecars, and the values of every
output and golden. ttnn's own tables are the truth: the sidecars read into a report that lacks them must give the same
rows, field for field; a malformed sidecar is a SidecarError and nothing is written.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import reportdb
from conftest import FIXTURES, built_once
from reportdb.legacy.sidecars import MAX_SIDECAR_BYTES, SidecarError, read_sidecar
from reportdb.ttnn import attach
from test_visualizer_queries import answers, assert_same_answers, runner, visualizer_python  # fixtures

FOLDER = FIXTURES / "ttnn-0.81.1-comparison"
TABLES = ("local_tensor_comparison_records", "global_tensor_comparison_records", "tensor_lifetime")
ROOT = Path(__file__).resolve().parents[1]


def rows(db: Path, table: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        cursor = conn.execute(f"SELECT * FROM {table}")
        names = [d[0] for d in cursor.description]
        return sorted((tuple(zip(names, r)) for r in cursor.fetchall()), key=repr)
    finally:
        conn.close()


def stripped_report(tmp_path: Path) -> Path:
    """The fixture folder with the rows the sidecars hold removed from its db.sqlite (a report made without them)."""
    folder = tmp_path / "report"
    shutil.copytree(FOLDER / "comparison-report", folder)
    conn = sqlite3.connect(folder / "db.sqlite")
    with conn:
        for table in TABLES:
            conn.execute(f"DELETE FROM {table}")
        golden = json.loads((folder / "graph_capture.comparison_records.json").read_text())["tensors"]
        conn.executemany("DELETE FROM tensors WHERE tensor_id=?", [(t["tensor_id"],) for t in golden])
    conn.close()
    return folder


def values_file(path: Path) -> None:
    """The values of the run (outputs and goldens, as ttnn read them back) in a reportdb file, as capture() leaves one
    (built once per process, copied to ``path``)."""

    def build(made: Path) -> None:
        data = np.load(FOLDER / "values.npz")
        with reportdb.Writer(made) as w:
            for key in data.files:
                w.put_tensor(int(key[1:]), data[key])

    built_once(path, build)


def test_the_sidecars_give_the_rows_ttnn_imported_itself(tmp_path: Path) -> None:
    folder = stripped_report(tmp_path)
    values_file(tmp_path / "values.sqlite")
    result = attach(tmp_path / "values.sqlite", folder)
    truth = FOLDER / "comparison-report" / "db.sqlite"
    for table in (*TABLES, "tensors"):
        assert rows(folder / "db.sqlite", table) == rows(truth, table), table
    assert result.sidecars is not None
    assert result.sidecars["added"] == {"local_tensor_comparison_records": 6, "global_tensor_comparison_records": 6,
                                        "tensors": 12, "tensor_lifetime": 6}
    # every field of every record in the files is in a column, value for value
    comparison = json.loads((folder / "graph_capture.comparison_records.json").read_text())
    lifetime = json.loads((folder / "graph_capture.tensor_lifetime.json").read_text())
    stored = {t: {dict(r)["tensor_id"]: dict(r) for r in rows(folder / "db.sqlite", t)} for t in TABLES}
    for table, records in [(t, comparison[t]) for t in TABLES[:2]] + [("tensor_lifetime", lifetime)]:
        assert len(records) == len(stored[table])
        for record in records:
            row = stored[table][record["tensor_id"]]
            for key, value in record.items():
                assert row[key] == (int(value) if isinstance(value, bool) else value), (table, key)


def test_attached_sidecars_drive_compare_golden_roles(tmp_path: Path) -> None:
    folder = stripped_report(tmp_path)
    values_file(tmp_path / "values.sqlite")
    attach(tmp_path / "values.sqlite", folder)
    with reportdb.open(folder) as r:
        golden = reportdb.compare_golden(r)
    roles = {(g.kind, g.name): g.role for g in golden.records}
    assert golden.first_culprit is not None and golden.first_culprit.name == "ttnn.reshape"
    assert roles[("local", "ttnn.reshape")] == "culprit"
    assert roles[("global", "ttnn.typecast")] in ("victim", "culprit")
    typecast_after = [g for g in golden.records if g.name == "ttnn.typecast" and g.kind == "local" and g.role == "victim"]
    assert typecast_after, "the typecast of the reshaped tensor passes locally and inherits the error"
    assert all(g.status == "compared" for g in golden.records)


def test_attach_again_finds_the_rows_present(tmp_path: Path) -> None:
    folder = stripped_report(tmp_path)
    values_file(tmp_path / "values.sqlite")
    attach(tmp_path / "values.sqlite", folder)
    again = attach(tmp_path / "values.sqlite", folder)
    assert again.sidecars is not None and again.sidecars["added"] == {}
    assert sum(again.sidecars["already_present"].values()) == 30


def test_migrate_reads_the_sidecars(tmp_path: Path) -> None:
    folder = stripped_report(tmp_path)
    summary = reportdb.migrate(folder, tmp_path / "migrated")
    assert summary.sidecars is not None and summary.sidecars["added"]["local_tensor_comparison_records"] == 6
    for table in TABLES:
        assert rows(tmp_path / "migrated" / "db.sqlite", table) == rows(FOLDER / "comparison-report" / "db.sqlite", table)


def test_migrate_of_ttnns_own_folder_finds_every_row_present(tmp_path: Path) -> None:
    summary = reportdb.migrate(FOLDER / "comparison-report", tmp_path / "migrated")
    assert summary.sidecars is not None and summary.sidecars["added"] == {}
    assert summary.sidecars["already_present"]["local_tensor_comparison_records"] == 6


def bad_sidecars() -> list[tuple[str, str | bytes]]:
    """(name, content) of malformed sidecars."""
    good = json.loads((FOLDER / "comparison-report" / "graph_capture.comparison_records.json").read_text())
    wrong_type = json.loads(json.dumps(good))
    wrong_type["local_tensor_comparison_records"][0]["actual_pcc"] = "0.99"
    unknown = json.loads(json.dumps(good))
    unknown["global_tensor_comparison_records"][1]["ulp"] = 3
    contradicts = json.loads(json.dumps(good))
    contradicts["local_tensor_comparison_records"][0]["golden_tensor_id"] = 999
    return [
        ("graph_capture.comparison_records.json", b'{"version": 1, "local_tensor_comparison_records": [{'),
        ("graph_capture.comparison_records.json", json.dumps(wrong_type)),
        ("graph_capture.comparison_records.json", json.dumps(unknown)),
        ("graph_capture.comparison_records.json", json.dumps(dict(good, version=7))),
        ("graph_capture.comparison_records.json", json.dumps([good])),
        ("graph_capture.comparison_records.json", "[" * 100_000 + "]" * 100_000),
        ("graph_capture.comparison_records.json", b"\xff\xfe not utf-8"),
        ("graph_capture.tensor_lifetime.json", json.dumps([{"tensor_id": True, "rank": 0}])),
        ("graph_capture.tensor_lifetime.json", json.dumps({"tensor_id": 1})),
        ("graph_capture.comparison_records.json", json.dumps(contradicts)),
    ]


@pytest.mark.parametrize("index", range(10))
def test_a_malformed_sidecar_is_refused_and_nothing_is_written(tmp_path: Path, index: int) -> None:
    name, content = bad_sidecars()[index]
    folder = stripped_report(tmp_path)
    if index == 9:  # a record that contradicts the row ttnn's table holds: the original, with its rows
        shutil.copyfile(FOLDER / "comparison-report" / "db.sqlite", folder / "db.sqlite")
    path = folder / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    values_file(tmp_path / "values.sqlite")
    before = (folder / "db.sqlite").read_bytes()
    with pytest.raises(SidecarError) as raised:
        attach(tmp_path / "values.sqlite", folder)
    assert name in str(raised.value)
    assert (folder / "db.sqlite").read_bytes() == before
    with pytest.raises(SidecarError):
        reportdb.migrate(folder, tmp_path / "migrated")
    assert not (tmp_path / "migrated" / "db.sqlite").exists()
    assert not (tmp_path / "migrated").exists()


def test_a_huge_sidecar_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "graph_capture.comparison_records.json"
    with open(path, "wb") as f:
        f.truncate(MAX_SIDECAR_BYTES + 1)  # sparse: no disk used, and never read
    with pytest.raises(SidecarError, match="more than"):
        read_sidecar(path)
    with pytest.raises(SidecarError, match="more than"):
        read_sidecar(path, max_bytes=1000)


def test_a_link_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"version": 1}))
    link = tmp_path / "graph_capture.comparison_records.json"
    os.symlink(target, link)
    with pytest.raises(SidecarError, match="cannot be opened"):
        read_sidecar(link)


@pytest.mark.process
def test_the_cli_reads_named_sidecars_and_says_one_line_on_a_bad_one(tmp_path: Path) -> None:
    folder = stripped_report(tmp_path)
    aside = tmp_path / "capture"
    aside.mkdir()
    for name in ("graph_capture.comparison_records.json", "graph_capture.tensor_lifetime.json"):
        shutil.move(folder / name, aside / name)
    values_file(tmp_path / "values.sqlite")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = [sys.executable, "-m", "reportdb", "attach", str(tmp_path / "values.sqlite"), str(folder), "--json"]
    named = [a for n in sorted(aside.iterdir()) for a in ("--sidecar", str(n))]
    done = subprocess.run(run + named, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["sidecars"]["added"]["tensor_lifetime"] == 6
    (aside / "graph_capture.tensor_lifetime.json").write_text("{")
    bad = subprocess.run(run + named, capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1 and "not valid JSON" in bad.stderr


@pytest.mark.slow
@pytest.mark.process
def test_visualizer_reads_the_sidecars_rows_as_it_reads_ttnns(tmp_path: Path, visualizer_python: str, runner: Path) -> None:
    """ttnn-visualizer's own query layer: the report whose tables were filled from the sidecars by migrate gives the
    answers ttnn's own report gives (tensors with their lifetimes and local/global comparisons)."""
    folder = stripped_report(tmp_path)
    reportdb.migrate(folder, tmp_path / "migrated")
    truth = answers(visualizer_python, runner, FOLDER / "comparison-report" / "db.sqlite")
    ours = answers(visualizer_python, runner, tmp_path / "migrated" / "db.sqlite")
    lifetimes = [t["lifetime"] for t in truth["query_tensors"] if t.get("lifetime")]
    assert len(lifetimes) == 6 and all(len(c) == 6 for c in truth["query_tensor_comparisons"][:2])  # not vacuous
    assert_same_answers(truth, ours)


def _lifetime_entry(i: int) -> dict[str, object]:
    return {"tensor_id": i, "producer_operation_id": i, "last_use_operation_id": None, "deallocate_operation_id": None,
            "producer_source_file": "/a/model.py", "producer_source_line": 7, "last_use_source_file": None,
            "last_use_source_line": None}


@pytest.mark.parametrize("content, found", [
    (b"[" + b",".join([b"[]"] * 400_000) + b"]", "400001 JSON lists"),
    (b"[" + b",".join([b"{}"] * 400_000) + b"]", "values other than records"),
    (b"[" + b",".join([b"0.5"] * 400_000) + b"]", "values other than records"),
    (b"[" + b",".join([b'{"tensor_id": 1}'] * 70_000) + b"]", "70000 JSON objects in 1190001 bytes"),
])
def test_a_lifetime_file_that_cannot_be_one_is_refused_before_it_is_parsed(tmp_path: Path, content: bytes,
                                                                            found: str) -> None:
    """Lists inside it, list items that are not records, objects too short to be records: refused, in a file of 1 MiB
    or more, from counts taken over the file before it is parsed (a smaller one is parsed, then checked)."""
    path = tmp_path / "graph_capture.tensor_lifetime.json"
    path.write_bytes(content)
    with pytest.raises(SidecarError, match=found):
        read_sidecar(path)


def test_a_large_real_shaped_lifetime_file_is_read(tmp_path: Path) -> None:
    """What ttnn writes (indented, or not) passes the shape checks, whatever its strings hold (brackets, colons and
    commas in them are not counted)."""
    path = tmp_path / "graph_capture.tensor_lifetime.json"
    entries = [{**_lifetime_entry(i), "producer_source_file": "/a/[b]{c},d:e.py"} for i in range(20_000)]
    for indent in (None, 2):
        path.write_text(json.dumps(entries, indent=indent))
        assert len(read_sidecar(path).rows["tensor_lifetime"]) == 20_000


@pytest.mark.process
@pytest.mark.parametrize("max_bytes", [None, 200 << 20])
def test_a_100_mb_lifetime_file_of_empty_lists_is_refused_in_bounded_memory(tmp_path: Path,
                                                                            max_bytes: int | None) -> None:
    """A 95 MB ``[[],[],...]`` lifetime file took 22.5 s and 2.5 GB before it was refused (parsed whole, its entries
    typed later). Now: refused by its size (the default cap), or, under a cap raised past it, by its shape before it is
    parsed. The peak memory the read adds is measured in a process of its own."""
    path = tmp_path / "graph_capture.tensor_lifetime.json"
    with open(path, "wb") as f:
        f.write(b"[[]")
        for _ in range(100):
            f.write(b",[]" * 333_333)
        f.write(b"]")
    size = path.stat().st_size
    assert size > 99_000_000
    code = (
        "import resource, sys\n"
        "from reportdb.legacy.sidecars import SidecarError, read_sidecar\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "try:\n"
        f"    read_sidecar(sys.argv[1]{'' if max_bytes is None else f', max_bytes={max_bytes}'})\n"
        "except SidecarError as exc:\n"
        "    print(exc)\n"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)\n"  # KiB on Linux
    )
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300)
    message, added = done.stdout.strip().splitlines()
    assert done.returncode == 0, done.stderr
    assert ("more than the" if max_bytes is None else "JSON lists where a lifetime sidecar has at most 1") in message
    assert int(added) < 5 * size, (int(added), size)


@pytest.mark.parametrize("piece", [1, 2, 3, 7, 16, 61, 4096])
def test_strings_cut_by_the_pieces_the_shape_check_reads_are_not_counted(piece: int,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The shape check blanks a file's strings a piece at a time: a string a piece's end cuts (after its opening
    quote, inside an escape, between two escaped quotes) is carried into the next, so the counts are the whole
    file's, whatever the piece size."""
    from reportdb.legacy import sidecars

    records = [{"tensor_id": i, "producer_source_file": name, "producer_source_line": i}
               for i, name in enumerate(["/a/[b]{c},d:e.py", 'q\\"[,"', "\\\\", "", '"', 'x\\"{:}"', "é[{,:"] * 9)]
    raw = json.dumps(records, ensure_ascii=False).encode()
    chars = (b"[", b"{", b",", b":")
    whole = sidecars._count_outside_strings(raw, chars)
    assert whole == [1, len(records), 3 * len(records) - 1, 3 * len(records)]
    monkeypatch.setattr(sidecars, "_BLANKED_PIECE", piece)
    assert sidecars._count_outside_strings(raw, chars) == whole


@pytest.mark.process
def test_a_large_comparison_sidecar_is_checked_and_read_in_bounded_memory(tmp_path: Path) -> None:
    """A real-shaped 59 MB comparison sidecar (500,000 records) took 650 MB to read, most of it the shape check's
    blanked copy of the file held as one object per string (2.5 million keys); its pieces and the records let go
    as their rows are made keep it near what the parse itself needs. Measured in a process of its own."""
    path = tmp_path / "graph_capture.comparison_records.json"
    records = [{"tensor_id": i, "golden_tensor_id": i + 10**6, "matches": True, "desired_pcc": 0.99,
                "actual_pcc": 0.5 + i / 2e6} for i in range(400_000)]
    path.write_text(json.dumps({"version": 1, "local_tensor_comparison_records": records,
                                "global_tensor_comparison_records": records[:100_000]}))
    del records
    size = path.stat().st_size
    code = (
        "import resource, sys\n"
        "from reportdb.legacy.sidecars import read_sidecar\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "rows = read_sidecar(sys.argv[1]).rows\n"
        "print(len(rows['local_tensor_comparison_records']), len(rows['global_tensor_comparison_records']))\n"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)\n"  # KiB on Linux
    )
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    counted, added = done.stdout.strip().splitlines()
    assert counted == "400000 100000"
    assert int(added) < 6 * size, (int(added), size)
