"""pytest plugin (``-p benchmarks.suites.select_plugin``): keep only the node ids listed in the
file named by BENCH_SELECT_IDS (a line without ``::`` keeps a whole file); ids that do not
exist are ignored instead of failing the run, so one id list serves a device and the CPU.

With BENCH_CPU_TIMES set, it also writes there {node id: CPU seconds of the process for the
test's setup + call + teardown}: on a shared machine a test's wall time includes the time it
waited for a core, its CPU time does not."""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from collections.abc import Generator

import pytest

_CPU: defaultdict[str, float] = defaultdict(float)


def _cpu_of(item: pytest.Item) -> Generator[None, None, None]:
    """The body of the three phase wrappers below: adds the phase's CPU seconds to the test's."""
    start = time.process_time()
    try:
        return (yield)
    finally:
        _CPU[item.nodeid] += time.process_time() - start


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _cpu_of(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _cpu_of(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _cpu_of(item))


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get("BENCH_CPU_TIMES")
    if out:
        with open(out, "w") as f:
            json.dump(dict(_CPU), f)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    path = os.environ.get("BENCH_SELECT_IDS")
    if not path:
        return
    with open(path) as f:
        wanted = {line.strip() for line in f if line.strip()}
    files = {w for w in wanted if "::" not in w}
    keep = [i for i in items if i.nodeid in wanted or i.nodeid.split("::", 1)[0] in files]
    dropped = [i for i in items if i not in set(keep)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep
