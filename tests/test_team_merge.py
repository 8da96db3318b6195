"""``merge``: a real 2-rank pair written by the Writer from two processes becomes one report with rank columns,
tensors deduplicated, nothing dropped; conflicting values are reported."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

import reportdb
from reportdb import team
from reportdb.errors import InvalidArgumentError, OutputPathError

WRITER = r'''
import sys
import zlib
import numpy as np
import reportdb
path, rank = sys.argv[1], int(sys.argv[2])
weights = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)  # the same on every host
x = np.random.default_rng(rank).standard_normal((32, 64)).astype(np.float32)
with reportdb.Writer(path, rank=rank) as w:
    w.put_tensor(1, weights, layout="TILE")
    w.put_tensor(2, x)
    w.put_tensor(3, x @ weights, role="output")
    w.add_operation(1, "ttnn.matmul", duration=0.001 * (rank + 1), arguments={"rank": str(rank)},
                    stack_trace='File "model.py", line 3', inputs=[2, 1], outputs=[3])
'''


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two per-rank reports, each written by the Writer in its own process (as two hosts would)."""
    base = tmp_path_factory.mktemp("ranks")
    script = base / "writer.py"
    script.write_text(WRITER)
    paths = [base / f"rank{r}" for r in range(2)]
    for p in paths:
        p.mkdir()
    procs = [subprocess.Popen([sys.executable, str(script), str(p / "db.sqlite"), str(r)], stderr=subprocess.PIPE, text=True)
             for r, p in enumerate(paths)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    return paths


@pytest.mark.process
def test_merge_of_a_two_rank_pair(pair: list[Path], tmp_path: Path) -> None:
    result = team.merge(pair, tmp_path / "merged")
    assert result.ranks == {str(p / "db.sqlite"): r for r, p in enumerate(pair)}
    merged = Path(result.output)
    with reportdb.open(merged) as report:
        assert report.tensor_keys() == [(1, 0), (2, 0), (3, 0), (1, 1), (2, 1), (3, 1)]
        for rank, p in enumerate(pair):
            with reportdb.open(p) as original:
                for t in (1, 2, 3):
                    np.testing.assert_array_equal(report.tensor(t, rank), original.tensor(t, rank))
        assert report.verify_tensor(1, 1) > 0 and report.check_store() == []
    assert result.stored_bytes < result.logical_bytes  # the replicated weights are stored once
    with sqlite3.connect(merged) as conn:
        ops = conn.execute("SELECT operation_id, name, duration, rank FROM operations ORDER BY rank").fetchall()
        assert ops == [(1, "ttnn.matmul", 0.001, 0), (1, "ttnn.matmul", 0.002, 1)]
        for table in ("operation_arguments", "stack_traces", "input_tensors", "output_tensors"):
            ranks = [r for (r,) in conn.execute(f"SELECT rank FROM {table} ORDER BY rank")]
            assert ranks and set(ranks) == {0, 1}, table
            assert ranks.count(0) == ranks.count(1), table  # nothing dropped on either side
        args = conn.execute("SELECT value, rank FROM operation_arguments WHERE name = 'rank' ORDER BY rank").fetchall()
        assert args == [("0", 0), ("1", 1)]


def test_merge_refuses_duplicate_ranks_and_existing_output(tmp_path: Path) -> None:
    reports = []
    for i in range(2):
        folder = tmp_path / f"r{i}"
        folder.mkdir()
        with reportdb.open(folder, "a") as r:
            r.put_tensor(1, np.ones(4, np.float32) * i)
        reports.append(folder)
    with pytest.raises(InvalidArgumentError, match="same rank"):
        team.merge(reports, tmp_path / "out")  # both hold rank 0 tensors only
    assert not (tmp_path / "out").exists()
    result = team.merge(reports, tmp_path / "out", ranks=[0, 1])
    with reportdb.open(result.output) as merged:
        np.testing.assert_array_equal(merged.tensor(1, 1), np.ones(4, np.float32))
    with pytest.raises(OutputPathError, match="already exists"):
        team.merge(reports, tmp_path / "out", ranks=[0, 1])


def test_merge_of_legacy_reports_adds_rank_and_reports_conflicts(tmp_path: Path) -> None:
    """Tables without ``rank`` (a 2024 report) get it; source files and metadata that differ are reported."""
    reports = []
    for i in range(2):
        folder = tmp_path / f"legacy{i}"
        folder.mkdir()
        with sqlite3.connect(folder / "db.sqlite") as conn:
            conn.execute("CREATE TABLE operations (operation_id int, name text, duration float)")
            conn.execute("CREATE TABLE tensors (tensor_id int, shape text)")  # every TTNN report has both
            conn.execute("CREATE TABLE custom_table (a text)")  # unknown to reportdb: kept, with a rank
            conn.execute("CREATE TABLE source_files (id INTEGER PRIMARY KEY, path TEXT UNIQUE, contents TEXT)")
            conn.execute("CREATE TABLE stack_traces (operation_id int, stack_trace text, source_file_id int)")
            conn.execute("INSERT INTO operations VALUES (1, 'ttnn.add', ?)", (0.5 + i,))
            conn.execute("INSERT INTO custom_table VALUES (?)", (f"host{i}",))
            conn.execute("INSERT INTO source_files VALUES (?, 'model.py', ?)", (5 + i, f"v{i}"))
            conn.execute("INSERT INTO stack_traces VALUES (1, 'trace', ?)", (5 + i,))
        reports.append(folder)
    result = team.merge(reports, tmp_path / "out")
    assert any("model.py" in c for c in result.conflicts)
    with sqlite3.connect(result.output) as conn:
        assert conn.execute("SELECT name, duration, rank FROM operations ORDER BY rank").fetchall() == [
            ("ttnn.add", 0.5, 0), ("ttnn.add", 1.5, 1)]
        assert conn.execute("SELECT a, rank FROM custom_table ORDER BY rank").fetchall() == [("host0", 0), ("host1", 1)]
        (source_id,) = conn.execute("SELECT id FROM source_files WHERE path = 'model.py'").fetchone()
        assert [r for (r,) in conn.execute("SELECT source_file_id FROM stack_traces")] == [source_id, source_id]


def _honest_pair(base: Path, hostile_values: bool = False) -> tuple[Path, Path, np.ndarray]:
    """Two rank reports written by the Writer; tensor 3 holds the same values on both (a replicated weight), unless
    ``hostile_values`` gives rank 1 its own."""
    x = np.arange(32 * 32, dtype=np.float32).reshape(32, 32)  # one 4 KiB chunk: no block crc row to forge
    paths = []
    for rank in range(2):
        folder = base / f"rank{rank}"
        folder.mkdir()
        with reportdb.Writer(folder / "db.sqlite", rank=rank) as w:
            w.put_tensor(3, x - 7 if hostile_values and rank else x)
            w.put_tensor(4, x + rank)
            w.add_operation(1, "ttnn.add", outputs=[3])
        paths.append(folder / "db.sqlite")
    return paths[0], paths[1], x


def _chunk_of(conn: sqlite3.Connection, tensor_id: int) -> tuple[int, bytes, bytes]:
    return conn.execute(
        "SELECT c.id, c.digest, c.data FROM rdb_chunk c JOIN rdb_blob_chunk bc ON bc.chunk_id = c.id JOIN rdb_shard s"
        " ON s.blob_id = bc.blob_id JOIN rdb_tensor t ON t.id = s.tensor_pk WHERE t.tensor_id = ?", (tensor_id,)
    ).fetchone()


def forge_rank(db: Path, *, address_of: Path | None = None, rename: str = "RDB_CHUNK") -> None:
    """The issue's hostile rank: the chunk of its tensor 3 holds other bytes (all 1024.0) with a matching crc32, under
    the content address tensor 3 has in the honest rank (``address_of``: a lone extra row under that address; None:
    its own tensor 3's chunk, whose address is the honest one already), and its chunk table renamed ``rename``."""
    bad = np.full(1024, 1024.0, np.float32).tobytes()
    conn = sqlite3.connect(db)
    with conn:
        if address_of is None:
            chunk_id = _chunk_of(conn, 3)[0]
            conn.execute("UPDATE rdb_chunk SET data = ?, crc32 = ? WHERE id = ?", (bad, zlib.crc32(bad), chunk_id))
        else:
            honest = sqlite3.connect(address_of)
            digest = _chunk_of(honest, 3)[1]
            honest.close()
            conn.execute("INSERT INTO rdb_chunk (digest, nbytes, crc32, data) VALUES (?, ?, ?, ?)",
                         (digest, len(bad), zlib.crc32(bad), bad))
        if rename != "rdb_chunk":
            conn.execute("ALTER TABLE rdb_chunk RENAME TO forged_tmp")  # SQLite refuses a rename to the same name
            conn.execute(f'ALTER TABLE forged_tmp RENAME TO "{rename}"')
    conn.close()


@pytest.mark.parametrize("rename", ["RDB_CHUNK", "Rdb_Chunk", "rdb_chunk"])
def test_a_forged_rank_is_refused_naming_its_file(tmp_path: Path, rename: str) -> None:
    honest, hostile, _ = _honest_pair(tmp_path)
    forge_rank(hostile, rename=rename)
    with pytest.raises(reportdb.errors.CorruptionError, match=f"{hostile}: this rank's report is damaged or forged.*tensor 3"):
        team.merge([honest, hostile], tmp_path / "merged")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0", "rank1"]  # nothing left behind


@pytest.mark.parametrize("rename", ["RDB_CHUNK", "rDb_cHuNk"])
def test_a_foreign_chunk_under_an_honest_address_never_reaches_the_merged_file(tmp_path: Path, rename: str) -> None:
    """The hostile rank's own tensors are sound; its chunk table (under a case-folded name) also holds a lone row
    with the honest rank's address of tensor 3 and other bytes: copied as rows it would become the honest tensor."""
    honest, hostile, x = _honest_pair(tmp_path, hostile_values=True)
    forge_rank(hostile, address_of=honest, rename=rename)
    result = team.merge([honest, hostile], tmp_path / "merged")
    with reportdb.open(result.output) as merged:
        np.testing.assert_array_equal(merged.tensor(3, 0), x)
        np.testing.assert_array_equal(merged.tensor(3, 1), x - 7)
    assert reportdb.verify(result.output).ok
    with sqlite3.connect(result.output) as conn:  # the store tables hold what the write path put there, and no rank
        assert "rank" not in {r[1] for r in conn.execute("PRAGMA table_info(rdb_chunk)")}
        assert conn.execute("SELECT COUNT(*) FROM rdb_chunk WHERE data = ?",
                            (np.full(1024, 1024.0, np.float32).tobytes(),)).fetchone()[0] == 0


@pytest.mark.process
def test_cli_merge_of_a_forged_rank_fails_in_one_line(tmp_path: Path) -> None:
    honest, hostile, _ = _honest_pair(tmp_path)
    forge_rank(hostile)
    out = subprocess.run([sys.executable, "-m", "reportdb", "merge", str(honest), str(hostile), "-o", str(tmp_path / "m")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert str(hostile) in out.stderr and "forged" in out.stderr
    assert not (tmp_path / "m").exists()
