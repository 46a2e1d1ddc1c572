"""Stage 1, ``changes``: the change facts between base and head, cut into change units.

The facts come from :mod:`upstream.changes`; this stage only turns them into the units the
impact signals account for (a changed Python symbol, a non-Python file, a yaml entry, a database
entry, an OpInfo entry whose observed behaviour changed) and records the counts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from selector.model import ChangeUnit, StageRecord
from upstream.changes import ChangeFacts

COMPILED = "<compiled torch>"  # the path of a behaviour unit: no file shows it


@dataclass
class ChangeSet:
    facts: ChangeFacts
    units: list[ChangeUnit]
    record: StageRecord


def change_units(facts: ChangeFacts) -> list[ChangeUnit]:
    units: list[ChangeUnit] = []
    python = {p.path: p for p in facts.python}
    for f in facts.files:
        py = python.get(f.path)
        if py is None:
            units.append(ChangeUnit(f.path, "file", f.path, str(f.status)))
            continue
        if py.parse_error:
            units.append(
                ChangeUnit(f"{f.path}::*", "symbol", f.path, str(f.status), py.parse_error)
            )
            continue
        if not py.symbols:
            continue  # only comments, docstrings or layout changed: no code to map
        for s in py.symbols:
            units.append(ChangeUnit(f"{f.path}::{s.qualname}", "symbol", f.path, s.status, s.kind))
    for e in facts.native_functions:
        units.append(
            ChangeUnit(
                f"native_functions:{e.name}",
                "native_function",
                facts.head.requested,
                e.status,
                ",".join(e.fields),
            )
        )
    for e in facts.derivatives:
        units.append(
            ChangeUnit(
                f"derivatives:{e.name}",
                "derivative",
                facts.head.requested,
                e.status,
                ",".join(e.fields),
            )
        )
    for d in facts.db_entries:
        units.append(
            ChangeUnit(f"{d.kind}:{d.name}", d.kind, d.file, d.status, "; ".join(d.reasons))
        )
    for b in facts.behaviour:  # observed, not read: compiled code's changes (see signals.behaviour)
        units.append(
            ChangeUnit(
                f"behaviour:{b.name}", "behaviour", COMPILED, "modified", "; ".join(b.reasons)
            )
        )
    return units


def changes_stage(facts: ChangeFacts) -> ChangeSet:
    """Pure: the facts' change units, with the files in and the units out."""
    start = time.perf_counter()
    units = change_units(facts)
    record = StageRecord(
        stage="changes",
        count_in=len(facts.files),
        count_out=len(units),
        unit="files -> units",
        seconds=round(time.perf_counter() - start, 4),
        notes=tuple(facts.errors),
    )
    return ChangeSet(facts=facts, units=units, record=record)
