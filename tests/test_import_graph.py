"""The module import graph: no cycle, package edges only where the architecture allows, no private
name imported across modules.

Every module of the repository is parsed with :mod:`ast`; every ``import`` counts, wherever it is
(module level, inside a function — a lazy import — or under ``if TYPE_CHECKING:``). Allowed edges
between top-level packages (README, "How it is built"; the integrations are tested from ``tests``)::

    memcore ← actors ← serve_apps, jobs ← cluster → memclient (memctl mcp)   memclient: standalone
    examples → memclient    testkit: standalone          bench, tests → anything; nothing → them

One exception: ``memclient.segments`` (the URL rule for ids, standard library only) is imported by the
server's packages too, so that the rule has one home and the client still installs alone.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("memcore", "actors", "serve_apps", "jobs", "cluster", "memclient", "examples", "testkit", "bench",
            "tests")
ALLOWED: dict[str, set[str]] = {
    "memcore": set(),
    "actors": {"memcore"},
    "serve_apps": {"memcore", "actors"},
    "jobs": {"memcore", "actors"},
    "cluster": {"memcore", "actors", "serve_apps", "jobs", "memclient"},
    "memclient": set(),
    "examples": {"memclient"},
    "testkit": set(),
    "bench": {"memcore", "actors", "serve_apps", "jobs", "cluster", "memclient", "testkit"},
    "tests": {"memcore", "actors", "serve_apps", "jobs", "cluster", "memclient", "examples", "testkit", "bench"},
}
SHARED_LEAVES = {"memclient.segments"}
"""Modules every package may import: leaves of the standard library only."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))
            if (ROOT / pkg).is_dir()}


MODULES = modules()


def imports(name: str, path: Path) -> Iterator[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for every import of the module, lazy ones included."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if is_package else name.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join([*here, base] if base else here)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield (sub, None, node.lineno) if sub in MODULES else (base, alias.name, node.lineno)


def internal(target: str) -> str | None:
    """The repository module ``target`` refers to (itself or its nearest enclosing package), or None."""
    parts = target.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for name, path in MODULES.items():
        for target, _, _ in imports(name, path):
            dep = internal(target)
            if dep is not None and dep != name:
                edges[name].add(dep)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_lazy_and_type_checking_imports() -> None:
    edges = graph()
    assert "memcore.extraction.events" in edges["memcore.ports"]  # under TYPE_CHECKING
    assert "memcore.stores.embedders" in edges["memcore.factory"]  # inside a function
    assert len(MODULES) > 100


def test_no_import_cycle_between_modules() -> None:
    assert cycles(graph()) == []


def test_a_cycle_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_package_edges_follow_the_architecture() -> None:
    wrong = sorted(
        f"{name} -> {dep}"
        for name, deps in graph().items()
        for dep in deps
        if (src := name.split(".")[0]) != (dst := dep.split(".")[0]) and dst not in ALLOWED[src]
        and dep not in SHARED_LEAVES
    )
    assert wrong == []


def test_shared_leaves_import_only_the_standard_library() -> None:
    for leaf in SHARED_LEAVES:
        assert graph()[leaf] == set()
        imported = {target.split(".")[0] for target, _, _ in imports(leaf, MODULES[leaf])}
        assert imported <= {"__future__", "urllib"}, imported


def test_no_private_name_is_imported_across_modules_outside_tests() -> None:
    wrong = sorted(
        f"{path.relative_to(ROOT)}:{line} imports {target}.{imported}"
        for name, path in MODULES.items()
        if not name.startswith("tests")
        for target, imported, line in imports(name, path)
        if imported and imported.startswith("_") and not imported.startswith("__") and internal(target)
    )
    assert wrong == []


def test_settings_and_vocabulary_are_leaves_of_the_domain() -> None:
    edges = graph()
    assert edges["memcore.vocabulary"] == set()
    assert edges["memcore.app_policy"] <= {"memcore", "memcore.vocabulary", "memcore.errors"}
    assert edges["memcore.settings"] <= {"memcore", "memcore.vocabulary", "memcore.errors", "memcore.app_policy"}
    assert edges["memcore.validation"] <= {"memcore", "memcore.errors", "memcore.model", "memcore.vocabulary",
                                           "memcore.metadata"}
