"""The import contract over the whole package: imports run down the layers the README names, function-level imports
included, and no two parts of the package import each other (no cycle, however indirect).

Layers, lowest first (README "Layout"): the shared base (errors, results, dtypes, spec, pools, and the statistics of
an array, ``numeric.blocks`` and ``numeric.stats``, which the file readers, the store and the report compute with);
``formats``; ``store`` (with ``models`` and the alembic ``migrations``); ``report``; ``legacy``/``writer``/``ttnn``;
``numeric`` (metrics, streamed) and ``analysis``; ``web``/``team`` and ``opening`` (``reportdb.open``, which knows
files and team stores); ``cli``. The package's ``__init__`` is the lazy facade over all of them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import reportdb

PACKAGE = Path(reportdb.__file__).parent

#: Each part of the package and its layer (a module may import its own layer and those below).
LAYERS: dict[str, int] = {
    **dict.fromkeys(("errors", "_lazy", "results", "dtypes", "spec", "pools", "__version__"), 0),
    **dict.fromkeys(("numeric.blocks", "numeric.stats"), 0),
    "formats": 1,
    **dict.fromkeys(("store", "models", "migrations"), 2),
    **dict.fromkeys(("report", "recognize", "reading"), 3),
    **dict.fromkeys(("legacy", "writer", "ttnn"), 4),
    **dict.fromkeys(("numeric", "numeric.metrics", "numeric.quantiles", "numeric.ulps", "numeric.tolerances", "numeric.streamed", "analysis"), 5),
    **dict.fromkeys(("web", "team", "opening"), 6),
    **dict.fromkeys(("cli", "__main__", "__init__"), 7),
}


def part(module: str) -> str:
    """The part of the package a module (``reportdb.store.blobs``) or imported name (``reportdb.__version__``) is in:
    its subpackage, or, in ``numeric``, its module (``numeric.stats``)."""
    pieces = module.split(".")[1:]
    if not pieces:
        return "__init__"
    if pieces[0] == "numeric" and len(pieces) > 1:
        return f"numeric.{pieces[1]}"
    return pieces[0]


def imports() -> list[tuple[str, str]]:
    """Every (importing module, imported reportdb module or name) in the package, at any depth of the code."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target == "reportdb" or target.startswith("reportdb."):
                    names = [f"{target}.{a.name}" for a in node.names] if part(target) == "__init__" else [target]
                    found += [(module, name) for name in names]
            elif isinstance(node, ast.Import):
                found += [(module, a.name) for a in node.names if a.name.split(".")[0] == "reportdb"]
    return found


def test_every_part_has_a_layer() -> None:
    parts = {part(m) for m, _ in imports()} | {part(t) for _, t in imports() if part(t) != "__init__"}
    assert parts - set(LAYERS) == set() and len(parts) >= 20


def test_imports_run_down_the_layers() -> None:
    upward = sorted(
        f"{module} imports {target}" for module, target in imports()
        if part(module) != "__init__" and part(target) != "__init__" and LAYERS[part(target)] > LAYERS[part(module)]
    )
    facade = sorted(f"{m} imports {t}" for m, t in imports() if part(t) == "__init__" and LAYERS[part(m)] < 7)
    assert upward == [] and facade == []


def test_no_two_parts_import_each_other() -> None:
    """No cycle between parts (``report`` <-> ``team``, ``writer`` <-> ``ttnn`` were two), however indirect."""
    graph: dict[str, set[str]] = {}
    for module, target in imports():
        a, b = part(module), part(target)
        if a != b and "__init__" not in (a, b):
            graph.setdefault(a, set()).add(b)

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, ()):
            if nxt == goal or (nxt not in seen and (seen.add(nxt) or reaches(nxt, goal, seen))):
                return True
        return False

    cycles = sorted(f"{a} -> {b} -> ... -> {a}" for a, targets in graph.items() for b in targets if reaches(b, a, {b}))
    assert cycles == []
    assert "team" in graph["opening"] and "report" in graph["team"] and "writer" in graph["ttnn"]
