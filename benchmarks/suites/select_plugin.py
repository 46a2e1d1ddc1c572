"""pytest plugin (``-p benchmarks.suites.select_plugin``): keep only the node ids listed in the
file named by BENCH_SELECT_IDS (a line without ``::`` keeps a whole file); ids that do not
exist are ignored instead of failing the run, so one id list serves a device and the CPU."""

from __future__ import annotations

import os

import pytest


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
