"""Hostile tensor files: error messages show bounded excerpts of hostile values, never the whole value.

A 58 KB ``.pt`` whose storage key is a list of 14,000 references to one list of 30,000 ``None`` (pickle's memo makes
the repeats free): ``show`` built the text of that list for its error message (29 s, 2.5 GB). The file is read in a
child under a 1 GiB address space and a time limit.
"""

from __future__ import annotations

import collections
import io
import pickle
import resource
import subprocess
import sys
import textwrap
import types
import zipfile
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT


def _hostile_pt(path: Path) -> Path:
    """A torch zip ``.pt`` of one tensor whose storage key is the shared list of lists, pickled with stand-ins for the
    torch names it references (torch itself is not needed to write it)."""
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch._utils")

    class FloatStorage:
        pass

    def _rebuild_tensor_v2(*args: Any) -> None:
        raise AssertionError("never called when writing")

    FloatStorage.__module__, FloatStorage.__qualname__ = "torch", "FloatStorage"
    _rebuild_tensor_v2.__module__, _rebuild_tensor_v2.__qualname__ = "torch._utils", "_rebuild_tensor_v2"
    torch.FloatStorage, torch._utils, utils._rebuild_tensor_v2 = FloatStorage, utils, _rebuild_tensor_v2  # type: ignore[attr-defined]
    nones = [None] * 30_000
    key = [nones] * 14_000

    class Storage:
        pass

    class Tensor:
        def __reduce__(self) -> Any:
            return (_rebuild_tensor_v2, (Storage(), 0, (4,), (1,), False, collections.OrderedDict()))

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj: Any) -> Any:
            return ("storage", FloatStorage, key, "cpu", 4) if isinstance(obj, Storage) else None

    saved = {name: sys.modules.get(name) for name in ("torch", "torch._utils")}
    sys.modules.update({"torch": torch, "torch._utils": utils})
    try:
        data = io.BytesIO()
        Pickler(data, protocol=2).dump(Tensor())
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", data.getvalue())
        zf.writestr("archive/byteorder", "little")
        zf.writestr("archive/data/0", bytes(16))
        zf.writestr("archive/version", "3\n")
    return path


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


@pytest.mark.process
def test_a_hostile_value_in_a_pt_file_is_shown_as_a_bounded_excerpt(tmp_path: Path) -> None:
    path = _hostile_pt(tmp_path / "bomb.pt")
    assert path.stat().st_size < 100_000
    code = f"""
        import reportdb
        try:
            reportdb.load_tensor_file({str(path)!r})
        except reportdb.ReportDBError as exc:
            print(type(exc).__name__, len(str(exc)), str(exc))
    """
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=30,
                            preexec_fn=_limit, cwd=ROOT, env={"PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-2000:]
    kind, length, message = result.stdout.split(" ", 2)
    assert kind == "FormatError" and "malformed storage reference" in message, result.stdout[:500]
    assert int(length) < 1000 and "[[None, None" in message, result.stdout[:1500]
    shown = subprocess.run([sys.executable, "-m", "reportdb", "show", str(path)], capture_output=True, text=True,
                           timeout=30, preexec_fn=_limit, cwd=ROOT, env={"PYTHONPATH": str(ROOT)})
    assert shown.returncode == 1 and "malformed storage reference" in shown.stderr and len(shown.stderr) < 1500, shown.stderr[:500]
