"""Registration of the `spyre` backend (the one place that touches torch's global registries)."""

from __future__ import annotations

import logging
import threading
from types import ModuleType

import spyre_stack.core as loaded
from spyre_stack.config import SpyreConfig

log = logging.getLogger(__name__)

BACKEND_NAME = "spyre"
RANDOM_FLAG = 16  # csrc/aten.h kRandomFlag: the op draws from the global generator
EXACT_FLAG = 32  # csrc/aten.h kExactFlag: the op selects elements, no fp16 rounding
ITERATOR_FLAG = 64  # csrc/aten.h kIteratorFlag: pointwise, upstream's overlap check applies

_lock = threading.RLock()
_config: SpyreConfig | None = None


def is_registered() -> bool:
    return loaded.attached()


def core() -> ModuleType:
    """The loaded C++ core; registers the backend first if needed."""
    if not loaded.attached():
        register()
    return loaded.core()


def config() -> SpyreConfig:
    if _config is None:
        register()
    assert _config is not None
    return _config


def register() -> None:
    """Make ``torch.device("spyre")`` work. Idempotent; does nothing at import time.

    Loads (building once into the cache) the C++ core, renames PrivateUse1 to ``spyre``,
    installs the ``torch.spyre`` device module, generates the ``Tensor.spyre()`` style methods,
    and pushes the op table and the numerics policy into the core.
    """
    global _config
    with _lock:
        if loaded.attached():
            return
        import torch

        import spyre_stack._build as _build
        from spyre_stack.runtime import device_module

        cfg = SpyreConfig.from_env()
        lib = _build.load_core(cfg)
        lib.init(cfg.device_count, cfg.memory_bytes)
        current = torch._C._get_privateuse1_backend_name()
        if current == "privateuseone":
            torch.utils.rename_privateuse1_backend(BACKEND_NAME)
        elif current != BACKEND_NAME:
            raise RuntimeError(f"PrivateUse1 is already registered as {current!r}")
        if not hasattr(torch, BACKEND_NAME):
            torch._register_device_module(BACKEND_NAME, device_module)
        if not hasattr(torch.Tensor, "is_spyre"):
            torch.utils.generate_methods_for_privateuse1_backend(
                for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
            )
        _config = cfg
        loaded.attach(lib)
        apply_op_policy(cfg.op_policy)
        apply_numerics(warn=not cfg.silence_downcast_warning)
        apply_device_model(cfg.device_model)
        from spyre_stack.compile import registration

        registration.install()
        if cfg.backends_entry_point:
            _install_backends_entry()
        log.info("spyre backend registered: %d card(s)", cfg.device_count)


def apply_op_policy(policy: str) -> None:
    """Push the op table into the core under ``policy`` (permissive or strict)."""
    import spyre_stack.optable as optable

    if policy not in ("permissive", "strict"):
        raise ValueError(f"unknown op policy {policy!r}")
    table = optable.load()
    statuses = {
        name: optable.STATUS_CODES[e.status]
        + (RANDOM_FLAG if e.kind == "random" else 0)
        + (EXACT_FLAG if e.exact else 0)
        + (ITERATOR_FLAG if e.kind in ("pointwise", "special") else 0)
        for name, e in table.entries.items()
    }
    default = table.default_status if policy == "permissive" else "unsupported"
    core().set_op_table(statuses, optable.STATUS_CODES[default], str(table.path), policy)
    global _policy
    _policy = policy


_policy = "permissive"


def op_policy() -> str:
    return _policy


def apply_numerics(*, warn: bool) -> None:
    from spyre_stack.sim import numerics

    core().set_numerics(numerics.rounding_map(), numerics.host_only(), warn)


_device_model = "simulator"


def apply_device_model(mode: str) -> None:
    """Push the card's refusals into the core (``card``) or clear them (``simulator``)."""
    import torch

    import spyre_stack.device_model as device_model

    if mode not in device_model.MODES:
        raise ValueError(f"unknown device model {mode!r} (one of {device_model.MODES})")
    model = device_model.load()
    if mode == "card":
        r = model.refusals()
        dtypes = [getattr(torch, name) for name in r.dtypes if hasattr(torch, name)]
        core().set_card_refusals(dtypes, r.device_copy, r.resize, r.ops, str(model.path))
    else:
        core().set_card_refusals([], False, False, {}, str(model.path))
    global _device_model
    _device_model = mode


def device_model_mode() -> str:
    return _device_model


def _install_backends_entry() -> None:
    import sys

    import torch

    from spyre_stack.runtime import device_module

    if not hasattr(torch.backends, BACKEND_NAME):
        torch.backends.spyre = device_module  # type: ignore[attr-defined]
        sys.modules["torch.backends.spyre"] = device_module
