"""What a verdict saw reaches every surface beside its failed criteria: replay's rows say which tile failed."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np

import reportdb


def test_a_replayed_output_with_one_wrong_tile_names_it(tmp_path: Path) -> None:
    x = np.random.default_rng(8).standard_normal((1, 128, 512)).astype(np.float32)
    golden = (x / (1 + np.exp(-x))).astype(ml_dtypes.bfloat16)
    device = golden.astype(np.float32)
    device[0, 64:96, 256:288] *= -1  # tile (0, 2, 8) sign-flipped
    with reportdb.Writer(tmp_path / "r") as w:
        w.put_tensor(1, x.astype(ml_dtypes.bfloat16), ttnn_dtype="BFLOAT16")
        w.put_tensor(2, device.astype(ml_dtypes.bfloat16), ttnn_dtype="BFLOAT16")
        w.add_operation(1, "ttnn.silu", inputs=[1], outputs=[2])
    (row,) = reportdb.replay(tmp_path / "r").rows
    assert row.passed is False and "tile_sqnr_db" in row.failed
    assert "32x32 tile (0, 2, 8):" in row.detail
