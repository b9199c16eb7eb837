"""The layers of ARCHITECTURE.md, checked over the source tree with `ast`.

- gateway/ and backends/ never import handlers, except the app assembly (gateway/assembly.py);
- gateway/ uses backends/ only where the app builds them (assembly) and names their types (services);
- a handler package imports only itself, backends and gateway, never another handler;
- no import cycle between modules of gateway/, backends/ and handlers/;
- one room per engine: outside backends/engines/ no module imports a database driver or names a
  target protocol (the retrieval index storages, backends/retrieval/storage/, are storage, not
  targets: they may name their own backends and use psycopg);
- tool groups are composed, not inherited: a class that declares tools has no base but
  ToolHandler (a handler) or none (a tool group), and no class inherits from one that declares tools.

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


# -- one room per engine ------------------------------------------------------------------------
DRIVERS = frozenset({"pymysql", "psycopg", "psycopg_pool", "sqlite3", "duckdb"})
PROTOCOL_NAMES = frozenset({"mysql", "pgsql", "sqlite", "duckdb"})
ENGINE_ROOMS = ("backends.engines",)  # every engine's knowledge lives here
STORAGE_ROOMS = ("backends.retrieval.storage",)  # the retrieval index storages: storage, not targets


def _inside(module: str, rooms: tuple[str, ...]) -> bool:
    return any(module == room or module.startswith(room + ".") for room in rooms)


def engine_knowledge(root: Path) -> list[str]:
    """Driver imports and protocol names outside the engines' room: `protocol == "mysql"`,
    `{"pgsql": ..., "mysql": ...}`, `PLACEHOLDERS[target.protocol]`, `import pymysql` ..."""
    problems = []
    for module, path in sorted(source_modules(root).items()):
        if _inside(module, ENGINE_ROOMS):
            continue
        storage = _inside(module, STORAGE_ROOMS)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            line = f"{module}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import | ast.ImportFrom) or _lazy_driver(node):
                if isinstance(node, ast.Call):  # backends.drivers.LazyDriver("psycopg") imports it too, later
                    names = [node.args[0].value]
                else:
                    names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for name in names:
                    driver = name.split(".")[0]
                    if driver in DRIVERS and not (storage and driver in ("psycopg", "psycopg_pool")):
                        problems.append(f"{line} imports the driver {driver}")
            elif isinstance(node, ast.Constant) and node.value in PROTOCOL_NAMES and not storage:
                problems.append(f"{line} names the protocol {node.value!r}")
            elif isinstance(node, ast.Subscript) and _names_protocol(node.slice):
                problems.append(f"{line} looks a table up by protocol")
    return problems


def _lazy_driver(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and ast.unparse(node.func).rsplit(".", 1)[-1] == "LazyDriver"
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    )


def _names_protocol(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "protocol") or (isinstance(node, ast.Attribute) and node.attr == "protocol")


def _tool_classes(root: Path) -> dict[str, tuple[str, list[str], bool]]:
    """Every class of handlers/: name -> (module, base names, whether it declares a @tool)."""
    found: dict[str, tuple[str, list[str], bool]] = {}
    for module, path in source_modules(root).items():
        if not module.startswith("handlers"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases]
                declares = any(
                    isinstance(d, ast.Call) and ast.unparse(d.func) == "tool"
                    for item in node.body
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                    for d in item.decorator_list
                )
                found[node.name] = (module, bases, declares)
    return found


def tool_group_mixins(root: Path) -> list[str]:
    classes = _tool_classes(root)
    tool_owners = {name for name, (_, bases, declares) in classes.items() if declares or "ToolHandler" in bases}
    problems = []
    for name, (module, bases, declares) in sorted(classes.items()):
        inherited = [b for b in bases if b in tool_owners]
        if inherited:
            problems.append(f"{module}.{name} inherits from {', '.join(inherited)}: compose tool groups, do not inherit them")
        elif (declares or "ToolHandler" in bases) and [b for b in bases if b not in ("ToolHandler", "object")]:
            problems.append(f"{module}.{name} declares tools over {', '.join(bases)}: a tool group has no base")
    return problems


def test_engines_live_in_one_room() -> None:
    assert engine_knowledge(ROOT) == []


def test_tool_groups_are_composed() -> None:
    assert tool_group_mixins(ROOT) == []


def test_no_silent_attribute_contracts() -> None:
    """A tool group states what it uses in its constructor: no attribute it hopes a sibling sets."""
    offenders = [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "handlers").rglob("*.py"))
        if "type: ignore[attr-defined]" in p.read_text()
    ]
    assert offenders == []


@pytest.mark.parametrize(
    ("module", "line", "expected"),
    [
        (
            "handlers.query.sql_tools",
            "def _planted(target):\n    return target.protocol == 'mysql'",
            "names the protocol 'mysql'",
        ),
        (
            "handlers.admin.handler",
            "PLANTED = {}\ndef _planted(target):\n    return PLANTED[target.protocol]",
            "looks a table up by protocol",
        ),
        ("handlers.query.sql_tools", "import pymysql", "imports the driver pymysql"),
        ("gateway.store", "from psycopg import sql as planted", "imports the driver psycopg"),
        ("handlers.rag.handler", "def _planted():\n    import sqlite3", "imports the driver sqlite3"),
        (
            "handlers.query.sql_tools",
            "from backends.drivers import LazyDriver\nPLANTED = LazyDriver('pymysql.cursors')",
            "imports the driver pymysql",
        ),
    ],
)
def test_planted_engine_knowledge_is_caught(tmp_path: Path, module: str, line: str, expected: str) -> None:
    problems = engine_knowledge(_tree_with(tmp_path, module, line))
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize(
    "line",
    [
        "class PlantedMixin(SqlTools):\n    pass",
        "from gateway.tools import ToolHandler, tool\nclass Planted(ToolHandler, SqlTools):\n    pass",
    ],
)
def test_a_planted_mixin_is_caught(tmp_path: Path, line: str) -> None:
    problems = tool_group_mixins(_tree_with(tmp_path, "handlers.query.sql_tools", line))
    assert any("inherits from SqlTools" in p for p in problems), problems
