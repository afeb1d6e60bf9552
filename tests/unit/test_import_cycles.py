"""No import cycle in ``src/chorus``: module by module, function-level imports included.

The graph is read with :mod:`ast` from the source, not from ``sys.modules``:
every ``import`` and ``from … import`` anywhere in a module (at its top, in a
function, in a class) is an edge, except those under ``if TYPE_CHECKING:``,
which never run. ``from package import name`` is an edge to ``package.name``
when that is a module, else to ``package``. A package's ``__init__`` is the
package itself. A ``strawberry.lazy`` reference is no import: it is resolved
when the schema is built, after every module has loaded.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
ROOT = "chorus"


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted((SRC / ROOT).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST, module: str, is_package: bool) -> set[str]:
    """The modules ``node`` imports (``if TYPE_CHECKING:`` bodies left out)."""
    found: set[str] = set()
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                found |= _imports(other, module, is_package)
            continue
        if isinstance(child, ast.Import):
            found |= {alias.name for alias in child.names}
        elif isinstance(child, ast.ImportFrom):
            base = child.module or ""
            if child.level:
                package = module if is_package else module.rpartition(".")[0]
                for _ in range(child.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in child.names}
        found |= _imports(child, module, is_package)
    return found


def import_graph() -> dict[str, set[str]]:
    """Each module of ``chorus`` and the modules of ``chorus`` it imports."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        targets = _imports(tree, name, path.name == "__init__.py")
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        # Iterative: the graph is a few hundred modules deep at most, but
        # recursion limits differ between interpreters.
        work = [(node, iter(sorted(graph[node])))]
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        while work:
            current, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    break
                if succ in on_stack:
                    low[current] = min(low[current], index[succ])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[current])
                if low[current] == index[current]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == current:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_is_read() -> None:
    graph = import_graph()
    assert "chorus.app" in graph["chorus.cli.subcommands"] or graph["chorus.cli.subcommands"]
    assert "chorus.domain.model" in graph["chorus.domain.handlers"]


def test_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_in_src() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)
