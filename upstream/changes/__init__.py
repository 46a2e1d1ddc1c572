"""Change facts: what changed upstream between two revisions (files, symbols, ops, OpInfos)."""

from upstream.changes.facts import (
    FACTS_VERSION,
    BehaviourChange,
    ChangeFacts,
    DbEntryChange,
    PythonFileChange,
    SymbolChange,
    YamlEntryChange,
    compute_change_facts,
    facts_to_json,
)

__all__ = [
    "FACTS_VERSION",
    "BehaviourChange",
    "ChangeFacts",
    "DbEntryChange",
    "PythonFileChange",
    "SymbolChange",
    "YamlEntryChange",
    "compute_change_facts",
    "facts_to_json",
]
