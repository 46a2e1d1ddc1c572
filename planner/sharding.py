"""Shards sized in time: a job's tests cut into shards of about a target duration, the one
split a job runs (the selector ranks and cuts, it does not shard). :func:`cut_shards` makes it
on a :class:`~planner.RunPlan` (the runner's plan stage calls it); the job stores it (its Shard
rows, each selected test's shard, the plan's shard counts and finish estimate), so what the API,
the run page and the estimates show is the split that runs.

A shard is the unit a worker runs without yielding: a pull request waits at most one shard's
duration for a worker (see ``store.scheduling``), so shards are cut to a target number of
runner-seconds (``RELAY_RUNNER_SHARD_SECONDS``, default 120) from each variant's estimated
runner-seconds (a mapping the caller gives, else a prior), not to a fixed count;
``RELAY_RUNNER_SHARDS`` is a ceiling (past it shards grow). Tests of one file stay together in
as few shards as possible (a shard's child pays a file's collection once), and shards are run
longest first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from config.settings import Settings
from planner.model import RunPlan, finish_seconds
from selector import SelectionPlan

#: runner-seconds of a variant nothing is known about: plain pytest's mean over 2,000 bundled
#: spyre variants (113.8 s for 2,000, README's workers benchmark)
PRIOR_SECONDS = 0.057

#: the least runner-seconds a shard is cut to so that idle shard workers get a share of a job: a
#: shard's child pays about 2 s to start (fork of the warm pool, collection of its files)
MIN_SHARD_SECONDS = 20.0


@dataclass(frozen=True)
class ShardPolicy:
    """How the runner cuts a job: shards of about ``target_seconds`` runner-seconds, at most
    ``max_shards``, at least one per shard worker (``parallel``, each at least
    ``min_shard_seconds``); a test nothing is known about costs ``prior_seconds``."""

    target_seconds: float = 120.0
    max_shards: int = 64
    parallel: int = 1
    prior_seconds: float = PRIOR_SECONDS
    min_shard_seconds: float = MIN_SHARD_SECONDS

    @classmethod
    def from_settings(cls, settings: Settings) -> ShardPolicy:
        """``RELAY_RUNNER_SHARD_SECONDS``, ``RELAY_RUNNER_SHARDS``, ``RELAY_RUNNER_PARALLEL``."""
        return cls(
            target_seconds=settings.runner_shard_seconds,
            max_shards=settings.runner_shards,
            parallel=settings.runner_parallel,
        )


def _file_of(test_id: str) -> str:
    return test_id.split("::", 1)[0]


def shard_by_time(
    test_ids: Sequence[str],
    durations: Mapping[str, float],
    *,
    target_seconds: float,
    max_shards: int,
    prior_seconds: float = PRIOR_SECONDS,
    parallel: int = 1,
    min_shard_seconds: float = MIN_SHARD_SECONDS,
) -> tuple[list[list[str]], list[float]]:
    """(shards, estimated seconds of each): ``test_ids`` (in their order within a file, files
    in order of first appearance) cut into consecutive shards of at most ``target_seconds``
    (a test longer than that alone), at most ``max_shards`` of them, longest first.

    ``parallel`` is how many shard workers run at once: a job that would make fewer shards than
    that is cut into as many shards of equal time as there are workers (each at least
    ``min_shard_seconds``), so no worker idles while it runs."""
    ids = list(dict.fromkeys(test_ids))
    if not ids:
        return [], []
    by_file: dict[str, list[str]] = {}
    for t in ids:
        by_file.setdefault(_file_of(t), []).append(t)
    ordered = [t for group in by_file.values() for t in group]
    seconds = [max(0.0, float(durations.get(t, prior_seconds))) for t in ordered]
    total = sum(seconds)
    target = max(target_seconds, total / max(1, max_shards), 1e-9)
    cap = max_shards
    share = min(parallel, max_shards, int(total // max(min_shard_seconds, 1e-9)))
    if share > 1 and total / target < share:
        target, cap = total / share, share
    while True:
        shards, loads = _cut(ordered, seconds, target)
        if len(shards) <= max(1, cap):
            break
        target *= 1.05
    order = sorted(range(len(shards)), key=lambda i: (-loads[i], i))
    return [shards[i] for i in order], [round(loads[i], 6) for i in order]


def _cut(
    ids: list[str], seconds: list[float], target: float
) -> tuple[list[list[str]], list[float]]:
    shards: list[list[str]] = [[]]
    loads = [0.0]
    for t, s in zip(ids, seconds, strict=True):
        if shards[-1] and loads[-1] + s > target:
            shards.append([])
            loads.append(0.0)
        shards[-1].append(t)
        loads[-1] += s
    return shards, loads


def _cut_with(
    ids: Sequence[str], durations: Mapping[str, float], policy: ShardPolicy
) -> tuple[list[list[str]], list[float]]:
    return shard_by_time(
        ids,
        durations,
        target_seconds=policy.target_seconds,
        max_shards=policy.max_shards,
        prior_seconds=policy.prior_seconds,
        parallel=policy.parallel,
        min_shard_seconds=policy.min_shard_seconds,
    )


def cut_shards(plan: RunPlan, policy: ShardPolicy) -> RunPlan:
    """``plan`` with the shards the job runs: its tests (in the planner's order) cut in time,
    each test's runner-seconds the selection's estimate (:meth:`RunPlan.runner_seconds`:
    measured history, else its siblings' median, else the shipped prior), else
    ``policy.prior_seconds``; with each shard's estimated seconds and the workers the finish
    estimate assumes. A plan without a selection keeps the shards its planner laid out."""
    if plan.selection is None:
        return plan.model_copy(update={"shards": [list(s) for s in plan.shards if s]})
    ids = [t for shard in plan.shards for t in shard]
    shards, seconds = _cut_with(ids, plan.runner_seconds(), policy)
    return plan.model_copy(
        update={"shards": shards, "shard_seconds": seconds, "workers": max(1, policy.parallel)}
    )


def split_summary(selection: SelectionPlan, policy: ShardPolicy) -> str:
    """One line on the split the runner would make of ``selection`` under ``policy`` (what
    `relay select` and `relay replay` show; a job stores the split it runs)."""
    shards, seconds = _cut_with(
        selection.test_ids, {t.test_id: t.seconds for t in selection.tests}, policy
    )
    finish = finish_seconds(seconds, policy.parallel)
    return (
        f"runner's split: {len(shards)} shard(s), the longest {max(seconds, default=0.0):,.1f} "
        f"runner-seconds; about {finish / 60:,.1f} min on {policy.parallel} shard worker(s)"
    )
