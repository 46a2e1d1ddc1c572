"""Applying a spec while upstream instantiates device-generic tests.

``make_spec_test_base(base, config)`` subclasses the backend's device test base (a
``PrivateUse1TestBase``) and overrides ``instantiate_test``: before upstream generates the variants
of one generic test it adds the ops and dtypes the spec includes; afterwards it resolves every new
variant, deletes the skipped ones, and wraps the rest so that the spec's precision and cpu_move
apply while the test runs. Every decision is recorded in :data:`DECISIONS` for the pytest plugin
(marks, outcome rewriting, reports).

Upstream's ``set_test_configs(op_allowlist=...)`` is deliberately not used for
``global.supported_ops``: its allowlist runs before a test's own ``edits.ops.include`` could add an
op back, so the supported-op filter is applied per variant after generation instead.
"""

from __future__ import annotations

import functools
import runpy
import sys
import types
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testspecs.compiled import CompiledSpec, norm_dtype
from testspecs.loader import load_files
from testspecs.merge import merge
from testspecs.resolve import Decision, resolve

# (test module, instantiated class name, variant method name) -> decision
DECISIONS: dict[tuple[str, str, str], Decision] = {}


@dataclass
class SpecConfig:
    spec_paths: list[str]
    device: str = "spyre"
    backend_base: str | None = None  # a TORCH_TEST_DEVICES file whose TEST_CLASS we extend
    torch_root: str | None = None
    device_root: str | None = None
    _compiled: CompiledSpec | None = field(default=None, repr=False)

    @property
    def compiled(self) -> CompiledSpec:
        if self._compiled is None:
            merged = merge(load_files(self.spec_paths))
            self._compiled = CompiledSpec(
                merged.document,
                device=self.device,
                torch_root=self.torch_root,
                device_root=self.device_root,
            )
        return self._compiled

    def env(self) -> dict[str, str]:
        """The environment that carries this configuration into a subprocess."""
        out = {"TESTSPECS_SPECS": ":".join(self.spec_paths), "TESTSPECS_DEVICE": self.device}
        if self.backend_base:
            out["TESTSPECS_BACKEND_BASE"] = self.backend_base
        return out

    @classmethod
    def from_env(cls, environ: dict[str, str]) -> SpecConfig | None:
        paths = [p for p in environ.get("TESTSPECS_SPECS", "").split(":") if p]
        if not paths:
            return None
        return cls(
            paths,
            device=environ.get("TESTSPECS_DEVICE", "spyre"),
            backend_base=environ.get("TESTSPECS_BACKEND_BASE") or None,
        )


_ACTIVE: SpecConfig | None = None


def activate(config: SpecConfig | None) -> None:
    global _ACTIVE
    _ACTIVE = config


def active_config(environ: dict[str, str] | None = None) -> SpecConfig | None:
    if _ACTIVE is not None:
        return _ACTIVE
    if environ is not None:
        return SpecConfig.from_env(environ)
    return None


def load_backend_base(path: str | None, cdt_globals: dict[str, Any]) -> type:
    """The backend's TEST_CLASS (run like upstream runs TORCH_TEST_DEVICES files)."""
    if path:
        base: type = runpy.run_path(path, init_globals=cdt_globals)["TEST_CLASS"]
        return base
    generic: type = cdt_globals["PrivateUse1TestBase"]
    return generic


def _clone(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A copy of a test function whose attributes can change without touching the original."""
    if not isinstance(fn, types.FunctionType):
        return fn
    new = types.FunctionType(
        fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
    )
    new.__dict__.update(fn.__dict__)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__ = fn.__qualname__
    new.__doc__ = fn.__doc__
    new.__module__ = fn.__module__
    return new


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name, None)


def _dtype_name(value: Any) -> str | None:
    import torch

    if isinstance(value, torch.dtype):
        return norm_dtype(str(value))
    return None


def _includes(
    cs: CompiledSpec, files: list[Any], cls_name: str, method: str
) -> tuple[set[str], set[str]]:
    """Ops and dtypes that any entry for this base name includes."""
    ops: set[str] = set()
    dtypes: set[str] = set()
    for ce in cs.lookup(files, cls_name, method):
        ops.update(o.name for o in ce.entry.edits.ops.include)
        dtypes.update(ce.include)
    return ops, dtypes


def _extend(
    test: Callable[..., Any], cls: type, ops_in: set[str], dtypes_in: set[str]
) -> Callable[..., Any]:
    test = _clone(test)
    pf = getattr(test, "parametrize_fn", None)
    ops_obj = getattr(pf, "__self__", None)
    if ops_obj is not None and hasattr(ops_obj, "op_list"):
        ops_obj = _copy_ops(ops_obj, ops_in, dtypes_in)
        original = ops_obj._parametrize_test

        def parametrize(test: Any, generic_cls: Any, device_cls: Any) -> Iterator[Any]:
            seen: dict[int, set[Any]] = defaultdict(set)
            first: dict[int, Any] = {}
            for item in original(test, generic_cls, device_cls):
                kw = item[2]
                seen[id(kw.get("op"))].add(kw.get("dtype"))
                first.setdefault(id(kw.get("op")), item)
                yield item
            for key, (t, name, kw, dfn) in first.items():
                for dt_name in sorted(dtypes_in):
                    dt = _torch_dtype(dt_name)
                    if dt is None or dt in seen[key] or "dtype" not in kw:
                        continue
                    kw2 = {**kw, "dtype": dt}
                    if isinstance(dfn, functools.partial) and dfn.args:
                        dfn = functools.partial(dfn.func, *dfn.args[:-1], dt, **dfn.keywords)
                    yield (t, name, kw2, dfn)

        test.parametrize_fn = parametrize  # type: ignore[attr-defined]
    elif dtypes_in and hasattr(test, "dtypes"):
        current = list(cls._get_dtypes(test) or [])  # type: ignore[attr-defined]
        extra = [
            d
            for d in (_torch_dtype(n) for n in sorted(dtypes_in))
            if d is not None and d not in current
        ]
        test.dtypes = {**test.dtypes, cls.device_type: current + extra}  # type: ignore[attr-defined]
    return test


def _copy_ops(ops_obj: Any, ops_in: set[str], dtypes_in: set[str]) -> Any:
    import copy

    new = copy.copy(ops_obj)
    new.op_list = list(ops_obj.op_list)
    if ops_in:
        have = {o.name for o in new.op_list} | {o.full_name for o in new.op_list}
        wanted = ops_in - have
        if wanted:
            from torch.testing._internal.common_methods_invocations import op_db

            new.op_list += [o for o in op_db if o.name in wanted or o.full_name in wanted]
    if dtypes_in and new.allowed_dtypes is not None:
        new.allowed_dtypes = set(new.allowed_dtypes) | {
            d for d in (_torch_dtype(n) for n in dtypes_in) if d is not None
        }
    return new


def _wrap(fn: Callable[..., Any], decision: Decision) -> Callable[..., Any]:
    @functools.wraps(fn)
    def run_with_spec(self: Any, *args: Any, **kwargs: Any) -> Any:
        restore: list[str] = []
        if decision.atol is not None or decision.rtol is not None:
            original = self._apply_precision_override_for_test

            def override(test: Any, param_kwargs: Any) -> None:
                original(test, param_kwargs)
                if decision.atol is not None:
                    self.precision = decision.atol
                if decision.rtol is not None:
                    self.rel_tol = decision.rtol

            self._apply_precision_override_for_test = override
            restore.append("_apply_precision_override_for_test")
        for name in decision.cpu_move:
            target = getattr(self, name, None)
            if target is not None and name not in restore:
                setattr(self, name, _cpu_moving(target))
                restore.append(name)
        try:
            return fn(self, *args, **kwargs)
        finally:
            for name in restore:
                self.__dict__.pop(name, None)

    run_with_spec.spec_decision = decision  # type: ignore[attr-defined]
    return run_with_spec


def _cpu_moving(target: Callable[..., Any]) -> Callable[..., Any]:
    import torch
    from torch.utils._pytree import tree_map

    def to_cpu(x: Any) -> Any:
        return x.cpu() if isinstance(x, torch.Tensor) else x

    @functools.wraps(target)
    def moved(*args: Any, **kwargs: Any) -> Any:
        return target(*tree_map(to_cpu, args), **tree_map(to_cpu, kwargs))

    return moved


def _module_file(generic_cls: type | None) -> str | None:
    if generic_cls is None:
        return None
    mod = sys.modules.get(generic_cls.__module__)
    f = getattr(mod, "__file__", None)
    return str(Path(f).resolve()) if f else None


def _backend_module() -> tuple[str, Any]:
    """The renamed privateuse1 backend and its registered device module (``torch.spyre``)."""
    import torch

    name = torch._C._get_privateuse1_backend_name()
    mod = getattr(torch, name, None)
    if mod is None:
        raise RuntimeError(f"torch has no device module {name!r}: register the backend first")
    return name, mod


def make_spec_test_base(base: type, config: SpecConfig) -> type:
    """Subclass the backend's device test base so instantiation applies the spec."""
    cs = config.compiled

    class SpecTestBase(base):
        spec_config = config

        @classmethod
        def get_primary_device(cls) -> str:
            # Instantiation asks for the device before setUpClass ran; answer without renaming
            # device_type (which would change the names of classes instantiated later).
            try:
                return cls.primary_device
            except AttributeError:
                name, mod = _backend_module()
                return f"{name}:{mod.current_device()}"

        @classmethod
        def get_all_devices(cls) -> list[str]:
            # Upstream's PrivateUse1TestBase reads ``device_mod``, which only its setUpClass sets;
            # a @deviceCountAtLeast test asks for every device while it is instantiated, before.
            if getattr(cls, "device_mod", None) is not None:
                devices: list[str] = super().get_all_devices()
                return devices
            name, mod = _backend_module()
            primary = cls.get_primary_device()
            index = int(primary.rpartition(":")[2])
            others = [f"{name}:{i}" for i in range(mod.device_count()) if i != index]
            return [primary, *others]

        @classmethod
        def instantiate_test(cls, name: str, test: Any, *, generic_cls: Any = None) -> None:
            test_file = _module_file(generic_cls)
            files = cs.files_for(test_file)
            generic_name = generic_cls.__name__ if generic_cls is not None else None
            ops_in, dtypes_in = _includes(cs, files, generic_name or "", name)
            test = _extend(test, cls, ops_in, dtypes_in)
            before = set(cls.__dict__)
            super().instantiate_test(name, test, generic_cls=generic_cls)
            base_name = f"{generic_name}::{name}" if generic_name else name
            for attr in sorted(set(cls.__dict__) - before):
                fn = cls.__dict__[attr]
                if not callable(fn) or not attr.startswith("test"):
                    continue
                params = (fn.__defaults__ or ({},))[0] if isinstance(fn, types.FunctionType) else {}
                params = params if isinstance(params, dict) else {}
                op = params.get("op")
                module_info = params.get("module_info")
                decision = resolve(
                    cs,
                    f"{test_file or ''}::{cls.__name__}::{attr}"
                    if test_file
                    else f"{cls.__name__}::{attr}",
                    base=base_name,
                    op=getattr(op, "name", None),
                    dtype=_dtype_name(params.get("dtype")),
                    module=getattr(module_info, "name", None),
                )
                if not decision.run:
                    delattr(cls, attr)
                    continue
                module = generic_cls.__module__ if generic_cls is not None else ""
                DECISIONS[(module, cls.__name__, attr)] = decision
                setattr(cls, attr, _wrap(fn, decision))

    SpecTestBase.__name__ = SpecTestBase.__qualname__ = f"Spec{base.__name__}"
    return SpecTestBase


__all__ = ["DECISIONS", "SpecConfig", "activate", "active_config", "make_spec_test_base"]
