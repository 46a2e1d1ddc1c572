"""The four selection stages: changes -> impact -> applicability -> budget.

Each is a pure function of typed inputs that returns typed outputs with a
:class:`~selector.stages.model.StageRecord` (counts in and out). :func:`selector.plan.run_selection`
chains them into a :class:`~selector.plan.SelectionPlan`.
"""

from selector.stages.applicability import applicability_stage
from selector.stages.budget import TRIAGE_HOOKS, TriageHook, budget_stage, shard_longest_first
from selector.stages.changes import ChangeSet, change_units, changes_stage
from selector.stages.costs import History, SimulatorEstimate, TestHistory
from selector.stages.impact import impact_stage
from selector.stages.model import NEW_AT_HEAD, REMOVED_AT_HEAD, ChangeUnit, StageRecord, Universe

__all__ = [
    "NEW_AT_HEAD",
    "REMOVED_AT_HEAD",
    "TRIAGE_HOOKS",
    "ChangeSet",
    "ChangeUnit",
    "History",
    "SimulatorEstimate",
    "StageRecord",
    "TestHistory",
    "TriageHook",
    "Universe",
    "applicability_stage",
    "budget_stage",
    "change_units",
    "changes_stage",
    "impact_stage",
    "shard_longest_first",
]
