"""Shards sized in time: a job's tests cut into shards of about a target duration.

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

from planner import RunPlan

#: runner-seconds of a variant nothing is known about: plain pytest's mean over 2,000 bundled
#: spyre variants (113.8 s for 2,000, README's workers benchmark)
PRIOR_SECONDS = 0.057

#: the least runner-seconds a shard is cut to so that idle shard workers get a share of a job: a
#: shard's child pays about 2 s to start (fork of the warm pool, collection of its files)
MIN_SHARD_SECONDS = 20.0


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


def time_shards(
    plan: RunPlan,
    *,
    target_seconds: float,
    max_shards: int,
    durations: Mapping[str, float] | None = None,
    prior_seconds: float = PRIOR_SECONDS,
    parallel: int = 1,
) -> tuple[list[list[str]], list[float] | None]:
    """The shards a job runs: the plan's tests cut in time, each test's runner-seconds from
    ``durations`` (by node id), else ``prior_seconds``. A plan without a selection and without
    ``durations`` keeps the shards its planner chose (a planner that lays out shards itself).

    ``durations`` is the runner's estimate per variant (the planner gives the selection's
    runner-seconds: measured history, else its siblings' median, else the shipped prior)."""
    if plan.selection is None and durations is None:
        return [list(s) for s in plan.shards if s], None
    known = durations or {}
    ids = [t for shard in plan.shards for t in shard]
    return shard_by_time(
        ids, known, target_seconds=target_seconds, max_shards=max_shards,
        prior_seconds=prior_seconds, parallel=parallel,
    )  # fmt: skip
