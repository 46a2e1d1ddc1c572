"""The four selection stages: changes -> impact -> applicability -> budget.

Each is a pure function of typed inputs that returns typed outputs with a
:class:`~selector.model.StageRecord` (counts in and out). :func:`selector.select` chains them
into a :class:`~selector.SelectionPlan`.
"""
