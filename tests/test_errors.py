"""Every error reportdb raises on purpose is a ReportDBError subclass defined in reportdb.errors and exported by
reportdb, so a caller finds them all in one place and catches each by name."""

from __future__ import annotations

import ast
from pathlib import Path

import reportdb
import reportdb.errors as errors

PACKAGE = Path(reportdb.__file__).parent


def test_every_error_class_lives_in_errors_py() -> None:
    elsewhere = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(base, ast.Name) and (base.id.endswith("Error") or base.id == "Exception") for base in node.bases
            ) and not node.name.startswith("_"):
                elsewhere.append(f"{path.relative_to(PACKAGE)}: {node.name}")
    assert elsewhere == []


def test_every_error_class_is_exported() -> None:
    defined = {name for name, value in vars(errors).items() if isinstance(value, type) and issubclass(value, errors.ReportDBError)}
    assert defined <= set(reportdb.__all__), defined - set(reportdb.__all__)
    assert all(getattr(reportdb, name) is getattr(errors, name) for name in defined)
    assert len(defined) > 30
