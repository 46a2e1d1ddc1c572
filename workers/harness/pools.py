"""The launchers a worker process keeps: one warm pool per runner recipe, closed when the worker
process ends."""

from __future__ import annotations

import os
from pathlib import Path

from backends.base import RunnerConfig
from workers.harness.collecting import CollectingLauncher
from workers.harness.launchers import FreshProcessLauncher, Launcher, WarmPool

_pools: dict[str, Launcher] = {}


def launcher_for(runner: RunnerConfig, *, warm: bool, module_servers: int = 0) -> Launcher:
    """A fresh-process launcher, or the warm pool for ``runner`` (made on first use); with
    ``module_servers`` > 0, the warm pool behind a :class:`CollectingLauncher` keeping that
    many collected modules."""
    env = {**os.environ, **runner.env, "OMP_NUM_THREADS": "1"}
    cwd = Path(runner.rootdir)
    if not warm:
        return FreshProcessLauncher(cwd=cwd, env=env)
    key = repr((runner.rootdir, sorted(runner.env.items()), runner.preload, module_servers))
    pool = _pools.get(key)
    if pool is None:
        warm_pool = WarmPool(cwd=cwd, env=env, preload=list(runner.preload))
        pool = _pools[key] = (
            CollectingLauncher(warm_pool, keep=module_servers) if module_servers else warm_pool
        )
    return pool


def close_pools() -> None:
    for pool in _pools.values():
        pool.close()
    _pools.clear()
