"""The page's ES modules (``reportdb/web/static/*.js``) as source: no module imports one that imports it back (views
say what changed through the store and the URL writer subscribes, rather than being called), every imported name is
exported by its module and used by its importer."""

from __future__ import annotations

import re
from pathlib import Path

STATIC = Path(__file__).resolve().parents[1] / "reportdb" / "web" / "static"
IMPORT = re.compile(r'^import \{([^}]*)\} from "\./([a-z]+)\.js";$', re.M)
EXPORT = re.compile(r"^export (?:async )?(?:function|const|let|class) ([\w$]+)|^export \{([^}]*)\}", re.M)


def _imports() -> dict[str, dict[str, list[str]]]:
    """Each module's imports: the names it takes from each other module."""
    found = {}
    for path in sorted(STATIC.glob("*.js")):
        text = path.read_text()
        found[path.stem] = {m.group(2): [n.strip() for n in m.group(1).split(",") if n.strip()] for m in IMPORT.finditer(text)}
    return found


def _cycle(graph: dict[str, list[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (module -> modules it imports), or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        """A cycle through ``node`` reached along ``path``, or None."""
        state[node] = 1
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt, path + [nxt])):
                return found
        state[node] = 2
        return None

    for start in graph:
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_no_module_imports_one_that_imports_it_back() -> None:
    graph = {name: list(deps) for name, deps in _imports().items()}
    assert len(graph) > 20
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])
    assert _cycle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]  # the check itself sees one


def test_only_the_entry_wires_the_url_writer() -> None:
    importers = sorted(name for name, deps in _imports().items() if "hash" in deps)
    assert importers == ["app"]


def test_imported_names_are_exported_and_used() -> None:
    exports = {}
    for path in STATIC.glob("*.js"):
        names = set()
        for m in EXPORT.finditer(path.read_text()):
            names |= {m.group(1)} if m.group(1) else {n.strip() for n in m.group(2).split(",")}
        exports[path.stem] = names
    for name, deps in _imports().items():
        body = IMPORT.sub("", (STATIC / f"{name}.js").read_text())
        for module, names in deps.items():
            for imported in names:
                assert imported in exports[module], f"{name}.js imports {imported}, which {module}.js does not export"
                assert re.search(rf"(?<![\w$]){re.escape(imported)}(?![\w$])", body), f"{name}.js never uses {imported}"


def test_every_function_called_from_another_module_is_imported() -> None:
    exported: dict[str, str] = {}
    for path in STATIC.glob("*.js"):
        for m in EXPORT.finditer(path.read_text()):
            if m.group(1):
                exported[m.group(1)] = path.stem
    for name, deps in _imports().items():
        text = (STATIC / f"{name}.js").read_text()
        body = IMPORT.sub("", text)
        imported = {n for names in deps.values() for n in names}
        declared = set(re.findall(r"\b(?:function|const|let|var|class) ([\w$]+)", body))
        for params in re.findall(r"\bfunction\s*[\w$]*\s*\(([^)]*)\)", body):  # parameters, destructured ones too
            declared |= set(re.findall(r"[\w$]+", params))
        for fn, home in exported.items():
            if home != name and fn not in imported and fn not in declared:
                assert not re.search(rf"(?<![\w$.]){re.escape(fn)}\(", body), f"{name}.js calls {fn} without importing it"
