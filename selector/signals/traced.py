"""Signal: the function-level coverage map learned from our own traced runs.

The traced run (:func:`inventory.importmap.learn_import_map` with ``sweep``) executes one variant
of every op and module of the universe with a profiler and records, per test, the upstream
Python functions it called. A changed function maps to every variant of the ops and modules
whose traced test called it (all templates, all dtypes); a changed function in a traced module
that no traced test called maps to nothing. Module-level code maps through the functions of
the same file that use the names it (re)defines; other module-level changes stay unmapped.
"""

from __future__ import annotations

import ast
from functools import lru_cache

from selector.model import ChangeUnit
from selector.signals.base import SignalContext, SignalResult
from selector.signals.devices import changed_nodes
from selector.signals.imports import load_import_map
from selector.signals.operators import used_names

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@lru_cache(maxsize=2)
def _load(path: str) -> tuple[dict[str, list[int]], list[str], frozenset[str]] | None:
    data = load_import_map(path)
    if data is None or "calls" not in data:
        return None
    calls = data["calls"]
    # every module the runs imported is traced: its functions that no test called were not run
    traced_files = frozenset({k.split("::", 1)[0] for k in calls} | set(data.get("modules", [])))
    return calls, list(data["tests"]), traced_files


COMMON_SHARE = 0.25  # a function called by the tests of more than this share of targets


class TracedCoverage:
    """Functions called by the traced tests of a few ops / modules (specific code)."""

    name = "traced-coverage"
    closeness = 0.6
    only_unexplained = False
    common = False

    def map(self, ctx: SignalContext) -> SignalResult:
        result = SignalResult()
        if ctx.config.import_map is None:
            return result
        loaded = _load(str(ctx.config.import_map))
        if loaded is None:
            return result
        calls, tests, traced_files = loaded
        by_prefix: dict[str, list[str]] = {}
        for key in calls:
            path, qual = key.split("::", 1)
            by_prefix.setdefault(path, []).append(qual)
        uni = ctx.universe
        all_targets = _all_targets(uni, tuple(tests))
        common: list[str] = []
        for unit in ctx.units:
            if unit.kind != "symbol" or unit.path not in traced_files:
                continue
            qual = unit.key.split("::", 1)[1]
            if qual == "*":
                continue
            if qual == "<module>":
                quals = self._module_users(ctx, unit)
                if quals is None:
                    continue
                what = "module-level names used by " + (
                    ", ".join(sorted(quals)[:3]) or "no function"
                )
            else:
                quals = {qual}
                what = qual
            hit: set[int] = set()
            for q in quals:
                for known in by_prefix.get(unit.path, ()):
                    if known == q or known.startswith(q + "."):
                        hit.update(calls[f"{unit.path}::{known}"])
            targets = sorted({t for i in hit if (t := _target(uni, tests[i]))})
            if hit and not targets:
                result.explained[unit.key] = (
                    f"{what}: called only by traced tests of ops/modules outside the universe"
                )
                continue
            n = 0
            if (len(targets) > COMMON_SHARE * all_targets) != self.common:
                continue  # the other of the two traced signals handles this unit
            for target in targets:
                variants = (
                    uni.by_op.get(target[3:], [])
                    if target.startswith("op:")
                    else uni.by_module.get(target[7:], [])
                )
                n += len(variants)
            if self.common:
                common.append(unit.key)
                n = len(uni)
            else:
                for target in targets:
                    variants = (
                        uni.by_op.get(target[3:], [])
                        if target.startswith("op:")
                        else uni.by_module.get(target[7:], [])
                    )
                    result.add(
                        (v.test_id for v in variants),
                        f"{what} ({unit.status}) is called by the traced test of {target}",
                    )
            result.explained[unit.key] = (
                f"{what}: called by the traced tests of {len(targets)} op(s)/module(s), "
                f"{n} variant(s)"
                if targets
                else f"{what}: not called by any of the {len(tests)} traced tests"
            )
        if common:
            shown = ", ".join(common[:3]) + (f" (+{len(common) - 3})" if len(common) > 3 else "")
            result.add(
                (v.test_id for v in uni.variants),
                f"common code (called by the traced tests of more than "
                f"{COMMON_SHARE:.0%} of {all_targets} ops/modules) changed: {shown}",
            )
        return result

    def _module_users(self, ctx: SignalContext, unit: ChangeUnit) -> set[str] | None:
        """Functions of the file that use the names changed module-level code defines; None
        when the change is more than (re)defining names."""
        users = ctx.file_fact(
            "traced:module-users",
            ((unit.path, True), (unit.path, False)),
            lambda: _sorted_or_none(_module_users(ctx, unit)),
        )
        return None if users is None else set(users)


def _sorted_or_none(names: set[str] | None) -> list[str] | None:
    return None if names is None else sorted(names)


def _module_users(ctx: SignalContext, unit: ChangeUnit) -> set[str] | None:
    """:meth:`TracedCoverage._module_users`, from the parsed files."""
    old, new = ctx.tree(unit.path, at_base=True), ctx.tree(unit.path)
    if old is None or new is None:
        return None
    body_old = [s for s in old.body if not isinstance(s, _DEFS)]
    body_new = [s for s in new.body if not isinstance(s, _DEFS)]
    names: set[str] = set()
    for node in changed_nodes(body_old, body_new):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".", 1)[0] for a in node.names)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring or a bare constant
        else:
            return None
    if "__all__" in names:
        names.discard("__all__")
    users = {fn for fn, used in used_names(new).items() if used & names}
    return users


class TracedCommon(TracedCoverage):
    """Functions called by the traced tests of most ops (test harness, dispatch glue): they run
    in nearly every variant, so they select everything, at a low closeness."""

    name = "traced-common"
    closeness = 0.2
    common = True


_TARGET_COUNTS: dict[int, int] = {}


def _all_targets(uni, tests: tuple[str, ...]) -> int:
    key = hash((id(uni), tests))
    if key not in _TARGET_COUNTS:
        _TARGET_COUNTS[key] = max(1, len({t for x in tests if (t := _target(uni, x))}))
    return _TARGET_COUNTS[key]


def _target(uni, test_id: str) -> str | None:
    v = uni.by_id.get(test_id)
    if v is None:
        return None
    if v.op:
        return f"op:{v.op}"
    if v.module:
        return f"module:{v.module}"
    return None
