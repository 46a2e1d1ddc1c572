"""backends.tbcache: the failure reports of a run share their parsed modules (each module parsed
once, not once per failure), and every report reads the same as without it."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

from backends.base import TB_CACHE_PLUGIN
from backends.tbcache import ModuleTrees, install

HELPER = """
def check(value):
    assert value == 0, f"value {value} is not zero"


def deep(value):
    return check(value)
"""

TESTS = """
import pytest

from helper import deep


@pytest.mark.parametrize("value", [1, 2, 3])
def test_fails(value):
    deep(value)


@pytest.mark.xfail(reason="known")
def test_expected():
    deep(4)


def test_passes():
    deep(0)
"""

# counts the parses pytest's formatter pays (a module parsed when no cached tree is passed in)
# and writes every failure's report text
CONFTEST = """
import json
import os

from _pytest._code import code

PARSES = []
REPORTS = {}
_original = code.getstatementrange_ast


def counting(lineno, source, assertion=False, astnode=None):
    if astnode is None:
        PARSES.append(lineno)
    return _original(lineno, source, assertion=assertion, astnode=astnode)


code.getstatementrange_ast = counting


def pytest_runtest_logreport(report):
    if report.when == "call" and (report.failed or hasattr(report, "wasxfail")):
        REPORTS[report.nodeid] = report.longreprtext


def pytest_sessionfinish(session):
    with open(os.environ["OUT"], "w") as f:
        json.dump({"parses": len(PARSES), "reports": REPORTS}, f)
"""


def _run(tmp: Path, *plugin: str) -> dict[str, object]:
    out = tmp / f"out{len(plugin)}.json"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin, "test_cases.py"],
        cwd=tmp,
        env={"OUT": str(out), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        check=False,
        timeout=300,
    )
    result: dict[str, object] = json.loads(out.read_text())
    return result


def test_failure_reports_parse_each_module_once_and_read_the_same(tmp_path: Path) -> None:
    (tmp_path / "helper.py").write_text(textwrap.dedent(HELPER))
    (tmp_path / "test_cases.py").write_text(textwrap.dedent(TESTS))
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    plain = _run(tmp_path)
    shared = _run(tmp_path, "-p", TB_CACHE_PLUGIN)
    reports = plain["reports"]
    assert isinstance(reports, dict) and len(reports) == 4  # three failures and the xfail
    assert shared["reports"] == reports
    assert "value 2 is not zero" in reports["test_cases.py::test_fails[2]"]
    # each report parses the test module and the helper: 8 parses, and 2 with the plugin
    assert (plain["parses"], shared["parses"]) == (8, 2)


def test_the_cache_keeps_the_most_recent_modules_and_is_removed_with_the_session() -> None:
    trees = ModuleTrees(size=2)
    for name in ("a", "b", "a", "c"):
        if trees.get(name) is None:
            trees[name] = ast.parse(f"{name} = 1")
    assert list(trees) == ["a", "c"] and trees.parsed == 3  # b was the least recently used
    from _pytest._code.code import ExceptionInfoFormatter

    undo = install(trees)
    assert undo is not None
    try:
        assert ExceptionInfoFormatter().astcache is trees
    finally:
        undo()
    assert ExceptionInfoFormatter().astcache is not trees


def test_a_seeded_process_starts_every_session_with_the_seeded_trees(tmp_path: Path) -> None:
    """The warm pool seeds the trees of upstream's large modules before it forks: a session
    there parses only what was not seeded, and its reports read the same."""
    (tmp_path / "helper.py").write_text(textwrap.dedent(HELPER))
    (tmp_path / "test_cases.py").write_text(textwrap.dedent(TESTS))
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    plain = _run(tmp_path, "-p", TB_CACHE_PLUGIN)
    out = tmp_path / "seeded.json"
    script = (
        "import sys, pathlib, pytest\n"
        "from backends import tbcache\n"
        "assert tbcache.seed([pathlib.Path('helper.py').resolve()]) == 1\n"
        "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-p', 'backends.tbcache',"
        " 'test_cases.py']))\n"
    )
    root = str(Path(__file__).resolve().parents[2])
    subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={"OUT": str(out), "PATH": "/usr/bin:/bin", "PYTHONPATH": f"{tmp_path}:{root}"},
        capture_output=True,
        check=False,
        timeout=300,
    )
    seeded = json.loads(out.read_text())
    assert seeded["reports"] == plain["reports"]
    assert (plain["parses"], seeded["parses"]) == (2, 1)  # the helper's tree came seeded
