"""Backend drivers, one package each: how PyTorch's device-generic tests are collected and run on
a device. A new backend is a folder with a :class:`~backends.base.Backend` factory and one line
in ``BACKENDS``.
"""

from __future__ import annotations

from collections.abc import Callable

from backends.base import Backend, BackendError, RunnerConfig

# name -> "module:factory"; imported on first use, so naming a backend imports nothing heavy
BACKENDS: dict[str, str] = {
    "spyre": "backends.spyre:backend",
    "cpu": "backends.cpu:backend",
}


def get_backend(name: str) -> Backend:
    try:
        target = BACKENDS[name]
    except KeyError:
        raise BackendError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}") from None
    import importlib

    module, _, attr = target.partition(":")
    factory: Callable[[], Backend] = getattr(importlib.import_module(module), attr)
    return factory()


__all__ = ["BACKENDS", "Backend", "BackendError", "RunnerConfig", "get_backend"]
