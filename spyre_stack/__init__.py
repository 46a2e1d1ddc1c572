"""spyre_stack: a simulated IBM Spyre card that is a real PyTorch PrivateUse1 backend, `spyre`.

Three layers, as in PyTorch's OpenReg reference backend:

* the driver / simulator (``spyre_stack.sim`` in Python, ``csrc/driver.h`` in C++): memory
  accounting, numerics policy, sticks, scratchpad tiling, ring, cost model; no torch.library code;
* the runtime glue (``spyre_stack.runtime``, ``csrc/runtime.h``): registration, ``torch.spyre``,
  device guard, streams, events, generator, PrivateUse1 hooks;
* the aten registrations (``csrc/aten.h``): a dozen device kernels and the boxed fallback that
  applies the op table (``spyre_stack/ops.yaml``) and the numerics policy.

Importing the package does nothing; :func:`register` does the work, once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spyre_stack.runtime.state import BACKEND_NAME, is_registered, register

if TYPE_CHECKING:
    from spyre_stack.sim.trace import OpRecord, Trace

__all__ = ["BACKEND_NAME", "OpRecord", "Trace", "is_registered", "register", "trace"]


def trace() -> Any:
    """``with spyre_stack.trace() as t:`` records every op the device executes (see sim.trace)."""
    from spyre_stack.sim.trace import trace as _trace

    register()
    return _trace()


def __getattr__(name: str) -> Any:
    if name in ("OpRecord", "Trace"):
        from spyre_stack.sim import trace as _trace_mod

        return getattr(_trace_mod, name)
    raise AttributeError(name)
