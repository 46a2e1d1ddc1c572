"""The launchers a worker process keeps: one warm pool per runner recipe, closed when the worker
process ends."""

from __future__ import annotations

import os
from pathlib import Path

from backends.base import RunnerConfig
from workers.harness.launchers import FreshProcessLauncher, Launcher, WarmPool

_pools: dict[str, Launcher] = {}


def launcher_for(runner: RunnerConfig, *, warm: bool) -> Launcher:
    """A fresh-process launcher, or the warm pool for ``runner`` (made on first use)."""
    env = {**os.environ, **runner.env, "OMP_NUM_THREADS": "1"}
    cwd = Path(runner.rootdir)
    if not warm:
        return FreshProcessLauncher(cwd=cwd, env=env)
    key = repr((runner.rootdir, sorted(runner.env.items()), runner.preload))
    pool = _pools.get(key)
    if pool is None:
        pool = _pools[key] = WarmPool(cwd=cwd, env=env, preload=list(runner.preload))
    return pool


def close_pools() -> None:
    for pool in _pools.values():
        pool.close()
    _pools.clear()
