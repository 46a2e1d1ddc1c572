"""The test suite's own layout rule: test modules import nothing from ``tests``.

A test module gets its helpers through fixtures (tests/conftest.py and one conftest per folder);
the implementations live in ``tests/support``, which only conftest files (and the benchmarks)
import. So no test depends on where another test, or a helper, happens to live, and moving a
test module never breaks another one. Checked on the source with ``ast``: import statements
(absolute and relative, anywhere in the module, ``TYPE_CHECKING`` blocks included), dynamic
imports (``importlib.import_module``, ``__import__``, ``runpy``, ``spec_from_file_location``...)
and code handed to a fresh interpreter as a string.
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
    "import_module", "__import__", "spec_from_file_location", "SourceFileLoader", "find_spec",
    "load_source",
}  # fmt: skip
#: calls that run a module named by their argument (refused when it names one of tests)
RUNS = {"run_module", "run_path"}
IMPORT_IN_TEXT = re.compile(r"(?:^|[\s;])(?:from|import)\s+tests(?:\.|\s|$)", re.M)


def _names_tests(value: str) -> bool:
    """A module name or path inside the ``tests`` package."""
    return (
        value == "tests"
        or value.startswith(("tests.", "tests/", "tests:"))
        or "/tests/" in value
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
