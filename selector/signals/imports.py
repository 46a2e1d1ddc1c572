"""Signal: a change to an upstream module the universe's runs never import reaches no test.

Uses the import map learned from our own traced runs (:mod:`inventory.importmap`). Units it
accounts for are hidden from the signals after it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


IMPORT_MAP_VERSION = 2


def load_import_map(path: str | Path | None) -> dict[str, Any] | None:
    """The import map file written by :func:`inventory.importmap.learn_import_map`, or None when
    there is none (or it is of another version)."""
    if path is None or not Path(path).is_file():
        return None
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return data if data.get("version") == IMPORT_MAP_VERSION else None
