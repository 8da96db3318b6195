"""A legacy report folder written through a real ttnn report module, with the values ttnn reads back.

Run with the python of a venv that has ttnn installed (make_all.py does):

    python ttnn_reports.py OUT                         # the wheel's own ttnn.database (0.62.2: .bin)
    python ttnn_reports.py OUT --database-py FILE      # another wheel's ttnn/database.py driving this
                                                       # wheel's serializer (0.64.5's on 0.81.1: .tensorbin)

Writes ``OUT/report`` (``db.sqlite``, ``config.json``, ``tensors/<id>.bin|.tensorbin``) the way
``enable_detailed_tensor_report`` runs did: operations, arguments, stack traces, input and output
tensors, and comparison records whose golden tensors were never dumped. ``OUT/report_expected`` gets
``<id>.npy`` (or ``<id>.shard<i>.npy``) for every tensor file. Golden ``.pt`` files come afterwards
from torch (``torch_files.py goldens``). The tensor ids and operation layout are fixed (see PLANS);
values come from a seeded generator.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import pathlib
import sys
import types

import numpy as np
import ttnn

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from ttnn_tensors import TENSORBIN, make, read_back

# Per operation: how many new input tensors it takes besides the previous operation's output. Ids are
# handed out in order, so the 0.62.2 report has tensors 1-28 (outputs 2, 5, 7, 10, ...) and the
# .tensorbin report tensors 1-24 (outputs 3, 5, 7, 9, 12, ...).
@dataclasses.dataclass(frozen=True)
class Plan:
    """The fixed layout of one report."""

    names: list[str]  # operation names, cycled
    new_inputs: list[int]  # per operation
    golden_without_file_every: int  # every n-th operation compares against a golden never written (0: none)
    arguments: dict[str, str]


PLANS = {
    "bin": Plan(["ttnn.matmul", "ttnn.softmax", "ttnn.layer_norm", "ttnn.to_layout", "ttnn.linear", "ttnn.add"],
                [1, 2, 1, 2, 1, 1, 2, 2, 1, 1, 1, 1], 3, {"memory_config": "DRAM", "dtype": "bfloat16"}),
    "tensorbin": Plan(["ttnn.add", "ttnn.rms_norm", "ttnn.all_gather", "ttnn.embedding", "ttnn.softmax", "ttnn.matmul"],
                      [2, 1, 1, 1, 2, 1, 1, 1, 2, 2], 0, {"core_grid": "(8, 8)"}),
}


@dataclasses.dataclass
class Operation:
    """What ttnn.database reads from an operation object."""

    python_fully_qualified_name: str


def install_torch_stand_in() -> None:
    """The report modules import torch only for isinstance checks on their torch branch; these venvs have
    no torch (no CPU wheel for them here), so a module whose Tensor matches nothing stands in."""
    if "torch" not in sys.modules:
        stand_in = types.ModuleType("torch")
        stand_in.Tensor = type("Tensor", (), {})  # type: ignore[attr-defined]
        sys.modules["torch"] = stand_in


def report_module(database_py: pathlib.Path | None) -> types.ModuleType:
    """ttnn.database of this wheel, or another wheel's database.py installed in its place (it calls
    itself through ``ttnn.database.*``)."""
    if database_py is None:
        import ttnn.database as db

        return db
    sys.dont_write_bytecode = True  # no __pycache__ beside a cached download
    spec = importlib.util.spec_from_file_location("ttnn_database_of_another_wheel", database_py)
    assert spec is not None and spec.loader is not None
    db = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(db)
    ttnn.database = db
    return db


def new_input(rng: np.random.Generator, index: int) -> ttnn.Tensor:
    """The index-th new input tensor: a cycle of dtypes and layouts the wheel can write."""
    if not TENSORBIN:
        dtype, layout = [("float32", "ROW_MAJOR_LAYOUT"), ("bfloat16", "TILE_LAYOUT"), ("float32", "TILE_LAYOUT"),
                         ("bfloat16", "ROW_MAJOR_LAYOUT")][index % 4]
        return make(rng, dtype, layout, [1, 1, int(rng.integers(1, 48)), int(rng.integers(1, 48))])
    kind = index % 4
    if kind == 0:
        return make(rng, "bfloat8_b", "TILE_LAYOUT", [1, int(rng.integers(1, 48)), int(rng.integers(1, 48))])
    if kind == 1:
        width = int(rng.integers(1, 48))
        shards = [make(rng, "bfloat16", "TILE_LAYOUT", [1, 32, width]) for _ in range(2)]
        return ttnn.from_host_shards(shards, ttnn.MeshShape(1, 2))
    if kind == 2:
        return make(rng, "uint32", "ROW_MAJOR_LAYOUT", [int(rng.integers(1, 9)), int(rng.integers(1, 40))])
    return make(rng, "float32", "TILE_LAYOUT", [2, int(rng.integers(1, 40)), int(rng.integers(1, 40))])


def write_report(report: pathlib.Path, db: types.ModuleType, rng: np.random.Generator) -> None:
    """Operations with their tensors, arguments, stack traces and comparison records, through ``db``."""
    plan = PLANS["tensorbin" if TENSORBIN else "bin"]
    ttnn.CONFIG.enable_detailed_tensor_report = True
    next_id, made, previous = 1, 0, None
    for op_id, count in enumerate(plan.new_inputs, start=1):
        operation = Operation(plan.names[op_id % len(plan.names)])
        db.insert_operation(report, op_id, operation, None)
        inputs = [previous] if previous is not None else []
        for _ in range(count):
            tensor = new_input(rng, made)
            tensor.tensor_id = next_id
            next_id, made = next_id + 1, made + 1
            inputs.append(tensor)
        db.insert_input_tensors(report, op_id, inputs)
        db.insert_operation_arguments(report, op_id, [f"arg{i}" for i in range(len(inputs))], plan.arguments)
        # ttnn drops the two innermost frames (its own decorator) and stores the rest outermost first
        db.insert_stack_trace(report, op_id, [f'File "model.py", line {op_id}, in forward', "decorator", "wrapper"])
        # outputs are small activations, like a normalized model's (a +1.0 offset is a real change in bfloat16)
        output = make(rng, "bfloat16", "TILE_LAYOUT", [1, 1, 32, 64 if not TENSORBIN else int(rng.integers(1, 96))], scale=0.01)
        output.tensor_id = next_id
        next_id += 1
        db.insert_output_tensors(report, op_id, [output])
        db.insert_operation(report, op_id, operation, float(rng.uniform(1e-4, 1e-2)))
        previous = output
        every = plan.golden_without_file_every
        if every and op_id % every == 0:
            actual = float(rng.uniform(0.95, 0.999))
            record = db.TensorComparisonRecord(output.tensor_id, 100_000 + op_id, actual >= 0.99, 0.99, actual)
            for table in ("local_tensor_comparison_records", "global_tensor_comparison_records"):
                db.insert_tensor_comparison_records(report, table, [record])
    if hasattr(db, "insert_error"):
        db.insert_error(report, 4, plan.names[4 % len(plan.names)], "RuntimeError",
                        "TT_FATAL: input tensor must be on device", 'File "model.py", line 4, in forward', "2025-10-01T12:00:00")


def write_expected(report: pathlib.Path, expected: pathlib.Path) -> None:
    """``<id>.npy`` (or one ``<id>.shard<i>.npy`` per device) for every tensor file, read back by ttnn."""
    expected.mkdir(parents=True)
    for path in sorted((report / "tensors").iterdir()):
        tensor = ttnn.load_tensor(str(path))
        devices = ttnn.get_device_tensors(tensor) if TENSORBIN else [tensor]
        if len(devices) > 1:
            for i, shard in enumerate(devices):
                np.save(expected / f"{path.stem}.shard{i}.npy", read_back(shard))
        else:
            np.save(expected / f"{path.stem}.npy", read_back(tensor))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--database-py", type=pathlib.Path)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    install_torch_stand_in()
    db = report_module(args.database_py)
    write_report(args.out / "report", db, np.random.default_rng(args.seed))
    write_expected(args.out / "report", args.out / "report_expected")
    print("report at", args.out / "report")


if __name__ == "__main__":
    main()
