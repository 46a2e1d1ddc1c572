"""The selector: the pure decision core. Which of a backend's test variants can an upstream
change affect, which apply, and which fit the budget, with a reason for every choice.

Its one public surface is this module: :func:`select` (four stages over one
:class:`SelectionRequest`: change facts, a universe and the :class:`Costs` it was priced with),
the :class:`SelectionPlan` it returns, and the model it reads (:class:`Universe` of
:class:`Variant`, :class:`History`, :class:`SignalConfig`). It touches no database, no network,
no subprocess and no settings: change facts come from :mod:`upstream`, the universe from
:mod:`inventory`, the costs, the signals' inputs and the budget from :mod:`planner`, which wires
them together. It ranks and cuts; the runner's split into shards is :mod:`planner.sharding`'s.
"""

from selector.model import (
    NEW_AT_HEAD,
    REMOVED_AT_HEAD,
    ChangeUnit,
    Costs,
    DurationEstimate,
    History,
    TestHistory,
    Universe,
    Variant,
    price,
)
from selector.plan import (
    SCHEMA_VERSION,
    Reader,
    SelectionPlan,
    SelectionRequest,
    select,
    unanalysed,
)
from selector.signals import MEMO_VERSION, SignalConfig
from selector.stages.budget import TRIAGE_HOOKS, TriageHook

__all__ = [
    "MEMO_VERSION",
    "NEW_AT_HEAD",
    "REMOVED_AT_HEAD",
    "SCHEMA_VERSION",
    "TRIAGE_HOOKS",
    "ChangeUnit",
    "Costs",
    "DurationEstimate",
    "History",
    "Reader",
    "SelectionPlan",
    "SelectionRequest",
    "SignalConfig",
    "TestHistory",
    "TriageHook",
    "Universe",
    "Variant",
    "price",
    "select",
    "unanalysed",
]
