"""The placement packages stay readable: no module over 800 lines, no function over 120,
and no import cycle between their modules (issue 14's acceptance, checked here rather
than by eye)."""

from __future__ import annotations

import ast
import pathlib

import grimp

PLACEMENT = pathlib.Path(__file__).resolve().parents[3] / "cloudhub" / "placement"
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 120


def _sources() -> list[pathlib.Path]:
    return sorted(PLACEMENT.rglob("*.py"))


def test_no_file_over_800_lines() -> None:
    long = {
        str(p.relative_to(PLACEMENT)): n
        for p in _sources()
        if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES
    }
    assert long == {}


def test_no_function_over_120_lines() -> None:
    long = {}
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(PLACEMENT)}:{node.lineno} {node.name}"] = lines
    assert long == {}


def _cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    edges = {m: graph.find_modules_directly_imported_by(m) & modules for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in sorted(edges[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for module in sorted(modules):
        if module not in index:
            visit(module)
    return out


def test_no_import_cycle_between_placement_modules() -> None:
    graph = grimp.build_graph("cloudhub")
    # Packages included: a module importing its own package's __init__ (which imports
    # the module back) is a cycle too.
    modules = {m for m in graph.modules if m.startswith("cloudhub.placement")}
    assert {"cloudhub.placement.planner.replicas", "cloudhub.placement.importers.karmada"} <= (
        modules
    )
    assert _cycles(graph, modules) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for module in ("pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.c")
    graph.add_import(importer="pkg.c", imported="pkg.a")
    assert _cycles(graph, {"pkg.a", "pkg.b", "pkg.c"}) == [["pkg.a", "pkg.b", "pkg.c"]]
