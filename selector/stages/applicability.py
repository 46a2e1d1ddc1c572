"""Stage 3, ``applicability``: keep the candidates that exist and run on the backend.

The universe holds the backend's variants with their spec decision (from :mod:`testspecs`
through the inventory). ``skip`` removes a variant; ``xfail`` / ``xfail_strict`` keep it but it
does not gate; a test the test file itself skips unconditionally is removed; a variant the
change facts show is gone at head is removed. Each removal says why.
"""

from __future__ import annotations

import time

from selector.model import (
    REMOVED_AT_HEAD,
    ApplicabilityResult,
    Applicable,
    Candidate,
    Removed,
    StageRecord,
    Universe,
)

NON_GATING = frozenset({"xfail", "xfail_strict"})


def applicability_stage(
    candidates: dict[str, Candidate], universe: Universe
) -> ApplicabilityResult:
    start = time.perf_counter()
    kept: list[Applicable] = []
    removed: list[Removed] = []
    by_id = universe.by_id
    for tid in sorted(candidates):
        c = candidates[tid]
        v = by_id.get(tid)
        flag = universe.flags.get(tid)
        if v is None:
            removed.append(Removed(tid, "not a variant of the backend's universe"))
        elif flag == REMOVED_AT_HEAD:
            removed.append(Removed(tid, "removed at head (per the change facts)"))
        elif v.decision == "skip":
            removed.append(Removed(tid, f"spec: skip ({v.rule or 'no rule given'})"))
        elif v.static_skip:
            removed.append(Removed(tid, f"skipped by the test file: {v.static_skip}"))
        else:
            mode = v.decision or "run"
            kept.append(
                Applicable(
                    tid, mode, mode not in NON_GATING, c.reasons, c.signals, c.closeness, flag
                )
            )
    record = StageRecord(
        stage="applicability",
        count_in=len(candidates),
        count_out=len(kept),
        unit="variants",
        seconds=round(time.perf_counter() - start, 4),
        notes=tuple(
            f"{sum(1 for k in kept if not k.gating)} kept as non-gating (xfail)" for _ in [0]
        ),
    )
    return ApplicabilityResult(kept=kept, removed=removed, record=record)
