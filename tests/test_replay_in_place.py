"""An in-place call (its output tensor is one of its inputs) keeps one stored value for both: replay cannot tell
whether it is the value before or after the call, so it says so instead of judging a softmax of its own output."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import reportdb


def test_an_in_place_output_is_not_judged_and_says_why(tmp_path: Path) -> None:
    x = np.random.default_rng(5).standard_normal((1, 1, 32, 64)).astype(np.float32)
    after = np.exp(x - x.max(-1, keepdims=True))
    after /= after.sum(-1, keepdims=True)
    with reportdb.Writer(tmp_path / "r") as w:
        w.put_tensor(1, after)  # ttnn 0.8x keeps the value after the call under the one id
        w.put_tensor(2, x)
        w.put_tensor(3, after.copy())
        w.add_operation(1, "ttnn.softmax_in_place", inputs=[1], outputs=[1])
        w.add_operation(2, "ttnn.softmax", inputs=[2], outputs=[3], arguments={"dim": "-1"})
    result = reportdb.replay(tmp_path / "r")
    assert [(r.name, r.status, r.passed) for r in result.rows] == [
        ("ttnn.softmax_in_place", "in_place", None), ("ttnn.softmax", "compared", True)]
    assert "tensor 1 is both an input and an output" in result.rows[0].detail
