"""Build (once, cached) and load the C++ core with ``torch.utils.cpp_extension``.

The sources live in ``spyre_stack/csrc``. The build directory is
``SpyreConfig.extensions_dir / spyre_stack_core``; ``cpp_extension`` rebuilds only when a source
or flag changes and takes a file lock, so concurrent test processes build once.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from types import ModuleType

from spyre_stack.config import SpyreConfig

log = logging.getLogger(__name__)

CSRC = Path(__file__).resolve().parent / "csrc"
SOURCES = ("module.cpp",)
HEADERS = ("driver.h", "runtime.h", "aten.h")
EXTENSION_NAME = "spyre_stack_core"

_core: ModuleType | None = None


def build_dir(config: SpyreConfig) -> Path:
    return config.extensions_dir / EXTENSION_NAME


def load_core(config: SpyreConfig) -> ModuleType:
    """Return the compiled core, building it into the cache directory on first use."""
    global _core
    if _core is not None:
        return _core
    from torch.utils import cpp_extension

    directory = build_dir(config)
    directory.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MAX_JOBS", "1")
    log.info("loading spyre C++ core from %s", directory)
    _core = cpp_extension.load(
        name=EXTENSION_NAME,
        sources=[str(CSRC / s) for s in SOURCES],
        extra_include_paths=[str(CSRC)],
        extra_cflags=["-O1", *_std_flags(), "-DSPYRE_HEADERS_" + _headers_digest()],
        build_directory=str(directory),
        verbose=False,
    )
    return _core


def _std_flags() -> list[str]:
    # torch >= 2.14's headers require C++20, which cpp_extension passes itself; a later -std=c++17
    # would override it. Older torch keeps the C++17 build (and its cached flags) unchanged.
    import torch
    from torch.torch_version import TorchVersion

    return [] if TorchVersion(torch.__version__) >= "2.14.0a0" else ["-std=c++17"]


def _headers_digest() -> str:
    # cpp_extension hashes sources and flags but not included headers: fold them into a flag.
    import hashlib

    digest = hashlib.sha256()
    for name in HEADERS:
        digest.update((CSRC / name).read_bytes())
    return digest.hexdigest()[:12]
