"""``torch.spyre``: the device module of the simulated card (installed by ``register()``).

Mirrors the shape of ``torch.cuda`` where the card has the concept: devices, streams (a pool of
32 low- and 32 high-priority streams per device plus the default), events, memory statistics with
a CUDA-shaped out-of-memory error, and per-device random generators.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

import spyre_stack.core as loaded

OutOfMemoryError = torch.OutOfMemoryError

DeviceLike = torch.device | str | int | None


def _core():
    return loaded.core()


def _index(device: DeviceLike = None) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    d = torch.device(device)
    if d.type not in ("spyre", "privateuseone"):
        raise ValueError(f"expected a spyre device, got {d}")
    return current_device() if d.index is None else d.index


# ------------------------------------------------------------------ devices
def is_available() -> bool:
    return device_count() > 0


def is_initialized() -> bool:
    return True


def _lazy_init() -> None:
    _core()


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    return int(_core().device_count())


def current_device() -> int:
    return int(_core().current_device())


def set_device(device: DeviceLike) -> None:
    _core().set_device(_index(device))


def get_device_name(device: DeviceLike = None) -> str:
    return f"Simulated IBM Spyre card {_index(device)}"


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.float16, torch.bfloat16]


class device:
    """Context manager that changes the current spyre device."""

    def __init__(self, device: DeviceLike) -> None:
        self.idx = _index(device) if device is not None else -1
        self.prev = -1

    def __enter__(self) -> None:
        self.prev = current_device()
        if self.idx >= 0:
            set_device(self.idx)

    def __exit__(self, *exc: object) -> None:
        if self.idx >= 0:
            set_device(self.prev)


def synchronize(device: DeviceLike = None) -> None:
    """Wait for all work on a device (the simulator executes eagerly, so this only validates)."""
    idx = _index(device)
    if not 0 <= idx < device_count():
        raise ValueError(f"invalid spyre device {idx}")


# ------------------------------------------------------------------ streams and events
class Stream(torch.Stream):
    """A spyre stream. ``priority < 0`` takes one of the 32 high-priority pool streams.

    ``query()`` and ``synchronize()`` are torch's: they reach the runtime's device guard
    (``queryStream``, ``synchronizeStream`` in ``csrc/runtime.h``; the simulator executes
    eagerly, so a stream is always complete)."""

    def __new__(cls, device: DeviceLike = None, priority: int = 0, **kwargs: Any) -> Stream:
        if "stream_id" in kwargs:
            return super().__new__(cls, **kwargs)
        idx = _index(device)
        return super().__new__(cls, device=torch.device("spyre", idx), priority=priority)

    @property
    def priority(self) -> int:
        return int(_core().stream_priority(self.stream_id))

    def wait_event(self, event: torch.Event) -> None:
        event.wait(self)

    def wait_stream(self, stream: torch.Stream) -> None:
        self.wait_event(stream.record_event())

    def record_event(self, event: torch.Event | None = None) -> torch.Event:
        event = Event() if event is None else event
        event.record(self)
        return event


class Event:
    """Factory of spyre events: ``torch.spyre.Event(enable_timing=True)`` returns a ``torch.Event``
    on the current spyre device (torch's event methods accept only the exact ``torch.Event`` type,
    so this is not a subclass). ``elapsed_time`` is host time between two records, in ms.
    """

    def __new__(  # type: ignore[misc]
        cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> torch.Event:
        return torch.Event(
            device=torch.device("spyre", current_device()),
            enable_timing=enable_timing,
            blocking=blocking,
            interprocess=interprocess,
        )


def current_stream(device: DeviceLike = None) -> Stream:
    return _wrap(torch.accelerator.current_stream(_index(device)))


def default_stream(device: DeviceLike = None) -> Stream:
    cur = torch.accelerator.current_stream(_index(device))
    return Stream(stream_id=0, device_index=cur.device_index, device_type=cur.device_type)


def _wrap(s: torch.Stream) -> Stream:
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


def set_stream(stream: torch.Stream) -> None:
    torch.accelerator.set_stream(stream)


@contextmanager
def stream(s: torch.Stream | None) -> Iterator[None]:
    """Make ``s`` the current stream of its device inside the block (the current device is
    restored on exit, like ``torch.cuda.stream``)."""
    if s is None:
        yield
        return
    prev_device = current_device()
    prev = torch.accelerator.current_stream(s.device_index)
    torch.accelerator.set_stream(s)
    try:
        yield
    finally:
        torch.accelerator.set_stream(prev)
        set_device(prev_device)


# ------------------------------------------------------------------ memory
def memory_stats(device: DeviceLike = None) -> dict[str, int]:
    c = _core().memory_counters(_index(device))
    return {
        "allocated_bytes.all.current": c["allocated"],
        "allocated_bytes.all.peak": c["peak"],
        "allocation.all.allocated": c["num_allocs"],
        "allocation.all.freed": c["num_frees"],
        "allocation.all.current": c["num_allocs"] - c["num_frees"],
        "num_ooms": c["num_ooms"],
        "capacity_bytes": c["capacity"],
    }


def memory_allocated(device: DeviceLike = None) -> int:
    return int(_core().memory_counters(_index(device))["allocated"])


def max_memory_allocated(device: DeviceLike = None) -> int:
    return int(_core().memory_counters(_index(device))["peak"])


def memory_reserved(device: DeviceLike = None) -> int:
    return memory_allocated(device)  # no caching allocator: reserved == allocated


def max_memory_reserved(device: DeviceLike = None) -> int:
    return max_memory_allocated(device)


def reset_peak_memory_stats(device: DeviceLike = None) -> None:
    _core().reset_peak(_index(device))


def mem_get_info(device: DeviceLike = None) -> tuple[int, int]:
    c = _core().memory_counters(_index(device))
    return c["capacity"] - c["allocated"], c["capacity"]


def get_memory_capacity(device: DeviceLike = None) -> int:
    return int(_core().memory_counters(_index(device))["capacity"])


def set_memory_capacity(nbytes: int, device: DeviceLike = None) -> None:
    """Change a simulated card's device-memory capacity (default 128 GiB)."""
    if nbytes < 0:
        raise ValueError("capacity must be non-negative")
    _core().set_capacity(_index(device), int(nbytes))


def empty_cache() -> None:
    return None


# ------------------------------------------------------------------ random numbers
def _generator(idx: int) -> torch.Generator:
    return _core().default_generator(idx)


def __getattr__(name: str) -> Any:
    if name == "default_generators":
        return tuple(_generator(i) for i in range(device_count()))
    raise AttributeError(name)


def manual_seed(seed: int) -> None:
    """Seed the current device's generator (never calls torch.manual_seed: that calls us)."""
    _generator(current_device()).manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for i in range(device_count()):
        _generator(i).manual_seed(int(seed))


def seed() -> None:
    _generator(current_device()).seed()


def seed_all() -> None:
    s = _generator(0).seed()
    for i in range(1, device_count()):
        _generator(i).manual_seed(s)


def initial_seed() -> int:
    return int(_generator(current_device()).initial_seed())


def get_rng_state(device: DeviceLike = "spyre") -> torch.Tensor:
    return _generator(_index(device)).get_state()


def set_rng_state(new_state: torch.Tensor, device: DeviceLike = "spyre") -> None:
    _generator(_index(device)).set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for i, s in enumerate(new_states):
        set_rng_state(s, i)
