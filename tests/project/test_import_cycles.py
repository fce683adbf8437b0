"""
No import cycles among the project's modules (issue 24, item 2).

Every module of ``acpkit``, ``acpkit_agent`` and ``acpkit_client`` is parsed (``ast``, the
code is not run) and each ``import`` statement found anywhere in it becomes an arrow
from that module to the project module it names:

=====================================  ============================================
where the import stands                counted
=====================================  ============================================
the module's top level                 yes
inside a function or a method (lazy)   yes: it runs when called, a cycle all the same
under ``if TYPE_CHECKING:``            yes, in a second test: the layers must not lean
                                       on each other even for annotations (the few
                                       left are listed, with why)
``importlib.import_module("...")``     no (a string, not an import statement)
=====================================  ============================================

``import a.b.c`` and ``from a.b import c`` (``c`` a module) point at ``a.b.c``;
``from a.b import name`` points at ``a.b``.  Running a package's ``__init__`` before its
submodules is not an arrow: a package face that imports its own modules would otherwise
be a cycle with each of them.  Relative imports are resolved.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
PACKAGES = ("acpkit", "acpkit_agent", "acpkit_client")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    """Every project module by dotted name."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _imports(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Each import statement of ``tree``, and whether it stands under TYPE_CHECKING."""

    def visit(
        node: ast.AST, typing_only: bool
    ) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child, typing_only
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    yield from visit(ast.Module(body=[stmt], type_ignores=[]), True)
                for stmt in child.orelse:
                    yield from visit(ast.Module(body=[stmt], type_ignores=[]), typing_only)
            else:
                yield from visit(child, typing_only)

    yield from visit(tree, False)


def _targets(
    node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: Mapping[str, Path]
) -> Iterator[str]:
    """The project modules an import statement of ``module`` names."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name in known:
                yield alias.name
        return
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join([*base, node.module] if node.module else base)
    else:
        source = node.module or ""
    for alias in node.names:
        submodule = f"{source}.{alias.name}"
        if submodule in known:
            yield submodule
        elif source in known:
            yield source


def import_graph(*, typing_only: bool = True) -> dict[str, set[str]]:
    """Module → the project modules it imports (TYPE_CHECKING imports when ``typing_only``)."""
    known = project_modules()
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        is_package = path.name == "__init__.py"
        for node, under_type_checking in _imports(tree):
            if under_type_checking and not typing_only:
                continue
            for target in _targets(node, name, is_package, known):
                if target != name:
                    graph[name].add(target)
    return graph


def strongly_connected(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The groups of modules that reach each other (Tarjan), each of two or more."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return groups


def shortest_cycle(graph: Mapping[str, set[str]], group: list[str]) -> list[str]:
    """One shortest cycle through the first module of ``group``, as a path back to it."""
    start = group[0]
    members = set(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    following.append(w)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover


def describe(graph: Mapping[str, set[str]]) -> list[str]:
    return [
        " -> ".join(shortest_cycle(graph, group)) + f"  ({len(group)} modules reach each other)"
        for group in strongly_connected(graph)
    ]


def test_the_walk_finds_the_project() -> None:
    """The walk sees the packages' modules and their imports (a guard against a test
    that passes because it read nothing)."""
    graph = import_graph()
    assert "acpkit.jsonrpc.engine" in graph
    assert "acpkit_agent.agent" in graph
    assert "acpkit_client.cli" in graph
    assert "acpkit.errors" in graph["acpkit.connection.role"]


def test_a_cycle_is_found_and_printed() -> None:
    """A cycle through a lazy import is reported as the path around it."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert describe(graph) == ["a -> b -> c -> a  (3 modules reach each other)"]
    tree = ast.parse(
        "def f():\n    from acpkit import errors\nif TYPE_CHECKING:\n    import acpkit.io\n"
    )
    found = [(ast.unparse(node), typing_only) for node, typing_only in _imports(tree)]
    assert found == [("from acpkit import errors", False), ("import acpkit.io", True)]


def test_no_import_cycles_at_run_time() -> None:
    """No two modules import each other, directly or around a loop, counting the
    imports inside functions."""
    cycles = describe(import_graph(typing_only=False))
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


#: Cycles that exist only through ``if TYPE_CHECKING:`` imports and are left for now,
#: each with its reason.  Every entry must still be a cycle (the test below fails once it
#: is gone, so the list only shrinks).
ANNOTATION_CYCLES_LEFT: dict[frozenset[str], str] = {
    frozenset({"acpkit.conformance.checks.base", "acpkit.conformance.checks.state"}): (
        "the family interface (base) names the conversation state's contexts in its "
        "signatures; the state builds on base's records at run time"
    ),
}


def test_no_import_cycles_counting_annotations() -> None:
    """No cycle either when the imports under ``if TYPE_CHECKING:`` count, but for the
    ones listed in ANNOTATION_CYCLES_LEFT, each of which is still there."""
    graph = import_graph()
    groups = [frozenset(group) for group in strongly_connected(graph)]
    unexpected = [
        " -> ".join(shortest_cycle(graph, sorted(group)))
        for group in groups
        if group not in ANNOTATION_CYCLES_LEFT
    ]
    assert not unexpected, "import cycles:\n" + "\n".join(unexpected)
    gone = [sorted(group) for group in ANNOTATION_CYCLES_LEFT if group not in groups]
    assert not gone, f"no longer cycles, remove them from ANNOTATION_CYCLES_LEFT: {gone}"
