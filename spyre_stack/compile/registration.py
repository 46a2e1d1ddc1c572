"""Make ``backend="spyre"`` known to dynamo without importing dynamo eagerly.

Importing ``torch._dynamo`` costs seconds, and ``register()`` must stay cheap. If dynamo's backend
registry is already imported the backend is registered at once; otherwise a one-shot import hook
registers it right after ``torch._dynamo.backends.registry`` executes (the first
``torch.compile`` call), then removes itself. Nothing in torch is patched.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any

REGISTRY = "torch._dynamo.backends.registry"
NAME = "spyre"


def _register_into(module: ModuleType) -> None:
    from spyre_stack.compile import spyre_backend

    if NAME not in getattr(module, "_COMPILER_FNS", {}):
        module.register_backend(compiler_fn=spyre_backend, name=NAME)


class _RegisterAfterImport(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Any, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != REGISTRY:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            _register_into(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    module = sys.modules.get(REGISTRY)
    if module is not None:
        _register_into(module)
        return
    if not any(isinstance(f, _RegisterAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterImport())
