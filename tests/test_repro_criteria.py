"""A repro folder's test judges as reportdb's policy does: its own copy of the criteria (``analysis/repro_test.py``,
numpy only) fails exactly the criteria ``Policy.judge`` fails, the tile and scale/offset checks included, on every
device-like calibration case and every planted fault of ``tests/faults.py``, and on scale and offset bugs."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from faults import FAULTS, families, make_case
import reportdb.analysis
from reportdb.analysis.policy import Policy
from reportdb.numeric.metrics import compare

SHAPE = (64, 256)


@pytest.fixture(scope="module")
def folder_test(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """``test_repro.py`` as a repro folder holds it, imported from a folder of its own (it reads repro.json there)."""
    folder = tmp_path_factory.mktemp("repro")
    shutil.copyfile(Path(reportdb.analysis.__file__).parent / "repro_test.py", folder / "test_repro.py")
    (folder / "repro.json").write_text(json.dumps({"policy": {}}))
    spec = importlib.util.spec_from_file_location("repro_folder_test", folder / "test_repro.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _both(module: ModuleType, device: np.ndarray, golden: np.ndarray, op: str, dtype: str) -> tuple[list[str], list[str]]:
    """The failed criteria by reportdb's policy and by the folder's copy of it."""
    policy = Policy.default()
    rtol, atol = policy.tolerances(op, dtype)
    verdict = policy.judge(compare(device, golden, rtol=rtol, atol=atol, pcc=policy.pcc_threshold(op, dtype)),
                           op=op, dtype=dtype)
    criteria = {k: v for k, v in verdict.criteria.to_dict().items() if v is not None}
    m = module.measures(np.asarray(device), np.asarray(golden), rtol, atol, module.pcc_threshold(criteria))
    return list(verdict.failed), module.failed_criteria(m, criteria)


@pytest.mark.parametrize("family, label, op, dtype, build", families(), ids=lambda v: v if isinstance(v, str) else "")
def test_the_folder_fails_what_the_policy_fails(folder_test: ModuleType, family: str, label: str, op: str,
                                                 dtype: str, build) -> None:  # type: ignore[no-untyped-def]
    case = make_case(family, label, op, dtype, build, SHAPE, seed=31)
    ours, folders = _both(folder_test, case.device, case.golden, op, dtype)
    assert ours == folders == [], (ours, folders)
    for name, fault in FAULTS.items():
        wrong = fault(case.device, case.stale)
        if wrong is None:
            continue
        ours, folders = _both(folder_test, wrong, case.golden, op, dtype)
        assert folders == ours, (name, ours, folders)


@pytest.mark.parametrize("change", [0.5, 0.95, 0.978, 2.0, "offset"])
def test_scale_and_offset_are_judged_alike(folder_test: ModuleType, change: float | str) -> None:
    golden = np.random.default_rng(4).standard_normal((1, 128, 512)).astype(np.float32)
    device = golden + 0.2 if change == "offset" else golden * float(change)
    ours, folders = _both(folder_test, device.astype(np.float32), golden, "ttnn.matmul", "FLOAT32")
    assert folders == ours and (("scale_or_offset" in ours) == (change != 0.978)), (ours, folders)
