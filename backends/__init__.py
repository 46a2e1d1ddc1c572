"""Backend drivers, one package each: how PyTorch's device-generic tests are collected and run on
a device. A backend is a :class:`~backends.base.Backend` factory that its distribution declares
in the ``crcr_relay.backends`` entry-point group (this project's own, ``spyre`` and ``cpu``, in
its ``pyproject.toml``); :mod:`plugins` reads the group.
"""

from __future__ import annotations

from collections.abc import Callable

import plugins
from backends.base import Backend, BackendError, RunnerConfig


def get_backend(name: str) -> Backend:
    """The backend an installed distribution declares as ``name`` (or a ``module:factory``);
    importing it happens here, so naming a backend imports nothing heavy."""
    try:
        factory: Callable[[], Backend] = plugins.load(plugins.BACKENDS, name)
    except plugins.PluginError as exc:
        raise BackendError(str(exc)) from exc
    return factory()


__all__ = ["Backend", "BackendError", "RunnerConfig", "get_backend"]
