"""The C++ core this process loaded: set once by :func:`spyre_stack.runtime.state.register`,
read by the device module and the tracer (which therefore need not import the registration)."""

from __future__ import annotations

from types import ModuleType

_core: ModuleType | None = None


def attach(core: ModuleType) -> None:
    global _core
    _core = core


def core() -> ModuleType:
    if _core is None:
        raise RuntimeError("the spyre backend is not registered: call spyre_stack.register()")
    return _core


def attached() -> bool:
    return _core is not None
