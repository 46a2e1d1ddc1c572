"""``SpyreTestBase``: the device-generic test base for the simulated Spyre card.

It is upstream's ``PrivateUse1TestBase`` (``device_type`` "privateuse1", renamed to "spyre" by
``setUpClass``) plus a few hooks, so ``instantiate_device_type_tests(Cls, globals())`` with
``PYTORCH_TESTING_DEVICE_ONLY_FOR=privateuse1`` creates ``ClsPRIVATEUSE1`` classes whose tests are
named ``test_x_spyre_float16`` and run on ``spyre:0``.

Hooks for subclasses (the testspecs plugin subclasses this class to apply YAML specs):

* ``instantiate_test(name, test, *, generic_cls=None)`` - upstream's classmethod that adds the
  variants of one generic test to the device class. Override it, call ``super()``, then inspect or
  decorate the new attributes (every attribute added to ``cls`` by the call is a variant); or
  filter before calling ``super()``.
* ``spyre_variant_added(cls, variant_name, test_fn)`` - classmethod called once per variant this
  base instantiates, after upstream's code added it; return a replacement function (for example
  wrapped with ``unittest.skip(reason)`` or ``unittest.expectedFailure``) or ``None`` to keep it.
* ``set_test_configs(op_overrides=..., op_allowlist=..., test_exclusions=...)`` - upstream's
  per-class configuration (from torch 2.13), left intact.
* ``spyre_policy`` - class attribute, the op-table policy the class expects (informational).

``setUpClass`` registers the backend (idempotent) before upstream's setup runs.

A subclass is published from its own ``TORCH_TEST_DEVICES`` file with
``TEST_CLASS = replace_generic_base(MyBase, globals())``, which also drops upstream's generic
``PrivateUse1TestBase`` from the device list (it is added automatically when the backend was
registered before ``common_device_type`` was imported, and would produce a second
``...PRIVATEUSE1`` class of the same name).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.testing._internal.common_device_type import PrivateUse1TestBase


class SpyreTestBase(PrivateUse1TestBase):
    device_type = "privateuse1"
    spyre_policy = "permissive"

    @classmethod
    def setUpClass(cls) -> None:
        import spyre_stack

        spyre_stack.register()
        super().setUpClass()

    @classmethod
    def instantiate_test(
        cls, name: str, test: Callable[..., Any], *, generic_cls: Any = None
    ) -> None:
        import spyre_stack

        spyre_stack.register()
        before = set(vars(cls))
        super().instantiate_test(name, test, generic_cls=generic_cls)
        _pin_device_type(cls)
        for variant in sorted(set(vars(cls)) - before):
            fn = vars(cls)[variant]
            if not callable(fn):
                continue
            replacement = cls.spyre_variant_added(variant, fn)
            if replacement is not None:
                setattr(cls, variant, replacement)

    @classmethod
    def spyre_variant_added(
        cls, variant_name: str, test_fn: Callable[..., Any]
    ) -> Callable[..., Any] | None:
        """Called for every instantiated variant; return a replacement or None (keep)."""
        return None


def _pin_device_type(device_cls: type) -> None:
    """Keep class names independent of collection order.

    Upstream instantiates a device class by calling ``setUpClass`` on its *base*, which renames
    the base's ``device_type`` from "privateuse1" to the backend name; every module instantiated
    afterwards in the same interpreter would then get ``...SPYRE`` classes instead of
    ``...PRIVATEUSE1`` ones, so a test's id would depend on which files were collected before
    it. The instantiated class keeps the backend name for its tests; the bases go back to
    "privateuse1".
    """
    import torch

    device_cls.device_type = torch._C._get_privateuse1_backend_name()  # type: ignore[attr-defined]
    for klass in device_cls.__mro__[1:]:
        if issubclass(klass, SpyreTestBase) and "device_type" in vars(klass):
            klass.device_type = "privateuse1"


def replace_generic_base(test_class: type, runpy_globals: dict[str, Any]) -> type:
    """For TORCH_TEST_DEVICES files: drop the generic PrivateUse1TestBase, return ``test_class``."""
    bases = runpy_globals.get("device_type_test_bases")
    generic = runpy_globals.get("PrivateUse1TestBase")
    if isinstance(bases, list) and generic is not None:
        bases[:] = [b for b in bases if b is not generic]
    return test_class
