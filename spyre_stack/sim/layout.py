"""Sticks: the 128-byte unit in which the card moves data.

A stick holds ``128 // itemsize`` elements (64 for fp16). The innermost dimension is padded to a
whole number of sticks, and the device layout puts the stick index outermost: a (1024, 256) fp16
tensor is held as (4, 1024, 64).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from spyre_stack.sim.hardware import CARD


def elems_per_stick(itemsize: int) -> int:
    return max(1, CARD.stick_bytes // itemsize)


def device_shape(shape: Sequence[int], itemsize: int) -> tuple[int, ...]:
    """The stick-major device layout of a host tensor shape (a scalar is one element)."""
    dims = list(shape) or [1]
    per = elems_per_stick(itemsize)
    inner = dims[-1]
    return (math.ceil(inner / per), *dims[:-1], per)


def sticks(shape: Sequence[int], itemsize: int) -> int:
    """Sticks needed to hold a tensor: outer elements times whole sticks of the inner dimension."""
    dims = list(shape) or [1]
    if any(d == 0 for d in dims):
        return 0
    outer = math.prod(dims[:-1])
    return outer * math.ceil(dims[-1] / elems_per_stick(itemsize))


def padded_bytes(shape: Sequence[int], itemsize: int) -> int:
    return sticks(shape, itemsize) * CARD.stick_bytes
