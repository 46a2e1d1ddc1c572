"""Build (once per torch build) and load the C++ core with ``torch.utils.cpp_extension``.

The sources live in ``spyre_stack/csrc``. Each build has its own directory,
``SpyreConfig.extensions_dir / spyre_stack_core-<key>``, whose key names everything the compiled
module depends on: torch's version and git revision, the Python ABI, and a digest of the sources,
headers and flags (:class:`BuildKey`). Two environments side by side each keep their own build,
and neither rebuilds the other's.

A directory that exists is whole: a build runs in a staging directory of its process and is
renamed into place with its marker (``built.json``) last; a process that finds it imports the
module straight away. Otherwise the build runs under an OS lock, ``fcntl.flock`` on
``<directory>.lock``, that dies with its process: concurrent processes build once (the others
wait, then find the directory), and a build killed half way blocks nobody. The next process
takes the lock and clears what the dead build left, ``cpp_extension``'s own lock file with it
(a ``FileBaton``, whose mere existence would make every later build wait forever), before it
builds again; a compiler the dead build left running writes into a staging directory nobody
reads.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import sys
import sysconfig
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType

from spyre_stack.config import SpyreConfig

log = logging.getLogger(__name__)

CSRC = Path(__file__).resolve().parent / "csrc"
SOURCES = ("module.cpp",)
EXTENSION_NAME = "spyre_stack_core"
MARKER = "built.json"
#: cpp_extension's lock file (a FileBaton: its existence is the lock) inside a build directory
BATON = "lock"

_core: ModuleType | None = None


@dataclass(frozen=True)
class BuildKey:
    """What one build of the core depends on; its :meth:`dirname` names the build directory."""

    torch_version: str
    torch_git: str
    python_abi: str  # the extension module's ABI tag, e.g. cpython-311-x86_64-linux-gnu
    sources: str  # digest of csrc's files and the compiler flags

    def dirname(self) -> str:
        parts = (
            EXTENSION_NAME,
            self.torch_version,
            f"git{self.torch_git[:12]}",
            self.python_abi,
            f"src{self.sources[:12]}",
        )
        return re.sub(r"[^A-Za-z0-9._+-]", "_", "-".join(parts))


def current_key() -> BuildKey:
    """The key of a build against the torch this process imports."""
    import torch

    return BuildKey(
        torch_version=str(torch.__version__),
        torch_git=str(getattr(torch.version, "git_version", None) or "unknown"),
        python_abi=python_abi(),
        sources=sources_digest(_cflags()),
    )


def python_abi() -> str:
    soabi = sysconfig.get_config_var("SOABI")
    return str(soabi) if soabi else f"{sys.implementation.cache_tag}-{sys.platform}"


def sources_digest(cflags: list[str]) -> str:
    """Every file of ``csrc`` (cpp_extension hashes sources and flags, not included headers)
    and the flags the core is compiled with."""
    digest = hashlib.sha256()
    for path in sorted(p for p in CSRC.iterdir() if p.is_file()):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update("\0".join(cflags).encode())
    return digest.hexdigest()


def build_dir(config: SpyreConfig, key: BuildKey | None = None) -> Path:
    """The build directory of ``key`` (default: this process's torch) in the cache."""
    return config.extensions_dir / (key or current_key()).dirname()


def load_core(config: SpyreConfig) -> ModuleType:
    """Return the compiled core, building it into its directory on first use."""
    global _core
    if _core is not None:
        return _core
    key = current_key()  # imports torch, which the core's libraries need loaded first
    directory = build_dir(config, key)
    module = _import_built(directory)
    if module is None:
        with build_lock(directory):
            module = _import_built(directory) or _build(directory, key)
    _core = module
    return module


@contextmanager
def build_lock(directory: Path) -> Iterator[None]:
    """Hold the exclusive OS lock of ``directory``'s build (released when the process dies)."""
    lock = directory.with_name(directory.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a+b") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another process's build of the spyre C++ core in %s", directory)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _import_built(directory: Path) -> ModuleType | None:
    """The module of a finished build in ``directory``, or None when there is none."""
    try:
        marker = json.loads((directory / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    library = directory / str(marker.get("library", ""))
    if not library.is_file():
        return None
    spec = importlib.util.spec_from_file_location(EXTENSION_NAME, library)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    log.info("loaded spyre C++ core from %s", directory)
    return module


def _build(directory: Path, key: BuildKey) -> ModuleType:
    """Build in a staging directory of this process, then move it into place with its marker
    (the caller holds the lock): ``directory`` is absent or whole, whatever dies when."""
    from torch.utils import cpp_extension

    _clear_unfinished(directory)
    staging = directory.with_name(f"{directory.name}.building-{os.getpid()}")
    staging.mkdir(parents=True)
    os.environ.setdefault("MAX_JOBS", "1")
    log.info("building the spyre C++ core into %s (once per torch build)", directory)
    began = time.monotonic()
    module = cpp_extension.load(
        name=EXTENSION_NAME,
        sources=[str(CSRC / s) for s in SOURCES],
        extra_include_paths=[str(CSRC)],
        extra_cflags=_cflags(),
        build_directory=str(staging),
        verbose=False,
    )
    assert isinstance(module, ModuleType)
    library = Path(str(module.__file__)).name
    seconds = round(time.monotonic() - began, 1)
    marker = {**asdict(key), "library": library, "seconds": seconds, "pid": os.getpid()}
    (staging / MARKER).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
    os.rename(staging, directory)
    module.__file__ = str(directory / library)
    log.info("built the spyre C++ core in %.1f s", seconds)
    return module


def _clear_unfinished(directory: Path) -> None:
    """Remove what builds that died left (the caller holds the lock, so their owners are gone):
    their staging directories with cpp_extension's lock files, whose existence would otherwise
    make the next build wait forever, and a directory without its marker."""
    pattern = glob.escape(directory.name) + ".building-*"
    for stale in [*directory.parent.glob(pattern), directory]:
        if stale.is_dir():
            baton = " and its lock file" if (stale / BATON).exists() else ""
            log.warning("clearing an unfinished build%s: %s", baton, stale)
            shutil.rmtree(stale)


def _cflags() -> list[str]:
    return ["-O1", *_std_flags()]


def _std_flags() -> list[str]:
    # torch >= 2.14's headers require C++20, which cpp_extension passes itself; a later -std=c++17
    # would override it. Older torch keeps the C++17 build.
    import torch
    from torch.torch_version import TorchVersion

    return [] if TorchVersion(torch.__version__) >= "2.14.0a0" else ["-std=c++17"]
