"""The import contract over the whole package: imports run down the layers the README names, function-level imports
included, and no two parts of the package import each other (no cycle, however indirect). And the house's sizes:
every module under 700 lines, every class under 400, every function (method, nested function) under 160.

Layers, lowest first (README "Layout"): the shared base (errors, results, dtypes, spec, pools, and the statistics of
an array, ``numeric.blocks`` and ``numeric.stats``, which the file readers, the store and the report compute with);
``formats``; ``store`` (with ``models`` and the alembic ``migrations``); ``report``; ``legacy``/``writer``/``ttnn``;
``numeric`` (metrics, streamed) and ``analysis``; ``web``/``team`` and ``opening`` (``reportdb.open``, which knows
files and team stores); ``cli``. The package's ``__init__`` is the lazy facade over all of them.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Iterator

from conftest import parsed
import reportdb

PACKAGE = Path(reportdb.__file__).parent

#: Each part of the package and its layer (a module may import its own layer and those below).
LAYERS: dict[str, int] = {
    **dict.fromkeys(("errors", "_lazy", "results", "dtypes", "spec", "pools", "__version__"), 0),
    **dict.fromkeys(("numeric.blocks", "numeric.stats"), 0),
    "formats": 1,
    **dict.fromkeys(("store", "models", "migrations"), 2),
    **dict.fromkeys(("report", "recognize", "reading", "chunk_source", "tensor_reads", "tensor_writes", "checks"), 3),
    **dict.fromkeys(("legacy", "writer", "ttnn"), 4),
    **dict.fromkeys(("numeric", "numeric.metrics", "numeric.quantiles", "numeric.ulps", "numeric.tolerances", "numeric.streamed", "numeric.tiles", "numeric.fit", "numeric.fidelity", "numeric.ttmetal", "analysis"), 5),
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


@functools.lru_cache(maxsize=1)  # parsed once for all the tests here (the package's files do not change under them)
def imports() -> tuple[tuple[str, str], ...]:
    """Every (importing module, imported reportdb module or name) in the package, at any depth of the code."""
    found: list[tuple[str, str]] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for node in ast.walk(parsed(path)):
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
    return tuple(found)


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


#: The size limits of the house (README, "How the code must be"): lines of a module, of a class, of a function; each
#: must be below its limit.
LIMITS = {"module": 700, "class": 400, "function": 160}

#: What is at or over its limit today, by name as :func:`sizes` gives it, with the reason it may stay so for now. An
#: entry that is no longer over its limit fails the test too: strike it.
OVERSIZED: dict[str, str] = {}


def sizes() -> Iterator[tuple[str, str, int]]:
    """``(kind, name, lines)`` of every module, class and function of the package, methods and nested functions
    included: ``("module", "reportdb/report.py", 180)``, ``("class", "reportdb/report.py:Report", 90)``,
    ``("function", "reportdb/report.py:Report.close", 25)``. A class or function counts from its ``def``/``class`` line
    to its last line (decorators left out)."""

    def inside(node: ast.AST, prefix: str, module: str) -> Iterator[tuple[str, str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                assert child.end_lineno is not None
                kind = "class" if isinstance(child, ast.ClassDef) else "function"
                yield kind, f"{module}:{name}", child.end_lineno - child.lineno + 1
                yield from inside(child, f"{name}.", module)
            else:
                yield from inside(child, prefix, module)

    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE.parent).as_posix()
        text = path.read_text(encoding="utf-8")
        yield "module", module, len(text.splitlines())
        yield from inside(parsed(path), "", module)


def test_every_module_class_and_function_is_below_its_size_limit() -> None:
    found = list(sizes())
    assert sum(kind == "module" for kind, _, _ in found) >= 100 and sum(kind == "class" for kind, _, _ in found) >= 100
    over = {name: f"{kind} {name}: {lines} lines (limit {LIMITS[kind]})" for kind, name, lines in found
            if lines >= LIMITS[kind]}
    assert sorted(text for name, text in over.items() if name not in OVERSIZED) == []
    assert sorted(name for name in OVERSIZED if name not in over) == []  # no longer over: strike it from OVERSIZED


def _classes(path: Path) -> dict[str, ast.ClassDef]:
    return {node.name: node for node in ast.walk(parsed(path))
            if isinstance(node, ast.ClassDef)}


def test_a_remote_report_is_a_report_on_its_chunk_source() -> None:
    """Reading has one seam, the chunk source (``chunk_source``): the team store's RemoteReport only builds a Report on
    its source (``RemoteChunks``), overriding none of Report's methods, and no part of Report has a hook for it."""
    remote = _classes(PACKAGE / "team" / "remote.py")["RemoteReport"]
    methods = {node.name for node in remote.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    assert methods <= {"__init__", "__repr__"}
    assert "RemoteChunks" in _classes(PACKAGE / "team" / "remote.py")
    for path in PACKAGE.glob("*.py"):
        for cls in _classes(path).values():
            names = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)} | {
                t.id for n in cls.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
            assert not names & {"__init_subclass__", "keeps_snapshots"}, f"{path.name}: {cls.name}"


def test_the_references_package_stands_alone() -> None:
    """``make_repro`` copies ``analysis/references`` into a folder that runs with numpy, ml_dtypes and pytest only, so
    its modules import the standard library, numpy, ml_dtypes and each other (``from . import``), never reportdb: a
    ``from ...formats`` there broke every repro folder, and only the slow repro tests noticed. An import in a ``try``
    whose ``except ImportError`` has a fallback (``args.py``'s error class) is allowed."""
    import sys

    allowed = set(sys.stdlib_module_names) | {"numpy", "ml_dtypes"}
    outside = []
    for path in sorted((PACKAGE / "analysis" / "references").glob("*.py")):
        guarded = {id(node) for tried in ast.walk(parsed(path)) if isinstance(tried, ast.Try)
                   and any(isinstance(h.type, ast.Name) and h.type.id == "ImportError" for h in tried.handlers)
                   for statement in tried.body for node in ast.walk(statement)}
        for node in ast.walk(parsed(path)):
            if id(node) in guarded or not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif node.level == 0:
                names = [node.module or ""]
            else:  # from . import x (the package itself) passes; from .. or from ... reaches reportdb
                names = [] if node.level == 1 else ["." * node.level + (node.module or "")]
            outside += [f"{path.name}:{node.lineno} imports {name}" for name in names
                        if name.startswith(".") or name.split(".")[0] not in allowed]
    assert outside == []
