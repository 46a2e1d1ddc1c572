"""Stage 2, ``impact``: candidate variants from every registered signal, and the fallback.

Signals run in registry order. A unit that no signal accounts for is never dropped: it
triggers the conservative fallback (the universe file it belongs to when it is one, else every
variant), which is recorded with the units that caused it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from typing import Any

from selector.model import (
    Candidate,
    ChangeUnit,
    Fallback,
    ImpactResult,
    StageRecord,
    Universe,
)
from selector.signals import SIGNALS, ImpactSignal, SignalConfig, SignalContext
from selector.stages.changes import ChangeSet
from upstream.changes import ChangeFacts

FALLBACK_CLOSENESS = 0.1


def impact_stage(
    changes: ChangeSet,
    universe: Universe,
    *,
    config: SignalConfig | None = None,
    reader: Callable[[str, bool], bytes | None] | None = None,
    signals: Mapping[str, Callable[[], ImpactSignal]] | None = None,
    force_all: str | None = None,
    memo: MutableMapping[str, Any] | None = None,
) -> ImpactResult:
    """Pure given its inputs (``reader`` reads upstream files at head / base; ``memo`` keeps
    what signals learned per file contents, see :meth:`SignalContext.file_facts`)."""
    start = time.perf_counter()
    config = config or SignalConfig()
    registry = SIGNALS if signals is None else signals
    explained: dict[str, list[str]] = {}
    hits: _Hits = {}
    per_signal: dict[str, int] = {}
    ctx = SignalContext(
        facts=changes.facts,
        units=changes.units,
        universe=universe,
        config=config,
        reader=reader,
        explained=explained,
        memo=memo,
    )
    for name, factory in registry.items():
        signal = factory()
        result = signal.map(ctx)
        per_signal[name] = len(result.hits)
        for key, why in result.explained.items():
            explained.setdefault(key, []).append(f"{name}: {why}")
        if getattr(signal, "excludes_units", False) and result.explained:
            ctx.units = [u for u in ctx.units if u.key not in result.explained]
            ctx.facts = _without(ctx.facts, result.explained.keys())
        _add_hits(hits, name, result.hits, signal.closeness)
    unexplained = [u for u in changes.units if u.key not in explained]
    fallbacks = _fallbacks(unexplained, universe, config.fallback)
    if force_all is not None:  # the change itself could not be analysed
        fallbacks = [Fallback("all", tuple(u.key for u in unexplained), force_all, len(universe))]
    for fb in fallbacks:
        _add_fallback(hits, fb, universe)
    per_signal["fallback"] = sum(f.tests for f in fallbacks)
    candidates = {
        tid: Candidate(tid, _cap(tuple(dict.fromkeys(r))), tuple(s), c)
        for tid, (r, s, c) in hits.items()
    }
    notes = config.unavailable + tuple(f"{u.key}: unmapped -> fallback" for u in unexplained[:20])
    record = StageRecord(
        stage="impact",
        count_in=len(changes.units),
        count_out=len(candidates),
        unit="units -> variants",
        seconds=round(time.perf_counter() - start, 4),
        notes=notes,
    )
    return ImpactResult(
        candidates=candidates,
        explained=explained,
        unexplained=unexplained,
        fallbacks=fallbacks,
        per_signal=per_signal,
        record=record,
    )


#: test id -> (its reasons, the signals that chose it, the closest signal's closeness)
_Hits = dict[str, tuple[list[str], list[str], float]]


def _add_hits(hits: _Hits, name: str, found: Mapping[str, Sequence[str]], closeness: float) -> None:
    """Fold one signal's hits (test id -> reasons) into ``hits``."""
    for tid, reasons in found.items():
        got = hits.get(tid)
        if got is None:
            hits[tid] = ([f"{name}: {r}" for r in reasons], [name], closeness)
        else:
            got[0].extend(f"{name}: {r}" for r in reasons)
            if name not in got[1]:
                got[1].append(name)
            hits[tid] = (got[0], got[1], max(got[2], closeness))


def _add_fallback(hits: _Hits, fb: Fallback, universe: Universe) -> None:
    """Choose every variant of the fallback's scope (the whole universe, or one suite)."""
    variants = (
        universe.variants
        if fb.scope == "all"
        else universe.by_file.get(fb.scope.removeprefix("suite:"), [])
    )
    for v in variants:
        got = hits.get(v.test_id)
        if got is None:
            hits[v.test_id] = ([f"fallback: {fb.reason}"], ["fallback"], FALLBACK_CLOSENESS)
        elif "fallback" not in got[1]:
            got[0].append(f"fallback: {fb.reason}")
            got[1].append("fallback")


MAX_REASONS = 8


def _cap(reasons: tuple[str, ...]) -> tuple[str, ...]:
    if len(reasons) <= MAX_REASONS:
        return reasons
    return (*reasons[:MAX_REASONS], f"(+{len(reasons) - MAX_REASONS} more reasons)")


def _without(facts: ChangeFacts, keys: Iterable[str]) -> ChangeFacts:
    """The facts without the database / yaml entries whose units are in ``keys``."""
    gone = set(keys)
    return facts.model_copy(
        update={
            "db_entries": [d for d in facts.db_entries if f"{d.kind}:{d.name}" not in gone],
            "native_functions": [
                e for e in facts.native_functions if f"native_functions:{e.name}" not in gone
            ],
            "derivatives": [e for e in facts.derivatives if f"derivatives:{e.name}" not in gone],
        }
    )


def _fallbacks(units: list[ChangeUnit], universe: Universe, mode: str) -> list[Fallback]:
    if not units:
        return []
    by_scope: dict[str, list[str]] = {}
    for u in units:
        scope = f"suite:{u.path}" if mode == "suite" and u.path in universe.files else "all"
        by_scope.setdefault(scope, []).append(u.key)
    if "all" in by_scope:  # everything covers the suites too
        keys = [k for ks in by_scope.values() for k in ks]
        return [Fallback("all", tuple(keys), _why(keys, "every variant"), len(universe))]
    return [
        Fallback(
            scope,
            tuple(keys),
            _why(keys, f"all of {scope.removeprefix('suite:')}"),
            len(universe.by_file.get(scope.removeprefix("suite:"), [])),
        )
        for scope, keys in sorted(by_scope.items())
    ]


def _why(keys: list[str], scope: str) -> str:
    shown = ", ".join(keys[:3]) + (f" (+{len(keys) - 3} more)" if len(keys) > 3 else "")
    return f"no signal maps {shown}; selecting {scope} (conservative)"
