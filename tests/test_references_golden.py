"""Every reference against ttnn 0.81.1's own golden function (torch on the CPU), on seeded inputs and argument sets
real models use, with the arguments read from the texts ttnn itself records for each call.

The golden functions need torch beside ttnn; the ttnn venv of tests/ttnn_env.py has none, so this test builds its
own cached venv (ttnn 0.81.1 + torch 2.14.1 on CPython 3.12; the first build downloads ~0.9 GB). Equal means equal
within float32 rounding: a reference the golden disagrees with fails here; no tolerance is widened to hide it.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import test_references_nn
from reportdb.analysis import references
from ttnn_env import MOCK_CLUSTER, ROOT, EnvBuildError, EnvUnavailable, TtnnEnv, _dependencies, cached_venv, find_interpreter

pytestmark = [pytest.mark.slow, pytest.mark.process]

TTNN, TORCH = "0.81.1", "2.14.1"
EPS32 = float(np.finfo(np.float32).eps)


def golden_env() -> TtnnEnv:
    """The cached venv with ttnn, torch and this checkout (skips when it cannot be downloaded here)."""
    interpreter = find_interpreter("3.12")
    if interpreter is None or not interpreter.exists() or not sys.platform.startswith("linux"):
        pytest.skip("ttnn 0.81.1 wheels need CPython 3.12 on Linux x86-64")
    tag = hashlib.sha256(" ".join([str(interpreter), str(ROOT), *_dependencies()]).encode()).hexdigest()[:8]
    try:
        python = cached_venv(f"ttnn-{TTNN}-torch-{TORCH}-py3.12-{tag}", interpreter,
                             [f"ttnn=={TTNN}", f"torch=={TORCH}", "-e", str(ROOT)], f"ttnn {TTNN} with torch {TORCH}")
    except EnvUnavailable as exc:
        pytest.skip(str(exc))
    except EnvBuildError as exc:
        pytest.fail(str(exc))
    return TtnnEnv(python, TTNN)


def legacy_database_py() -> Path | None:
    """ttnn 0.64.5's database.py (ttnn 0.6x's argument texts), as tests/data/make/make_all.py fetches it; None
    offline."""
    sys.path.insert(0, str(ROOT / "tests" / "data" / "make"))
    try:
        import make_all

        return make_all.database_py()
    except (SystemExit, subprocess.CalledProcessError, OSError):
        return None
    finally:
        sys.path.pop(0)


@pytest.fixture(scope="module")
def goldens(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    env = golden_env()
    out = tmp_path_factory.mktemp("goldens")
    script = out / "golden_references.py"
    script.write_text((ROOT / "tests" / "golden_references.py").read_text())
    database = legacy_database_py()
    env.run(str(script), str(out / "cases"), *(["--database-py", str(database)] if database else []),
            extra_env={"TT_METAL_MOCK_CLUSTER_DESC_PATH": str(MOCK_CLUSTER)})
    return out / "cases", json.loads((out / "cases" / "cases.json").read_text())


def test_the_golden_cases_cover_every_reference(goldens: tuple[Path, list[dict]]) -> None:
    _, cases = goldens
    covered = {c["op"] for c in cases}
    aliases = {"ttnn.sub", "ttnn.mul", "ttnn.div", "ttnn.clip", "ttnn.view", "ttnn.tilize", "ttnn.untilize",
               "ttnn.tilize_with_zero_padding", "ttnn.to_memory_config",
               "ttnn.experimental.split_query_key_value_and_split_heads"}  # one function with a covered name
    # no golden function in ttnn 0.81.1 (tests/test_references_more.py checks them by hand and against torch)
    without_golden = {"ttnn.experimental.typecast", "ttnn.experimental.view",
                      "ttnn.experimental.repeat_and_interleave_eltwise_mul"}
    # collectives run per device shard, which a host golden call cannot express: tests/test_replay_collectives.py
    collectives = {n for n in references.names() if references.lookup(n).per_device}
    unchecked = set(references.names()) - aliases - without_golden - collectives - set(test_references_nn.NO_GOLDEN)
    assert unchecked <= covered, unchecked - covered
    assert all("database" in c["rows"] for c in cases) or legacy_database_py() is None


def test_every_reference_equals_the_golden(goldens: tuple[Path, list[dict]]) -> None:
    folder, cases = goldens
    failures = []
    for case in cases:
        data = np.load(folder / f"{case['case']}.npz")
        inputs = [(tensor_id, data[f"input{i}"]) for i, tensor_id in enumerate(case["input_ids"])]
        goldens = [data[f"golden{i}"] for i in range(len(data.files)) if f"golden{i}" in data.files]
        for form, rows in case["rows"].items():
            arguments = [references.Argument(name, text) for name, text in rows]
            try:
                ours = references.compute_outputs(case["op"], inputs, arguments)
            except references.UnsupportedArguments as exc:
                failures.append(f"case {case['case']} {case['op']} ({form} texts {rows}): {exc}")
                continue
            if len(ours) != len(goldens):
                failures.append(f"case {case['case']} {case['op']}: {len(ours)} outputs, the golden gives {len(goldens)}")
            for index, (mine, golden) in enumerate(zip(ours, goldens)):
                # only where the operation defines its output (the pre-all-gather statistics' columns)
                problem = disagreement(references.defined_part(case["op"], mine),
                                       references.defined_part(case["op"], golden))
                if problem:
                    failures.append(f"case {case['case']} {case['op']} output {index} ({form} texts): {problem}")
    assert not failures, "\n".join(failures)


def disagreement(ours: np.ndarray, golden: np.ndarray) -> str:
    """Why two results are not equal within float32 rounding ("" when they are): the same shape, exactly equal for
    integer results, and elsewhere |ours - golden| within a few float32 ulps of the result's scale."""
    if ours.shape != golden.shape:
        return f"shape {ours.shape} != golden {golden.shape}"
    if golden.dtype.kind in "iub":
        return "" if np.array_equal(ours.astype(np.int64), golden.astype(np.int64)) else "integer results differ"
    a, b = ours.astype(np.float64), golden.astype(np.float64)
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        return "NaN positions differ"
    scale = float(np.nanmax(np.abs(b))) if b.size else 0.0
    error = np.abs(a - b)
    bound = 8 * EPS32 * np.abs(b) + 32 * EPS32 * max(scale, EPS32)
    worst = np.nanmax(error - bound) if b.size else -1.0
    return "" if worst <= 0 else f"max error {np.nanmax(error):.3g} beyond float32 rounding (scale {scale:.3g})"
