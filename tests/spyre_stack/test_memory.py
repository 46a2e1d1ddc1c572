"""Device memory: byte accounting, peaks, capacity and the CUDA-shaped out-of-memory error."""

from __future__ import annotations

import gc
import re
from typing import Any

import pytest
import torch

from spyre_stack.config import DEFAULT_MEMORY_BYTES

DEV = 1  # the second simulated card: other tests allocate on card 0


def sp():  # type: ignore[no-untyped-def]
    return torch.spyre  # type: ignore[attr-defined]


def test_allocations_are_counted_in_bytes(spyre: None) -> None:
    gc.collect()
    before = sp().memory_allocated(DEV)
    x = torch.empty(1000, dtype=torch.float16, device=f"spyre:{DEV}")
    assert sp().memory_allocated(DEV) - before == 2000
    del x
    gc.collect()
    assert sp().memory_allocated(DEV) == before


def test_peak_and_reset(spyre: None) -> None:
    sp().reset_peak_memory_stats(DEV)
    base = sp().memory_allocated(DEV)
    x = torch.empty(4096, dtype=torch.float32, device=f"spyre:{DEV}")
    del x
    assert sp().max_memory_allocated(DEV) >= base + 16384
    sp().reset_peak_memory_stats(DEV)
    assert sp().max_memory_allocated(DEV) == sp().memory_allocated(DEV)
    stats = sp().memory_stats(DEV)
    assert stats["allocated_bytes.all.current"] == sp().memory_allocated(DEV)
    assert stats["allocation.all.allocated"] >= stats["allocation.all.freed"]


def test_default_capacity_is_128_gib(spyre: None) -> None:
    assert DEFAULT_MEMORY_BYTES == 128 * 1024**3
    free, total = sp().mem_get_info(0)
    assert total == sp().get_memory_capacity(0)
    assert free == total - sp().memory_allocated(0)


def test_capacity_from_environment(run_python: Any) -> None:
    proc = run_python(
        "import torch, spyre_stack\nspyre_stack.register()\n"
        "print(torch.spyre.get_memory_capacity(0))",
        env={"SPYRE_MEMORY_BYTES": str(64 * 1024**2)},
    )
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) == 64 * 1024**2


def test_out_of_memory_is_shaped_like_cuda(spyre: None) -> None:
    capacity = sp().get_memory_capacity(DEV)
    used = sp().memory_allocated(DEV)
    sp().set_memory_capacity(used + 1024**2, DEV)
    try:
        with pytest.raises(torch.OutOfMemoryError) as err:
            torch.empty(2 * 1024**2, dtype=torch.uint8, device=f"spyre:{DEV}")
        message = str(err.value)
        assert re.search(
            rf"Spyre out of memory\. Tried to allocate 2\.00 MiB\. Spyre device {DEV} has a total "
            r"capacity of [\d.]+ MiB of which 1\.00 MiB is free\. Of the allocated memory .* is "
            r"allocated by PyTorch\.",
            message,
        ), message
        assert sp().memory_stats(DEV)["num_ooms"] >= 1
        assert sp().memory_allocated(DEV) == used  # nothing leaked
        ok = torch.empty(512 * 1024, dtype=torch.uint8, device=f"spyre:{DEV}")
        assert ok.numel() == 512 * 1024
    finally:
        sp().set_memory_capacity(capacity, DEV)


def test_oom_on_growth_of_an_existing_tensor(simulator: None) -> None:
    # grows the tensor with resize_, which the card model refuses
    capacity = sp().get_memory_capacity(DEV)
    x = torch.zeros(16, device=f"spyre:{DEV}")
    sp().set_memory_capacity(sp().memory_allocated(DEV) + 256, DEV)
    try:
        with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate"):
            x.resize_(1024)
        assert x.shape == (16,)
    finally:
        sp().set_memory_capacity(capacity, DEV)


def test_storage_resize_is_accounted(spyre: None) -> None:
    x = torch.zeros(8, dtype=torch.float16, device=f"spyre:{DEV}")
    before = sp().memory_allocated(DEV)
    x.untyped_storage().resize_(64)
    assert x.untyped_storage().nbytes() == 64
    assert sp().memory_allocated(DEV) - before == 64 - 16


def test_a_huge_request_fails_without_allocating(spyre: None) -> None:
    with pytest.raises(torch.OutOfMemoryError, match=r"Tried to allocate 256\.00 GiB"):
        torch.empty(2**37, dtype=torch.float16, device="spyre")
