"""Building the recorded inputs of an op-level spec test (torch-spyre's model op-test format).

An ``edits.ops.include`` item names an op (``torch.add``, ``torch.Tensor.expand``,
``torch.nn.functional.embedding``, ``torch.getitem``) and its arguments: tensor descriptors
(``shape``, ``stride``, ``storage_offset``, ``dtype``, the ``device`` it was recorded on, ``init``
and ``init_args``), lists of them, plain values and Python literals (``py: (None, slice(None,
None, None))``), and keyword arguments. :func:`build_call` makes them on the CPU (seeded, so the
device run gets the very same values); :func:`to_device` moves them and maps every recorded
device (``cuda:0``, ``cuda``, ``privateuse1``) to the device under test; :func:`resolve_op` finds
the callable. torch is imported lazily: the spec loader never needs it.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from testspecs.input_specs import InputArg, Inputs, TensorSpec

#: device strings as recorded on the machine the model ran on: they mean "the device under test"
RECORDED_DEVICES = ("cuda", "privateuse1", "spyre", "xpu", "mps", "hpu")


class InputError(ValueError):
    """An input description that cannot be built (the test reports it as an error)."""


class OpNotRegistered(InputError):
    """A custom operator (``torch.ops.<namespace>.<op>``) whose library is not loaded in this
    process: the recording is fine, the test cannot run here (the test reports a skip)."""


@dataclass
class Call:
    """The positional and keyword arguments of one op call."""

    args: list[Any]
    kwargs: dict[str, Any]


def _is_recorded_device(value: Any) -> bool:
    return isinstance(value, str) and value.split(":")[0] in RECORDED_DEVICES


def _dtype(name: str) -> Any:
    import torch

    bare = name.removeprefix("torch.")
    bare = {"fp16": "float16", "fp32": "float32", "bf16": "bfloat16", "half": "float16"}.get(
        bare, bare
    )
    dtype = getattr(torch, bare, None)
    if not isinstance(dtype, torch.dtype):
        raise InputError(f"unknown dtype {name!r}")
    return dtype


def _random(spec: TensorSpec, numel: int, dtype: Any, generator: Any) -> Any:
    import torch

    init, ia = spec.init, spec.init_args
    if init == "randint" or (
        init in ("rand", "randn") and not (dtype.is_floating_point or dtype.is_complex)
    ):
        if dtype == torch.bool:
            return torch.randint(0, 2, (numel,), generator=generator).to(torch.bool)
        high = ia.high if ia.high is not None else 10
        return torch.randint(ia.low, max(high, ia.low + 1), (numel,), generator=generator).to(dtype)
    if init == "rand":
        return torch.rand(numel, generator=generator).to(dtype)
    if init in ("randn", "xavier"):
        scale = 1.0 if init == "randn" else 1.0 / max(1, spec.shape[-1] if spec.shape else 1) ** 0.5
        return (torch.randn(numel, generator=generator) * scale).to(dtype)
    if init == "zeros":
        return torch.zeros(numel, dtype=dtype)
    if init == "ones":
        return torch.ones(numel, dtype=dtype)
    if init == "full":
        if ia.fill_value is None:
            raise InputError("init: full needs init_args.fill_value")
        return torch.full((numel,), ia.fill_value, dtype=dtype)
    if init == "arange":
        return torch.arange(numel).to(dtype)
    if init == "cumsum_offsets":
        # group offsets (torch._grouped_mm): a non-decreasing partition of `total` rows over the
        # groups of a 1-D shape, ending at `total`
        if ia.total is None:
            raise InputError("init: cumsum_offsets needs init_args.total")
        if len(spec.shape) != 1:
            raise InputError(f"init: cumsum_offsets needs a 1-D shape, got {list(spec.shape)}")
        groups = spec.shape[0]
        counts = torch.zeros(groups, dtype=torch.int64)
        picks = torch.randint(0, max(groups, 1), (ia.total,), generator=generator)
        counts.scatter_add_(0, picks, torch.ones(ia.total, dtype=torch.int64))
        return torch.cumsum(counts, 0).to(dtype)
    raise InputError(f"unsupported init {init!r}")


def build_tensor(spec: TensorSpec, generator: Any) -> Any:
    """A CPU tensor of the described shape, dtype, strides and storage offset."""
    import torch

    dtype = _dtype(spec.dtype)
    shape = list(spec.shape)
    if any(d < 0 for d in shape):
        raise InputError(f"negative dimension in shape {shape}")
    if spec.init == "eye":
        if len(shape) != 2:
            raise InputError(f"init: eye needs a 2-D shape, got {shape}")
        return torch.eye(*shape, dtype=dtype)
    if spec.init == "file":
        raise InputError("init: file (tensors loaded from disk) is not supported")
    layout = spec.device_layout
    if layout is not None and math.prod(layout.device_size) < math.prod(shape):
        # the recorded layout is the real card's; the simulated device keeps its own stick
        # layout, but a layout that cannot hold the tensor is a broken recording
        raise InputError(
            f"device_layout {layout.device_size} holds {math.prod(layout.device_size)} elements, "
            f"fewer than the tensor's {math.prod(shape)} (shape {shape})"
        )
    if spec.stride is None and spec.storage_offset == 0:
        numel = 1
        for d in shape:
            numel *= d
        return _random(spec, numel, dtype, generator).reshape(shape)
    stride = list(spec.stride) if spec.stride is not None else list(torch.empty(shape).stride())
    if len(stride) != len(shape):
        raise InputError(f"stride {stride} does not match shape {shape}")
    if any(d == 0 for d in shape):
        needed = spec.storage_offset
    else:
        needed = (
            spec.storage_offset + sum((d - 1) * s for d, s in zip(shape, stride, strict=True)) + 1
        )
    backing = _random(spec, max(needed, 1), dtype, generator)
    return torch.as_strided(backing, shape, stride, spec.storage_offset)


_LITERAL_CALLS: dict[str, Callable[..., Any]] = {"slice": slice}
_LITERAL_NAMES = {"None": None, "Ellipsis": Ellipsis, "True": True, "False": False}


def py_literal(text: str) -> Any:
    """A Python literal, with ``slice(...)`` and ``Ellipsis`` (evaluated without ``eval``)."""

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Tuple):
            return tuple(ev(e) for e in node.elts)
        if isinstance(node, ast.List):
            return [ev(e) for e in node.elts]
        if isinstance(node, ast.Name) and node.id in _LITERAL_NAMES:
            return _LITERAL_NAMES[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _LITERAL_CALLS
            and not node.keywords
        ):
            return _LITERAL_CALLS[node.func.id](*(ev(a) for a in node.args))
        raise InputError(f"not a literal: {ast.dump(node)[:80]}")

    try:
        return ev(ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, RecursionError) as e:
        raise InputError(f"invalid python literal {text!r}: {e}") from None


def _value(value: Any, key: str | None = None) -> Any:
    """A plain value as the op receives it: dtype names become dtypes, tuple text a tuple, and
    Python's own spelling of a constant (``None``, ``True``, ``False``, as a recorder writes a
    keyword argument's repr) that constant."""
    if isinstance(value, str):
        if value in _LITERAL_NAMES:
            return _LITERAL_NAMES[value]
        bare = value.removeprefix("torch.")
        if value.startswith("torch.") or key == "dtype":
            try:
                return _dtype(bare)
            except InputError:
                pass
        if value.startswith(("(", "[")):
            try:
                return py_literal(value)
            except InputError:
                return value
    return value


def _arg(arg: InputArg, seed: int | None, index: int) -> Any:
    import torch

    generator = torch.Generator().manual_seed((seed or 0) + index * 1000)
    if arg.tensor is not None:
        return build_tensor(arg.tensor, generator)
    if arg.tensor_list is not None:
        return [build_tensor(t, generator) for t in arg.tensor_list]
    if arg.py is not None:
        return py_literal(arg.py)
    if arg.config_path or arg.model_id or arg.module_path or arg.cache is not None:
        raise InputError(
            "a config, module or cache argument describes a module test's inputs; an op test "
            "takes tensors, tensor lists, values and Python literals"
        )
    return _value(arg.value)


def build_call(inputs: Inputs, *, seed: int | None) -> Call:
    """The arguments on the CPU; recorded device strings are kept (see :func:`to_device`).
    A keyword argument written as a tensor spec is built like a positional one."""
    args = [_arg(a, seed, i) for i, a in enumerate(inputs.args)]
    kwargs: dict[str, Any] = {}
    for i, (k, v) in enumerate(inputs.kwargs.items()):
        spec = inputs.kwarg_spec(k)
        kwargs[k] = _value(v, k) if spec is None else _arg(spec, seed, len(args) + i)
    return Call(args, kwargs)


def to_device(call: Call, device: str) -> Call:
    """The same call on ``device``: tensors moved (strides kept), recorded devices mapped."""
    import torch

    def move(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            if x.device.type == torch.device(device).type:
                return x
            dims = list(zip(x.size(), x.stride(), strict=True))
            if x.numel() and any(s == 0 and d > 1 for d, s in dims):
                # an expanded view (elements sharing a location) cannot be written element by
                # element: move the storage it spans and take the same view of it there
                span = x.storage_offset() + sum((d - 1) * s for d, s in dims)
                base = torch.as_strided(x, (span + 1,), (1,), 0).to(device)
                return torch.as_strided(base, x.size(), x.stride(), x.storage_offset())
            out = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=device)
            return out.copy_(x) if x.numel() else out
        if isinstance(x, list):
            return [move(v) for v in x]
        if isinstance(x, tuple):
            return tuple(move(v) for v in x)
        if _is_recorded_device(x):
            return device
        if isinstance(x, torch.device) and _is_recorded_device(str(x)):
            return torch.device(device)
        return x

    return Call([move(a) for a in call.args], {k: move(v) for k, v in call.kwargs.items()})


def resolve_op(name: str) -> Callable[..., Any]:
    """The callable an op name means: a torch attribute path (``torch.nn.functional.gelu``,
    ``torch.ops.aten.view``), a Tensor method (``torch.Tensor.expand``, or ``torch.to`` /
    ``torch.float`` written as if they were functions), or Python's operator (``torch.getitem``,
    ``torch.and_``)."""
    import torch

    parts = name.split(".")
    if parts[0] != "torch":
        raise InputError(f"op {name!r} is not under torch")
    obj: Any = torch
    for part in parts[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            break
    if obj is not None and callable(obj) and not isinstance(obj, torch.dtype):
        return obj
    if len(parts) >= 4 and parts[1] == "ops" and parts[2] not in ("aten", "prims"):
        raise OpNotRegistered(
            f"op {name!r}: no operator {'.'.join(parts[3:])!r} is registered in the "
            f"{parts[2]!r} namespace of this process (import the library that defines it, as "
            "the recording model did)"
        )
    last = parts[-1]
    method = getattr(torch.Tensor, last, None)
    if len(parts) == 2 and callable(method):
        return method
    fn = getattr(operator, last, None)
    if len(parts) == 2 and callable(fn):
        return fn
    raise InputError(f"op {name!r} names no torch function, Tensor method or operator")
