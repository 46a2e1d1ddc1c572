"""Process helpers shared by `relay up` and the test harness (:mod:`backends.procs`)."""

from __future__ import annotations

from backends.procs import die_with_parent

__all__ = ["die_with_parent"]
