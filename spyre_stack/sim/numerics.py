"""The numerics policy table: how each dtype is computed by ops the device executes natively.

One entry per dtype; nothing else in the stack decides precision. ``mode`` is one of

* ``native``   - computed in the dtype itself (fp16, bf16: the PE arrays' formats);
* ``downcast`` - inputs and results are rounded through ``compute`` (fp32 -> fp16), with a
  one-time warning that ``SPYRE_SILENCE_DOWNCAST_WARNING=1`` silences;
* ``exact``    - integer and boolean ops, exact;
* ``host``     - the card has no path for the dtype: the op runs on the host at full precision and
  is recorded as a fallback (fp64, complex).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DtypePolicy:
    mode: str
    compute: torch.dtype | None = None


POLICY: dict[torch.dtype, DtypePolicy] = {
    torch.float16: DtypePolicy("native", torch.float16),
    torch.bfloat16: DtypePolicy("native", torch.bfloat16),
    torch.float32: DtypePolicy("downcast", torch.float16),
    torch.float64: DtypePolicy("host"),
    torch.complex32: DtypePolicy("host"),
    torch.complex64: DtypePolicy("host"),
    torch.complex128: DtypePolicy("host"),
    torch.bool: DtypePolicy("exact"),
    torch.uint8: DtypePolicy("exact"),
    torch.int8: DtypePolicy("exact"),
    torch.int16: DtypePolicy("exact"),
    torch.int32: DtypePolicy("exact"),
    torch.int64: DtypePolicy("exact"),
}


def policy_for(dtype: torch.dtype) -> DtypePolicy:
    return POLICY.get(dtype, DtypePolicy("host"))


def rounding_map() -> dict[torch.dtype, torch.dtype]:
    """dtype -> dtype its values are rounded through on the device (downcast entries)."""
    return {d: p.compute for d, p in POLICY.items() if p.mode == "downcast" and p.compute}


def host_only() -> list[torch.dtype]:
    return [d for d, p in POLICY.items() if p.mode == "host"]
