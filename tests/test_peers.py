"""Peers (``analysis/peers.py``): which outputs are far out of line with the same operation on the same shape."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import reportdb
from reportdb.analysis.peers import PEER_GAP_DB, PeerOutput, anomalies
from test_culprits import _silu_layers


def _out(tensor_id: int, sqnr: float | None, name: str = "ttnn.silu", shape: tuple[int, ...] = (1, 256, 2816),
         dtype: str = "bfloat16") -> PeerOutput:
    return PeerOutput(tensor_id, tensor_id, 0, name, shape, dtype, sqnr)


def test_an_output_far_below_its_peers_median_is_flagged_and_its_peers_are_not() -> None:
    found = anomalies([_out(1, 55.1), _out(2, 54.8), _out(3, 27.5), _out(4, 55.3)])
    assert [(a.tensor_id, a.peers, a.peer_sqnr_db, round(a.gap_db or 0, 2)) for a in found] == [(3, 3, 55.1, 27.6)]


def test_the_gap_must_exceed_the_bound_and_peers_are_same_name_shape_and_dtype() -> None:
    assert anomalies([_out(1, 50.0), _out(2, 50.0), _out(3, 50.0 - PEER_GAP_DB)]) == ()
    assert anomalies([_out(1, 50.0), _out(2, 50.0), _out(3, 50.0 - PEER_GAP_DB - 0.1)])[0].tensor_id == 3
    mixed = [_out(1, 55.0), _out(2, 55.0, shape=(1, 32)), _out(3, 20.0, dtype="float32"), _out(4, 20.0, "ttnn.gelu")]
    assert anomalies(mixed) == ()  # no output has two peers


def test_two_calls_alone_have_no_peers_to_judge_by() -> None:
    assert anomalies([_out(1, 55.0), _out(2, 10.0)]) == ()


def test_exact_peers_make_the_one_erring_call_an_anomaly() -> None:
    """Data movement is exact: a call with any error among exact peers is out of line (no finite gap to quote)."""
    found = anomalies([_out(1, None, "ttnn.permute"), _out(2, None, "ttnn.permute"), _out(3, 60.0, "ttnn.permute")])
    assert [(a.tensor_id, a.peer_sqnr_db, a.gap_db) for a in found] == [(3, None, None)]
    assert "its 2 peers (exact)" in found[0].describe()


def test_replay_flags_the_call_out_of_line_with_its_peers(tmp_path: Path) -> None:
    _silu_layers(tmp_path / "r", faulty=True)
    result = reportdb.replay(tmp_path / "r")
    assert [(a.operation_id, a.tensor_id, a.peers) for a in result.anomalies] == [(3, 21, 3)]
    assert result.to_dict()["anomalies"][0]["operation_id"] == 3
    assert reportdb.replay(tmp_path / "r", chain=True).anomalies == ()  # chained errors grow with depth: no peers


@pytest.mark.process
def test_the_replay_command_prints_the_anomaly(tmp_path: Path) -> None:
    _silu_layers(tmp_path / "r", faulty=True)
    out = subprocess.run([sys.executable, "-m", "reportdb", "replay", str(tmp_path / "r")], capture_output=True,
                         text=True, cwd=Path(__file__).resolve().parents[1])
    assert "anomaly: operation 3 ttnn.silu (tensor 21, 1x64x256 bfloat16)" in out.stdout, out.stdout + out.stderr
