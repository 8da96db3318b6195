"""The read API on both engines: one parametrised suite runs against a SQLite report and against the same report
pushed to a real PostgreSQL server and opened as ``reportdb.open("postgresql://.../NAME")``."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import ml_dtypes
import numpy as np
import pytest
from sqlalchemy import select, text

from conftest import FIXTURES
from pg_server import PgServer
import reportdb
from reportdb import team
from reportdb.errors import ReportLockedError, TensorNotFoundError
from reportdb.models import LocalTensorComparisonRecord, Operation, StoredTensor
from reportdb.spec import Distribution, Placement

pytestmark = [pytest.mark.process, pytest.mark.service]

RNG = np.random.default_rng(7)
BIG = RNG.standard_normal((96, 1024)).astype(np.float32)  # 384 KiB: several 64 KiB chunks
SMALL = RNG.standard_normal((4, 8)).astype(ml_dtypes.bfloat16)
PARTS = [((i,), RNG.integers(0, 100, (8, 16), dtype=np.int32)) for i in range(4)]


@pytest.fixture(scope="module")
def local_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated real report with a large chunked tensor, a bfloat16 one and a 4-device sharded one added."""
    folder = tmp_path_factory.mktemp("remote") / "report"
    reportdb.migrate(FIXTURES / "ttnn-0.62.2-bin" / "report", folder)
    with reportdb.open(folder, "a", chunk_size=64 << 10) as report:
        report.put_tensor(900, BIG, layout="TILE", ttnn_dtype="FLOAT32")
        report.put_tensor(901, SMALL, ttnn_dtype="BFLOAT16")
        report.put_tensor(902, shards=PARTS, distribution=Distribution((4,), (Placement("shard", 1),)), rank=1)
    return folder


@pytest.fixture(scope="module")
def store(pg_server: PgServer, local_report: Path) -> str:
    url = pg_server.create_database()
    team.push(local_report, url, name="the report")
    return url


@pytest.fixture(params=["sqlite", "postgresql"])
def report(request: pytest.FixtureRequest, local_report: Path) -> Iterator[reportdb.Report]:
    where = str(local_report) if request.param == "sqlite" else team.report_url(request.getfixturevalue("store"), "the report")
    with reportdb.open(where) as opened:
        yield opened


def test_ids_and_presence(report: reportdb.Report) -> None:
    assert 900 in report.tensor_ids() and 901 in report.tensor_ids() and 902 not in report.tensor_ids()
    assert report.tensor_ids(rank=1) == [902]
    assert report.has_tensor(902, rank=1) and not report.has_tensor(902)
    assert (902, 1) in report.tensor_keys()


def test_values_windows_and_shards(report: reportdb.Report) -> None:
    np.testing.assert_array_equal(report.tensor(900), BIG)
    np.testing.assert_array_equal(report.tensor(900, window=np.s_[5:70, 100:900:3]), BIG[5:70, 100:900:3])
    np.testing.assert_array_equal(report.tensor(900, rows=slice(90, None)), BIG[90:])
    small = report.tensor(901)
    assert small.dtype == SMALL.dtype and small.tobytes() == SMALL.tobytes()
    np.testing.assert_array_equal(report.tensor(902, rank=1), np.concatenate([a for _, a in PARTS], axis=1))
    shards = report.shards(902, rank=1)
    assert [c for c, _ in shards] == [c for c, _ in PARTS]
    for (_, got), (_, want) in zip(shards, PARTS):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(TensorNotFoundError):
        report.tensor(123456)


def test_metadata_stats_and_checks(report: reportdb.Report) -> None:
    info = report.tensor_info(900)
    assert info.shape == (96, 1024) and info.dtype == "float32" and info.spec.layout == "TILE"
    assert report.tensor_info(902, rank=1).spec.distribution is not None
    stats = report.tensor_stats(900)
    assert stats.shard.count == BIG.size and stats.shard.max == pytest.approx(float(BIG.max()))
    assert report.verify_tensor(900) == BIG.nbytes
    assert report.check_store() == []
    summary = report.summary()
    assert summary.tensors == len(report.tensor_keys()) and summary.logical_bytes > BIG.nbytes


def test_session_reads_the_report_tables_with_the_same_models(report: reportdb.Report) -> None:
    with report.session() as session:
        names = session.scalars(select(Operation.name).order_by(Operation.operation_id)).all()
        assert len(names) == 12 and all(isinstance(n, str) for n in names)
        records = session.scalars(select(LocalTensorComparisonRecord)).all()
        assert len(records) == 12
        stored = session.scalars(select(StoredTensor).where(StoredTensor.tensor_id == 900)).one()
        assert stored.n_shards == 1 and stored.shards[0].shape == "[96, 1024]"


def test_both_engines_answer_alike(local_report: Path, store: str) -> None:
    with reportdb.open(local_report) as a, reportdb.open(team.report_url(store, "the report")) as b:
        assert a.tensor_keys() == b.tensor_keys()
        for key in a.tensor_keys():
            assert a.tensor_info(*key) == b.tensor_info(*key)
            assert a.tensor_stats(*key) == b.tensor_stats(*key)
            for (ca, xa), (cb, xb) in zip(a.shards(*key), b.shards(*key)):
                assert ca == cb and xa.dtype == xb.dtype and xa.tobytes() == xb.tobytes()
        sa, sb = a.summary(), b.summary()
        assert (sa.tables, sa.tensors, sa.logical_bytes, sa.stored_bytes) == (sb.tables, sb.tensors, sb.logical_bytes, sb.stored_bytes)


def test_a_remote_report_leaves_no_file_behind(store: str) -> None:
    remote = reportdb.open(team.report_url(store, "the report"))
    folder = remote.path.parent
    remote.tensor(900)
    remote.close()
    assert not folder.exists()


def test_a_window_fetches_only_the_chunks_it_spans(store: str) -> None:
    """A remote window costs the server only the chunks that hold it (the private copy shows what was fetched)."""
    import sqlite3

    def fetched(remote: reportdb.Report) -> int:
        with sqlite3.connect(f"file:{remote.path}?mode=ro", uri=True) as conn:
            return conn.execute("SELECT COUNT(*) FROM rdb_chunk WHERE length(data) > 0").fetchone()[0]

    with reportdb.open(team.report_url(store, "the report")) as remote:
        assert fetched(remote) == 0
        np.testing.assert_array_equal(remote.tensor(900, window=np.s_[:10, :]), BIG[:10])  # 40 KiB: chunk 0
        assert fetched(remote) == 1
        np.testing.assert_array_equal(remote.tensor(900, rows=slice(80, 96)), BIG[80:])  # the last chunk
        assert fetched(remote) == 2
        np.testing.assert_array_equal(remote.tensor(900), BIG)
        assert fetched(remote) == 6


def test_one_shard_or_a_window_of_a_multi_shard_tensor_fetches_only_its_chunks(pg_server: PgServer, tmp_path: Path) -> None:
    """``device=`` fetches that shard's chunks only, a window of it only those it spans, and a window across a
    multi-device tensor only the chunks of the shards it overlaps."""
    import sqlite3

    rng = np.random.default_rng(3)
    parts = [((i,), rng.standard_normal((64, 256)).astype(np.float32)) for i in range(4)]  # 64 KiB: 4 chunks each
    whole = np.concatenate([a for _, a in parts], axis=0)
    with reportdb.open(tmp_path / "r", "a", chunk_size=16 << 10) as local:
        local.put_tensor(5, shards=parts, distribution=Distribution((4,), (Placement("shard", 0),)))
    url = pg_server.create_database()
    team.push(tmp_path / "r", url, name="sharded")

    def fetched(remote: reportdb.Report) -> int:
        with sqlite3.connect(f"file:{remote.path}?mode=ro", uri=True) as conn:
            return conn.execute("SELECT COUNT(*) FROM rdb_chunk WHERE length(data) > 0").fetchone()[0]

    with reportdb.open(team.report_url(url, "sharded")) as remote:
        np.testing.assert_array_equal(remote.tensor(5, device=(2,)), parts[2][1])
        assert fetched(remote) == 4
        np.testing.assert_array_equal(remote.tensor(5, device=(1,), window=np.s_[:8]), parts[1][1][:8])  # 8 KiB
        assert fetched(remote) == 5
        np.testing.assert_array_equal(remote.tensor(5, window=np.s_[190:200, :4]), whole[190:200, :4])  # shards 2, 3
        assert fetched(remote) == 6  # shard 2's last chunk was there already; shard 3's first one
        np.testing.assert_array_equal(remote.tensor(5), whole)
        assert fetched(remote) == 16
        with pytest.raises(TensorNotFoundError):
            remote.tensor(5, device=(7,))


def test_a_read_that_must_fetch_inside_a_transaction_of_the_callers_says_so_at_once(store: str) -> None:
    """Chunks are brought into the private copy through a connection of their own, which a transaction of the caller's
    on the report (a session's) holds back: a read that must fetch is then a ReportLockedError at once (it waited 60 s
    on its own lock, then raised a raw sqlite3 error), a tensor whose chunks are there already reads, and once the
    transaction ends the read fetches."""
    with reportdb.open(team.report_url(store, "the report")) as remote:
        assert remote.tensor(901).tobytes() == SMALL.tobytes()
        with remote.session() as session:
            assert session.execute(text("SELECT COUNT(*) FROM rdb_tensor")).scalar_one() == len(remote.tensor_keys())
            assert remote.tensor(901).tobytes() == SMALL.tobytes()
            with pytest.raises(ReportLockedError, match="tensor 900 .rank 0. needs 6 chunk.s. brought into"):
                remote.tensor(900)
        np.testing.assert_array_equal(remote.tensor(900), BIG)
