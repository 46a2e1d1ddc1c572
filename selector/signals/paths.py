"""Signal: path rules for C++, build and other non-Python files.

Rules are ``(glob, action, reason)``, first match wins. Actions: ``none`` (the file cannot
change a device test's outcome: documentation, CI configuration), ``all`` (conservative: every
variant, e.g. core C++ or the build), or ``files:<glob>`` (the universe's test files matching).
Rules that only hold for one source kind carry it as a fourth element.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from selector.signals.base import SignalContext, SignalResult

Rule = tuple[str, ...]

DEFAULT_RULES: tuple[Rule, ...] = (
    ("docs/*", "none", "documentation"),
    ("*.md", "none", "documentation"),
    ("*.rst", "none", "documentation"),
    (".github/*", "none", "upstream CI configuration"),
    (".ci/*", "none", "upstream CI configuration"),
    ("benchmarks/*", "none", "benchmarks are not tests"),
    (
        "torch/include/*",
        "none",
        "wheel headers: the operator surface they declare is tracked through native_functions.yaml",
        "wheels",
    ),
    (
        "torch/lib/*",
        "none",
        "compiled libraries: a wheel has no kernel sources; kernel changes are tracked through "
        "native_functions.yaml and derivatives.yaml entries",
        "wheels",
    ),
    ("*.so", "none", "compiled library (see torch/lib)", "wheels"),
    ("*.pyi", "none", "type stubs"),
    ("*.jinja", "none", "code-generation templates of the compiler (torch.compile only)"),
    ("*LICENSE*", "none", "license text"),
    ("torch/bin/*", "none", "C++ test binaries shipped in the wheel", "wheels"),
    ("torch/share/*", "none", "CMake package files shipped in the wheel", "wheels"),
    ("*.dist-info/*", "none", "package metadata"),
    ("CMakeLists.txt", "all", "build configuration (conservative)"),
    ("*/CMakeLists.txt", "all", "build configuration (conservative)"),
    ("cmake/*", "all", "build configuration (conservative)"),
    ("setup.py", "all", "build configuration (conservative)"),
    ("c10/*", "all", "core C++ used by every op (conservative)"),
    ("aten/src/ATen/core/*", "all", "core ATen used by every op (conservative)"),
    ("torch/csrc/*", "all", "core C++ bindings (conservative)"),
    (
        "torch/testing/_internal/common_device_type.py",
        "all",
        "device-generic test machinery (conservative)",
    ),
    ("torch/testing/_internal/common_utils.py", "all", "test machinery (conservative)"),
)


class PathRules:
    name = "path-rules"
    closeness = 0.3
    only_unexplained = True

    def map(self, ctx: SignalContext) -> SignalResult:
        rules = ctx.config.path_rules if ctx.config.path_rules is not None else DEFAULT_RULES
        result = SignalResult()
        uni = ctx.universe
        everything: dict[str, list[str]] = {}
        for unit in ctx.units:
            if unit.key in ctx.explained or unit.kind not in ("symbol", "file"):
                continue
            for rule in rules:
                glob, action, reason = rule[0], rule[1], rule[2]
                if len(rule) > 3 and rule[3] != ctx.facts.source_kind:
                    continue
                if not fnmatchcase(unit.path, glob):
                    continue
                if action == "none":
                    result.explained[unit.key] = f"path rule {glob}: {reason}; no test"
                elif action == "all":
                    everything.setdefault(f"path rule {glob}: {reason}", []).append(unit.path)
                    result.explained[unit.key] = f"path rule {glob}: {reason}; all variants"
                elif action.startswith("files:"):
                    pattern = action.removeprefix("files:")
                    files = [f for f in uni.files if fnmatchcase(f, pattern)]
                    for f in files:
                        result.add(
                            (v.test_id for v in uni.by_file[f]), f"path rule {glob}: {reason}"
                        )
                    result.explained[unit.key] = f"path rule {glob}: {len(files)} file(s)"
                break
        for why, paths in sorted(everything.items()):
            shown = sorted(set(paths))
            more = f" (+{len(shown) - 3})" if len(shown) > 3 else ""
            result.add((v.test_id for v in uni.variants), f"{why}: {', '.join(shown[:3])}{more}")
        return result
