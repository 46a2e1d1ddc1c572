"""The launchers a worker process keeps: one warm pool per upstream environment and runner
recipe (the few environments in use, least recently used closed first), closed when the worker
process ends; :func:`warm_default` and :func:`warm_and_log` start the default recipe's pool before the first shard asks."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections import OrderedDict
from pathlib import Path

from backends import Backend, RunnerConfig, get_backend
from config.settings import Settings
from upstream.undertest import INSTALLED_KEY, RunEnvironment
from workers.harness.collecting import CollectingLauncher
from workers.harness.launchers import FreshProcessLauncher, Launcher, WarmPool

log = logging.getLogger("workers.harness")

_pools: OrderedDict[tuple[str, str], Launcher] = OrderedDict()  # (environment, recipe)
_lock = threading.Lock()


def launcher_for(
    runner: RunnerConfig,
    *,
    warm: bool,
    module_servers: int = 0,
    environment: RunEnvironment | None = None,
    environment_key: str = INSTALLED_KEY,
    keep_environments: int = 2,
) -> Launcher:
    """A fresh-process launcher, or the warm pool for ``runner`` in ``environment`` (the
    upstream under test's interpreter, named by ``environment_key``; default: this interpreter),
    made on first use; with ``module_servers`` > 0, the warm pool behind a
    :class:`CollectingLauncher` keeping that many collected modules. The pools of at most
    ``keep_environments`` environments are kept: the least recently used one's are closed."""
    base_env = environment.env if environment is not None else os.environ
    python = environment.python if environment is not None else sys.executable
    env = {**base_env, **runner.env, "OMP_NUM_THREADS": "1"}
    cwd = Path(runner.rootdir)
    if not warm:
        return FreshProcessLauncher(cwd=cwd, env=env, python=python)
    recipe = repr((runner.rootdir, sorted(runner.env.items()), runner.preload, module_servers))
    key = (environment_key, recipe)
    with _lock:
        pool = _pools.pop(key, None)
        if pool is None:
            warm_pool = WarmPool(cwd=cwd, env=env, preload=list(runner.preload), python=python)
            pool = (
                CollectingLauncher(warm_pool, keep=module_servers) if module_servers else warm_pool
            )
        _pools[key] = pool  # most recently used last
        for old in _evicted(keep_environments):
            old.close()
    return pool


def _evicted(keep: int) -> list[Launcher]:
    """Remove the pools of the least recently used environments beyond ``keep`` (under _lock)."""
    recent: list[str] = []
    for environment, _ in reversed(_pools):
        if environment not in recent:
            recent.append(environment)
    stale = set(recent[max(1, keep) :])
    return [_pools.pop(k) for k in [k for k in _pools if k[0] in stale]]


def pool_environments() -> list[str]:
    """The environments whose pools this process keeps, least recently used first."""
    with _lock:
        return list(dict.fromkeys(k[0] for k in _pools))


def runner_backend(settings: Settings) -> tuple[Backend, list[Path]]:
    """The backend jobs run on (``RELAY_RUNNER_BACKEND``) and the specs they run under:
    ``RELAY_RUNNER_SPECS``, else the backend's own."""
    backend = get_backend(settings.runner_backend)
    specs = [Path(p).resolve() for p in settings.runner_specs] or list(backend.default_specs)
    return backend, specs


def default_runner(settings: Settings) -> RunnerConfig:
    """The recipe the default planner's jobs run with: :func:`runner_backend`'s backend under
    its specs."""
    backend, specs = runner_backend(settings)
    return backend.runner_config(specs)


def boot_pool(settings: Settings) -> WarmPool | None:
    """The warm pool of :func:`default_runner`, its server started now (a shard worker process
    at boot: from that process's main thread, as the server dies with the thread that started
    it), not yet waited for; None when there is nothing to warm. ``warm`` it in a thread so the
    first shard does not wait for torch and the test databases to import (a shard asking
    meanwhile waits for the same start)."""
    if not (settings.warm_pool and settings.warm_pool_at_boot):
        return None
    launcher = launcher_for(
        default_runner(settings),
        warm=True,
        module_servers=settings.module_servers,
        environment_key=INSTALLED_KEY,
        keep_environments=settings.warm_pool_envs,
    )
    pool = launcher.base if isinstance(launcher, CollectingLauncher) else launcher
    if not isinstance(pool, WarmPool):
        return None
    pool.spawn()
    return pool


def warm_and_log(pool: WarmPool) -> None:
    """Wait for ``pool`` to be ready; log "warm pool ready" (or why it failed: the first shard
    then tries again and reports what fails)."""
    began = time.perf_counter()
    try:
        pool.warm()
    except Exception:
        log.exception("warm pool failed to start")
        return
    log.info(
        "warm pool ready",
        extra={"seconds": round(time.perf_counter() - began, 2), "pid": os.getpid()},
    )


def close_pools() -> None:
    with _lock:
        for pool in _pools.values():
            pool.close()
        _pools.clear()
