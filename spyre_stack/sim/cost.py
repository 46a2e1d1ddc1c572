"""The cost model: an estimated kernel time for every op the simulated card executes.

For a native kernel::

    total_us = launch + max(compute, device_memory, ring)

the three terms overlapping because the card is a dataflow machine (data streams into compute as
it arrives). ``compute`` is flops over the PE arrays' fp16 rate (matmul; dimensions padded to the
8x8 array and to whole sticks) or elements over the vector / special-function rate (pointwise,
transcendental, row-wise ops), on the cores the tiling plan uses. ``device_memory`` is the sticks
read and written (padded) over the LPDDR5 bandwidth. ``ring`` is the busiest link's share of the
plan's core-to-core bytes. A host fallback costs the PCIe round trip of its operands plus host
compute; copies cost PCIe (host <-> device) or device memory (device -> device).

These are estimates from the figures in :mod:`spyre_stack.sim.hardware`, not measurements.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import torch

from spyre_stack.sim.hardware import CARD
from spyre_stack.sim.layout import sticks
from spyre_stack.sim.tiling import TilePlan, plan_matmul, plan_rows, plan_streaming

Shape = Sequence[int]

# ops whose pointwise work runs on the special-function unit (non-linear functions)
SPECIAL = {
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sigmoid", "tanh", "erf", "erfc",
    "erfinv", "gelu", "silu", "mish", "softplus", "sin", "cos", "tan", "asin", "acos", "atan",
    "sinh", "cosh", "asinh", "acosh", "atanh", "sqrt", "rsqrt", "reciprocal", "pow", "elu",
    "logit", "digamma", "lgamma", "atan2", "div", "hardswish", "hardsigmoid",
}  # fmt: skip

VECTOR_ELEMS_PER_CYCLE = 64  # one fp16 stick per cycle per core for simple arithmetic


@dataclass(frozen=True)
class TensorMeta:
    shape: tuple[int, ...]
    dtype: torch.dtype

    @cached_property
    def itemsize(self) -> int:
        return self.dtype.itemsize if self.dtype else 2

    @cached_property
    def numel(self) -> int:
        return math.prod(self.shape) if self.shape else 1

    @cached_property
    def sticks(self) -> int:
        return sticks(self.shape, self.itemsize)


@dataclass(frozen=True)
class Estimate:
    compute_us: float
    memory_us: float
    ring_us: float
    launch_us: float
    sticks_moved: int
    plan: TilePlan | None

    @property
    def total_us(self) -> float:
        return self.launch_us + max(self.compute_us, self.memory_us, self.ring_us)


def _us(seconds: float) -> float:
    return seconds * 1e6


def _memory_us(n_sticks: int) -> float:
    return _us(n_sticks * CARD.stick_bytes / CARD.memory_bandwidth)


def _ring_us(plan: TilePlan) -> float:
    if plan.cores <= 1 or plan.ring_bytes == 0:
        return 0.0
    # the busiest link carries about ring_bytes / cores (pipelined around the ring)
    return _us(plan.ring_bytes / plan.cores / CARD.ring_bandwidth)


def _vector_us(elements: int, cores: int, special: bool) -> float:
    rate = CARD.sfu_elems_per_cycle_per_core if special else VECTOR_ELEMS_PER_CYCLE
    return _us(elements / (rate * max(cores, 1) * CARD.clock_hz))


def estimate_native(
    kind: str, base: str, inputs: Sequence[TensorMeta], outputs: Sequence[TensorMeta]
) -> Estimate:
    """Estimate one native kernel of table ``kind`` (pointwise, reduction, matmul, ...)."""
    moved = sum(t.sticks for t in inputs) + sum(t.sticks for t in outputs)
    memory = _memory_us(moved)
    out = outputs[0] if outputs else (inputs[0] if inputs else TensorMeta((), torch.float16))
    special = base in SPECIAL
    plan: TilePlan
    compute: float
    if kind == "matmul" and len(inputs) >= 2:
        plan, compute = _matmul(base, inputs, out)
    elif kind in ("softmax", "norm"):
        shape = out.shape or (1,)
        rows = math.prod(shape[:-1]) if len(shape) > 1 else 1
        row_bytes = sticks((shape[-1],), out.itemsize) * CARD.stick_bytes
        plan = plan_rows(rows, row_bytes, row_bytes)
        # softmax: max, exp (SFU), sum, scale; norm: mean, variance, scale, shift
        elems = out.numel
        compute = _vector_us(elems, plan.cores, True) + _vector_us(3 * elems, plan.cores, False)
    elif kind == "reduction":
        src = inputs[0] if inputs else out
        shape = src.shape or (1,)
        rows = math.prod(shape[:-1]) if len(shape) > 1 else 1
        row_bytes = sticks((shape[-1],), src.itemsize) * CARD.stick_bytes
        plan = plan_rows(rows, row_bytes, CARD.stick_bytes, partial_bytes=out.sticks * 128)
        compute = _vector_us(src.numel, plan.cores, special)
    else:  # pointwise, movement and anything else streaming
        broadcast = sum(t.sticks * CARD.stick_bytes for t in inputs if t.sticks < out.sticks)
        plan = plan_streaming(out.sticks, [t.sticks for t in inputs], broadcast)
        compute = _vector_us(out.numel, plan.cores, special)
    return Estimate(compute, memory, _ring_us(plan), CARD.launch_us, moved, plan)


def _matmul(base: str, inputs: Sequence[TensorMeta], out: TensorMeta) -> tuple[TilePlan, float]:
    # addmm / baddbmm carry the bias first; the two matrix operands are the last two 2-D+ inputs
    mats = [t for t in inputs if len(t.shape) >= 2]
    if len(mats) < 2:
        mats = list(inputs[-2:])
    a, b = mats[-2], mats[-1]
    ash = a.shape if len(a.shape) >= 2 else (1, *a.shape)
    bsh = b.shape if len(b.shape) >= 2 else (*b.shape, 1)
    m, k = ash[-2], ash[-1]
    n = bsh[-1]
    batch = math.prod(ash[:-2]) if len(ash) > 2 else 1
    plan = plan_matmul(batch, m, k, n, max(a.itemsize, 2))
    per = 128 // max(a.itemsize, 2)
    m_pad = math.ceil(max(m, 1) / 8) * 8
    k_pad = math.ceil(max(k, 1) / per) * per
    n_pad = math.ceil(max(n, 1) / per) * per
    flops = 2 * batch * m_pad * k_pad * n_pad
    compute = _us(flops / (CARD.flops_per_cycle_per_core * plan.cores * CARD.clock_hz))
    return plan, compute


def estimate_fallback(inputs: Sequence[TensorMeta], outputs: Sequence[TensorMeta]) -> Estimate:
    """A host fallback: operands cross PCIe both ways, the host computes."""
    nbytes = sum(t.numel * t.itemsize for t in inputs) + sum(t.numel * t.itemsize for t in outputs)
    elems = sum(t.numel for t in outputs) or sum(t.numel for t in inputs)
    pcie = _us(nbytes / CARD.pcie_bandwidth)
    host = _us(elems / CARD.host_flops)
    moved = sum(t.sticks for t in inputs) + sum(t.sticks for t in outputs)
    return Estimate(host, pcie, 0.0, CARD.launch_us, moved, None)


def estimate_copy(direction: str, src: TensorMeta, dst: TensorMeta) -> Estimate:
    """h2d / d2h cross PCIe; d2d reads and writes device memory."""
    if direction == "d2d":
        moved = src.sticks + dst.sticks
        return Estimate(0.0, _memory_us(moved), 0.0, CARD.launch_us, moved, None)
    device_side = dst if direction == "h2d" else src
    nbytes = device_side.sticks * CARD.stick_bytes
    return Estimate(0.0, _us(nbytes / CARD.pcie_bandwidth), 0.0, CARD.launch_us,
                    device_side.sticks, None)  # fmt: skip
