"""The fixture data is complete and consistent, and the suite needs nothing beside the checkout.

On the project's own data (``tests/data``) always, and on ``../shared/fixtures`` as well when it is
there: every manifest entry has its file and its expected values, no file is left out of a manifest,
every report tensor file has its expected values, and reading each file with
``reportdb.load_tensor_file`` gives exactly the values the producing library read back.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import EXTRA_FIXTURES, FIXTURES, OWN_FOLDERS, ROOT, assert_values_equal, fixture_roots
from reportdb import load_tensor_file

VISUALIZER_EMPTY_SHA256 = "51fe5dc2f3298fc7569078c94400b0a2feb0f859a95a5b9e7cd76e88952aebe8"


def _label(root: Path) -> str:
    return "own" if root == FIXTURES else "shared"


def _manifest_folders() -> list[Path]:
    return [folder for root in fixture_roots() for folder in sorted(root.iterdir()) if (folder / "manifest.json").is_file()]


def _report_folders() -> list[Path]:
    return [folder for root in fixture_roots() for folder in sorted(root.iterdir()) if (folder / "report" / "db.sqlite").is_file()]


def _entries() -> list[tuple[Path, dict[str, Any]]]:
    out = []
    for folder in _manifest_folders():
        data = json.loads((folder / "manifest.json").read_text())
        out += [(folder, entry) for entry in (data["files"] if isinstance(data, dict) else data)]
    return out


def _expected_names(entry: dict[str, Any]) -> list[str]:
    """The expected-value files of a manifest entry: one per device shard of a multi-device file."""
    shards = entry.get("num_shards", 1)
    return [f"{entry['name']}.npy"] if shards == 1 else [f"{entry['name']}.shard{i}.npy" for i in range(shards)]


def _report_expected(folder: Path, tensor_file: Path) -> list[Path]:
    single = folder / "report_expected" / f"{tensor_file.stem}.npy"
    if single.exists():
        return [single]
    return sorted((folder / "report_expected").glob(f"{tensor_file.stem}.shard*.npy"), key=lambda p: int(p.suffixes[-2][6:]))


ENTRIES = _entries()
REPORT_FILES = [(folder, path) for folder in _report_folders() for path in sorted((folder / "report" / "tensors").iterdir())]


def test_the_project_carries_its_own_fixtures() -> None:
    for name in OWN_FOLDERS:
        assert (FIXTURES / name).is_dir(), f"tests/data/{name} is missing: run tests/data/make/make_all.py"
    assert {f.name for f, _ in ENTRIES if f.parent == FIXTURES} >= {"ttnn-0.62.2-bin", "ttnn-0.81.1-tensorbin", "torch-2.13-pt"}
    assert {folder.name for folder in _report_folders() if folder.parent == FIXTURES} == {"ttnn-0.62.2-bin", "ttnn-0.64.5-report-tensorbin"}
    readme = (FIXTURES / "README.md").read_text()
    for name in [*OWN_FOLDERS, "mock-cluster"]:
        assert f"`{name}/`" in readme, f"tests/data/README.md does not describe {name}/"


def test_extra_corpus_is_optional() -> None:
    """Only reports whether ../shared/fixtures is used; nothing else depends on it."""
    if EXTRA_FIXTURES is None:
        pytest.skip("no ../shared/fixtures beside the checkout: only the project's own fixtures are checked")
    assert _manifest_folders() and any(folder.parent == EXTRA_FIXTURES for folder in _manifest_folders())


@pytest.mark.parametrize("folder", _manifest_folders(), ids=lambda f: f"{_label(f.parent)}/{f.name}")
def test_manifest_and_files_match(folder: Path) -> None:
    """Every entry has its file and expected values; no file or expected value is outside the manifest."""
    data = json.loads((folder / "manifest.json").read_text())
    entries = data["files"] if isinstance(data, dict) else data
    assert entries
    names = [e["name"] for e in entries]
    assert len(set(names)) == len(names), "duplicate names in the manifest"
    files = {e["file"] for e in entries}
    assert files == {f"files/{p.name}" for p in (folder / "files").iterdir()}
    expected = {n for e in entries for n in _expected_names(e)}
    assert expected == {p.name for p in (folder / "expected").iterdir()}
    for entry in entries:
        assert {"name", "file", "dtype", "shape"} <= set(entry), entry


@pytest.mark.parametrize("folder,entry", ENTRIES, ids=[f"{_label(f.parent)}/{f.name}/{e['name']}" for f, e in ENTRIES])
def test_each_file_reads_as_the_producer_read_it(folder: Path, entry: dict[str, Any]) -> None:
    loaded = load_tensor_file(folder / entry["file"])
    expected = [np.load(folder / "expected" / name) for name in _expected_names(entry)]
    assert len(loaded.shards) == len(expected)
    if len(expected) == 1:
        assert_values_equal(loaded.array, expected[0])
    for (_, array), values in zip(loaded.shards, expected):
        assert_values_equal(array, values)
    assert list(expected[0].shape) == list(entry["shape"])


@pytest.mark.parametrize("folder", _report_folders(), ids=lambda f: f"{_label(f.parent)}/{f.name}")
def test_report_tables_name_every_tensor_file(folder: Path) -> None:
    """Every tensor file is a row of the report's ``tensors`` table, and has its expected values."""
    conn = sqlite3.connect(f"file:{folder / 'report' / 'db.sqlite'}?mode=ro", uri=True)
    try:
        rows = {r[0] for r in conn.execute("SELECT tensor_id FROM tensors")}
        assert conn.execute("SELECT COUNT(*) FROM operations").fetchone()[0] > 0
    finally:
        conn.close()
    files = sorted((folder / "report" / "tensors").iterdir())
    assert files and {int(p.stem) for p in files} <= rows
    assert any(p.suffix == ".pt" for p in files), "no golden .pt tensors in the report"
    for path in files:
        assert _report_expected(folder, path), f"no report_expected values for {path.name}"
    assert (folder / "report" / "config.json").is_file()


@pytest.mark.parametrize("folder,path", REPORT_FILES, ids=[f"{_label(f.parent)}/{f.name}/{p.name}" for f, p in REPORT_FILES])
def test_each_report_tensor_reads_as_the_producer_read_it(folder: Path, path: Path) -> None:
    loaded = load_tensor_file(path)
    expected = [np.load(p) for p in _report_expected(folder, path)]
    assert len(loaded.shards) == len(expected)
    for (_, array), values in zip(loaded.shards, expected):
        assert_values_equal(array, values)


@pytest.mark.parametrize("root", fixture_roots(), ids=_label)
def test_report_schema_databases(root: Path) -> None:
    folder = root / "report-schemas"
    if root != FIXTURES and not folder.is_dir():
        pytest.skip(f"{root} has no report-schemas")
    visualizer = folder / "visualizer_empty_2024-09.sqlite"
    assert hashlib.sha256(visualizer.read_bytes()).hexdigest() == VISUALIZER_EMPTY_SHA256
    for db in (visualizer, folder / "ttnn_0.81.1_schema_3.5.sqlite"):
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            assert {"operations", "tensors", "input_tensors", "output_tensors"} <= tables
            if "report_metadata" in tables:
                version = conn.execute("SELECT value FROM report_metadata WHERE key='schema_version'").fetchone()
                assert version == ("3.5",)
            else:
                assert db == visualizer and "device_tensors" not in tables  # the 2024 schema
        finally:
            conn.close()


def _checkout_files() -> list[str]:
    """The files a clone of this checkout would have: tracked, plus new files not ignored (not yet committed)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: cannot tell which files a clone would have")
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True, timeout=60).stdout
    return [name for name in listed.decode().split("\0") if name and (ROOT / name).is_file()]


@pytest.mark.process
def test_suite_collects_on_a_plain_clone(tmp_path: Path) -> None:
    """A copy of the checkout with nothing beside it collects every test module without an error."""
    clone = tmp_path / "clone" / "reportdb"
    for name in _checkout_files():
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, clone / name)
    assert not (clone.parent / "shared").exists()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "REPORTDB_"))}
    env["PYTHONPATH"] = str(clone)
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
                          cwd=clone, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]


def test_no_fixture_names_the_folder_it_was_made_in() -> None:
    """ttnn records its callers' source files; a fixture made from a worktree named it in stack traces and the
    tensor-lifetime records until ``make/neutral_paths.py`` made them relative. No file under tests/data may carry an
    absolute path to the fixture makers."""
    absolute = re.compile(rb"(?:/[A-Za-z0-9_.-]+)+/tests/data/make/")
    named = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "tests" / "data").rglob("*"))
             if p.is_file() and absolute.search(p.read_bytes())]
    assert named == []
