"""Signal: tests of an OpInfo entry that behaves differently on CPU at head, at the dtypes where
it does.

Source diffs are blind to compiled code: a release that rewrites a kernel, a decomposition or a
backward formula leaves the Python sources as they were. The release planner fingerprints the
OpInfo database under both torches (:mod:`upstream.changes.behaviour`: the ATen operators each
entry dispatches forward and backward, its outputs and gradients, its errors and dtypes) and
lists the entries whose fingerprint changed as ``behaviour`` units; this signal maps each to the
entry's variants at the changed dtypes (and its dtype-less variants). It is closer evidence than
a source diff of the entry: the change was observed, not inferred.
"""

from __future__ import annotations

from selector.signals.base import SignalContext, SignalResult


class BehaviourChanges:
    name = "behaviour"
    closeness = 0.95
    only_unexplained = False

    def map(self, ctx: SignalContext) -> SignalResult:
        result = SignalResult()
        for change in ctx.facts.behaviour:
            variants = ctx.universe.by_op.get(change.name, [])
            if change.dtypes:
                wanted = set(change.dtypes)
                variants = [v for v in variants if v.dtype is None or v.dtype in wanted]
            why = "; ".join(change.reasons)
            result.add(
                (v.test_id for v in variants),
                f"opinfo {change.name} behaves differently on CPU at head: {why}",
            )
            at = ", ".join(change.dtypes) if change.dtypes else "every dtype"
            result.explained[f"behaviour:{change.name}"] = (
                f"{len(variants)} variant(s) at {at}"
                if variants
                else f"entry has no variant in the universe at {at}"
            )
        return result
