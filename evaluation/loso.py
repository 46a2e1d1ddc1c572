"""No tuning on the scored step: leave-one-step-out choice of a setting (the budget share).

Each step's row is scored at the setting chosen on the *other* steps; the default to ship is
the one chosen on all of them. The objective (:func:`choose`): the cheapest setting that catches
every gating event (:data:`evaluation.events.GATING_KINDS`: regression and new-and-failing) of
the steps it looks at; when none does, the one that misses the fewest, then the cheapest.

A step's results at every candidate setting come from its uncut ranking
(:func:`evaluation.events.cut_at`); ``relay eval --kind release`` computes them for every step
whose runs and inputs are stored in the repository (:mod:`evaluation.stepinputs`), from those
stored inputs, so the table is the same on every host.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from evaluation.events import GATING_KINDS, KINDS, StepEvents, caught_by, selection_of

#: the budget shares tried on every step (shares of the applicable universe's runner-seconds)
SHARES = (0.02, 0.04, 0.06, 0.08, 0.10, 0.12, 0.15, 0.20, 0.25, 0.30, 0.40, 0.50, 0.75, 1.0)


@dataclass(frozen=True)
class SettingResult:
    setting: float
    events: dict[str, int]  # kind -> events of the step
    caught: dict[str, int]  # kind -> of those caught at this setting
    share: float  # the measured runner-seconds share the setting spent

    @property
    def missed(self) -> int:
        return sum(self.events.get(k, 0) - self.caught.get(k, 0) for k in GATING_KINDS)


StepResults = Mapping[float, SettingResult]


def setting_results(
    events: StepEvents,
    kept: Mapping[float, set[str]],
    costs: Mapping[str, float],
    full_seconds: float,
) -> dict[float, SettingResult]:
    """A step's result at each setting (``kept``: setting -> the tests it selects)."""
    out = {}
    for setting, tests in sorted(kept.items()):
        sel = selection_of(tests, costs)
        hit = caught_by(events.events, sel.tests)
        out[setting] = SettingResult(
            setting=setting,
            events={k: events.count(k) for k in KINDS},
            caught={k: sum(1 for e in hit if e.kind == k) for k in KINDS},
            share=sel.seconds / full_seconds if full_seconds else 0.0,
        )
    return out


def choose(results: Mapping[str, StepResults], steps: Iterable[str]) -> float | None:
    """The setting chosen on ``steps`` (None when there is none to look at): fewest gating
    events missed over them, then the cheapest; only settings every one of them was scored at."""
    chosen = [results[s] for s in steps]
    if not chosen:
        return None
    common = set.intersection(*(set(r) for r in chosen))
    if not common:
        return None
    return min(common, key=lambda s: (sum(r[s].missed for r in chosen), s))


@dataclass(frozen=True)
class HeldOut:
    step: str
    setting: float | None  # chosen on the other steps; None: no other step
    result: SettingResult | None  # the step's own result at that setting


@dataclass(frozen=True)
class Loso:
    rows: list[HeldOut]
    default: float | None  # chosen on every step: the one to ship


def leave_one_step_out(results: Mapping[str, StepResults]) -> Loso:
    steps = sorted(results)
    rows = []
    for step in steps:
        setting = choose(results, [s for s in steps if s != step])
        result = results[step].get(setting) if setting is not None else None
        rows.append(HeldOut(step=step, setting=setting, result=result))
    return Loso(rows=rows, default=choose(results, steps))


def loso_table(loso: Loso, *, shipped: float) -> str:
    """Each step scored at the share chosen on the others, and the default the steps choose."""
    lines = [
        "leave-one-step-out (each step at the budget share chosen on the other steps: the "
        "cheapest catching every regression and new-and-failing event there):",
        "| step | share chosen on the others | "
        + " | ".join(f"{k} caught" for k in KINDS)
        + " | runner-s share |",
        "|---|---|" + "---|" * (len(KINDS) + 1),
    ]
    for row in loso.rows:
        if row.setting is None or row.result is None:
            lines.append(f"| {row.step} | no other step scored | " + "| " * (len(KINDS) + 1))
            continue
        r = row.result
        cells = " | ".join(f"{r.caught[k]}/{r.events[k]}" for k in KINDS)
        lines.append(
            f"| {row.step} | {100 * row.setting:.0f} % | {cells} | {100 * r.share:.1f} % |"
        )
    steps = len(loso.rows)
    default = "none" if loso.default is None else f"{100 * loso.default:.0f} %"
    lines.append(
        f"default chosen on all {steps} step(s): {default}; shipped: {100 * shipped:.0f} %"
        + ("" if loso.default == shipped else " (the shipped default is not the chosen one)")
    )
    return "\n".join(lines)
