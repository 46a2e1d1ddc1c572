"""Stage 4, ``budget``: rank by risk and cut to a budget in runner-seconds.

Risk = the closest signal's weight + how unsettled history says the outcome is (a failure rate
near one half, or flaky) + a bonus for variants new at head (and for tests never run); a variant
that failed in every recorded run cannot regress and ranks after those that can. Within
one risk, one variant of each OpInfo / ModuleInfo entry ranks before a second of any; then the
test id, so the order is stable. Durations are runner-seconds (what a test costs on a runner: setup, call and teardown):
history, else the runner-seconds estimate (:mod:`planner.durations` gives one with its source per
variant). Simulated device time (history, else the backend's device-time hook) is summed beside
them and never budgeted. Everything past the budget is listed with its rank and the reason.
The selected tests are returned in rank order: the runner splits them into shards (by measured
duration, :mod:`planner.sharding`), the one split a job runs. An optional :class:`TriageHook` may
re-rank; none is registered by default and the selector makes no network calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from selector.model import (
    NEW_AT_HEAD,
    Applicable,
    BudgetResult,
    Costs,
    Cut,
    History,
    Ranked,
    StageRecord,
    Universe,
    source_of,
)

# a variant new at head has no history and an unknown outcome: it ranks before every other
# (more than closeness + agreeing signals + failure and flaky history can add up to)
NEW_BONUS = 3.0
FAILURE_WEIGHT = 1.0
FLAKY_BONUS = 0.3
# a variant that failed in every recorded run cannot regress (it can stay failing or be fixed,
# neither of which a gate waits for): it ranks after every variant that can (more than
# closeness and agreeing signals can add up to), before nothing new at head
SETTLED_FAILURE = 1.0
NEVER_RUN_BONUS = 0.05
EVIDENCE_WEIGHT = 0.05  # per further signal that chose the variant (up to MAX_EVIDENCE)
MAX_EVIDENCE = 4
BROAD = 0.5  # closeness below this: only broad signals (common code, coverage, fallback)


@runtime_checkable
class TriageHook(Protocol):
    """Re-ranks the ranked list (or proposes spec modes through the reasons). Offline only
    unless a deployment registers one that is not."""

    name: str

    def rerank(self, ranked: Sequence[Ranked]) -> list[Ranked]: ...


# name -> factory; empty by default: no triage, no network
TRIAGE_HOOKS: dict[str, Callable[[], TriageHook]] = {}


def risk_of(item: Applicable, history: History) -> tuple[float, list[str]]:
    risk = item.closeness
    why = [f"closeness {item.closeness:.2f}"]
    agreeing = min(len(item.signals) - 1, MAX_EVIDENCE)
    if agreeing > 0:
        risk += EVIDENCE_WEIGHT * agreeing
        why.append(f"{agreeing + 1} signals agree")
    h = history.get(item.test_id)
    if item.flag == NEW_AT_HEAD:
        risk += NEW_BONUS
        why.append("new at head")
    if h is None or h.runs == 0:
        risk += NEVER_RUN_BONUS
    else:
        if h.failures:
            rate = min(h.failures / max(h.runs, 1), 1.0)
            # what a run can tell: an outcome that is not yet settled. A variant that failed in
            # every recorded run (a device without the op or dtype) cannot regress, and one that
            # never failed gains nothing either; the weight peaks at a failure rate of one half
            risk += FAILURE_WEIGHT * 4 * rate * (1 - rate)
            why.append(f"failed {h.failures}/{h.runs}")
            if rate >= 1.0:
                risk -= SETTLED_FAILURE
                why.append("failed in every run: cannot regress")
        if h.flaky:
            risk += FLAKY_BONUS
            why.append("flaky")
    return round(risk, 6), why


def budget_stage(
    kept: Sequence[Applicable],
    universe: Universe,
    *,
    costs: Costs,
    budget_seconds: float | None = None,
    triage: TriageHook | None = None,
    min_closeness: float = 0.0,
) -> BudgetResult:
    """Prices in ``costs``: runner-seconds (``budget_seconds`` is in runner-seconds) and
    simulated device-seconds, summed beside them.
    ``min_closeness`` (focus): variants only broad signals chose (common code, file-level
    coverage, fallback) are cut, listed with that reason, before the budget applies."""
    start = time.perf_counter()
    ranked, device = _ranked(kept, universe, costs)
    if triage is not None:
        ranked = [
            Ranked(**{**r.__dict__, "rank": i + 1}) for i, r in enumerate(triage.rerank(ranked))
        ]
    closeness = {item.test_id: item.closeness for item in kept}
    selected, cut, total = _cut(ranked, closeness, budget_seconds, min_closeness)
    record = StageRecord(
        stage="budget",
        count_in=len(kept),
        count_out=len(selected),
        unit="variants",
        seconds=round(time.perf_counter() - start, 4),
        notes=(f"{len(cut)} cut by the budget",) if cut else (),
    )
    return BudgetResult(
        selected=selected,
        cut=cut,
        budget_seconds=budget_seconds,
        selected_seconds=round(total, 9),
        record=record,
        triage=getattr(triage, "name", None),
        selected_device_seconds=round(sum(device.get(r.test_id, 0.0) for r in selected), 9),
    )


def _ranked(
    kept: Sequence[Applicable], universe: Universe, costs: Costs
) -> tuple[list[Ranked], dict[str, float]]:
    """The kept variants by risk (ties: test id), each priced; and their device-seconds."""
    history, estimator = costs.history, costs.runner
    by_id = universe.by_id
    rows = []
    device: dict[str, float] = {}
    for item in kept:
        risk, why = risk_of(item, history)
        h = history.get(item.test_id)
        v = by_id[item.test_id]
        if h is not None and h.seconds is not None:
            seconds, source = h.seconds, "history"
        else:
            seconds, source = estimator.seconds(v), source_of(estimator, v)
        if h is not None and h.device_seconds is not None:
            device[item.test_id] = h.device_seconds
        else:
            device[item.test_id] = costs.device.seconds(v)
        rows.append((-risk, item.test_id, risk, seconds, source, item, why))
    rows.sort(key=lambda r: (r[0], r[1]))
    rows = _spread(rows, by_id)
    ranked = [
        Ranked(
            test_id=tid,
            rank=i + 1,
            risk=risk,
            seconds=seconds,
            seconds_source=source,
            mode=item.mode,
            gating=item.gating,
            reasons=(*item.reasons, "; ".join(why)),
            signals=item.signals,
            flag=item.flag,
        )
        for i, (_, tid, risk, seconds, source, item, why) in enumerate(rows)
    ]
    return ranked, device


def _spread(rows: list[tuple], by_id: dict) -> list[tuple]:
    """Within one risk, one variant of each OpInfo / ModuleInfo entry (else test) before a
    second of any: a change breaks an entry, so its first variant tells most per second.
    ``rows`` come sorted by (-risk, test id); the order inside an entry is kept."""
    seen: dict[tuple[float, str], int] = {}
    keyed = []
    for row in rows:
        v = by_id[row[1]]
        group = (row[0], v.op or v.module or v.base)
        nth = seen.get(group, 0)
        seen[group] = nth + 1
        keyed.append(((row[0], nth, row[1]), row))
    keyed.sort(key=lambda k: k[0])
    return [row for _, row in keyed]


def _cut(
    ranked: Sequence[Ranked],
    closeness: dict[str, float],
    budget_seconds: float | None,
    min_closeness: float,
) -> tuple[list[Ranked], list[Cut], float]:
    """(selected, cut, the selected runner-seconds): the focus first, then the budget."""
    selected: list[Ranked] = []
    cut: list[Cut] = []
    total = 0.0
    over = False
    for r in ranked:
        if closeness[r.test_id] < min_closeness and r.flag != NEW_AT_HEAD:
            cut.append(
                Cut(
                    r.test_id,
                    r.rank,
                    r.risk,
                    r.seconds,
                    f"focus: only broad signals chose it (closeness "
                    f"{closeness[r.test_id]:.2f} < {min_closeness})",
                )
            )
            continue
        if not over and (budget_seconds is None or total + r.seconds <= budget_seconds):
            selected.append(r)
            total += r.seconds
            continue
        over = True
        broad = " (broad signals only)" if closeness[r.test_id] < BROAD else ""
        cut.append(
            Cut(
                r.test_id,
                r.rank,
                r.risk,
                r.seconds,
                f"over budget: rank {r.rank}, risk {r.risk:.2f}, chosen by "
                f"{', '.join(r.signals)}{broad}; {total:.1f} of {budget_seconds:.1f} "
                f"runner-seconds used by higher-ranked tests",
            )
        )
    return selected, cut, total
