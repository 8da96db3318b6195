"""``reportdb repro``: one operation of a report as a folder that runs anywhere, with numpy, ml_dtypes and pytest.

The folder holds the operation's stored inputs and device output (``.npy``, dtype kept: bfloat16 and float8 as their
ml_dtypes values, the ttnn dtype named in ``repro.json``), its recorded arguments, the reference output, the policy's
criteria for it, a two-line README, ``test_repro.py`` (:mod:`reportdb.analysis.repro_test`) and a copy of the
references package. ``pytest`` in the folder fails exactly when the operation fails its policy.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InvalidArgumentError, OutputPathError
from . import references
from .graph import judged_dtype, opened, tensor_graph
from .policy import Policy, as_policy, canonical_dtype
from .replay import ReplayRow, _arguments, judged, prepare

if TYPE_CHECKING:
    from ..report import Report


def make_repro(
    report: "Report | str | Path", operation_id: int, out: str | Path, *, policy: "Policy | str | Path | None" = None,
    rank: int = 0, output_index: int = 0,
) -> Path:
    """Write the repro folder of operation ``operation_id`` (its output ``output_index``, for an operation with
    several) to ``out`` (which must not exist, or be an empty folder) and return it. InvalidArgumentError when the
    operation cannot be replayed (no such operation or output, no reference, an argument not understood, values not
    stored: the message says which)."""
    if output_index < 0:  # an index from the end would name another output than the one asked for
        raise InvalidArgumentError(f"output_index must be 0 or more (an operation's first output is 0), not {output_index}")
    target = Path(out)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise OutputPathError(f"{target} exists and is not an empty folder; give a new folder with -o")
    judge = as_policy(policy)
    with opened(report) as rep:
        graph = tensor_graph(rep, rank)
        if operation_id not in graph.names:
            raise InvalidArgumentError(f"{rep.path}: no operation {operation_id} (rank {rank})")
        arguments = _arguments(rep, rank).get(operation_id, [])
        prepared = prepare(rep, graph, operation_id, arguments, rank)
        if isinstance(prepared, ReplayRow):
            raise InvalidArgumentError(f"operation {operation_id} {prepared.name} cannot be replayed "
                                       f"({prepared.status}): {prepared.detail}")
        chosen = [(t, e) for i, t, e in prepared if i == output_index]
        if not chosen:
            raise InvalidArgumentError(f"operation {operation_id} has no output {output_index}")
        output_id, expected = chosen[0]
        if isinstance(expected, str):
            raise InvalidArgumentError(f"output {output_index} of operation {operation_id} cannot be replayed: {expected}")
        name = graph.names[operation_id]
        dtype = canonical_dtype(judged_dtype(rep, graph, output_id, rank))
        device = rep.tensor(output_id, rank)
        metrics, verdict = judged(judge, name, dtype, references.defined_part(name, device),
                                  references.defined_part(name, expected))  # where the operation defines its output
        rtol, atol = judge.tolerances(name, dtype)
        inputs = [(t, rep.tensor(t, rank), judged_dtype(rep, graph, t, rank), rep.tensor_info(t, rank).spec.layout)
                  for t in graph.inputs.get(operation_id, [])]
        meta: dict[str, Any] = {
            "report": str(rep.path), "operation_id": operation_id, "operation": name, "rank": rank,
            "output_index": output_index,
            "arguments": [[a.name, a.text] for a in arguments],
            "policy": {"dtype": dtype, "rtol": rtol, "atol": atol, "criteria": verdict.criteria.to_dict()},
            "reportdb_verdict": {"passed": verdict.passed, "failed": list(verdict.failed), "pcc": metrics.pcc,
                                 "max_abs_error": metrics.max_abs_error},
        }
        _write(target, meta, inputs, (output_id, device, dtype), expected)
    return target


def _save(
    folder: Path, name: str, array: np.ndarray, tensor_id: int | None, ttnn_dtype: str | None, layout: str | None = None
) -> dict[str, Any]:
    """Save one array as ``name.npy`` (its dtype kept) and return its entry for ``repro.json`` (with the layout the
    tensor had on the device, which a run of the operation on a device needs)."""
    np.save(folder / f"{name}.npy", np.ascontiguousarray(array), allow_pickle=False)
    return {"file": f"{name}.npy", "dtype": array.dtype.name, "ttnn_dtype": ttnn_dtype, "tensor_id": tensor_id,
            "shape": list(array.shape), "layout": layout}


def _write(target: Path, meta: dict[str, Any], inputs: list[tuple[int, np.ndarray, str, str | None]],
           output: tuple[int, np.ndarray, str], expected: np.ndarray) -> None:
    """Fill a scratch folder beside ``target`` and move it into place, so a failure leaves nothing behind."""
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        meta["inputs"] = [_save(scratch, f"input{i}", array, t, d, lay) for i, (t, array, d, lay) in enumerate(inputs)]
        meta["device_output"] = _save(scratch, "device_output", output[1], output[0], output[2])
        meta["reference_output"] = _save(scratch, "reference_output", expected, None, None)
        (scratch / "repro.json").write_text(json.dumps(meta, indent=1, allow_nan=False, default=str))
        (scratch / "arguments.json").write_text(json.dumps(meta["arguments"], indent=1))
        (scratch / "policy.json").write_text(json.dumps(meta["policy"], indent=1))
        verdict = "passes" if meta["reportdb_verdict"]["passed"] else "fails"
        (scratch / "README.md").write_text(
            f"Operation {meta['operation_id']} ({meta['operation']}) of {meta['report']}: it {verdict} its policy.\n"
            "Run `python -m pytest` here (numpy, ml_dtypes, pytest): the test fails exactly when the operation does.\n"
        )
        (scratch / "pytest.ini").write_text("[pytest]\naddopts = -rs\n")  # skip reasons printed (no device here)
        shutil.copy(Path(__file__).with_name("repro_test.py"), scratch / "test_repro.py")
        package = Path(references.__file__).parent
        shutil.copytree(package, scratch / "references", ignore=shutil.ignore_patterns("__pycache__"))
        if target.exists():
            target.rmdir()
        scratch.rename(target)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
