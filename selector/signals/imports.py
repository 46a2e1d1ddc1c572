"""Signal: a change to an upstream module the universe's runs never import reaches no test.

Uses the import map learned from our own traced runs (:mod:`selector.importmap`). Units it
accounts for are hidden from the signals after it.
"""

from __future__ import annotations

from selector.importmap import load_import_map
from selector.signals.base import SignalContext, SignalResult


class NotImported:
    name = "import-map"
    closeness = 0.0
    only_unexplained = False
    excludes_units = True

    def map(self, ctx: SignalContext) -> SignalResult:
        result = SignalResult()
        data = load_import_map(ctx.config.import_map)
        if data is None:
            return result
        modules = set(data["modules"])
        why = (
            f"module never imported by the universe's runs (import map of {len(modules)} "
            f"modules from {data['tests_run']} traced tests)"
        )
        for unit in ctx.units:
            if unit.kind not in ("symbol", "file") or not unit.path.endswith(".py"):
                continue
            if not unit.path.startswith(("torch/", "torchgen/")) or unit.path in modules:
                continue
            result.explained[unit.key] = why
        return result
