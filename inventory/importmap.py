"""The import map: which upstream modules the universe's test runs actually import.

Learned from our own runs: a sample of the universe (a few variants per template) runs under
pytest with the backend's plugins and this module as a plugin; at the end of the session every
loaded module whose file is inside the torch package is written out as ``torch/...`` paths. A
change to a module that the runs never import cannot change a test outcome, so the
``import-map`` signal accounts for it with no test (modules imported lazily by tests outside the
sample are the known gap; the map is keyed by torch build and backend version, and re-learned
when either changes).

Run as a plugin: ``pytest -p inventory.importmap --import-map-out FILE ...``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from backends import get_backend
from backends.base import PROJECT_ROOT, fresh_pytest
from config.settings import get_settings
from inventory.only_ids import add_option, keep_listed
from selector.model import Universe, Variant
from selector.signals.imports import IMPORT_MAP_VERSION
from store import caches

log = logging.getLogger(__name__)


class ImportMapBusy(RuntimeError):
    """Another process is learning this import map (it holds the map's OS lock)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--import-map-out",
        default=None,
        help="write the torch modules loaded during the session (selector)",
    )
    parser.addoption(
        "--trace-calls",
        action="store_true",
        default=False,
        help="with --import-map-out: also record the torch functions each test calls",
    )
    add_option(parser)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep_listed(config, items)


_CALLS: dict[str, set[Any]] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    if not item.config.getoption("--trace-calls"):
        yield
        return
    seen: set[Any] = set()

    def tracer(frame: Any, event: str, arg: Any) -> None:
        # called once per Python frame entered; returning None skips line tracing
        seen.add(frame.f_code)

    old = sys.gettrace()
    sys.settrace(tracer)
    try:
        yield
    finally:
        sys.settrace(old)
        _CALLS[item.nodeid] = seen


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    out = session.config.getoption("--import-map-out")
    if not out:
        return
    data: dict[str, Any] = {"modules": sorted(loaded_torch_modules())}
    if _CALLS:
        root = _torch_root()
        tests = sorted(_CALLS)
        calls: dict[str, list[int]] = {}
        names: dict[Any, str | None] = {}
        for index, test in enumerate(tests):
            for code in _CALLS[test]:
                if code not in names:
                    names[code] = _symbol(code, root)
                key = names[code]
                if key is not None:
                    calls.setdefault(key, []).append(index)
        data["tests"] = tests
        data["calls"] = {k: sorted(set(v)) for k, v in sorted(calls.items())}
    Path(out).write_text(json.dumps(data), encoding="utf-8")


def _torch_root() -> Path:
    import torch

    return Path(torch.__file__).resolve().parent.parent


def _symbol(code: Any, root: Path) -> str | None:
    """``torch/x.py::Class.method`` for a code object in torch or the backend package
    (``spyre_stack/...``); nested functions are folded into their enclosing definition."""
    filename = Path(code.co_filename)
    rel = None
    for base, prefixes in ((root, ("torch/", "torchgen/")), (PROJECT_ROOT, ("spyre_stack/",))):
        try:
            candidate = filename.relative_to(base).as_posix()
        except ValueError:
            continue
        if candidate.startswith(prefixes):
            rel = candidate
            break
    if rel is None:
        return None
    qual = code.co_qualname.split(".<locals>", 1)[0]
    return None if qual == "<module>" else f"{rel}::{qual}"


def loaded_torch_modules() -> set[str]:
    root = _torch_root()
    found = set()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not path:
            continue
        try:
            rel = Path(path).resolve().relative_to(root).as_posix()
        except ValueError:
            continue
        if rel.startswith("torch/") or rel.startswith("torchgen/"):
            found.add(rel)
    return found


def sample(variants: Iterable[Variant], per_template: int, *, sweep: int = 0) -> list[str]:
    """``per_template`` variants of every template, plus one variant per op / module for the
    ``sweep`` largest op-parametrized templates (the traced coverage needs every op once)."""
    by_template: dict[tuple[str, str], list[Variant]] = {}
    for v in variants:
        by_template.setdefault((v.file, v.base), []).append(v)
    out: list[str] = []
    for key in sorted(by_template):
        ids = sorted(v.test_id for v in by_template[key])
        step = max(1, len(ids) // per_template)
        out += ids[::step][:per_template]

    def width(key: tuple[str, str], attr: str) -> int:
        return len({getattr(v, attr) for v in by_template[key] if getattr(v, attr)})

    chosen = []
    for attr in ("op", "module"):
        ranked = sorted(by_template, key=lambda k: (-width(k, attr), k))
        chosen += [k for k in ranked[:sweep] if width(k, attr)]
    for key in chosen:
        per_target: dict[str, Variant] = {}
        for v in sorted(by_template[key], key=lambda v: (v.dtype != "float32", v.test_id)):
            per_target.setdefault(str(v.op or v.module), v)
        out += [v.test_id for v in per_target.values()]
    return list(dict.fromkeys(out))


def learn_import_map(
    variants: Sequence[Variant],
    *,
    key: str,
    backend: str = "spyre",
    per_template: int = 3,
    sweep: int = 0,
    cache_dir: Path | None = None,
    root: Path | None = None,
    timeout: float = 1800,
    wait: bool = True,
    nice: int = 0,
) -> Path:
    """Run a sample, write and return the map file (reused when ``key`` already has one; the
    folder unset: the host's, ``RELAY_VAR_DIR/selector``, seeded from ``RELAY_CACHE_SEED``).
    One process learns a map at a time (an OS lock beside it): another waits for it and reuses
    its map, or with ``wait=False`` raises :class:`ImportMapBusy`. ``nice``: how much lower
    than this process the sample run's priority is (a learning in the background)."""
    folder = cache_dir if cache_dir is not None else caches.cache_dir("selector")
    path = folder / f"importmap-{key}{'-traced' if sweep else ''}.json"
    if path.is_file() or (cache_dir is None and caches.seeded(path)):
        return path
    with _learning(path, wait=wait):
        if path.is_file():  # learned by the process that held the lock
            return path
        caches.building(path, f"import map of {len(variants)} variants")
        ids = sample(variants, per_template, sweep=sweep)
        traced = _sample_run(
            variants, ids, backend=backend, sweep=sweep, root=root, timeout=timeout, nice=nice
        )
        data: dict[str, Any] = {
            "version": IMPORT_MAP_VERSION,
            "key": key,
            "tests_run": len(ids),
            **traced,
        }
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        tmp.replace(path)  # atomic: a planner reading the folder never sees half a map
    return path


@contextlib.contextmanager
def _learning(path: Path, *, wait: bool) -> Iterator[None]:
    """Hold the OS lock of map ``path`` (it dies with its process)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.with_name(f".{path.name}.lock").open("w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise ImportMapBusy(f"{path.name} is being learned by another process") from None
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _sample_run(
    variants: Sequence[Variant],
    ids: list[str],
    *,
    backend: str,
    sweep: int,
    root: Path | None,
    timeout: float,
    nice: int,
) -> dict[str, Any]:
    """What the sample ``ids`` of ``variants`` import (and, with ``sweep``, call)."""
    be = get_backend(backend)
    with tempfile.TemporaryDirectory(prefix="relay-importmap-") as tmp:
        out = Path(tmp) / "modules.json"
        id_file = Path(tmp) / "ids.txt"
        id_file.write_text("\n".join(ids), encoding="utf-8")
        options = ["--import-map-out", str(out)]
        if sweep:
            options.append("--trace-calls")
        # collect the files exactly as the inventory did (same order: variant class names can
        # depend on it) and keep only the sample
        files = list(dict.fromkeys(v.file for v in variants))
        args = be.pytest_args(
            plugins=["inventory.importmap"],
            options=[*options, "--only-ids", str(id_file)],
            targets=files,
        )
        stdout, stderr = _run(
            fresh_pytest(args),
            cwd=root or PROJECT_ROOT,
            env={**os.environ, **be.env},
            timeout=timeout,
            nice=nice,
        )
        if not out.is_file():
            raise RuntimeError(f"import-map run failed:\n{(stdout + stderr)[-2000:]}")
        traced: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    if sweep and "calls" not in traced:
        raise RuntimeError(f"traced run recorded no calls:\n{stdout[-1500:]}{stderr[-1500:]}")
    return traced


def _run(
    command: list[str], *, cwd: Path, env: dict[str, str], timeout: float, nice: int
) -> tuple[str, str]:
    """Run ``command`` (``nice`` steps below this process's priority); its stdout and stderr.
    Raises subprocess.TimeoutExpired after ``timeout`` seconds (the process killed)."""
    with subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        if nice:  # set on the child, not with preexec_fn (unsafe in a process with threads)
            with contextlib.suppress(OSError):
                own = os.getpriority(os.PRIO_PROCESS, 0)
                os.setpriority(os.PRIO_PROCESS, proc.pid, min(19, own + nice))
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    return stdout, stderr


def map_key(universe: Universe) -> tuple[str, str, str] | None:
    """(torch build, test files' hash, backend version) that ``universe``'s import map is kept
    under, or None for a universe that has none (not the bundled suites, or no key)."""
    if not universe.key or universe.kind not in ("bundled", "installed+facts"):
        return None
    safe = "".join(c if c.isalnum() or c in ".-" else "_" for c in universe.key)
    build, _, backend_version = safe.partition("-spyre")
    files = hashlib.sha256(",".join(sorted(universe.by_file)).encode()).hexdigest()[:8]
    return build, files, backend_version


def import_map_for(
    universe: Universe,
    *,
    backend: str = "spyre",
    learn: bool = True,
    wait: bool = True,
    nice: int = 0,
    timeout: float = 1800,
) -> Path | None:
    """The learned import map for the universe's torch build and backend (run once, cached);
    with ``learn=False`` only a map learned before (else None). ``wait``, ``nice``, ``timeout``:
    how it is learned (:func:`learn_import_map`)."""
    keyed = map_key(universe)
    if keyed is None:
        return None
    build, files, backend_version = keyed
    key = f"{build}-{files}-spyre{backend_version}"
    folder = caches.cache_dir("selector")
    exact = folder / f"importmap-{key}-traced.json"
    if not caches.seeded(exact):
        # the traced run takes minutes: a map of the same torch build and test files learned
        # with an earlier backend version is reused (its backend symbols may be stale), this
        # host's or, when it has none, the cache seed's (copied here)
        same = _same_build(folder, f"importmap-{build}-{files}-*-traced.json")
        if same:
            log.info("reusing import map %s for %s", same[-1], key)
            return same[-1]
        if not learn:
            return None
    return learn_import_map(
        universe.variants,
        key=key,
        backend=backend,
        sweep=1,
        wait=wait,
        nice=nice,
        timeout=timeout,
    )


def _same_build(folder: Path, pattern: str) -> list[Path]:
    """The maps in ``folder`` named like ``pattern``, oldest first; when there are none, the
    newest of the cache seed's (``RELAY_CACHE_SEED``), copied into ``folder``."""

    def found(where: Path) -> list[Path]:
        return sorted(where.glob(pattern), key=lambda p: p.stat().st_mtime)

    here = found(folder)
    seed = get_settings().cache_seed
    if here or seed is None:
        return here
    theirs = found(seed / folder.name)
    if theirs and caches.seeded(folder / theirs[-1].name):
        return [folder / theirs[-1].name]
    return []
