"""Figures of one simulated Spyre card.

Published facts (../shared/reference/spyre-hardware.md): 32 cores on a bidirectional ring moving
128 bytes per cycle per direction; a 2 MB scratchpad per core; 2 corelets per core, each with an
8x8 systolic PE array and a 1-D special-function unit; up to 128 GB LPDDR5; 256 MB contiguous
footprint per core; 128-byte sticks; fp16 compute by default.

Assumptions (not published; chosen so the model's softmax and matmul times land in the range of
the published kernel measurements, and stated wherever a time is shown):

* clock 1.0 GHz;
* a PE does one fp16 multiply-accumulate per cycle (2 flops), so a core does 2 x 64 x 2 = 256
  flop/cycle and the card 8,192 flop/cycle (8.2 Tflop/s fp16);
* the special-function unit evaluates 16 elements per cycle per core (8 lanes per corelet);
* device-memory (LPDDR5) bandwidth 200 GB/s for the card;
* 3 us fixed cost to launch a kernel;
* host fallbacks cross PCIe at 16 GB/s each way and compute on the host at 20 Gflop/s.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CardSpec:
    cores: int = 32
    corelets_per_core: int = 2
    pe_rows: int = 8
    pe_cols: int = 8
    scratchpad_bytes: int = 2 * 1024 * 1024
    core_footprint_bytes: int = 256 * 1024 * 1024
    stick_bytes: int = 128
    ring_bytes_per_cycle: int = 128  # per direction
    clock_hz: float = 1.0e9
    sfu_elems_per_cycle_per_core: int = 16
    memory_bandwidth: float = 200e9  # bytes / s
    launch_us: float = 3.0
    pcie_bandwidth: float = 16e9  # bytes / s, each way
    host_flops: float = 20e9

    @property
    def flops_per_cycle_per_core(self) -> int:
        return self.corelets_per_core * self.pe_rows * self.pe_cols * 2

    @property
    def peak_flops(self) -> float:
        return self.flops_per_cycle_per_core * self.cores * self.clock_hz

    @property
    def ring_bandwidth(self) -> float:
        """Bytes per second one hop moves, both directions together."""
        return 2 * self.ring_bytes_per_cycle * self.clock_hz


CARD = CardSpec()
