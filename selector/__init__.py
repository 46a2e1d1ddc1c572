"""The selector: the pure decision core. Which of a backend's test variants can an upstream
change affect, which apply, and which fit the budget, with a reason for every choice.

Its one public surface is this module: :func:`select` (four stages over change facts and a
universe), :func:`select_everything`, the :class:`SelectionPlan` they return, and the model they
read (:class:`Universe` of :class:`Variant`, :class:`History`, :class:`SignalConfig`). It touches
no database, no network and no subprocess: change facts come from :mod:`upstream`, the universe
from :mod:`inventory`, and :mod:`planner` wires them together.
"""

from selector.model import (
    NEW_AT_HEAD,
    REMOVED_AT_HEAD,
    ChangeUnit,
    DurationEstimate,
    History,
    TestHistory,
    Universe,
    Variant,
)
from selector.plan import SCHEMA_VERSION, SelectionPlan, select, select_everything
from selector.signals import DEFAULT_PROFILING_MAP, MEMO_VERSION, SignalConfig
from selector.stages.budget import TRIAGE_HOOKS, TriageHook

__all__ = [
    "DEFAULT_PROFILING_MAP",
    "MEMO_VERSION",
    "NEW_AT_HEAD",
    "REMOVED_AT_HEAD",
    "SCHEMA_VERSION",
    "TRIAGE_HOOKS",
    "ChangeUnit",
    "DurationEstimate",
    "History",
    "SelectionPlan",
    "SignalConfig",
    "TestHistory",
    "TriageHook",
    "Universe",
    "Variant",
    "select",
    "select_everything",
]
