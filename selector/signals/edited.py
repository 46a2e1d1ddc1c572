"""Signal: tests edited or added by the change select themselves."""

from __future__ import annotations

from selector.signals.base import SignalContext, SignalResult


class EditedTests:
    name = "edited-tests"
    closeness = 1.0
    only_unexplained = False

    def map(self, ctx: SignalContext) -> SignalResult:
        result = SignalResult()
        uni = ctx.universe
        for unit in ctx.units:
            if unit.kind not in ("symbol", "file"):
                continue
            in_universe = unit.path in uni.files
            if not in_universe:
                if unit.path.startswith("test/") and _is_test_file(unit.path):
                    result.explained[unit.key] = "test file has no variant in the universe"
                continue
            qual = unit.key.split("::", 1)[1] if unit.kind == "symbol" else "*"
            top = qual.split(".", 1)[0]
            exact = uni.by_test.get((unit.path, qual), [])
            if exact:
                result.add((v.test_id for v in exact), f"{unit.status} test {qual}")
                result.explained[unit.key] = f"{len(exact)} variant(s) of {qual}"
                continue
            by_class = [
                v
                for v in uni.by_file[unit.path]
                if v.cls and (v.cls == top or v.cls.startswith(top))
            ]
            if by_class and top != "*":
                result.add((v.test_id for v in by_class), f"{unit.status} test class code {qual}")
                result.explained[unit.key] = f"{len(by_class)} variant(s) of class {top}"
                continue
            # module-level code or a helper of the test file: every variant of the file
            variants = uni.by_file[unit.path]
            result.add((v.test_id for v in variants), f"{unit.status} test-file code {qual}")
            result.explained[unit.key] = f"all {len(variants)} variant(s) of {unit.path}"
        return result


def _is_test_file(path: str) -> bool:
    return path.endswith(".py") and path.rsplit("/", 1)[-1].startswith("test_")
