"""What the HUD reads of a job's stored plan: the selection funnel, why each test was chosen,
what was cut or removed and why, and the runner's recipe (for the command that reproduces a
test locally).

Read defensively: the stored plan is a :class:`selector.SelectionPlan` dump with the runner's
configuration beside it, and its shape grows (compact storage, cost fields); a missing or
unexpected field shows as absent, never as an error. Parsed plans are kept in a small cache
keyed by the selection row (a stored plan never changes).
"""

from __future__ import annotations

import shlex
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from threading import Lock
from typing import Any

from pydantic import BaseModel

from backends.base import PROJECT_ROOT, PROJECT_TOKEN

#: the funnel's stages in order, as the issue and the design name them
STAGES = ("changes", "impact", "applicability", "budget")


class FunnelStage(BaseModel):
    stage: str
    count_in: int | None
    count_out: int | None
    unit: str | None
    seconds: float | None
    notes: list[str]


class SelectedTest(BaseModel):
    test_id: str
    rank: int | None
    mode: str | None
    gating: bool | None
    signals: list[str]
    reasons: list[str]
    seconds: float | None
    seconds_source: str | None
    flag: str | None


class LeftOut(BaseModel):
    test_id: str
    stage: str  # "budget" (cut) or "applicability" (removed by the spec)
    reason: str
    rank: int | None = None
    seconds: float | None = None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _strs(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


@dataclass
class PlanView:
    funnel: list[FunnelStage] = field(default_factory=list)
    selected: list[SelectedTest] = field(default_factory=list)
    left_out: list[LeftOut] = field(default_factory=list)
    fallbacks: list[dict[str, Any]] = field(default_factory=list)
    costs: dict[str, float] = field(default_factory=dict)  # every numeric *seconds* field
    universe: int | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    runner: dict[str, Any] = field(default_factory=dict)

    @property
    def cut(self) -> list[LeftOut]:
        return [c for c in self.left_out if c.stage == "budget"]

    @property
    def removed(self) -> list[LeftOut]:
        return [c for c in self.left_out if c.stage == "applicability"]


def read_plan(plan: dict[str, Any] | None, stage_counts: dict[str, Any] | None = None) -> PlanView:
    """The HUD's view of a stored plan (``stage_counts``: the selection row's funnel, used when
    the plan carries none)."""
    plan = plan if isinstance(plan, dict) else {}
    runner = plan.get("runner")
    view = PlanView(runner=runner if isinstance(runner, dict) else {})
    view.funnel = _funnel(plan, stage_counts)
    view.selected = [_selected(t) for t in plan.get("tests") or [] if _has_id(t)]
    view.left_out = [
        LeftOut(
            test_id=c["test_id"],
            stage="budget",
            reason=str(c.get("reason", "")),
            rank=_int(c.get("rank")),
            seconds=_num(c.get("seconds")),
        )
        for c in plan.get("cut") or []
        if _has_id(c)
    ] + [
        LeftOut(test_id=r["test_id"], stage="applicability", reason=str(r.get("reason", "")))
        for r in plan.get("removed") or []
        if _has_id(r)
    ]
    view.fallbacks = [f for f in plan.get("fallbacks") or [] if isinstance(f, dict)]
    view.costs = {k: float(v) for k, v in plan.items() if "seconds" in k and _num(v) is not None}
    universe = plan.get("universe")
    if isinstance(universe, dict):
        view.universe = _int(universe.get("variants"))
    view.summary = {
        k: plan.get(k)
        for k in (
            "backend",
            "source_kind",
            "base",
            "head",
            "base_resolved",
            "head_resolved",
            "fallback",
            "schema_version",
        )
        if k in plan
    }
    return view


def _has_id(row: Any) -> bool:
    return isinstance(row, dict) and isinstance(row.get("test_id"), str)


def _funnel(plan: dict[str, Any], stage_counts: dict[str, Any] | None) -> list[FunnelStage]:
    """The plan's funnel, else the selection row's stage counts."""
    funnel = [
        FunnelStage(
            stage=str(step.get("stage", "?")),
            count_in=_int(step.get("count_in")),
            count_out=_int(step.get("count_out")),
            unit=step.get("unit") if isinstance(step.get("unit"), str) else None,
            seconds=_num(step.get("seconds")),
            notes=_strs(step.get("notes")),
        )
        for step in plan.get("funnel") or []
        if isinstance(step, dict)
    ]
    if funnel or not isinstance(stage_counts, dict):
        return funnel
    return [
        FunnelStage(
            stage=str(stage),
            count_in=_int(counts.get("in") if isinstance(counts, dict) else None),
            count_out=_int(counts.get("out") if isinstance(counts, dict) else None),
            unit=None,
            seconds=None,
            notes=[],
        )
        for stage, counts in stage_counts.items()
    ]


def _selected(t: dict[str, Any]) -> SelectedTest:
    """One selected test of a stored plan, whatever of its fields are well typed."""
    return SelectedTest(
        test_id=t["test_id"],
        rank=_int(t.get("rank")),
        mode=t.get("mode") if isinstance(t.get("mode"), str) else None,
        gating=t.get("gating") if isinstance(t.get("gating"), bool) else None,
        signals=_strs(t.get("signals")),
        reasons=_strs(t.get("reasons")),
        seconds=_num(t.get("seconds")),
        seconds_source=t.get("seconds_source")
        if isinstance(t.get("seconds_source"), str)
        else None,
        flag=t.get("flag") if isinstance(t.get("flag"), str) else None,
    )


class _Cache:
    def __init__(self, size: int = 16) -> None:
        self._items: OrderedDict[int, PlanView] = OrderedDict()
        self._size = size
        self._lock = Lock()

    def get(self, key: int, load: Any) -> PlanView:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        view = load()
        with self._lock:
            self._items[key] = view
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return view


PLANS = _Cache()


def reproduce_command(runner: dict[str, Any], node_id: str) -> str | None:
    """The shell command that runs one test as the shard runner did: in the runner's folder, with
    its environment and pytest arguments (``python -P -m pytest ARGS NODE_ID``)."""
    rootdir = runner.get("rootdir")
    if not isinstance(rootdir, str):
        return None
    here = str(PROJECT_ROOT)  # a stored recipe names the project by a token: this install
    rootdir = rootdir.replace(PROJECT_TOKEN, here)
    env_value = runner.get("env")
    env: dict[str, Any] = env_value if isinstance(env_value, dict) else {}
    env = {k: str(v).replace(PROJECT_TOKEN, here) for k, v in env.items()}
    args = [a.replace(PROJECT_TOKEN, here) for a in _strs(runner.get("pytest_args"))]
    parts = [f"cd {shlex.quote(rootdir)} &&"]
    parts += [f"{k}={shlex.quote(str(v))}" for k, v in sorted(env.items())]
    venv = Path(rootdir, ".venv", "bin", "python")
    python = ".venv/bin/python" if venv.exists() else "python"
    parts += [python, "-P", "-m", "pytest", *(shlex.quote(a) for a in args), shlex.quote(node_id)]
    return " ".join(parts)
