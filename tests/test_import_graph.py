"""The import graph keeps the layering docs/architecture.md states ("Pipeline: one stage per
package, data flowing one way" and "Measurement"): measurement is below the compiler, cost never
reaches into a backend, no two packages (and no two modules) import each other, no module takes
another module's private name, and no test module imports another test module.

The opfuse graph is grimp's (every import statement, lazy ones inside functions included), its
cycles networkx's; the private-name and test-module checks read the import statements with
``ast``, since they are about the names imported, which grimp does not record."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
# the top of the graph: the command line and the public API may import everything
TOP = ("opfuse.cli", "opfuse.api", "opfuse.__main__")
MEASURE = "opfuse.measure"


def _graph(exclude_type_checking: bool = False) -> grimp.ImportGraph:
    graph = grimp.build_graph("opfuse", cache_dir=None,
                              exclude_type_checking_imports=exclude_type_checking)
    assert "opfuse.measure.validate.ort" in graph.modules  # the worktree's opfuse, not another
    return graph


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return _graph()


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _direct_imports(graph: grimp.ImportGraph) -> set[tuple[str, str]]:
    return {(a, b) for a in graph.modules for b in graph.find_modules_directly_imported_by(a)}


def _where(graph: grimp.ImportGraph, importer: str, imported: str) -> str:
    line = graph.get_import_details(importer=importer, imported=imported)[0]
    return f"{importer}:{line['line_number']} {line['line_contents']}"


def measurement_importers(graph: grimp.ImportGraph) -> list[str]:
    """Imports of opfuse.measure by a module that is neither measurement nor the top."""
    return sorted(
        _where(graph, a, b) for a, b in _direct_imports(graph)
        if _within(b, MEASURE) and not _within(a, MEASURE)
        and not any(_within(a, top) for top in TOP)
    )


def imports_between(graph: grimp.ImportGraph, importer: str, imported: str) -> list[str]:
    return sorted(_where(graph, a, b) for a, b in _direct_imports(graph)
                  if _within(a, importer) and _within(b, imported))


def package_of(module: str) -> str:
    """The first level below opfuse: a stage package (opfuse.fusion) or a top-level module."""
    return ".".join(module.split(".")[:2])


def cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """The import cycles: strongly connected components of more than one node."""
    graph = nx.DiGraph((a, b) for a, b in edges if a != b)
    return sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1)


def test_no_compiler_stage_imports_measurement(graph) -> None:
    assert measurement_importers(graph) == []


def test_cost_imports_nothing_from_backends(graph) -> None:
    assert imports_between(graph, "opfuse.cost", "opfuse.backends") == []


def test_no_import_cycle_between_packages(graph) -> None:
    edges = {(package_of(a), package_of(b)) for a, b in _direct_imports(graph)}
    assert cycles(edges) == []


def test_no_import_cycle_between_modules() -> None:
    # annotation-only imports (under TYPE_CHECKING) never run, so they close no cycle
    assert cycles(_direct_imports(_graph(exclude_type_checking=True))) == []


def test_cycles_finds_a_cycle_and_only_cycles() -> None:
    assert cycles({("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")}) == [["a", "b", "c"]]
    assert cycles({("a", "b"), ("b", "c"), ("a", "c"), ("a", "a")}) == []


# --- names, read from the source with ast ---------------------------------------------------------

def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_module(node: ast.ImportFrom, path: Path) -> str:
    """The absolute module a ``from ... import`` names, relative forms resolved."""
    if not node.level:
        return node.module or ""
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


def _sources(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


FIRST_PARTY = ("opfuse", "tests", "benchmarks")


def _first_party(module: str) -> bool:
    return module.split(".")[0] in FIRST_PARTY


def _private_module_outside(module: str, importer: str) -> bool:
    """``module`` has a private part (``a.b._c``) and ``importer`` is not inside ``a.b``."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.endswith("__"):
            return not _within(importer, ".".join(parts[:i]))
    return False


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, absolute module, names) of every import statement in ``path``, nested ones too."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            found.append((node.lineno, _imported_module(node, path), [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names]
    return found


def private_imports(paths: list[Path]) -> list[str]:
    """``from x import _name`` where x is another first-party module (a dunder is no private
    name), and any import of a private module from outside the package that holds it."""
    found = []
    for path in paths:
        me = _module_name(path)
        for line, module, names in _imports(path):
            if not _first_party(module):
                continue  # a third party's private API: ruff's PLC2701, with a reason where kept
            where = f"{path.relative_to(ROOT)}:{line}"
            if _private_module_outside(module, me):
                found.append(f"{where} {module}")
            if module != me:
                found += [f"{where} {name}" for name in names
                          if name.startswith("_") and not name.endswith("__")]
    return found


def test_modules_import_no_private_name_from_another() -> None:
    assert private_imports(_sources("opfuse", "tests", "benchmarks")) == []


def _is_test_module(module: str) -> bool:
    return module.startswith("tests.") and module.rsplit(".", 1)[-1].startswith("test_")


def imports_of_test_modules(paths: list[Path]) -> list[str]:
    """Imports of a tests/**/test_*.py module (or of conftest) by any file: what test modules
    share belongs in tests/helpers/."""
    found = []
    for path in paths:
        for line, module, names in _imports(path):
            targets = [module] + [f"{module}.{n}" for n in names]
            found += [f"{path.relative_to(ROOT)}:{line} {t}" for t in targets
                      if _is_test_module(t) or t.endswith(".conftest") or t == "conftest"]
    return sorted(set(found))


def test_no_test_module_imports_another() -> None:
    assert imports_of_test_modules(_sources("tests", "benchmarks")) == []


def test_kernel_plans_are_below_the_backends_and_the_cost_model(graph) -> None:
    """opfuse.kernelplan is pure data both read: it imports no other opfuse package."""
    assert sorted(_where(graph, a, b) for a, b in _direct_imports(graph)
                  if _within(a, "opfuse.kernelplan") and not _within(b, "opfuse.kernelplan")) == []
