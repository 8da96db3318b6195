"""A reference builds no more than the operation's stored arrays justify (issue 30): hostile shapes and arguments from
small stored tensors are refused before anything is computed, and hostile integers are refused, not overflowed."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import reportdb
from reportdb.analysis import references as refs
from reportdb.analysis.references import Argument as A
from reportdb.errors import CorruptionError, InvalidArgumentError

F = np.float32
N = 100_000
REASON = "more than the stored outputs justify"


def hostile(path: Path) -> None:
    """Ops 1-5 would build 10^9-10^10 elements (or 2M pieces) from stored tensors of at most 8 MB; op 6 is normal."""
    column, row = np.ones((N, 1), F), np.ones((1, N), F)
    small = np.zeros((32,), F)
    x = np.arange(32 * 32, dtype=F).reshape(32, 32)
    with reportdb.Writer(path) as w:
        for tensor_id, array in ((1, column), (2, row), (3, small), (4, np.zeros(1_000_000, np.int32)),
                                 (5, np.ones((2, 4096), F)), (6, np.ones((1, 1, N, 1), F)),
                                 (7, np.zeros(2_000_000, F)), (8, x), (9, x + x)):
            w.put_tensor(tensor_id, array)
        w.add_operation(1, "ttnn.add", inputs=[1, 2], outputs=[3])
        w.add_operation(2, "ttnn.matmul", inputs=[1, 2], outputs=[3])
        w.add_operation(3, "ttnn.embedding", inputs=[4, 5], outputs=[3])
        w.add_operation(4, "ttnn.transformer.scaled_dot_product_attention", inputs=[6, 6, 6], outputs=[3],
                        arguments={"is_causal": "False"})
        w.add_operation(5, "ttnn.split", inputs=[7], outputs=[3], arguments={"split_size": "1", "dim": "0"})
        w.add_operation(6, "ttnn.add", inputs=[8, 8], outputs=[9])


@pytest.mark.process
def test_hostile_references_are_refused_without_allocating(tmp_path: Path) -> None:
    """Replayed under a 2 GiB address-space cap: a reference that allocated would fail with MemoryError."""
    path = tmp_path / "hostile.sqlite"
    hostile(path)
    script = textwrap.dedent(f"""
        import json, resource
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        import reportdb
        rows = reportdb.replay({str(path)!r}).rows
        print(json.dumps([[r.operation_id, r.status, r.passed, list(r.unsupported), r.detail] for r in rows]))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {r[0]: r for r in json.loads(done.stdout)}
    for op in (1, 2, 3, 4, 5):
        assert rows[op][1:4] == ["unsupported_arguments", None, []], rows[op]
        assert "the reference would build" in rows[op][4] and REASON in rows[op][4], rows[op]
    assert rows[6][1:3] == ["compared", True]


@pytest.mark.parametrize("op, inputs, args", [
    ("ttnn.add", [np.ones((N, 1), F), np.ones((1, N), F)], []),
    ("ttnn.linear", [np.ones((N, 1), F), np.ones((1, N), F)], []),
    ("ttnn.embedding", [np.zeros(1_000_000, np.int32), np.ones((2, 4096), F)], []),
    ("ttnn.transformer.scaled_dot_product_attention", [np.ones((1, 1, N, 1), F)] * 3, []),
    ("ttnn.split", [np.zeros(2_000_000, F)], [A("split_size", "1")]),
    ("ttnn.chunk", [np.zeros(2_000_000, F)], [A("chunks", "2000000"), A("dim", "0")]),
    ("ttnn.concat", [np.zeros(10_000, F)] * 10_000, []),
    ("ttnn.where", [np.ones((N, 1), F), np.ones((1, N), F), np.ones(1, F)], []),
    ("ttnn.layer_norm", [np.ones((1, N), F), np.ones((N, 1), F)], [A("residual_input_tensor", "ttnn.Tensor(x)"),
                                                                   A("0", "ttnn.Tensor(y)")]),
])
def test_each_growing_reference_declares_its_size(op: str, inputs: list[np.ndarray], args: list[A]) -> None:
    """With the limit its stored arrays justify, each is refused before computing (the arrays it would build are
    1000s of times its inputs)."""
    limit = refs.justified_elements([a.size for a in inputs])
    with pytest.raises(refs.Oversized, match="the reference would build .* more than the stored outputs justify"):
        refs.compute_outputs(op, list(enumerate(inputs, start=1)), args, max_elements=limit)


def test_normal_references_fit_their_limit() -> None:
    x = np.arange(6, dtype=F).reshape(2, 3)
    limit = refs.justified_elements([x.size])
    assert refs.compute_outputs("ttnn.add", [(1, x), (2, x)], [], max_elements=limit)[0].tolist() == (x + x).tolist()
    pieces = refs.compute_outputs("ttnn.split", [(1, x)], [A("split_size", "1"), A("dim", "0")], max_elements=limit)
    assert [p.tolist() for p in pieces] == [[[0, 1, 2]], [[3, 4, 5]]]


@pytest.mark.parametrize("op, inputs, args, names", [
    ("ttnn.concat", [np.ones(2, F), np.ones(2, F)], [A("dim", str(10**20))], ("dim",)),
    ("ttnn.concat", [np.ones(2, F), np.ones(2, F)], [A("dim", str(2**62))], ("dim",)),
    ("ttnn.transformer.scaled_dot_product_attention", [np.ones((1, 1, 4, 2), F)] * 3,
     [A("sliding_window_size", str(10**20))], ("sliding_window_size",)),
    ("ttnn.transformer.scaled_dot_product_attention", [np.ones((1, 1, 4, 2), F)] * 3,
     [A("sliding_window_size", str(-(2**63)))], ("sliding_window_size",)),
    ("ttnn.permute", [np.ones((2, 2), F)], [A("dims", f"[0, {10**30}]")], ("dims",)),
])
def test_hostile_integers_are_unsupported_not_overflowed(op: str, inputs: list[np.ndarray], args: list[A],
                                                          names: tuple[str, ...]) -> None:
    with pytest.raises(refs.UnsupportedArguments) as info:
        refs.compute_outputs(op, list(enumerate(inputs, start=1)), args)
    assert info.value.names == names


def test_negative_output_indexes_are_clear_errors(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    x = np.arange(4, dtype=F)
    with reportdb.Writer(path) as w:
        w.put_tensor(1, x)
        w.put_tensor(2, x)
        w.put_tensor(3, x)
        w.add_operation(1, "ttnn.split", inputs=[1], outputs=[2, 3], arguments={"split_size": "2"})
    with pytest.raises(InvalidArgumentError, match="output_index must be 0 or more"):
        reportdb.make_repro(path, 1, tmp_path / "out", output_index=-1)
    import sqlite3

    con = sqlite3.connect(path)
    con.execute("UPDATE output_tensors SET output_index = -1 WHERE tensor_id = 3")
    con.commit()
    con.close()
    with pytest.raises(CorruptionError, match="output index -1"):
        reportdb.replay(path)


def test_a_chain_keeps_a_tensor_an_operation_reads_twice_for_its_later_consumers(tmp_path: Path) -> None:
    """Op 2 reads tensor 2 twice; op 3 reads it after: its chained reference must still be there."""
    path = tmp_path / "r.sqlite"
    x = np.arange(-4, 4, dtype=F)
    y = np.maximum(x, 0)
    with reportdb.Writer(path) as w:
        for tensor_id, array in ((1, x), (2, y), (3, y + y), (4, y)):
            w.put_tensor(tensor_id, array)
        w.add_operation(1, "ttnn.relu", inputs=[1], outputs=[2])
        w.add_operation(2, "ttnn.add", inputs=[2, 2], outputs=[3])
        w.add_operation(3, "ttnn.relu", inputs=[2], outputs=[4])
    rows = reportdb.replay(path, chain=True).rows
    assert [(r.operation_id, r.status, r.passed) for r in rows] == [(i, "compared", True) for i in (1, 2, 3)]
