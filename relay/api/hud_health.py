"""A downstream's health against CRCR's promotion rules, with the numbers that decide it.

L2 -> L3 (14-day window, after at least one month at L2): end-to-end P50 < 3 h, share of jobs
over 3 h < 1 %, average queue time < 30 min, timeout rate < 1 %, job pass rate >= 90 % (the
latest attempt of each job). Demotion (7-day window): pass rate <= 90 %, timeout rate >= 1 % or
P50 > 3 h. A criterion without data (no job finished in the window) is not met, and triggers no
demotion.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel

from store.health import DownstreamTimings, WindowMetrics, window_metrics
from store.jobs import seconds_between

PROMOTION_DAYS = 14
DEMOTION_DAYS = 7
MONTH_AT_L2_DAYS = 30


class Criterion(BaseModel):
    name: str  # p50_e2e, over_3h_share, avg_queue, timeout_rate, pass_rate, time_at_l2
    window_days: int
    value: float | None  # seconds, a share in 0..1 or days
    threshold: float
    comparison: str  # "<", "<=", ">=", ">"
    met: bool  # the condition holds (for demotion: the demotion trigger holds)
    text: str  # "P50 end-to-end 2.1 h < 3 h"


class WindowPublic(BaseModel):
    days: int
    jobs: int
    completed: int
    avg_queue_s: float | None
    p50_e2e_s: float | None
    over_3h: int
    over_3h_share: float | None
    timed_out: int
    timeout_rate: float | None
    graded: int
    passed: int
    pass_rate: float | None


class DownstreamHealth(BaseModel):
    repo: str
    level: str | None
    device: str | None
    listed_since: datetime | None
    window_7d: WindowPublic
    window_14d: WindowPublic
    l3_criteria: list[Criterion]
    l3_ready: bool
    demotion_triggers: list[Criterion]  # the 7-day rules (met = the trigger holds)
    demote: bool
    verdict: Literal["ready for L3", "not ready for L3", "keep", "demote", "events only"]
    summary: str  # one line with the deciding numbers


_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">=": operator.ge,
    ">": operator.gt,
}


def _fmt(name: str, value: float | None) -> str:
    if value is None:
        return "no data"
    if name in ("p50_e2e", "avg_queue"):
        return f"{value / 3600:.2f} h" if name == "p50_e2e" else f"{value / 60:.1f} min"
    if name == "time_at_l2":
        return f"{value:.0f} days"
    return f"{value * 100:.1f} %"


_LABEL = {
    "p50_e2e": "P50 end-to-end",
    "over_3h_share": "jobs over 3 h",
    "avg_queue": "average queue",
    "timeout_rate": "timeout rate",
    "pass_rate": "job pass rate",
    "time_at_l2": "time at L2",
}
_LIMIT_TEXT = {
    "p50_e2e": "3 h",
    "over_3h_share": "1 %",
    "avg_queue": "30 min",
    "timeout_rate": "1 %",
    "pass_rate": "90 %",
    "time_at_l2": "30 days",
}


def criterion_parts(c: Criterion) -> tuple[str, str, str]:
    """A criterion as the page's columns: (what, its value, the limit it is held to)."""
    return _LABEL[c.name], _fmt(c.name, c.value), f"{c.comparison} {_LIMIT_TEXT[c.name]}"


def _criterion(
    name: str, days: int, value: float | None, comparison: str, threshold: float, *, rule: str
) -> Criterion:
    met = value is not None and _OPS[comparison](value, threshold)
    text = f"{_LABEL[name]} {_fmt(name, value)} ({rule} {comparison} {_LIMIT_TEXT[name]})"
    if value is None:
        text = f"{_LABEL[name]}: no data in {days} days ({rule} {comparison} {_LIMIT_TEXT[name]})"
    return Criterion(
        name=name,
        window_days=days,
        value=value,
        threshold=threshold,
        comparison=comparison,
        met=met,
        text=text,
    )


def _public(m: WindowMetrics) -> WindowPublic:
    return WindowPublic.model_validate(m, from_attributes=True)


def health_of(d: DownstreamTimings, *, now: datetime) -> DownstreamHealth:
    """The 7- and 14-day numbers of one downstream and CRCR's verdict for its level."""
    cutoff7 = now.timestamp() - DEMOTION_DAYS * 86400
    recent = [t for t in d.timings if _ts(t.dispatched_at) >= cutoff7]
    w14 = window_metrics(d.timings, days=PROMOTION_DAYS, now=now)
    w7 = window_metrics(recent, days=DEMOTION_DAYS, now=now)
    at_l2 = seconds_between(d.listed_since, now)
    days_at_l2 = None if at_l2 is None else at_l2 / 86400
    need, demotes = "needs", "demotes at"
    l3 = [
        _criterion("time_at_l2", PROMOTION_DAYS, days_at_l2, ">=", MONTH_AT_L2_DAYS, rule=need),
        _criterion("p50_e2e", PROMOTION_DAYS, w14.p50_e2e_s, "<", 3 * 3600, rule=need),
        _criterion("over_3h_share", PROMOTION_DAYS, w14.over_3h_share, "<", 0.01, rule=need),
        _criterion("avg_queue", PROMOTION_DAYS, w14.avg_queue_s, "<", 30 * 60, rule=need),
        _criterion("timeout_rate", PROMOTION_DAYS, w14.timeout_rate, "<", 0.01, rule=need),
        _criterion("pass_rate", PROMOTION_DAYS, w14.pass_rate, ">=", 0.90, rule=need),
    ]
    demotion = [
        _criterion("pass_rate", DEMOTION_DAYS, w7.pass_rate, "<=", 0.90, rule=demotes),
        _criterion("timeout_rate", DEMOTION_DAYS, w7.timeout_rate, ">=", 0.01, rule=demotes),
        _criterion("p50_e2e", DEMOTION_DAYS, w7.p50_e2e_s, ">", 3 * 3600, rule=demotes),
    ]
    ready = all(c.met for c in l3)
    demote = any(c.met for c in demotion)
    level = (d.level or "L2").upper()
    verdict: Literal["ready for L3", "not ready for L3", "keep", "demote", "events only"]
    if level == "L1":
        verdict, summary = "events only", "L1 receives events only; no results are graded"
    elif level in ("L3", "L4"):
        verdict = "demote" if demote else "keep"
        hit = [c.text for c in demotion if c.met]
        summary = (
            "demote (7 days): " + "; ".join(hit)
            if hit
            else "keep (7 days): " + "; ".join(c.text for c in demotion)
        )
    else:
        verdict = "ready for L3" if ready else "not ready for L3"
        failing = [c.text for c in l3 if not c.met]
        summary = (
            "ready for L3 (14 days): " + "; ".join(c.text for c in l3)
            if ready
            else "not ready for L3 (14 days): " + "; ".join(failing)
        )
    return DownstreamHealth(
        repo=d.repo,
        level=d.level,
        device=d.device,
        listed_since=d.listed_since,
        window_7d=_public(w7),
        window_14d=_public(w14),
        l3_criteria=l3,
        l3_ready=ready,
        demotion_triggers=demotion,
        demote=demote,
        verdict=verdict,
        summary=summary,
    )


def _ts(at: datetime) -> float:
    # SQLite hands back naive UTC datetimes; PostgreSQL aware ones
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()
