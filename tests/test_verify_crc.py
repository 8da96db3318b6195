"""``verify`` checks what every read checks: a chunk whose stored crc32 is wrong fails verification even when its
bytes still match their content address (reads refuse such a chunk, so verify must not call it intact)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import reportdb
from reportdb.legacy import verify


def _report(folder: Path, compression: str = "none") -> Path:
    folder.mkdir()
    rng = np.random.default_rng(3)
    with reportdb.open(folder, "a", compression=compression) as r:  # type: ignore[arg-type]
        r.put_tensor(1, rng.standard_normal((64, 64)).astype(np.float32))
        r.put_tensor(2, np.zeros((128, 128), np.float32))  # compresses well: stored zstd-compressed when asked
    return folder / "db.sqlite"


def _wrong_crc(db: Path) -> None:
    """Every chunk's crc32 changed by one bit; the bytes and the content addresses stay as they were."""
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE rdb_chunk SET crc32 = crc32 + 1 - 2 * (crc32 & 1)")
    conn.close()


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_verify_fails_a_chunk_whose_crc32_is_wrong(tmp_path: Path, compression: str) -> None:
    db = _report(tmp_path / "r", compression)
    assert verify(db).ok
    _wrong_crc(db)
    with reportdb.open(db) as r, pytest.raises(reportdb.errors.CorruptionError):
        r.tensor(1)  # what the user meets when reading
    result = verify(db)
    assert not result.ok and {p.tensor_id for p in result.problems} == {1, 2}
    assert all("integrity check" in p.error for p in result.problems)


@pytest.mark.process
def test_cli_verify_exits_non_zero_on_a_wrong_crc32(tmp_path: Path) -> None:
    db = _report(tmp_path / "r")
    _wrong_crc(db)
    out = subprocess.run([sys.executable, "-m", "reportdb", "verify", str(db)], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0, out.stdout
