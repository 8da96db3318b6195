"""Reports for the page's debugging views (tests/test_web_debug_api.py, tests/test_web_debug_browser.py): a chain of
float32 operations with local and global golden records where one operation (CULPRIT_OP) is wrong by itself (a
sign-flipped 32x32 block in its output) and the operations after it inherit the error (their local comparisons pass,
their global ones fail), and a second run whose output of DIVERGE_OP differs from the first run's by a flipped
block (run against run); and a report with one block-sharded output whose shard on one core is wrong
(build_sharded)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import reportdb
from reportdb.spec import Distribution, Placement

OPS = 6
CULPRIT_OP = 3
DIVERGE_OP = 4
SHAPE = (1, 1, 64, 96)
FLIP = (slice(32, 64), slice(32, 64))
MESH_TENSOR = 50
#: The block-sharded output of build_sharded: 2 x 3 shards of 32 x 32 on cores (0, 0)..(2, 1), row major; the shard
#: of rows 32:64, columns 64:96 (shard 5, core (2, 1)) is wrong.
SHARDED_TENSOR = 2
SHARDED_SHAPE = (1, 1, 64, 96)
WRONG_SHARD = (slice(32, 64), slice(64, 96))
WRONG_CORE = (2, 1)
#: A height-sharded output of build_sharded with leading dims and uneven shards: (2, 3, 40, 32) in TILE layout
#: (40 rows padded to 64 per matrix), 96-row shards on cores (0, 0)..(3, 0); shard 1 starts at matrix [0, 1] row 32.
HEIGHT_TENSOR = 3
HEIGHT_SHAPE = (2, 3, 40, 32)


def _step(x: np.ndarray, op: int) -> np.ndarray:
    """The exact computation of operation ``op`` (golden and device alike)."""
    return (np.tanh(x * (1.0 + 0.1 * op)) + 0.05 * op).astype(np.float32)


def chain(variant: int) -> dict[str, dict[int, np.ndarray]]:
    """Per operation: the device output, its local golden (op on the device's input) and its global golden (the
    golden chain from the start). ``variant`` 1 flips a block of DIVERGE_OP's output as well (the second run)."""
    x = np.random.default_rng(5).standard_normal(SHAPE).astype(np.float32)
    device, local, glob = {0: x}, {}, {}
    g = x
    for op in range(1, OPS + 1):
        local[op] = _step(device[op - 1], op)
        g = _step(g, op)
        glob[op] = g
        out = local[op].copy()
        if op == CULPRIT_OP or (variant == 1 and op == DIVERGE_OP):
            out[(0, 0) + FLIP] *= -1
        device[op] = out
    return {"device": device, "local": local, "global": glob}


def build(path: Path, variant: int = 0) -> dict[str, dict[int, np.ndarray]]:
    """The report of a run: op ``k`` reads tensor ``k - 1`` and writes tensor ``k``; its local golden is tensor
    ``100 + k``, its global golden ``200 + k``. Operations carry arguments, a stack trace and a duration."""
    data = chain(variant)
    with reportdb.Writer(path) as w:
        w.put_tensor(0, data["device"][0])
        for op in range(1, OPS + 1):
            w.put_tensor(op, data["device"][op], role="output")
            w.put_tensor(100 + op, data["local"][op])
            w.put_tensor(200 + op, data["global"][op])
            w.add_operation(op, f"ttnn.step_{op}", inputs=[op - 1], outputs=[op], duration=1000.0 * op,
                            arguments={"scale": f"{1.0 + 0.1 * op:.1f}", "memory_config": "DRAM"},
                            stack_trace=[f'File "model.py", line {10 + op}, in forward', f"    y = ttnn.step_{op}(x)"])
        w.add_rows("local_tensor_comparison_records", [
            {"tensor_id": op, "golden_tensor_id": 100 + op, "matches": 1, "desired_pcc": 0.99, "actual_pcc": 1.0}
            for op in range(1, OPS + 1)
        ])
        w.add_rows("global_tensor_comparison_records", [
            {"tensor_id": op, "golden_tensor_id": 200 + op, "matches": 1, "desired_pcc": 0.99, "actual_pcc": 1.0}
            for op in range(1, OPS + 1)
        ])
    with reportdb.open(path, "a") as report:  # a 1x4 mesh tensor whose device (0, 2) is 7% off in scale
        mesh, golden = mesh_tensor()
        report.put_tensor(MESH_TENSOR, shards=[((0, d), mesh[..., 32 * d : 32 * (d + 1)]) for d in range(4)],
                          ttnn_dtype="FLOAT32", distribution=Distribution((1, 4), (Placement("replicate"), Placement("shard", 3))))
        report.put_tensor(MESH_TENSOR + 100, golden)
        with report.connection() as conn:
            conn.execute("INSERT INTO operations(operation_id, name) VALUES (?, ?)", (OPS + 1, "ttnn.all_gather"))
            conn.execute("INSERT INTO input_tensors(operation_id, input_index, tensor_id) VALUES (?, 0, ?)", (OPS + 1, OPS))
            conn.execute("INSERT INTO output_tensors(operation_id, output_index, tensor_id) VALUES (?, 0, ?)", (OPS + 1, MESH_TENSOR))
            conn.execute("INSERT INTO local_tensor_comparison_records(tensor_id, golden_tensor_id, matches, desired_pcc, "
                         "actual_pcc) VALUES (?, ?, 1, 0.99, 1.0)", (MESH_TENSOR, MESH_TENSOR + 100))
    return data


def mesh_tensor() -> tuple[np.ndarray, np.ndarray]:
    """The 1x4 mesh tensor (assembled) and its golden: device (0, 2)'s columns are 1.07 times the golden's."""
    golden = np.random.default_rng(9).standard_normal((1, 1, 32, 128)).astype(np.float32)
    mesh = golden.copy()
    mesh[..., 64:96] *= 1.07
    return mesh, golden


def pcc(a: np.ndarray, b: np.ndarray) -> float:
    """numpy's Pearson correlation of two arrays."""
    return float(np.corrcoef(np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel())[0, 1])


def sharded_tensor() -> tuple[np.ndarray, np.ndarray]:
    """The block-sharded output and its golden: the wrong shard is 1.5 times the golden plus 0.25."""
    golden = np.random.default_rng(13).standard_normal(SHARDED_SHAPE).astype(np.float32)
    out = golden.copy()
    out[(0, 0) + WRONG_SHARD] = out[(0, 0) + WRONG_SHARD] * np.float32(1.5) + np.float32(0.25)
    return out, golden


def build_sharded(path: Path, wrong: bool = True) -> None:
    """A report of an operation writing a TILE, block-sharded float32 tensor (L1, 32 x 32 shards on a 3 x 2 core
    grid) with a local golden record, one shard of it wrong (right, as the golden, without ``wrong``: a run to
    compare the other with); and one writing HEIGHT_TENSOR, right, with its golden."""
    out, golden = sharded_tensor()
    out = out if wrong else golden
    mc = {"memory_layout": "BLOCK_SHARDED", "buffer_type": "L1", "nd_shard_spec": None,
          "shard_spec": {"grid": [[[0, 0], [2, 1]]], "shape": [32, 32], "orientation": "ROW_MAJOR", "mode": "PHYSICAL",
                         "physical_shard_shape": None, "halo": None}}
    with reportdb.Writer(path) as w:
        w.put_tensor(1, golden * 0.5)
        w.put_tensor(SHARDED_TENSOR, out, role="output", layout="TILE", ttnn_dtype="FLOAT32", memory_config=mc)
        w.put_tensor(100 + SHARDED_TENSOR, golden)
        w.add_operation(1, "ttnn.sharded_add", inputs=[1], outputs=[SHARDED_TENSOR])
        tall = np.random.default_rng(17).standard_normal(HEIGHT_SHAPE).astype(np.float32)
        hmc = {**mc, "memory_layout": "HEIGHT_SHARDED", "shard_spec": {**mc["shard_spec"], "grid": [[[0, 0], [3, 0]]],
                                                                      "shape": [96, 32]}}
        w.put_tensor(HEIGHT_TENSOR, tall, role="output", layout="TILE", ttnn_dtype="FLOAT32", memory_config=hmc)
        w.put_tensor(100 + HEIGHT_TENSOR, tall)
        w.add_operation(2, "ttnn.sharded_copy", inputs=[SHARDED_TENSOR], outputs=[HEIGHT_TENSOR])
        w.add_rows("local_tensor_comparison_records", [
            {"tensor_id": t, "golden_tensor_id": 100 + t, "matches": 1, "desired_pcc": 0.99, "actual_pcc": 1.0}
            for t in (SHARDED_TENSOR, HEIGHT_TENSOR)
        ])


#: build_drift: DRIFT_OPS operations, each adding its own small noise (SQNR ~34 dB against its local golden, which
#: passes) so the error the chain accumulates fails the global SQNR criterion from DRIFT_FIRST_VICTIM on.
DRIFT_OPS = 8
DRIFT_NOISE = 0.02


def drift_chain() -> dict[str, dict[int, np.ndarray]]:
    """Per operation of build_drift: the device output, its local golden and its global golden (operation k adds
    0.1 to its input; the device's result carries noise of standard deviation DRIFT_NOISE times the output's)."""
    rng = np.random.default_rng(21)
    x = (rng.standard_normal(SHAPE) + 1.0).astype(np.float32)
    device, local, glob = {0: x}, {}, {}
    g = x
    for op in range(1, DRIFT_OPS + 1):
        local[op] = (device[op - 1] + np.float32(0.1)).astype(np.float32)
        g = (g + np.float32(0.1)).astype(np.float32)
        glob[op] = g
        scale = float(np.sqrt(np.mean(local[op].astype(np.float64) ** 2)))
        noise = rng.standard_normal(SHAPE) * DRIFT_NOISE * scale
        device[op] = (local[op] + noise).astype(np.float32)
    return {"device": device, "local": local, "global": glob}


def sqnr_db(a: np.ndarray, golden: np.ndarray) -> float:
    """numpy's SQNR of ``a`` against ``golden`` in dB (golden energy over error energy)."""
    g = np.asarray(golden, np.float64)
    return float(10 * np.log10(np.sum(g**2) / np.sum((np.asarray(a, np.float64) - g) ** 2)))


def build_drift(path: Path) -> dict[str, dict[int, np.ndarray]]:
    """A float32 report whose every operation passes its local comparison while the later ones fail their global one
    (victims of their inputs, with no culprit): op ``k`` reads tensor ``k - 1`` and writes tensor ``k``, its local
    golden tensor ``100 + k``, its global golden ``200 + k``."""
    data = drift_chain()
    with reportdb.Writer(path) as w:
        w.put_tensor(0, data["device"][0])
        for op in range(1, DRIFT_OPS + 1):
            w.put_tensor(op, data["device"][op], role="output")
            w.put_tensor(100 + op, data["local"][op])
            w.put_tensor(200 + op, data["global"][op])
            w.add_operation(op, f"ttnn.add_{op}", inputs=[op - 1], outputs=[op])
        for table, base in (("local_tensor_comparison_records", 100), ("global_tensor_comparison_records", 200)):
            w.add_rows(table, [{"tensor_id": op, "golden_tensor_id": base + op, "matches": 1, "desired_pcc": 0.99,
                                "actual_pcc": 1.0} for op in range(1, DRIFT_OPS + 1)])
    return data


#: build_long: LONG_OPS small operations; the second run's output of LONG_DIVERGE_OP differs (a flipped 16 x 16 block).
LONG_OPS = 40
LONG_DIVERGE_OP = 30


def build_long(path: Path, variant: int) -> None:
    """A run of LONG_OPS float32 operations on 32 x 32 tensors (op ``k`` reads tensor ``k - 1``, writes tensor ``k``);
    ``variant`` 1 flips a block of LONG_DIVERGE_OP's output and carries it on (a run to compare with variant 0)."""
    x = np.random.default_rng(29).standard_normal((32, 32)).astype(np.float32)
    with reportdb.Writer(path) as w:
        w.put_tensor(0, x)
        for op in range(1, LONG_OPS + 1):
            x = np.tanh(x + np.float32(0.01 * op)).astype(np.float32)
            if variant == 1 and op == LONG_DIVERGE_OP:
                x[:16, 16:] *= -1
            w.put_tensor(op, x, role="output")
            w.add_operation(op, f"ttnn.long_{op}", inputs=[op - 1], outputs=[op])
