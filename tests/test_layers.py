"""The layout is the design: layers import only downwards, nothing imports in a cycle, and no
rltriage import hides inside a function to dodge one.

    base → kb, inputs → infer → pipeline → tools, integrations → cli → the package API
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parent.parent / "engine"
PACKAGE = "rltriage"
# Layer of each top-level part of the package; a module may import its own layer's package and
# lower layers, never another package of the same layer.
LAYERS: dict[str, int] = {
    "_version": 0,
    "base": 0,
    "kb": 1,
    "inputs": 1,
    "infer": 2,
    "pipeline": 3,
    "tools": 4,
    "integrations": 4,
    "cli": 5,
    "__init__": 6,
    "__main__": 6,
}
# Imports inside functions that are allowed: the optional durable-rules engine is imported only
# when asked for (it imports nothing back).
LAZY_ALLOWED = {("rltriage.infer.registry", "rltriage.infer.durable")}
TOP_LEVEL_FILES = {"__init__.py", "__main__.py", "_version.py", "py.typed"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ENGINE).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join([PACKAGE, *parts])


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _imports(path: Path) -> list[tuple[str, bool, int]]:
    """(imported rltriage module, inside a function, line) for every import of the module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    name = _module_name(path)
    package = name if _is_package(path) else name.rsplit(".", 1)[0]
    found: list[tuple[str, bool, int]] = []

    def visit(node: ast.AST, nested: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = nested or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[: len(base) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                if target == PACKAGE or target.startswith(PACKAGE + "."):
                    # `from . import x` imports the submodule x.
                    for alias in child.names:
                        candidate = f"{target}.{alias.name}"
                        found.append((candidate if _exists(candidate) else target, inner, child.lineno))
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                        found.append((alias.name, inner, child.lineno))
            visit(child, inner)

    visit(tree, False)
    return found


def _exists(module: str) -> bool:
    parts = module.split(".")[1:]
    return (ENGINE.joinpath(*parts).with_suffix(".py")).is_file() or (ENGINE.joinpath(*parts) / "__init__.py").is_file()


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


MODULES = sorted(ENGINE.rglob("*.py"))
GRAPH = {_module_name(p): _imports(p) for p in MODULES}


def test_the_top_level_holds_only_the_package_api_and_subpackages() -> None:
    loose = sorted(p.name for p in ENGINE.iterdir() if p.is_file() and p.name not in TOP_LEVEL_FILES)
    assert not loose, f"modules at the top of engine/: {loose}; put them in the subpackage of their concept"
    packages = sorted(p.name for p in ENGINE.iterdir() if p.is_dir() and (p / "__init__.py").is_file())
    assert set(packages) == {k for k in LAYERS if not k.startswith("_")}


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_go_down_the_layers(module: str) -> None:
    own = _part(module)
    for target, _nested, line in GRAPH[module]:
        other = _part(target)
        if other == own:
            continue
        assert LAYERS[other] < LAYERS[own], f"{module}:{line} imports {target}: layer {other} is not below {own}"


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_no_rltriage_import_inside_a_function(module: str) -> None:
    for target, nested, line in GRAPH[module]:
        assert not nested or (module, target) in LAZY_ALLOWED, f"{module}:{line} imports {target} inside a function"


def test_no_import_cycles() -> None:
    edges = {m: {t for t, _nested, _line in imports if t in GRAPH and t != m} for m, imports in GRAPH.items()}
    # A package's __init__ importing its own submodules is how a package exposes them, not a cycle.
    for module in edges:
        edges[module] -= {p for p in edges if module.startswith(p + ".") and p in edges}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt) :] + [nxt]
                pytest.fail("import cycle: " + " → ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module)


def test_the_checker_sees_imports() -> None:
    # Guards against a checker that passes because it finds nothing.
    assert ("rltriage.infer.durable", True, 0) not in GRAPH["rltriage.infer.registry"]
    assert any(t == "rltriage.infer.durable" and nested for t, nested, _l in GRAPH["rltriage.infer.registry"])
    assert any(t == "rltriage.kb.load" for t, _n, _l in GRAPH["rltriage.pipeline.run"])
    assert sum(len(v) for v in GRAPH.values()) > 150
