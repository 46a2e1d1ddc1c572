"""Process helpers for whoever starts test processes: `relay up`, the harness, ground-truth runs."""

from __future__ import annotations

import ctypes
import signal


def die_with_parent() -> None:
    """In a child process (``preexec_fn``, or right after ``fork``): get SIGKILL when the parent
    dies (Linux ``PR_SET_PDEATHSIG``), so no worker or test process outlives whoever started it."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
