"""The test suite's own layout rules: test modules import nothing from ``tests``, and nothing
under ``tests`` refers to a path outside the repository.

A test module gets its helpers through fixtures (tests/conftest.py and one conftest per folder);
the implementations live in ``tests/support``, which only conftest files (and the benchmarks)
import. So no test depends on where another test, or a helper, happens to live, and moving a
test module never breaks another one. Checked on the source with ``ast``: import statements
(absolute and relative, anywhere in the module, ``TYPE_CHECKING`` blocks included), dynamic
imports (``importlib.import_module``, ``__import__``, ``runpy``, ``spec_from_file_location``...)
and code handed to a fresh interpreter as a string.

Everything a test reads lives in the repository (a user's clone has nothing beside it: no
``../shared``): no module under ``tests`` climbs above the repository's root from ``__file__``
or from the root's name, and no string in it names a parent folder (``../``), this machine's
folders (``/work/``, ``/home/``...) or the reference folder's content (``shared/fixtures``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
SUPPORT = TESTS / "support"

#: calls that import a module named by their argument (one named by a variable is refused too)
DYNAMIC_IMPORTS = {
    "import_module",
    "__import__",
    "spec_from_file_location",
    "SourceFileLoader",
    "find_spec",
    "load_source",
}
#: calls that run a module named by their argument (refused when it names one of tests)
RUNS = {"run_module", "run_path"}
IMPORT_IN_TEXT = re.compile(r"(?:^|[\s;])(?:from|import)\s+tests(?:\.|\s|$)", re.M)


def _names_tests(value: str) -> bool:
    """A module name or path inside the ``tests`` package."""
    return (
        value == "tests" or value.startswith(("tests.", "tests/", "tests:")) or "/tests/" in value
    )


def imports_of_tests(source: str) -> list[str]:
    """Every way ``source`` imports from the ``tests`` package, as "line N: what"."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            found += [f"line {line}: import {a.name}" for a in node.names if _names_tests(a.name)]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                found.append(f"line {line}: relative import from {'.' * node.level}{module}")
            elif _names_tests(module):
                found.append(f"line {line}: from {module} import ...")
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in DYNAMIC_IMPORTS or name in RUNS:
                strings = [
                    a.value
                    for a in [*node.args, *(k.value for k in node.keywords)]
                    if isinstance(a, ast.Constant) and isinstance(a.value, str)
                ]
                if (not strings and name in DYNAMIC_IMPORTS) or any(map(_names_tests, strings)):
                    found.append(f"line {line}: {name}({', '.join(map(repr, strings))})")
        elif isinstance(node, ast.Subscript):
            # sys.modules["tests..."]
            key = node.slice
            if (
                isinstance(node.value, ast.Attribute)
                and node.value.attr == "modules"
                and isinstance(key, ast.Constant)
                and isinstance(key.value, str)
                and _names_tests(key.value)
            ):
                found.append(f"line {line}: sys.modules[{key.value!r}]")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and IMPORT_IN_TEXT.search(node.value)
        ):
            found.append(f"line {line}: code in a string imports from tests")
    return found


def _checked_modules() -> list[Path]:
    """Every test module, and every other module under tests that is neither a conftest nor
    part of tests/support (the sample suites and fixture files the tests run)."""
    return sorted(
        path
        for path in TESTS.rglob("*.py")
        if "__pycache__" not in path.parts
        and path.name != "conftest.py"
        and SUPPORT not in path.parents
        and path != Path(__file__).resolve()
    )


def test_no_test_module_imports_from_tests() -> None:
    modules = _checked_modules()
    assert len([p for p in modules if p.name.startswith("test_")]) > 50  # the glob found them
    offences = {
        str(path.relative_to(ROOT)): found
        for path in modules
        if (found := imports_of_tests(path.read_text(encoding="utf-8")))
    }
    assert offences == {}, "get these through fixtures (tests/conftest.py): " + repr(offences)


def test_support_is_imported_by_conftest_files_only() -> None:
    """tests/support and the conftest files are the only importers of tests.* (besides the
    benchmarks); the plugins a relay under test loads by dotted path live in tests/support."""
    importers = sorted(
        str(path.relative_to(ROOT))
        for path in TESTS.rglob("*.py")
        if "__pycache__" not in path.parts
        and SUPPORT not in path.parents
        and imports_of_tests(path.read_text(encoding="utf-8"))
        and path != Path(__file__).resolve()
    )
    assert importers and all(p.endswith("conftest.py") for p in importers), importers


def test_the_check_sees_every_kind_of_import() -> None:
    """The checker itself: each of these would break the rule; none of the allowed forms do."""
    forbidden = [
        "from tests.support.stack import Stack",
        "import tests.support.services",
        "import tests",
        "from tests import support",
        "from . import conftest",
        "from .conftest import run_python",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tests.support import x",
        "def f():\n    from tests.workers import thing",
        "import importlib\nimportlib.import_module('tests.support.stack')",
        "import importlib\nname = 'x'\nimportlib.import_module(name)",
        "__import__('tests.support')",
        "import runpy\nrunpy.run_path('tests/support/stack.py')",
        "import sys\nsys.modules['tests.support.stack']",
        "run_python('from tests.support import stack')",
    ]
    for source in forbidden:
        assert imports_of_tests(source), source
    allowed = [
        "from typing import Any",
        "import testspecs.loader",
        "from testspecs.names import parse_variant",
        "import importlib.metadata",
        "from importlib import metadata",
        "run_python(\"import runpy; runpy.run_module('spyre_stack', run_name='__main__')\")",
        "x = 'tests/evaluation/mutation_suite/mutant_cases.py::test_a'",
        "def test_a(stack: 'Any') -> None:\n    pass",
    ]
    for source in allowed:
        assert imports_of_tests(source) == [], source


# ----------------------------------------------------------------------------- paths

#: text naming a place outside the repository: a parent folder, a machine's home or work folders,
#: the reference folder's content beside the clone
OUTSIDE_IN_TEXT = re.compile(
    r"^\.\.$|(?:^|[/\\\s'\"=:(])\.\.[/\\]"
    r"|(?:^|[^\w.-])/(?:work|home|Users|root|mnt)/"
    r"|(?:^|[^\w.-])shared/(?:fixtures|data|reference|DESIGN|STYLE)"
)
#: names bound to the repository's root wherever they appear
ROOT_NAMES = {"REPO_ROOT", "ROOT", "repo_root"}
#: calls that keep the path they are given (``Path(x).resolve()``...)
SAME_PATH = {"Path", "PurePath", "resolve", "absolute", "abspath", "realpath", "normpath", "fspath"}


def _docstrings(tree: ast.Module) -> set[int]:
    scopes = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, scopes))]
    return {
        id(body[0].value)
        for node in nodes
        if (body := node.body)
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
    }


def _descent(node: ast.expr) -> int:
    """How many folders ``path / node`` goes down (a ``..`` goes up; a name is one folder)."""
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return 1
    parts = [p for p in node.value.split("/") if p not in ("", ".")]
    return sum(-1 if p == ".." else 1 for p in parts)


def _climb(node: ast.expr, names: dict[str, int]) -> int | None:
    """How many folders above this module's file ``node`` is (0: the file itself), or None when
    it is not a path derived from ``__file__`` or from a name of the root."""
    if isinstance(node, ast.Name):
        return 0 if node.id == "__file__" else names.get(node.id)
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        below = _climb(node.value, names)
        return None if below is None else below + 1
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "parents"
        and isinstance(node.slice, ast.Constant)
    ):
        below = _climb(node.value.value, names)
        step = node.slice.value
        return None if below is None or not isinstance(step, int) else below + step + 1
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in SAME_PATH:
            inner = func.value if isinstance(func, ast.Attribute) and not node.args else None
            target = node.args[0] if node.args else inner
            return None if target is None else _climb(target, names)
        if name == "dirname" and node.args:
            below = _climb(node.args[0], names)
            return None if below is None else below + 1
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        above = _climb(node.left, names)
        return None if above is None else above - _descent(node.right)
    return None


def paths_outside(source: str, depth: int) -> list[str]:
    """Every place ``source`` (a module ``depth`` folders below the repository's root, its file
    counted) refers to a path outside the repository, as "line N: what"."""
    tree = ast.parse(source)
    names = {name: depth for name in ROOT_NAMES}
    for node in ast.walk(tree):  # names bound to paths climbed from __file__
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and (level := _climb(node.value, names)) is not None:
                names[target.id] = level
    found: list[str] = []
    docstrings = _docstrings(tree)
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings and OUTSIDE_IN_TEXT.search(node.value):
                found.append(f"line {line}: {node.value[:80]!r}")
        elif isinstance(node, ast.Attribute | ast.Subscript | ast.Call):
            level = _climb(node, names)
            if level is not None and level > depth:
                where = ast.unparse(node)[:80]
                found.append(f"line {line}: {where} is {level - depth} above the root")
    return sorted(set(found))


def test_nothing_under_tests_refers_to_a_path_outside_the_repository() -> None:
    modules = sorted(
        p
        for p in TESTS.rglob("*.py")
        if "__pycache__" not in p.parts and p != Path(__file__).resolve()
    )
    assert {"conftest.py", "services.py", "stack.py"} <= {p.name for p in modules}
    offences = {
        str(path.relative_to(ROOT)): found
        for path in modules
        if (found := paths_outside(path.read_text(), len(path.relative_to(ROOT).parts)))
    }
    assert offences == {}, "a user's clone has nothing beside it: " + repr(offences)


def test_the_path_check_sees_every_way_out() -> None:
    """The checker itself, for a module two folders deep (tests/x/test_y.py)."""
    outside = [
        'p = Path(__file__).resolve().parents[3] / "shared/data/pytorch-ci-stats"',
        'p = Path(__file__).parents[3] / "shared"',
        "p = Path(__file__).resolve().parent.parent.parent.parent",
        "import os\np = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))",
        'HERE = Path(__file__).resolve().parent\np = HERE.parent.parent.parent / "shared"',
        'p = REPO_ROOT.parent / "shared"',
        'p = (REPO_ROOT / "tests" / "../../shared").resolve()',
        "def f(repo_root):\n    return repo_root.parent",
        'x = open("../shared/fixtures/github/ping/payload.json")',
        'p = Path("..") / "shared"',
        'p = "/work/shared/fixtures/github"',
        'p = Path("/home/someone/data.json")',
        'p = base / "shared/fixtures/github"',
        'run(["cat", f"{root}/../shared/x"])',
    ]
    for source in outside:
        assert paths_outside(source, 3), source
    inside = [
        '"""no ../shared beside it"""',
        'p = Path(__file__).resolve().parents[2] / "tests" / "data"',
        "p = Path(__file__).resolve().parent.parent",
        "ROOT = Path(__file__).resolve().parents[2]\nq = ROOT / 'docs'",
        'x = "/api/v1/jobs"',
        'p = tmp_path / "shared"',
        'u = f"sqla+sqlite:///{tmp_path}/working-broker.sqlite"',
        'v = "1.2..3"',
        'p = Path("/srv/relay")',
        'out = repo_root / "var" / "fuzz" / "a.json"\nout.parent.mkdir()',
        'cell.locator("xpath=..")',
    ]
    for source in inside:
        assert paths_outside(source, 3) == [], source
