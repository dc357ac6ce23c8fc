"""The dependency rule of docs/architecture.md, measured from the source with `ast`.

Function-level imports count: a cycle hidden behind an import inside a function still makes
two modules unable to change apart, and still breaks when the function is called during the
other's import. Two graphs are checked. Between packages (``flows.core``, ``flows.config``,
``flows.stages``, ``flows.backends.gke``, ...) every import counts, ``TYPE_CHECKING`` ones
too. Between the modules inside a package every import that runs counts (at the top or in a
function); an import under ``if TYPE_CHECKING:`` never runs and only names a type for an
annotation (the backend/stage protocols), so it is not a module edge. ``from pkg import mod``
is an edge to ``pkg.mod`` alone, not to ``pkg/__init__.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOWS = ROOT / "flows"

# Layers that must not know the stages or the flow around them.
LOWER = ("flows.core", "flows.config", "flows.backends")
UPPER = ("flows.stages", "flows.operations", "flows.pipeline")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST, runtime_only: bool) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, anywhere; with ``runtime_only`` not those under
    ``if TYPE_CHECKING:`` (its ``else:`` does run)."""
    found: list[ast.Import | ast.ImportFrom] = []
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        if runtime_only and _is_type_checking(node):
            assert isinstance(node, ast.If)
            pending.extend(node.orelse)
            continue
        pending.extend(ast.iter_child_nodes(node))
    return found


def _imports(path: Path, module: str, known: set[str] | None = None, *,
             runtime_only: bool = False) -> set[str]:
    """Every ``flows`` module this file imports, wherever in the file the import stands.

    Without ``known`` (the package graph) ``from a import b`` yields both ``a`` and ``a.b``;
    with it, ``a.b`` when that is a module, else ``a``."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in _import_nodes(ast.parse(path.read_text(), str(path)), runtime_only):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
            continue
        if node.level:
            base = module.split(".")
            base = base[:len(base) - node.level + (1 if is_package else 0)]
            target = ".".join([*base, node.module] if node.module else base)
        else:
            target = node.module or ""
        # `from flows.stages import programs` imports flows.stages.programs
        named = {f"{target}.{alias.name}" for alias in node.names}
        if known is None:
            found |= {target, *named}
        else:
            submodules = named & known
            found |= submodules
            if len(submodules) < len(named):
                found.add(target)
    return {name for name in found if name == "flows" or name.startswith("flows.")}


def _modules() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in FLOWS.rglob("*.py")}
    return {name: {t for t in _imports(path, name) if t in modules}
            for name, path in modules.items()}


def _runtime_modules() -> dict[str, set[str]]:
    """The module graph of imports that run (see the module docstring)."""
    paths = {_module_name(p): p for p in FLOWS.rglob("*.py")}
    known = set(paths)
    return {name: {t for t in _imports(path, name, known, runtime_only=True) if t in known}
            for name, path in paths.items()}


def _package(module: str, modules: set[str]) -> str:
    """The package a module belongs to: flows.backends.gke.infra.infra_stage -> flows.backends.gke."""
    parts = module.split(".")
    if parts[:2] == ["flows", "backends"]:
        return ".".join(parts[:3])
    if len(parts) == 2 and f"{module}" in modules and not (FLOWS / parts[1]).is_dir():
        return module  # a top-level module (flows.pipeline, flows.cli) is its own node
    return ".".join(parts[:2])


def _package_graph() -> dict[str, set[str]]:
    modules = _modules()
    names = set(modules)
    graph: dict[str, set[str]] = {}
    for module, targets in modules.items():
        source = _package(module, names)
        edges = graph.setdefault(source, set())
        edges |= {_package(t, names) for t in targets} - {source}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_package_graph_has_no_cycle() -> None:
    assert _cycles(_package_graph()) == []


def test_no_module_imports_itself_back() -> None:
    """No cycle between modules, inside a package or across: each module can be read,
    changed and imported before the ones that use it."""
    assert _cycles(_runtime_modules()) == []


@pytest.mark.parametrize("lower", LOWER)
def test_lower_layers_never_import_stages_plan_or_pipeline(lower: str) -> None:
    offending = sorted(
        f"{module} imports {target}"
        for module, targets in _modules().items()
        if module == lower or module.startswith(lower + ".")
        for target in targets
        if any(target == upper or target.startswith(upper + ".") for upper in UPPER))
    assert offending == []


def test_the_graph_sees_function_level_and_relative_imports(tmp_path: Path) -> None:
    """The measuring itself: an import inside a function and a relative import are edges."""
    source = tmp_path / "flows" / "core" / "thing.py"
    source.parent.mkdir(parents=True)
    source.write_text("def f():\n    from flows.stages import programs\n"
                      "    from ..plan import build_plan\n    from . import issues\n")
    found = _imports(source, "flows.core.thing")
    assert {"flows.stages.programs", "flows.plan.build_plan", "flows.core.issues"} <= found
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_module_graph_skips_only_type_checking_imports(tmp_path: Path) -> None:
    """The measuring of the module graph: an annotation-only import is no edge, one in a
    function is, and ``from a import b`` names the module ``a.b``, not ``a``."""
    source = tmp_path / "flows" / "core" / "thing.py"
    source.parent.mkdir(parents=True)
    source.write_text("from typing import TYPE_CHECKING\nfrom flows.core import layout\n"
                      "if TYPE_CHECKING:\n    from flows.core.stage import Stage\n"
                      "def f():\n    from flows.core.programs import TO_MAXTEXT\n")
    known = {"flows.core", "flows.core.layout", "flows.core.stage", "flows.core.programs"}
    found = _imports(source, "flows.core.thing", known, runtime_only=True)
    assert found == {"flows.core.layout", "flows.core.programs"}


def test_the_leaf_package_imports_nothing_of_flows() -> None:
    """Nothing outside ``flows.common`` (its modules may use one another's types)."""
    modules = _modules()
    outside = {m: sorted(t for t in targets if not t.startswith("flows.common"))
               for m, targets in modules.items() if m.startswith("flows.common")}
    assert {m: t for m, t in outside.items() if t} == {}


def test_the_runtime_never_imports_the_docs_generator() -> None:
    """reference/ (top level, not installed) renders the docs from flows/; flows/ runs
    without it."""
    offending = sorted(
        f"{_module_name(path)} imports {alias}"
        for path in FLOWS.rglob("*.py")
        for node in _import_nodes(ast.parse(path.read_text(), str(path)), runtime_only=False)
        for alias in ([a.name for a in node.names] if isinstance(node, ast.Import)
                      else [node.module or ""] if not node.level else [])
        if alias == "reference" or alias.startswith("reference."))
    assert offending == []


@pytest.mark.parametrize("asker", ["flows.stages", "flows.core"])
def test_stages_and_core_ask_a_backend_only_through_the_protocol(asker: str) -> None:
    """A stage (and the model under it) reaches a backend through flows/core/backend.py's
    protocol, never by importing one's modules: what differs per backend, such as how long a
    stage may run, is a protocol question (``Timing``)."""
    offending = sorted(
        f"{module} imports {target}"
        for module, targets in _modules().items()
        if module == asker or module.startswith(asker + ".")
        for target in targets
        if target.startswith("flows.backends."))
    assert offending == []
