"""The architecture is a checked contract: the import-linter contracts in pyproject.toml (layers,
no cycles, a pure selector, the workers' stages in order) hold, the selector imports neither the
store nor the backends (anywhere, imports inside functions too), no module of ours imports itself
back through others (counting imports inside functions and the package ``__init__`` that
``from pkg import mod`` runs); the modules' and functions' sizes: ``test_code_shape.py``."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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


# ------------------------------------------------------- config at the bottom, queries in the store

#: SQLAlchemy's query builders: a module that imports one builds its own SQL
QUERY_BUILDERS = {
    "select",
    "insert",
    "update",
    "delete",
    "func",
    "text",
    "and_",
    "or_",
    "not_",
    "exists",
    "union",
    "union_all",
    "literal",
    "literal_column",
    "case",
    "bindparam",
    "outerjoin",
    "join",
}
#: the packages whose modules answer requests or relay events: they call the store's modules
#: (data access by aggregate), which own every query
QUERY_FREE = ("relay", "fanout", "wire")


def query_builders_in(tree: ast.AST) -> list[str]:
    """The query builders a module imports from SQLAlchemy (``from sqlalchemy import select``,
    ``from sqlalchemy.sql import func``), or ``import sqlalchemy`` itself (``sa.select``), as
    "line N: name"."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sqlalchemy":
            found += [
                f"line {node.lineno}: {a.name}" for a in node.names if a.name in QUERY_BUILDERS
            ]
        elif isinstance(node, ast.Import):
            found += [f"line {node.lineno}: {a.name}" for a in node.names if a.name == "sqlalchemy"]
    return found


def test_the_query_check_sees_a_query() -> None:
    assert query_builders_in(ast.parse("from sqlalchemy import func, select")) == [
        "line 1: func",
        "line 1: select",
    ]
    assert query_builders_in(ast.parse("import sqlalchemy as sa")) == ["line 1: sqlalchemy"]
    # types (a session, a query's type for a parameter) are not queries
    assert query_builders_in(ast.parse("from sqlalchemy.orm import Session")) == []
    assert query_builders_in(ast.parse("from sqlalchemy import Select")) == []


def test_routes_build_no_queries() -> None:
    """Routes and the relay role call the store's data-access modules (one per aggregate:
    deliveries, jobs, results, selections, outbox, HUD queries, metrics, paging); none of
    their modules builds SQL itself."""
    trees = _modules()
    assert "relay.api.jobs" in trees  # the walk sees the routes
    found = {
        name: lines
        for name, tree in trees.items()
        if name.split(".")[0] in QUERY_FREE and (lines := query_builders_in(tree))
    }
    assert found == {}


def test_config_imports_nothing_of_ours() -> None:
    """``config`` (settings, logs, the broker's configuration) is the ground floor: every package
    may read it, it imports no package of ours (``store`` imports it, not the reverse), and the
    import-linter contract says so too."""
    graph = _module_graph()
    config_modules = [m for m in graph if m == "config" or m.startswith("config.")]
    assert "config.settings" in config_modules
    assert "config.settings" in graph["store.db"] | graph["store.caches"]  # store reads it
    imported = {dep for m in config_modules for dep in graph[m]}
    assert sorted(d for d in imported if d.split(".")[0] != "config") == []
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contract = next(
        c for c in pyproject["tool"]["importlinter"]["contracts"] if c["id"] == "config-ground"
    )
    assert set(contract["forbidden_modules"]) == set(_packages()) - {"config"}
    assert not list((ROOT / "store").glob("settings.py"))  # no shim left behind in the store


# ------------------------------------------------------------------ a delivery is parsed once

#: who may read a delivery's raw body (``raw_body``, or bytes through the wire's body parsers):
#: ingress (it validates the body, once), the wire module that defines the parsers, the store
#: (it writes the new row, and names the column for the pages that leave it unread), the export
#: (`relay deliveries export`: audit and replay), the migration that created the column and the
#: one that filled the typed event of old rows, once. Every later stage loads the typed event.
RAW_BODY_READERS = {
    "relay.github.ingress",
    "wire.github.events",
    "store.deliveries",
    "cli.deliveries",
    "migrations.versions.0001_initial_schema",
    "migrations.versions.0012_h29_delivery_event",
}
#: the wire's functions that read a delivery's raw bytes
RAW_BODY_PARSERS = {"body_json", "parse_body", "stored_envelope"}
#: who may read the stored upstream payload: the relay role forwards it and the runner's
#: callback echoes it, verbatim (CRCR's ``client_payload.payload``); the store writes it
PAYLOAD_READERS = {"fanout.send", "workers.report", "store.deliveries"}


def _raw_body_reads(tree: ast.AST) -> list[int]:
    """The lines of ``tree`` that read a raw body: ``x.raw_body``, the string ``"raw_body"``
    (``getattr``, a column by name, SQL), a use or import of a raw-body parser."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if (isinstance(node, ast.Attribute) and node.attr in {"raw_body", *RAW_BODY_PARSERS})
        or (isinstance(node, ast.Constant) and node.value == "raw_body")
        or (isinstance(node, ast.Name) and node.id in RAW_BODY_PARSERS)
        or (
            isinstance(node, ast.ImportFrom)
            and any(alias.name in RAW_BODY_PARSERS for alias in node.names)
        )
    ]


def _payload_reads(tree: ast.AST) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(tree)
        if (isinstance(node, ast.Attribute) and node.attr == "upstream_payload")
        or (isinstance(node, ast.Constant) and node.value == "upstream_payload")
    ]


def _modules() -> dict[str, ast.AST]:
    trees = {}
    for package in _packages():
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            trees[name] = ast.parse(path.read_text(encoding="utf-8"))
    return trees


def test_the_raw_body_check_sees_a_read() -> None:
    for source in (
        "row.raw_body",
        "getattr(row, 'raw_body')",
        "select(Delivery.raw_body)",
        "from wire.github.events import stored_envelope",
        "events.parse_body(b)",
    ):
        assert _raw_body_reads(ast.parse(source)) == [1], source
    assert _raw_body_reads(ast.parse("DeliveryCreate(raw_body=b)\nrow.normalized")) == []
    assert _payload_reads(ast.parse("load_payload(delivery.upstream_payload)")) == [1]


def test_no_module_reads_the_raw_delivery_body_after_ingress() -> None:
    """A delivery is parsed once, at ingress: later stages load the typed event stored with it
    (``Delivery.normalized``), never the raw body (kept for audit and replay), and the stored
    upstream payload is only forwarded and echoed, never interpreted."""
    trees = _modules()
    readers = {name: lines for name, tree in trees.items() if (lines := _raw_body_reads(tree))}
    assert {n: lines for n, lines in readers.items() if n not in RAW_BODY_READERS} == {}
    assert set(readers) == RAW_BODY_READERS  # every exception is still needed
    payload = {name: lines for name, tree in trees.items() if (lines := _payload_reads(tree))}
    allowed = (
        PAYLOAD_READERS
        | {"store.models.deliveries"}
        | {m for m in payload if m.startswith("migrations.")}
    )
    assert {n: lines for n, lines in payload.items() if n not in allowed} == {}
    assert set(payload) >= PAYLOAD_READERS  # the forwarders read it


def test_the_limits_are_one_table_the_store_holds() -> None:
    """The edge's one table of limits (wire.github.events.LIMITS) fits the store's columns, and
    the store keeps no table of its own: its last guard reads the widths from its schema."""
    from store import deliveries
    from store.models import Delivery
    from wire.github.events import LIMITS, MAX_NUMBER, limit_of

    columns = Delivery.__table__.c
    for name, width in deliveries.COLUMN_WIDTHS.items():
        assert width == columns[name].type.length, name  # type: ignore[attr-defined]
        assert limit_of(name) <= width, name
    assert set(deliveries.COLUMN_WIDTHS) >= set(LIMITS) - {"sha", "text"}
    assert MAX_NUMBER == deliveries.MAX_INTEGER


def test_every_benchmark_module_imports() -> None:
    """The benchmarks are not run by the suite; a module moved under them must still fail it."""
    names = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem != "__main__")
    code = (
        "import importlib, sys\nfor n in sys.argv[1:]: importlib.import_module('benchmarks.' + n)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *names], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]


# ------------------------------------------------------- one per-test selection record, end to end


def test_the_per_test_selection_record_has_one_definition() -> None:
    """A selected test is the selector's ``Ranked`` from the budget stage to the API: the plan
    lists those records themselves (and the selector's ``Cut``, ``Removed`` and ``Fallback``),
    and the API's model is derived from the stored ``selection_test`` row. The row is the one
    restatement (the store is below the selector and cannot import it; its columns are the
    migration's): it has the record's fields and only ``kind`` and the runner's ``shard`` more,
    so no room can drop or rename a field the next one reads."""
    import dataclasses
    import typing

    from relay.api.jobs import SelectionTestPublic
    from selector.model import Cut, Fallback, Ranked, Removed
    from selector.plan import SelectionPlan
    from store.models import SelectionTest

    hints = {name: f.annotation for name, f in SelectionPlan.model_fields.items()}
    assert hints["tests"] == list[Ranked] and hints["cut"] == list[Cut]
    assert hints["removed"] == list[Removed] and hints["fallbacks"] == list[Fallback]
    ranked = {f.name for f in dataclasses.fields(Ranked)}
    columns = SelectionTest.variant_columns()
    assert set(columns) == ranked | {"kind", "shard"}
    assert {f.name for f in dataclasses.fields(Cut)} - {"reason"} <= ranked
    assert list(SelectionTestPublic.model_fields) == ["id", *columns]
    row_hints = typing.get_type_hints(SelectionTest)
    for name, field in SelectionTestPublic.model_fields.items():
        assert field.annotation == typing.get_args(row_hints[name])[0], name
