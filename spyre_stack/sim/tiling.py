"""Scratchpad tiling plans: how a kernel's work is spread over the 32 cores on the ring.

Each plan keeps a core's working set within half of its 2 MB scratchpad (the other half
double-buffers the next tile), says how many passes each core makes, and how many bytes travel
core-to-core on the ring (broadcast operands, reduction partials, matmul panels).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from spyre_stack.sim.hardware import CARD


@dataclass(frozen=True)
class TilePlan:
    cores: int  # cores that receive work
    units_per_core: int  # work units (output sticks or rows) per core
    units_per_pass: int  # units that fit in the scratchpad's working half
    passes: int  # scratchpad refills per core
    scratchpad_bytes: int  # per-core peak footprint, double-buffered
    ring_bytes: int  # bytes moved core-to-core in total

    @property
    def fits(self) -> bool:
        return self.scratchpad_bytes <= CARD.scratchpad_bytes


def _spread(units: int, unit_bytes: int, fixed_bytes: int = 0) -> tuple[int, int, int, int, int]:
    units = max(units, 0)
    cores = max(1, min(CARD.cores, units))
    per_core = math.ceil(units / cores) if units else 0
    budget = max(CARD.scratchpad_bytes // 2 - fixed_bytes, unit_bytes)
    per_pass = max(1, min(per_core or 1, budget // max(unit_bytes, 1)))
    passes = math.ceil(per_core / per_pass) if per_core else 0
    footprint = 2 * (per_pass * unit_bytes) + fixed_bytes
    return cores, per_core, per_pass, passes, footprint


def plan_streaming(
    out_sticks: int, operand_sticks: list[int], broadcast_bytes: int = 0
) -> TilePlan:
    """Pointwise-like work: one output stick needs one stick of every full-size operand.

    Operands smaller than the output (broadcasts) are sent to every core over the ring once and
    kept resident (``broadcast_bytes``).
    """
    streamed = [s for s in operand_sticks if s >= out_sticks]
    unit = CARD.stick_bytes * (len(streamed) + 1)
    resident = min(broadcast_bytes, CARD.scratchpad_bytes // 4)
    cores, per_core, per_pass, passes, footprint = _spread(out_sticks, unit, resident)
    ring = broadcast_bytes * (cores - 1)
    return TilePlan(cores, per_core, per_pass, passes, footprint, ring)


def plan_rows(rows: int, row_bytes: int, out_row_bytes: int, partial_bytes: int = 0) -> TilePlan:
    """Row-wise work (softmax, layer norm, reductions over the inner dimension).

    A row that does not fit the working half is processed in several passes; ``partial_bytes``
    are per-core partial results combined over the ring (reductions across cores).
    """
    unit = row_bytes + out_row_bytes
    cores, per_core, per_pass, passes, footprint = _spread(rows, unit)
    if unit > CARD.scratchpad_bytes // 2:
        # one row spills: stream it through in chunks, two sweeps (statistics, then output)
        chunks = math.ceil(unit / (CARD.scratchpad_bytes // 2))
        passes = per_core * chunks * 2
        footprint = CARD.scratchpad_bytes
    ring = partial_bytes * (cores - 1)
    return TilePlan(cores, per_core, per_pass, passes, footprint, ring)


def plan_matmul(batch: int, m: int, k: int, n: int, itemsize: int) -> TilePlan:
    """Output-stationary matmul: rows of A split over cores, B panels circulate on the ring.

    Each core holds an (m_t x K) block of A, a (K x n_t) panel of B and the (m_t x n_t) result;
    m_t and n_t are chosen so the three fit the working half of the scratchpad. Every core must
    see all of B, so B's bytes travel (cores - 1) hops in total.
    """
    from spyre_stack.sim.layout import elems_per_stick

    per = elems_per_stick(itemsize)
    k_pad = math.ceil(max(k, 1) / per) * per
    n_pad = math.ceil(max(n, 1) / per) * per
    rows = batch * m
    cores = max(1, min(CARD.cores, rows))
    m_core = math.ceil(rows / cores) if rows else 0
    budget = CARD.scratchpad_bytes // 2
    n_t = n_pad
    m_t = max(1, m_core)
    while n_t > per and (m_t * k_pad + k_pad * n_t + m_t * n_t) * itemsize > budget:
        n_t = max(per, n_t // 2)
    while m_t > 8 and (m_t * k_pad + k_pad * n_t + m_t * n_t) * itemsize > budget:
        m_t = max(8, m_t // 2)
    passes = math.ceil(m_core / m_t) * math.ceil(n_pad / n_t) if m_core else 0
    footprint = 2 * (m_t * k_pad + k_pad * n_t + m_t * n_t) * itemsize
    b_bytes = batch * k_pad * n_pad * itemsize
    ring = b_bytes * (cores - 1)
    return TilePlan(cores, m_core, m_t, passes, footprint, ring)
