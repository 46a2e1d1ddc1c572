"""Per-op trace records and the ``trace()`` context manager.

While a trace is open the C++ core reports every op the device executes (kernels, host
fallbacks, copies); each becomes an :class:`OpRecord` with the op, its shapes and dtypes, the sticks
it moved, the scratchpad footprint of its tiling plan and its estimated time from
:mod:`spyre_stack.sim.cost`. The compile backend adds one record per fused kernel.
``Trace.device_us`` is the simulated device time: an estimate, not a measurement.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache

import torch

from spyre_stack.sim import cost
from spyre_stack.sim.cost import TensorMeta


@dataclass(frozen=True)
class OpRecord:
    op: str  # aten::add, aten::_copy_from, spyre::fused_pointwise ...
    overload: str  # schema overload, or the copy direction (h2d, d2h, d2d)
    execution: str  # native | fallback
    kind: str  # the op table's kernel class
    device: int
    input_shapes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[torch.dtype, ...]
    output_shapes: tuple[tuple[int, ...], ...]
    output_dtypes: tuple[torch.dtype, ...]
    sticks_moved: int
    scratchpad_bytes: int
    cores: int
    estimated_us: float
    compute_us: float = 0.0
    memory_us: float = 0.0
    ring_us: float = 0.0
    note: str = ""

    @property
    def native(self) -> bool:
        return self.execution == "native"


@dataclass
class Trace:
    records: list[OpRecord] = field(default_factory=list)

    @property
    def device_us(self) -> float:
        """Total estimated device time of the traced ops, in microseconds."""
        return sum(r.estimated_us for r in self.records)

    @property
    def sticks_moved(self) -> int:
        return sum(r.sticks_moved for r in self.records)

    def ops(self) -> list[str]:
        return [r.op for r in self.records]

    def count(self, execution: str | None = None) -> Counter[str]:
        return Counter(r.op for r in self.records if execution in (None, r.execution))

    def kernels(self) -> list[OpRecord]:
        """Records that are device work (everything except host<->device copies)."""
        return [r for r in self.records if not (r.op == "aten::_copy_from" and r.overload != "d2d")]


_lock = threading.Lock()
_active: list[Trace] = []


def record_from_estimate(
    op: str,
    overload: str,
    execution: str,
    kind: str,
    device: int,
    inputs: list[TensorMeta],
    outputs: list[TensorMeta],
    est: cost.Estimate,
    note: str = "",
) -> OpRecord:
    plan = est.plan
    return OpRecord(
        op=op,
        overload=overload,
        execution=execution,
        kind=kind,
        device=device,
        input_shapes=tuple(t.shape for t in inputs),
        input_dtypes=tuple(t.dtype for t in inputs),
        output_shapes=tuple(t.shape for t in outputs),
        output_dtypes=tuple(t.dtype for t in outputs),
        sticks_moved=est.sticks_moved,
        scratchpad_bytes=plan.scratchpad_bytes if plan else 0,
        cores=plan.cores if plan else 0,
        estimated_us=est.total_us,
        compute_us=est.compute_us,
        memory_us=est.memory_us,
        ring_us=est.ring_us,
        note=note,
    )


def build_record(
    op: str,
    overload: str,
    execution: str,
    in_shapes: Sequence[Sequence[int]],
    in_dtypes: Sequence[torch.dtype],
    out_shapes: Sequence[Sequence[int]],
    out_dtypes: Sequence[torch.dtype],
    device: int,
) -> OpRecord:
    import spyre_stack.optable as optable

    inputs = [TensorMeta(tuple(s), d) for s, d in zip(in_shapes, in_dtypes, strict=True)]
    outputs = [TensorMeta(tuple(s), d) for s, d in zip(out_shapes, out_dtypes, strict=True)]
    base = optable.base_name(op)
    if op == "aten::_copy_from":
        kind = "movement"
        est = cost.estimate_copy(overload, inputs[0], outputs[0])
    else:
        kind = optable.load().kind(op)
        if execution == "native":
            est = cost.estimate_native(kind, base, inputs, outputs)
        else:
            est = cost.estimate_fallback(inputs, outputs)
    return record_from_estimate(op, overload, execution, kind, device, inputs, outputs, est)


_local = threading.local()


@contextmanager
def suppressed() -> Iterator[None]:
    """Drop the per-op records of this thread inside the block (the compile backend executes a
    fused kernel's member ops eagerly and reports the one fused kernel instead)."""
    prev = getattr(_local, "suppressed", False)
    _local.suppressed = True
    try:
        yield
    finally:
        _local.suppressed = prev


@lru_cache(maxsize=8192)
def _cached_record(
    op: str,
    overload: str,
    execution: str,
    in_shapes: tuple[tuple[int, ...], ...],
    in_dtypes: tuple[torch.dtype, ...],
    out_shapes: tuple[tuple[int, ...], ...],
    out_dtypes: tuple[torch.dtype, ...],
    device: int,
) -> OpRecord:
    # records are immutable: identical ops (same shapes, dtypes, device) share one
    return build_record(
        op, overload, execution, in_shapes, in_dtypes, out_shapes, out_dtypes, device
    )


def _hook(op, overload, execution, in_shapes, in_dtypes, out_shapes, out_dtypes, device) -> None:
    if getattr(_local, "suppressed", False):
        return
    rec = _cached_record(
        op,
        overload,
        execution,
        tuple(map(tuple, in_shapes)),
        tuple(in_dtypes),
        tuple(map(tuple, out_shapes)),
        tuple(out_dtypes),
        device,
    )
    emit(rec)


def emit(rec: OpRecord) -> None:
    """Append a record to every open trace (the compile backend uses this for fused kernels)."""
    with _lock:
        for t in _active:
            t.records.append(rec)


def tracing() -> bool:
    return bool(_active)


@contextmanager
def trace() -> Iterator[Trace]:
    """Record every op executed on the device inside the block (traces may nest)."""
    import spyre_stack.core as loaded

    core = loaded.core()
    t = Trace()
    with _lock:
        _active.append(t)
        if len(_active) == 1:
            core.set_trace_hook(_hook)
    try:
        yield t
    finally:
        with _lock:
            _active.remove(t)
            if not _active:
                core.set_trace_hook(None)
