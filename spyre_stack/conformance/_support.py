"""Shared helpers of the bundled conformance suites (not a test module).

The suites build every input on the CPU from a fixed seed and copy it to the device under test, so
the device and the CPU reference always see the same numbers. Nothing here imports the backend:
the device comes in through the ``device`` argument that ``instantiate_device_type_tests`` passes.
"""

from __future__ import annotations

import copy
import os
import unittest
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.testing._internal.common_device_type import ops as upstream_ops

# A test template looks at no more than this many sample inputs per op: enough to cover the
# shapes and broadcasting cases the OpInfo lists first, small enough for a simulated device.
MAX_SAMPLES = int(os.environ.get("SPYRE_CONFORMANCE_MAX_SAMPLES", "4"))

SEED = 1234


def detach_to(device: str | torch.device, *, keep_grad: bool = False) -> Callable[[Any], Any]:
    """A SampleInput.transform function: copy every tensor to ``device``; dtypes pass through.

    With ``keep_grad`` the copies are new leaves that require grad where the originals did.
    """

    def move(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.device.type != "cpu":
            return value.detach()  # e.g. a meta tensor in an error input stays where it is
        if isinstance(value, torch.Tensor):
            moved = value.detach().clone().to(device)
            if keep_grad and value.requires_grad:
                moved.requires_grad_(True)
            return moved
        return value

    return move


def cpu_samples(op: Any, dtype: torch.dtype, *, requires_grad: bool = False) -> list[Any]:
    """The first MAX_SAMPLES sample inputs of ``op`` made on the CPU from a fixed seed."""
    torch.manual_seed(SEED)
    samples = []
    for sample in op.sample_inputs("cpu", dtype, requires_grad=requires_grad):
        samples.append(sample)
        if len(samples) >= MAX_SAMPLES:
            break
    return samples


def cpu_reference_inputs(op: Any, dtype: torch.dtype) -> list[Any]:
    """Up to MAX_SAMPLES of the op's reference inputs after the first MAX_SAMPLES.

    ``op.reference_inputs`` yields the sample inputs first and then larger and edge-case inputs
    (or just the sample inputs for OpInfos without a reference-inputs function); the ones already
    covered by :func:`cpu_samples` are skipped.
    """
    torch.manual_seed(SEED)
    found = []
    for index, sample in enumerate(op.reference_inputs("cpu", dtype)):
        if index < MAX_SAMPLES:
            continue
        found.append(sample)
        if len(found) >= MAX_SAMPLES:
            break
    return found


def paired_samples(
    op: Any,
    device: str,
    dtype: torch.dtype,
    *,
    requires_grad: bool = False,
    reference_inputs: bool = False,
) -> Iterator[tuple[Any, Any]]:
    """(device sample, cpu sample) pairs with identical values."""
    made = (
        cpu_reference_inputs(op, dtype)
        if reference_inputs
        else cpu_samples(op, dtype, requires_grad=requires_grad)
    )
    for cpu_sample in made:
        device_sample = cpu_sample.transform(detach_to(device, keep_grad=requires_grad))
        reference = cpu_sample.transform(detach_to("cpu", keep_grad=requires_grad))
        yield device_sample, reference


def call(fn: Callable[..., Any], sample: Any) -> Any:
    return fn(sample.input, *sample.args, **sample.kwargs)


# What the CPU raising on a sample means: the sample is not valid as the suites rebuild it (for
# example a partial view whose storage the copy to the device does not keep), not a device bug.
INVALID_ON_CPU = (RuntimeError, TypeError, ValueError, IndexError)


class SampleRejected(Exception):
    """The CPU rejects this sample: the templates skip it."""


def reference_call(fn: Callable[..., Any], sample: Any) -> Any:
    try:
        return call(fn, sample)
    except INVALID_ON_CPU as exc:
        raise SampleRejected(str(exc)) from exc


def tensors_in(value: Any) -> list[torch.Tensor]:
    """Every tensor in a (possibly nested) result, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors_in(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in tensors_in(item)]
    return []


def to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu")
    if isinstance(value, (list, tuple)):
        return (
            type(value)(to_cpu(v) for v in value)
            if isinstance(value, list)
            else tuple(to_cpu(v) for v in value)
        )
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    return value


def _decorator_skips(decorator: Any) -> bool:
    try:
        probe = decorator(lambda: None)
    except Exception:
        return False
    return bool(getattr(probe, "__unittest_skip__", False))


def upstream_skip_reason(op: Any, test_class: str, test_name: str) -> str | None:
    """The reason upstream gives for skipping ``test_name`` of ``op`` on every device, if any.

    OpInfo entries mark ops whose output is random or uninitialised (``bernoulli``,
    ``empty_like``...) with a device-independent skip of the compare-with-CPU test; the other
    templates that compare two runs use the same marks to avoid comparing noise.
    """
    for info in getattr(op, "decorators", ()):
        if getattr(info, "cls_name", None) != test_class:
            continue
        if getattr(info, "test_name", None) != test_name:
            continue
        if getattr(info, "device_type", None) is not None:
            continue
        if getattr(info, "dtypes", None) is not None:
            continue
        for decorator in getattr(info, "decorators", ()):
            if _decorator_skips(decorator):
                return getattr(decorator(lambda: None), "__unittest_skip_why__", "skipped upstream")
    return None


# Ops whose result is defined by the input's strides and storage, not by its values.
LAYOUT_DEPENDENT_OPS = frozenset({"as_strided", "as_strided_copy", "as_strided_scatter"})


def not_comparable_reason(op: Any) -> str | None:
    reason = upstream_skip_reason(op, "TestCommon", "test_compare_cpu")
    if reason is not None:
        return f"{op.name}: output not comparable between runs ({reason})"
    return None


def module_inputs_cpu(
    module_info: Any, dtype: torch.dtype, *, training: bool, requires_grad: bool = False
) -> list[Any]:
    torch.manual_seed(SEED)
    inputs = module_info.module_inputs_func(
        module_info, device="cpu", dtype=dtype, requires_grad=requires_grad, training=training
    )
    return [i for i in inputs if i.forward_input is not None][:MAX_SAMPLES]


def move_args(value: Any, device: str, *, requires_grad: bool = False) -> Any:
    """Deep copy of a FunctionInput's args/kwargs structure with its tensors on ``device``."""
    if isinstance(value, torch.Tensor):
        moved = value.detach().clone().to(device)
        if requires_grad and (moved.is_floating_point() or moved.is_complex()):
            moved.requires_grad_(True)
        return moved
    if isinstance(value, list):
        return [move_args(v, device, requires_grad=requires_grad) for v in value]
    if isinstance(value, tuple):
        return tuple(move_args(v, device, requires_grad=requires_grad) for v in value)
    if isinstance(value, dict):
        return {k: move_args(v, device, requires_grad=requires_grad) for k, v in value.items()}
    return copy.deepcopy(value)


def build_module_pair(
    module_info: Any, module_input: Any, device: str, dtype: torch.dtype, *, training: bool
) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The same module (same parameters) on the CPU and on ``device``."""
    torch.manual_seed(SEED)
    args = module_input.constructor_input.args
    kwargs = module_input.constructor_input.kwargs
    reference = module_info.module_cls(*args, **kwargs).to(dtype)
    reference.train(training)
    lazy = isinstance(reference, torch.nn.modules.lazy.LazyModuleMixin)
    if lazy:
        # lazy parameters are drawn at the first call: draw them once, on the CPU copy
        fwd = module_input.forward_input
        with torch.no_grad():
            reference(*move_args(fwd.args, "cpu"), **move_args(fwd.kwargs, "cpu"))
    on_device = copy.deepcopy(reference).to(device)
    return reference, on_device


def _drop_expected_failures(decorator_fn: Callable[[Any], list[Any]]) -> Callable[[Any], list[Any]]:
    def decorators(param_kwargs: Any) -> list[Any]:
        return [d for d in decorator_fn(param_kwargs) if d is not unittest.expectedFailure]

    return decorators


class ops(upstream_ops):
    """Upstream's ``@ops`` without upstream's device-independent expected failures.

    An OpInfo's ``DecorateInfo(unittest.expectedFailure, "TestCommon", "test_compare_cpu")``
    describes upstream's own test on upstream's devices; on this device the YAML spec says what
    is expected to fail. Skips (random or uninitialised outputs) and tolerance overrides still
    apply.
    """

    def _parametrize_test(self, test, generic_cls, device_cls):
        for fn, name, param_kwargs, decorator_fn in super()._parametrize_test(
            test, generic_cls, device_cls
        ):
            yield fn, name, param_kwargs, _drop_expected_failures(decorator_fn)
