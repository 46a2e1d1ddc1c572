"""Signal: a coverage map from source file to the test files that execute it.

Two maps, both JSON ``{source path: {test: weight} | [test, ...]}``: ours (learned from traced
runs of the universe; tests named by id or file) and PyTorch's public profiling map
(``td_heuristic_profiling.json``, test files named relative to ``test/`` without ``.py``) as a
prior for real checkouts. The map is file-level, so this signal only looks at units the finer
signals left unexplained. On the bundled suites, an upstream test file maps to the bundled
suites that re-implement it (``UPSTREAM_ANALOGS``).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from selector.signals.base import SignalContext, SignalResult

# upstream test file (profiling-map name) -> bundled conformance files that play its part
UPSTREAM_ANALOGS: dict[str, tuple[str, ...]] = {
    "test_ops": (
        "spyre_stack/conformance/test_common.py",
        "spyre_stack/conformance/test_out.py",
        "spyre_stack/conformance/test_variants.py",
        "spyre_stack/conformance/test_errors.py",
    ),
    "test_ops_gradients": ("spyre_stack/conformance/test_gradients.py",),
    "test_ops_fwd_gradients": ("spyre_stack/conformance/test_gradients.py",),
    "test_modules": ("spyre_stack/conformance/test_modules.py",),
}


@lru_cache(maxsize=4)
def load_map(path: str) -> dict[str, list[str]]:
    p = Path(path)
    if not p.is_file():
        return {}
    data = json.loads(p.read_text(encoding="utf-8"))
    return {str(k): list(v) for k, v in data.items()}


class CoverageMap:
    name = "coverage"
    closeness = 0.4
    only_unexplained = True

    def map(self, ctx: SignalContext) -> SignalResult:
        result = SignalResult()
        ours = load_map(str(ctx.config.coverage_map)) if ctx.config.coverage_map else {}
        prior = load_map(str(ctx.config.profiling_map)) if ctx.config.profiling_map else {}
        if not ours and not prior:
            return result
        uni = ctx.universe
        # file-level, so group the units per target first: one reason per (target, origin)
        sources: dict[tuple[str, str], list[str]] = {}
        for unit in ctx.units:
            if unit.key in ctx.explained or unit.kind not in ("symbol", "file"):
                continue
            tests = ours.get(unit.path)
            origin = "our coverage map"
            if tests is None:
                tests, origin = prior.get(unit.path), "PyTorch profiling map"
            if tests is None:
                continue
            targets: set[str] = set()
            for test in tests:
                if test in uni.by_id:
                    targets.add(test)
                    continue
                for candidate in (test, f"test/{test}.py", *UPSTREAM_ANALOGS.get(test, ())):
                    if candidate in uni.files:
                        targets.add(candidate)
            for target in targets:
                sources.setdefault((target, origin), []).append(unit.path)
            n = sum(len(uni.by_file[t]) if t in uni.by_file else 1 for t in targets)
            result.explained[unit.key] = (
                f"{origin}: {len(targets)} file(s)/test(s), {n} variant(s)"
                if targets
                else f"{origin}: executed only by {len(tests)} test file(s) outside the universe"
            )
        for (target, origin), paths in sorted(sources.items()):
            shown = sorted(set(paths))
            why = (
                f"{origin}: {', '.join(shown[:3])}"
                + (f" (+{len(shown) - 3} files)" if len(shown) > 3 else "")
                + f" -> {target}"
            )
            if target in uni.by_file:
                result.add((v.test_id for v in uni.by_file[target]), why)
            else:
                result.add([target], why)
        return result
