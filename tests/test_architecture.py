"""The architecture is a checked contract: the import-linter contracts in pyproject.toml (layers,
no cycles, a pure selector, the workers' stages in order) hold, the selector imports neither the
store nor the backends (anywhere, imports inside functions too), no module of ours imports itself
back through others (counting imports inside functions and the package ``__init__`` that
``from pkg import mod`` runs), and no module of ours grows past 600 lines."""

from __future__ import annotations

import ast
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


def test_the_selector_imports_neither_the_store_nor_the_backends() -> None:
    """The planner gives the selector everything (universe, facts, history, estimates, paths):
    no module of the selector imports ``store`` (settings, the environment) or ``backends`` (the
    registry), and the import-linter contract forbids both."""
    graph = _module_graph()
    selector = [m for m in graph if m == "selector" or m.startswith("selector.")]
    assert "selector.stages.budget" in selector  # the graph sees the selector's modules
    imported = {dep for m in selector for dep in graph[m]}
    assert "upstream.changes" in imported  # the graph sees the selector's imports
    assert sorted(d for d in imported if d.split(".")[0] in ("store", "backends")) == []
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contract = next(
        c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "selector-pure"
    )
    assert contract["source_modules"] == ["selector"]
    assert {"store", "backends"} <= set(contract["forbidden_modules"])
    texts = [p.read_text(encoding="utf-8") for p in (ROOT / "selector").rglob("*.py")]
    assert not [t for t in texts if "os.environ" in t or "getenv" in t]  # no settings read
