"""pytest plugin (``-p backends.tbcache``, in every backend's run): one syntax-tree cache for all
the failure reports of a session.

To show the statement around each line of a traceback, pytest parses the module of every entry
and keeps the trees for one report only. A device run where many tests fail as their spec
expects (xfail) pays that for every failure: each traceback of the conformance suites goes
through upstream's large common_methods_invocations.py and a few other large modules,
several parses per failure (the CPU run of the same tests, which pass, pays none of it; what it
costs and what this plugin saves: docs/benchmarks.md). This is outside the setup + call +
teardown times pytest reports per test, but the runner's shard pays it. Here the formatter of every report shares one cache
of the most recently used modules' trees, so a module is parsed once per process. The reports
are the same text (tests/backends/test_tbcache.py).

A process that forks pytest sessions (the runner's warm pool) can :func:`seed` the trees of the
large modules its tracebacks go through once, before it forks: every session then starts with
them (each child of a shard otherwise parses common_methods_invocations.py again at its first
expected failure).

The cache is installed when pytest is configured and removed when it is unconfigured (a narrow,
reversible patch of pytest's report formatter); if pytest's formatter no longer has the cache
this relies on, the plugin does nothing.
"""

from __future__ import annotations

import ast
import dataclasses
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

#: module trees kept (the largest, common_methods_invocations.py, is about 50 MB of nodes)
MAX_MODULES = 16

_restore = pytest.StashKey[Callable[[], None]]()


class ModuleTrees(OrderedDict[str | Path, ast.AST]):
    """The ``astcache`` pytest's formatter reads (``get``) and fills (``[key] = tree``), kept to
    the ``size`` most recently used modules."""

    def __init__(self, size: int = MAX_MODULES) -> None:
        super().__init__()
        self.size = size
        self.parsed = 0  # trees stored: how many parses the session paid

    def get(self, key: str | Path, default: Any = None) -> Any:
        if key in self:
            self.move_to_end(key)
            return self[key]
        return default

    def __setitem__(self, key: str | Path, tree: ast.AST) -> None:
        if key not in self:
            self.parsed += 1
        super().__setitem__(key, tree)
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


#: trees every session of this process starts with (see :func:`seed`)
_seeded: ModuleTrees = ModuleTrees()


def seed(paths: list[Path]) -> int:
    """Parse ``paths`` now, the trees pytest's formatter would make of them (its key is the
    code object's file as a Path; the tree is only read for line numbers), so that every session
    this process (or a fork of it) configures later starts with them; how many were parsed."""
    import linecache

    done = 0
    for path in paths[: MAX_MODULES // 2]:
        lines = linecache.getlines(str(path))
        if not lines:
            continue
        try:
            _seeded[Path(path)] = ast.parse("".join(lines), "source", "exec")
        except SyntaxError:
            continue
        done += 1
    return done


def install(trees: ModuleTrees) -> Callable[[], None] | None:
    """Make every report formatter share ``trees``; returns the undo (None: not installed)."""
    try:
        from _pytest._code.code import ExceptionInfoFormatter
    except ImportError:
        return None
    if not dataclasses.is_dataclass(ExceptionInfoFormatter) or "astcache" not in {
        f.name for f in dataclasses.fields(ExceptionInfoFormatter)
    }:
        return None
    original = ExceptionInfoFormatter.__init__

    def shared_cache_init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.astcache = trees

    ExceptionInfoFormatter.__init__ = shared_cache_init  # type: ignore[method-assign]

    def undo() -> None:
        ExceptionInfoFormatter.__init__ = original  # type: ignore[method-assign]

    return undo


def pytest_configure(config: pytest.Config) -> None:
    trees = ModuleTrees()
    for key, tree in _seeded.items():
        trees[key] = tree
    undo = install(trees)
    if undo is not None:
        config.stash[_restore] = undo


def pytest_unconfigure(config: pytest.Config) -> None:
    undo = config.stash.get(_restore, None)
    if undo is not None:
        undo()
        del config.stash[_restore]
