"""The architecture is a checked contract: the import-linter contracts in pyproject.toml (layers,
no cycles, a pure selector, the workers' stages in order) hold, no module of ours imports itself
back through others (counting imports inside functions and the package ``__init__`` that
``from pkg import mod`` runs), and no module of ours grows past 600 lines."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 600


def _packages() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return list(config["tool"]["importlinter"]["root_packages"])


def test_import_contracts_are_kept() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run(
        [str(lint_imports), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_every_package_is_in_the_contract_and_installed() -> None:
    """A new top-level package must join the layers (and the wheel), or nothing checks it."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    ours = {
        p.name
        for p in ROOT.iterdir()
        if (p / "__init__.py").is_file() and p.name not in ("tests", "benchmarks")
    }
    assert ours == set(_packages())
    layered = {
        name.strip()
        for layer in config["tool"]["importlinter"]["contracts"][0]["layers"]
        for name in layer.split("|")
    }
    assert layered == ours
    included = {p.rstrip("*") for p in config["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert included == ours


def test_no_module_is_over_600_lines() -> None:
    long = [
        f"{path.relative_to(ROOT)}: {n} lines"
        for package in _packages()
        for path in sorted((ROOT / package).rglob("*.py"))
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    ]
    assert long == []


#: ``package.module:attr``: an object reference, what an entry point's value is
OBJECT_REFERENCE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
RESOLVERS = {"import_module", "__import__"}
SPLITS = {"partition", "rpartition", "split", "rsplit"}


def _reference_to_ours(node: ast.AST, ours: set[str]) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and OBJECT_REFERENCE.fullmatch(node.value) is not None
        and node.value.split(".")[0].split(":")[0] in ours
    )


def _name_of(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def registries_in(source: str, ours: set[str]) -> list[str]:
    """A table of ``"module:attr"`` strings naming our code (a dict with one as a value, a list,
    tuple or set with two or more), or a function that resolves one by hand (splits on ``:``
    and imports the module), as "line N: what"."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict) and any(_reference_to_ours(v, ours) for v in node.values):
            found.append(f"line {node.lineno}: a dict of module:attr strings")
        elif isinstance(node, ast.List | ast.Tuple | ast.Set):
            if sum(_reference_to_ours(e, ours) for e in node.elts) >= 2:
                found.append(f"line {node.lineno}: a collection of module:attr strings")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            calls = [c for c in ast.walk(node) if isinstance(c, ast.Call)]
            splits = any(
                _name_of(c) in SPLITS
                and c.args
                and isinstance(c.args[0], ast.Constant)
                and c.args[0].value == ":"
                for c in calls
            )
            if splits and any(_name_of(c) in RESOLVERS for c in calls):
                found.append(f"line {node.lineno}: {node.name} resolves module:attr by hand")
    return found


def test_the_registry_check_sees_a_registry() -> None:
    ours = {"cli", "backends"}
    assert registries_in('COMMANDS = {"up": "cli.serve:up"}', ours) == [
        "line 1: a dict of module:attr strings"
    ]
    assert registries_in('X = ("backends.a:f", "backends.b:f")', ours) == [
        "line 1: a collection of module:attr strings"
    ]
    by_hand = (
        "def load(t):\n    m, _, a = t.partition(':')\n    return getattr(import_module(m), a)"
    )
    assert registries_in(by_hand, ours) == ["line 1: load resolves module:attr by hand"]
    # another library's syntax (celery's bootsteps), a single reference, a docstring: not ours
    assert registries_in('R = ("celery.a:Pool", "celery.b:Beat")', ours) == []
    assert registries_in('PRELOAD = ("torch", "backends.x:register")', ours) == []


def test_no_module_attr_registry_outside_entry_points() -> None:
    """Plugins are entry points (pyproject.toml's ``[project.entry-points]``, read by the
    ``plugins`` package with importlib.metadata): no module of ours keeps its own registry of
    ``"module:attr"`` strings or resolves one by hand."""
    ours = set(_packages())
    found = [
        f"{path.relative_to(ROOT)}: {what}"
        for package in _packages()
        for path in sorted((ROOT / package).rglob("*.py"))
        for what in registries_in(path.read_text(encoding="utf-8"), ours)
    ]
    assert found == []


def _module_graph() -> dict[str, set[str]]:
    """Our modules and the modules of ours each imports anywhere in its body (imports inside
    functions count): ``import a.b`` imports ``a.b``; ``from a.b import c`` imports ``a.b`` (its
    ``__init__`` runs) and ``a.b.c`` when that is a module."""
    paths: dict[str, Path] = {}
    for package in _packages():
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            paths[name.removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = {m: set() for m in paths}

    def module_of(dotted: str) -> set[str]:
        while dotted and dotted not in paths:
            dotted = dotted.rpartition(".")[0]
        return {dotted} if dotted else set()

    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    graph[module] |= module_of(alias.name)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                graph[module] |= module_of(base)
                for alias in node.names:
                    graph[module] |= module_of(f"{base}.{alias.name}")
        graph[module].discard(module)
    return graph


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph[start])
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(graph[node])
    return seen


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, except a package and one of
    its own modules alone (an ``__init__`` re-exporting its module is not a design cycle)."""
    reach = {m: _reachable(graph, m) for m in graph}
    found: list[list[str]] = []
    done: set[str] = set()
    for m in sorted(graph):
        if m in done:
            continue
        component = sorted({m} | {w for w in reach[m] if m in reach[w]})
        done.update(component)
        if len(component) < 2:
            continue
        if len(component) == 2:
            a, b = component
            if a == b.rpartition(".")[0] or b == a.rpartition(".")[0]:
                continue
        found.append(component)
    return found


def test_the_cycle_check_sees_a_cycle() -> None:
    assert _cycles({"a": {"a.b"}, "a.b": {"a"}}) == []  # a package re-exporting its module
    assert _cycles({"a": {"a.b"}, "a.b": {"a.c"}, "a.c": {"a"}}) == [["a", "a.b", "a.c"]]
    assert _cycles({"x": {"y"}, "y": {"x"}, "z": set()}) == [["x", "y"]]


def test_no_import_cycle_among_our_modules() -> None:
    graph = _module_graph()
    assert "relay.web.routes" in graph["relay.app"]  # the graph sees our imports
    assert _cycles(graph) == []
