"""A toy second backend: the bundled device-generic suites instantiated for plain ``cpu``.

It needs no plugin, no simulator and no spec: upstream's own CPU test base does the work, and
every variant runs through the same inventory, selector, harness and store as ``spyre``. It is the
proof that a backend is one folder.
"""

from __future__ import annotations

from backends.base import Backend


def backend() -> Backend:
    return Backend(name="cpu", env={"PYTORCH_TESTING_DEVICE_ONLY_FOR": "cpu"})
