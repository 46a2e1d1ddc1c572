"""The caches of one host, every one under ``RELAY_VAR_DIR`` (docs/production.md lists them).

A cache is a folder of the var dir named in :data:`CACHES`; its entries are keyed by what they
depend on (a torch build, a revision, a specs hash...), so a host never needs another host's
copy: a host that lacks an entry builds it, and says so in its log (:func:`building`).

``RELAY_CACHE_SEED`` names a read-only folder laid out like a var dir (the test session's var dir,
or one baked into an image): an entry this var dir lacks is copied from there first
(:func:`seeded`), which is what keeps a fresh var dir from paying a cold inventory (minutes).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

from config.settings import Settings, get_settings

log = logging.getLogger(__name__)

#: every cache folder of a var dir, and what it holds
CACHES = {
    "inventory": "collected test universes and spec decisions (inventory)",
    "selector": "import maps learned from runs (selector)",
    "eval": "ground-truth runs and catch stacks (relay eval)",
    "envs": "torch environments and head overlays (upstream under test)",
    "upstream": "change facts when no wheel cache is configured",
    "torch_extensions": "the spyre C++ core built per torch build (SPYRE_EXTENSIONS_DIR)",
}


def cache_dir(name: str, settings: Settings | None = None) -> Path:
    """The absolute folder of cache ``name`` (a key of :data:`CACHES`) in this host's var dir."""
    if name not in CACHES:
        raise ValueError(f"unknown cache {name!r} (known: {', '.join(CACHES)})")
    return (settings or get_settings()).var_dir / name


def seeded(path: Path, settings: Settings | None = None) -> bool:
    """Whether ``path`` (a file or folder inside the var dir) exists, after copying it from
    ``RELAY_CACHE_SEED`` when this host lacked it and the seed has it (logged)."""
    if path.exists():
        return True
    s = settings or get_settings()
    if s.cache_seed is None:
        return False
    try:
        relative = path.absolute().relative_to(s.var_dir)
    except ValueError:  # a folder the caller chose: not this var dir's cache
        return False
    source = s.cache_seed / relative
    if not source.exists() or source.absolute() == path.absolute():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.seed-{os.getpid()}")
    start = time.perf_counter()
    if source.is_dir():
        shutil.copytree(source, tmp, symlinks=True, dirs_exist_ok=True)
    else:
        shutil.copyfile(source, tmp)
    try:
        tmp.rename(path)  # atomic; another process may have copied or built it meanwhile
    except OSError:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
    log.info(
        "cache entry copied from the seed",
        extra={
            "cache": str(relative),
            "seed": str(s.cache_seed),
            "seconds": round(time.perf_counter() - start, 3),
        },
    )
    return path.exists()


def building(path: Path, what: str) -> None:
    """Say in the log that this host lacks cache entry ``path`` and builds it now."""
    log.info(
        "cache entry missing on this host: building it", extra={"cache": str(path), "what": what}
    )


def seed_folder(name: str, settings: Settings | None = None) -> list[str]:
    """Copy every entry of the seed's cache ``name`` that this var dir lacks (for caches a leaf
    package fills on its own, the workers' torch_extensions); the names copied."""
    s = settings or get_settings()
    if s.cache_seed is None or not (s.cache_seed / name).is_dir():
        return []
    here = cache_dir(name, s)
    copied = []
    for entry in sorted((s.cache_seed / name).iterdir()):
        wanted = not entry.name.startswith(".") and entry.suffix != ".lock"
        if wanted and not (here / entry.name).exists() and seeded(here / entry.name, s):
            copied.append(entry.name)
    return copied
