"""Every public name of ``reportdb`` has its real type for mypy and editors (they load lazily at run time), so a
misspelt keyword of ``reportdb.compare`` is an error, and the version is written once.

mypy checks a snippet that uses each name of ``reportdb.__all__``; it type-checks the package too, so this is a
``slow`` test (about a minute without a cache)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import reportdb

from conftest import ROOT

pytestmark = pytest.mark.slow


def test_every_public_name_is_typed_and_a_wrong_keyword_is_an_error(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    names = [n for n in reportdb.__all__ if n != "__version__"]
    snippet = tmp_path / "use_reportdb.py"
    snippet.write_text(
        "import reportdb\n"
        + "".join(f"reveal_type(reportdb.{name})\n" for name in names)
        + "reveal_type(reportdb.ttnn.attach)\n"
        + "reportdb.compare(1, 2, rtoll=3)\n"
    )
    out, err, status = api.run([str(snippet), "--cache-dir", str(tmp_path / "cache"), "--config-file",
                                str(ROOT / "pyproject.toml"), "--no-error-summary"])
    assert status == 1, out + err
    revealed = re.findall(r'use_reportdb\.py:(\d+): note: Revealed type is "(.*)"', out)
    assert len(revealed) == len(names) + 1, out
    untyped = [names[int(line) - 2] if int(line) - 2 < len(names) else "ttnn.attach" for line, t in revealed if t == "Any"]
    assert untyped == []
    errors = [line for line in out.splitlines() if ": error:" in line]
    last = len(names) + 3  # the compare line: ints for arrays are errors too, and nothing else is
    assert any('Unexpected keyword argument "rtoll" for "compare"' in e for e in errors), out
    assert errors and all(f"use_reportdb.py:{last}: error:" in e for e in errors), out


def test_the_version_is_written_once() -> None:
    """pyproject.toml takes it from ``reportdb.__version__``; no other file of the package spells it."""
    text = (ROOT / "pyproject.toml").read_text()
    project = text.split("\n[project]\n", 1)[1].split("\n[", 1)[0]
    assert re.search(r'^dynamic = \["version"\]', project, re.M) and not re.search(r"^version\s*=", project, re.M)
    assert 'version = {attr = "reportdb.__version__"}' in text
    spelled = [p for p in (ROOT / "reportdb").rglob("*.py") if f'"{reportdb.__version__}"' in p.read_text()]
    assert spelled == [ROOT / "reportdb" / "__init__.py"]
