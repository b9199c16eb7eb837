"""The layers of ARCHITECTURE.md, checked over the source tree with `ast`.

- gateway/ and backends/ never import handlers, except the app assembly (gateway/assembly.py);
- gateway/ uses backends/ only where the app builds them (assembly) and names their types (services);
- a handler package imports only itself, backends and gateway, never another handler;
- no import cycle between modules of gateway/, backends/ and handlers/.

Every import counts: module level, inside functions, and under `if TYPE_CHECKING:`, so a cycle
cannot hide behind a delayed or type-only import.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("gateway", "backends", "handlers")
ASSEMBLY = "gateway.assembly"
GATEWAY_USING_BACKENDS = (ASSEMBLY, "gateway.services")  # builds them; names their types


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules(root: Path) -> dict[str, Path]:
    return {module_name(path, root): path for package in PACKAGES for path in sorted((root / package).rglob("*.py"))}


def imported_names(module: str, path: Path, known: Iterable[str]) -> set[str]:
    """The modules of the tree that `module` imports, resolved to the most specific known module
    (`from backends.retrieval import fusion` is backends.retrieval.fusion; `from gateway.tools import tool` is gateway.tools)."""
    known = set(known)
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, *([base] if base else [])])
            candidates = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for name in candidates:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
                break
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    modules = source_modules(root)
    return {name: imported_names(name, path, modules) for name, path in modules.items()}


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    problems = []
    for module, imports in sorted(graph.items()):
        top = module.split(".")[0]
        for target in sorted(imports):
            target_top = target.split(".")[0]
            if top in ("gateway", "backends") and target_top == "handlers" and module != ASSEMBLY:
                problems.append(f"{module} imports {target}: only {ASSEMBLY} may import handlers")
            if top == "gateway" and target_top == "backends" and module not in GATEWAY_USING_BACKENDS:
                problems.append(f"{module} imports {target}: gateway/ uses backends only in {', '.join(GATEWAY_USING_BACKENDS)}")
            if top == "backends" and target_top == "gateway" and target in GATEWAY_USING_BACKENDS:
                problems.append(f"{module} imports {target}: backends/ is below the app assembly and the services")
            if top == "handlers" and target_top == "handlers":
                own, other = module.split(".")[:2], target.split(".")[:2]
                if module != "handlers" and len(other) > 1 and own != other:
                    problems.append(f"{module} imports {target}: a handler imports no other handler")
    return problems


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_layers_point_one_way() -> None:
    assert layer_violations(import_graph(ROOT)) == []


def test_no_import_cycles() -> None:
    assert cycles(import_graph(ROOT)) == []


def test_the_graph_sees_every_kind_of_import() -> None:
    graph = import_graph(ROOT)
    assert "handlers" in graph[ASSEMBLY]  # the one allowed exception is seen, so the rule is live
    assert "backends.sql" in graph["gateway.services"]  # under TYPE_CHECKING
    assert (
        "backends.retrieval.storage.sqlite.vector_store" in graph["backends.retrieval.storage.sqlite.index"]
    )  # inside a function


# -- the checks catch what they should: a copy of the tree with one bad import added ----------
def _tree_with(tmp_path: Path, module: str, line: str) -> Path:
    for name, path in source_modules(ROOT).items():
        target = tmp_path / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        text = path.read_text()
        target.write_text(text + f"\n{line}\n" if name == module else text)
    return tmp_path


@pytest.mark.parametrize(
    ("module", "line", "expected"),
    [
        ("gateway.protocol", "from handlers.query import QueryHandler", "only gateway.assembly may import handlers"),
        ("backends.retrieval.search", "import handlers.rag.models", "only gateway.assembly may import handlers"),
        ("handlers.rag.fetch", "from handlers.query.discovery import DiscoveryTools", "a handler imports no other handler"),
        ("gateway.protocol", "from backends.pools import TargetPools", "gateway/ uses backends only in"),
    ],
)
def test_a_bad_import_is_caught(tmp_path: Path, module: str, line: str, expected: str) -> None:
    problems = layer_violations(import_graph(_tree_with(tmp_path, module, line)))
    assert any(expected in p for p in problems), problems


def test_a_cycle_is_caught(tmp_path: Path) -> None:
    root = _tree_with(tmp_path, "backends.targets", "def _late():\n    from backends import pools  # noqa")
    assert any({"backends.targets", "backends.pools"} <= set(c) for c in cycles(import_graph(root)))
