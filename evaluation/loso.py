"""No tuning on the scored step: leave-one-step-out choice of a setting (the budget share).

Each step's row is scored at the setting chosen on the *other* steps; the default to ship is
the one chosen on all of them. The objective (:func:`choose`): the cheapest setting that catches
every gating event (:data:`evaluation.events.GATING_KINDS`: regression and new-and-failing) of
the steps it looks at; when none does, the one that misses the fewest, then the cheapest.

A step's results at every candidate setting come from its uncut ranking
(:func:`evaluation.events.cut_at`) and are recorded per step
(``RELAY_VAR_DIR/eval/steps/<step>.json``, :func:`save_step`), so the steps scored one
``relay eval --kind release`` at a time can be combined.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from evaluation.events import GATING_KINDS, KINDS, StepEvents, caught_by, selection_of

#: the budget shares tried on every step (shares of the applicable universe's runner-seconds)
SHARES = (0.02, 0.04, 0.06, 0.08, 0.10, 0.12, 0.15, 0.20, 0.25, 0.30, 0.40, 0.50, 0.75, 1.0)
STEPS_VERSION = 1


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


# -- records of the steps scored on this host ----------------------------------------

_STEP = re.compile(r"^[0-9A-Za-z.+_-]{1,40} -> [0-9A-Za-z.+_-]{1,40}$")


def _step_path(folder: Path, step: str) -> Path:
    if not _STEP.match(step):
        raise ValueError(f"not a step name: {step!r}")
    return folder / (step.replace(" -> ", "_to_") + ".json")


def save_step(folder: Path, step: str, results: StepResults, *, runs: Sequence[str]) -> Path:
    """Record a step's results at every setting, with the stored runs they rest on."""
    path = _step_path(folder, step)
    body = {
        "version": STEPS_VERSION,
        "step": step,
        "runs": list(runs),
        "settings": [asdict(r) for r in results.values()],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(body, indent=1, sort_keys=True), encoding="utf-8")
    tmp.replace(path)
    return path


def load_steps(folder: Path) -> dict[str, dict[float, SettingResult]]:
    """Every step recorded in ``folder`` (records of another version are skipped)."""
    out: dict[str, dict[float, SettingResult]] = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            body = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(body, dict) or body.get("version") != STEPS_VERSION:
            continue
        out[str(body["step"])] = {
            float(r["setting"]): SettingResult(
                setting=float(r["setting"]),
                events={str(k): int(v) for k, v in r["events"].items()},
                caught={str(k): int(v) for k, v in r["caught"].items()},
                share=float(r["share"]),
            )
            for r in body["settings"]
        }
    return out
