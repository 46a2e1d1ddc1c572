"""The planner: from an upstream change to what to run. It wires the domain together (the
upstream source and its change facts, the inventory's universe, the selector) for a pair of
revisions (:func:`plan_revisions`), an upstream event on a backend (:func:`plan_event`, a
:class:`RunPlan` for the runner) and a release step (:func:`release_plan`); and the one split of
a plan's tests into the shards a job runs (:func:`cut_shards`).
"""

from planner.events import plan_event, revisions, revisions_config
from planner.model import RunPlan, StoredPlan
from planner.release import ReleasePlan, collected_universe, head_env_for, release_plan
from planner.revisions import plan_revisions, source_reader
from planner.sharding import ShardPolicy, cut_shards, shard_by_time, split_summary

__all__ = [
    "ReleasePlan",
    "RunPlan",
    "ShardPolicy",
    "StoredPlan",
    "collected_universe",
    "cut_shards",
    "head_env_for",
    "plan_event",
    "plan_revisions",
    "release_plan",
    "revisions",
    "revisions_config",
    "shard_by_time",
    "source_reader",
    "split_summary",
]
