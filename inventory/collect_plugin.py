"""pytest plugin that records every collected test variant for the inventory.

Loaded in a collection subprocess (``-p inventory.collect_plugin --inventory-out FILE``), it
writes one JSON record per collected item after collection has finished (after every other
plugin's ``pytest_collection_modifyitems``), plus one record per collection error. It reads what
``instantiate_device_type_tests`` left on each generated method: the template's name (kept by
``functools.wraps``) and the ``param_kwargs`` default of the instantiated function, which holds
the OpInfo, ModuleInfo and dtype the variant was generated for. Nothing is patched.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from testspecs.outcomes import fold

RECORD_VERSION = 1


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--inventory-out",
        default=None,
        help="write the collected variants as JSON lines to this file (inventory.build)",
    )
    parser.addoption(
        "--inventory-outcomes",
        default=None,
        help="write each test's outcome as JSON lines to this file (inventory.run)",
    )


def _param_kwargs(fn: Any) -> dict[str, Any] | None:
    """The ``param_kwargs`` an instantiated device-generic test was built with, if any."""
    seen = 0
    while fn is not None and seen < 20:
        fn = getattr(fn, "__func__", fn)
        for default in getattr(fn, "__defaults__", None) or ():
            if isinstance(default, dict) and (
                {"op", "module_info", "dtype", "dtypes", "device"} & set(default)
            ):
                return default
        fn = getattr(fn, "__wrapped__", None)
        seen += 1
    return None


def _dtype_name(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return ",".join(_dtype_name(v) or "" for v in value)
    return str(value).removeprefix("torch.")


def _op_name(op: Any) -> str | None:
    if op is None:
        return None
    name = getattr(op, "name", None)
    variant = getattr(op, "variant_test_name", "")
    if name is None:
        return None
    return f"{name}.{variant}" if variant else str(name)


def _static_skip(fn: Any) -> str | None:
    if getattr(fn, "__unittest_skip__", False):
        return str(getattr(fn, "__unittest_skip_why__", "") or "skipped")
    return None


def describe(item: pytest.Item, rootdir: Path) -> dict[str, Any]:
    cls = getattr(item, "cls", None)
    method = item.name
    fn = getattr(cls, method, None) if cls is not None else getattr(item, "obj", None)
    params = _param_kwargs(fn) or {}
    base = getattr(fn, "__name__", None) or method
    if not method.startswith(base):
        base = method
    op = params.get("op")
    module_info = params.get("module_info")
    extra = {
        k: v
        for k, v in params.items()
        if k not in {"op", "module_info", "dtype", "dtypes", "device", "devices"}
        and isinstance(v, (str, int, float, bool))
    }
    path = Path(str(item.path))
    try:
        rel = path.resolve().relative_to(rootdir.resolve()).as_posix()
    except ValueError:
        rel = path.as_posix()
    marks = sorted({m.name for m in item.iter_markers()})
    return {
        "v": RECORD_VERSION,
        "test_id": item.nodeid,
        "file": rel,
        "cls": cls.__name__ if cls is not None else None,
        "name": method,
        "base": base,
        "op": _op_name(op),
        "module": getattr(module_info, "name", None),
        "dtype": _dtype_name(params.get("dtypes", params.get("dtype"))),
        "params": extra,
        "marks": marks,
        "static_skip": _static_skip(fn),
    }


class _Recorder:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.errors: list[dict[str, Any]] = []

    @pytest.hookimpl(trylast=True)
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            text = str(report.longrepr)
            self.errors.append({"error": report.nodeid, "message": text[-2000:]})

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        rootdir = Path(str(session.config.rootpath))
        with self.out.open("w", encoding="utf-8") as fh:
            for item in session.items:
                fh.write(json.dumps(describe(item, rootdir), sort_keys=True) + "\n")
            for error in self.errors:
                fh.write(json.dumps(error, sort_keys=True) + "\n")


class _OutcomeRecorder:
    """One line per test: passed, failed, error, skipped, xfailed or xpassed (after any plugin
    that rewrites outcomes, such as the testspecs plugin)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.outcomes: dict[str, dict[str, Any]] = {}

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        previous = self.outcomes.get(report.nodeid)
        outcome = fold(previous["outcome"] if previous else None, report)
        if previous is not None and outcome == previous["outcome"] and report.when != "call":
            return  # setup and teardown only report their failures (and skips)
        message = report.longreprtext.strip().splitlines()[-1:] if report.longreprtext else []
        self.outcomes[report.nodeid] = {
            "test_id": report.nodeid,
            "outcome": outcome,
            "message": message[0][:300] if message else None,
        }

    def pytest_sessionfinish(self) -> None:
        with self.out.open("w", encoding="utf-8") as fh:
            for row in self.outcomes.values():
                fh.write(json.dumps(row, sort_keys=True) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    out = config.getoption("--inventory-out")
    if out:
        config.pluginmanager.register(_Recorder(Path(out)), "inventory-recorder")
    outcomes = config.getoption("--inventory-outcomes")
    if outcomes:
        config.pluginmanager.register(_OutcomeRecorder(Path(outcomes)), "inventory-outcomes")
