"""`reportdb show` and `reportdb convert` on real legacy tensor files, in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, assert_values_equal


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reportdb", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    "name, folder, suffix",
    [("t024_mc_height_sharded_l1", "ttnn-0.62.2-bin", ".bin"), ("t000_bfloat16_row", "ttnn-0.81.1-tensorbin", ".tensorbin")],
)
@pytest.mark.process
def test_show_and_convert_to_npy(tmp_path: Path, name: str, folder: str, suffix: str) -> None:
    src = FIXTURES / folder / "files" / f"{name}{suffix}"
    expected = np.load(FIXTURES / folder / "expected" / f"{name}.npy")
    shown = run("show", str(src), "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["shape"] == list(expected.shape)
    assert "stats:" in run("show", str(src)).stdout
    out = tmp_path / "t.npy"
    converted = run("convert", str(src), "-o", str(out))
    assert converted.returncode == 0, converted.stderr
    assert_values_equal(np.load(out), expected)


@pytest.mark.process
def test_convert_multi_device_to_npz_keeps_every_shard(tmp_path: Path) -> None:
    manifest = json.loads((FIXTURES / "ttnn-0.81.1-tensorbin" / "manifest.json").read_text())["files"]
    entry = next(e for e in manifest if e["num_shards"] > 1)
    out = tmp_path / "t.npz"
    done = run("convert", str(FIXTURES / "ttnn-0.81.1-tensorbin" / entry["file"]), "-o", str(out))
    assert done.returncode == 0, done.stderr
    with np.load(out) as npz:
        shards = sorted(k for k in npz.files if k.startswith("shard_"))
        assert len(shards) == entry["num_shards"]


@pytest.mark.process
def test_bad_file_is_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "x.bin"
    bad.write_bytes(b"\xff" * 8 + b"\x09" + b"\x00" * 40)
    for args in (("show", str(bad)), ("convert", str(bad), "-o", str(tmp_path / "o.npy")), ("show", str(tmp_path / "missing.bin"))):
        out = run(*args)
        assert out.returncode != 0 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not (tmp_path / "o.npy").exists()


def test_show_never_blocks_on_a_fifo_swapped_in_after_a_look(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # what the file is comes from the descriptor opened non-blocking, so a FIFO put where a regular file was
    # (is_file() said True a moment before) is not opened for a blocking read
    import os
    import threading

    from reportdb.cli.files import _a_report

    fifo = tmp_path / "db.sqlite"
    os.mkfifo(fifo)
    monkeypatch.setattr(Path, "is_file", lambda self: True)
    found: list[object] = []
    looker = threading.Thread(target=lambda: found.append(_a_report(fifo)), daemon=True)
    looker.start()
    looker.join(10)
    if looker.is_alive():
        with open(fifo, "wb"):  # let the blocked open go, so the thread ends
            pass
        pytest.fail("_a_report blocked opening a FIFO")
    assert found == [None]
