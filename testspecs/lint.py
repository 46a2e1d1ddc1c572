"""Health checks over a set of spec files (torch-spyre runs the same ones on its configs).

* duplicates: one name listed by two entries of the same test file that rule 4 cannot tell apart;
* overlaps: one test (of the file, as collected) matched by two entries of its file through
  different names (a pattern and a literal, two patterns) that rule 4 cannot tell apart: only the
  first applies. A later entry that names the test literally never applies to it (``overlap``, an
  error); a later pattern is the usual "exceptions first, the rule after" idiom and is a warning
  (``overlap-pattern``);
* dead patterns: names that match no collectable test of their file. With a ``collector`` (what
  pytest collects for the device, see :mod:`testspecs.collect`) tests a module generates at
  import time count; without one the source is read;
* warnings, for names that exist but can never run on the device: ``restricted`` (every test
  they match is in a class instantiated ``only_for`` other devices) and ``dtype-filtered``
  (every variant they match is removed by the spec's dtypes, e.g. a float64-only test under
  ``supported_dtypes: [float16]``);
* uncovered tests: collectable tests that no entry lists, in files with no explicit
  ``unlisted_test_mode`` (nobody decided what happens to them); a file no entry names at all is
  a warning (``uncovered-file``: nothing of it runs on the device, which may be the intent);
* expired xfails: ``x-relay/v1.expires`` in the past on an xfail / xfail_strict entry;
* variant names: a generated variant (``test_add_spyre_float16``) where a base name belongs.
"""

from __future__ import annotations

import ast
import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testspecs.collect import (
    CollectedTest,
    CollectedVariant,
    CollectionError,
    Collector,
    collect_file,
)
from testspecs.compiled import CompiledSpec
from testspecs.errors import SourceLoc, SpecError
from testspecs.loader import LoadedSpec, load_files
from testspecs.merge import merge
from testspecs.names import DTYPE_TOKENS, NamePattern, parse_name
from testspecs.resolve import resolve

_DEVICE_TOKENS = ("spyre", "privateuse1", "cpu", "cuda", "meta")
_VARIANT_RE = re.compile(
    r"_(" + "|".join(_DEVICE_TOKENS) + r")(_(" + "|".join(DTYPE_TOKENS) + r"))*$"
)


WARNINGS = frozenset({"restricted", "dtype-filtered", "uncovered-file", "overlap-pattern"})


@dataclass(frozen=True)
class Finding:
    # error | duplicate | overlap | dead-pattern | uncovered | expired | variant-name |
    # missing-file | collection-error; warnings: restricted | dtype-filtered | uncovered-file |
    # overlap-pattern
    kind: str
    loc: SourceLoc
    message: str

    @property
    def severity(self) -> str:
        return "warning" if self.kind in WARNINGS else "error"

    def __str__(self) -> str:
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{self.loc}: {prefix}{self.kind}: {self.message}"


def resolve_spec_path(spec_path: str, roots: dict[str, Path]) -> list[Path]:
    """The test files a spec `path` names, with its tokens replaced by `roots`."""
    for token, root in roots.items():
        if spec_path.startswith(token):
            rel = spec_path[len(token) :].lstrip("/")
            return sorted(p for p in root.glob(rel) if p.is_file())
    p = Path(spec_path)
    if p.is_absolute():
        return sorted(q for q in Path("/").glob(spec_path.lstrip("/")) if q.is_file())
    for root in roots.values():
        hits = sorted(q for q in root.glob(spec_path) if q.is_file())
        if hits:
            return hits
    return []


def lint(
    paths: list[str | Path],
    *,
    tests_root: Path | None = None,
    device_root: Path | None = None,
    today: dt.date | None = None,
    collector: Collector | None = None,
    device: str = "spyre",
) -> list[Finding]:
    """Every finding of the spec files at ``paths``; test files are read with ``collector``
    (pytest's view) when given, else from their source."""
    try:
        specs = load_files(paths)
    except SpecError as e:
        return [
            Finding("error", i.loc, f"{'.'.join(map(str, i.path))}: {i.message}") for i in e.issues
        ]
    today = today or dt.date.today()
    findings: list[Finding] = []
    roots: dict[str, Path] = {}
    if tests_root is not None:
        roots["${TORCH_ROOT}"] = tests_root
    if device_root is not None:
        roots["${TORCH_DEVICE_ROOT}"] = device_root
    findings += _expired(specs, today)
    findings += _variant_names(specs, _defined_tests(specs, roots))
    findings += _duplicates(specs)
    if roots:
        try:
            compiled: CompiledSpec | None = CompiledSpec(
                merge(specs).document,
                device=device,
                torch_root=str(tests_root.resolve()) if tests_root else None,
                device_root=str(device_root.resolve()) if device_root else None,
            )
        except SpecError:  # conflicting entries: the duplicate findings above name them
            compiled = None
        findings += _against_tests(specs, roots, collector, compiled)
    return sorted(findings, key=lambda f: (f.loc.file, f.loc.line, f.loc.column, f.kind))


def _where(obj: object, fallback: str) -> SourceLoc:
    return getattr(obj, "loc", None) or SourceLoc(fallback, 1, 1)


def _expired(specs: list[LoadedSpec], today: dt.date) -> list[Finding]:
    out = []
    for s in specs:
        for f in s.document.files:
            for t in f.tests:
                exp = t.ext.expires if t.ext else None
                if (
                    exp is not None
                    and exp < today
                    and t.effective_mode in ("xfail", "xfail_strict")
                ):
                    out.append(
                        Finding(
                            "expired",
                            _where(t, s.file),
                            f"{t.effective_mode} for {t.names} expired on {exp.isoformat()}",
                        )
                    )
    return out


def _defined_tests(specs: list[LoadedSpec], roots: dict[str, Path]) -> frozenset[str]:
    """Test functions the spec's test files define: a base name that happens to end like a
    variant (``test_compare_cpu``) is still a base name."""
    names: set[str] = set()
    for s in specs:
        for f in s.document.files:
            for path in resolve_spec_path(f.path, roots) if roots else []:
                try:
                    tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
                except SyntaxError:
                    continue
                names.update(
                    n.name
                    for n in ast.walk(tree)
                    if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                    and n.name.startswith("test")
                )
    return frozenset(names)


def _variant_names(specs: list[LoadedSpec], defined: frozenset[str] = frozenset()) -> list[Finding]:
    out = []
    for s in specs:
        for f in s.document.files:
            for t in f.tests:
                for p in t.patterns:
                    cls_variant = (
                        p.cls is not None
                        and p.cls.kind == "literal"
                        and p.cls.text.endswith("PRIVATEUSE1")
                    )
                    variant = p.is_literal and p.method.text not in defined
                    if (variant and _VARIANT_RE.search(p.method.text)) or cls_variant:
                        out.append(
                            Finding(
                                "variant-name",
                                _where(t, s.file),
                                f"{p.text!r} is a generated variant; list the base name instead",
                            )
                        )
    return out


def _scope_key(entry: Any) -> str:
    """What rule 4 tells entries of one name apart by: their dtypes and x-relay scope."""
    scope = entry.ext.scope() if entry.ext else ((), (), ())
    return entry.edits.dtypes.model_dump_json() + repr(scope)


def _duplicates(specs: list[LoadedSpec]) -> list[Finding]:
    seen: dict[tuple[str, str, str], tuple[SourceLoc, str]] = {}
    out = []
    for s in specs:
        for f in s.document.files:
            for t in f.tests:
                dtype_key = _scope_key(t)
                for name in t.names:
                    key = (f.path, name, dtype_key)
                    here = _where(t, s.file)
                    if key in seen:
                        first, _ = seen[key]
                        out.append(
                            Finding(
                                "duplicate",
                                here,
                                f"{name!r} for {f.path} is already listed at {first}",
                            )
                        )
                    else:
                        seen[key] = (here, s.file)
    return out


class _Tests:
    """The tests of each file: from the source always (lines, ``only_for``), from pytest when a
    collector is given (generated tests included)."""

    def __init__(self, collector: Collector | None) -> None:
        self.collector = collector
        self.source: dict[Path, list[CollectedTest]] = {}
        self.collected: dict[Path, list[CollectedVariant]] = {}
        self.errors: dict[Path, str] = {}

    def of_source(self, p: Path) -> list[CollectedTest]:
        if p not in self.source:
            try:
                self.source[p] = collect_file(p)
            except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
                self.source[p] = []
        return self.source[p]

    def of_pytest(self, p: Path) -> list[CollectedVariant] | None:
        if self.collector is None:
            return None
        if p not in self.collected:
            try:
                self.collected[p] = self.collector(p)
            except CollectionError as e:
                self.errors[p] = str(e)
                self.collected[p] = []
        return self.collected[p]

    def names(self, p: Path) -> dict[str, int]:
        """Base name -> line (1 when only pytest knows it: generated at import time)."""
        out = {t.name: t.line for t in self.of_source(p)}
        for v in self.of_pytest(p) or []:
            out.setdefault(v.name, 1)
        return out


def _unrunnable(
    pat: NamePattern, variants: list[CollectedVariant], compiled: CompiledSpec | None, path: str
) -> str | None:
    """Why every variant ``pat`` matches is removed by the spec's dtypes, or None."""
    if compiled is None or not variants:
        return None
    dtypes: set[str] = set()
    for v in variants:
        d = resolve(
            compiled,
            f"{path}::{v.test_id.split('::', 1)[-1]}",
            op=v.op,
            dtype=v.dtype,
            module=v.module,
            base=v.name,
        )
        if d.run or not d.rule.startswith("rule 2") or d.dtype is None:
            return None
        dtypes.add(d.dtype)
    return ", ".join(sorted(dtypes))


def _against_tests(
    specs: list[LoadedSpec],
    roots: dict[str, Path],
    collector: Collector | None = None,
    compiled: CompiledSpec | None = None,
) -> list[Finding]:
    out: list[Finding] = []
    covered_files: set[Path] = set()
    tests = _Tests(collector)
    listed: dict[Path, set[str]] = {}
    explicit_unlisted: dict[Path, bool] = {}
    for s in specs:
        for f in s.document.files:
            files = resolve_spec_path(f.path, roots)
            if not files:
                out.append(Finding("missing-file", _where(f, s.file), f"{f.path} matches no file"))
                continue
            covered_files.update(files)
            for p in files:
                explicit_unlisted[p] = explicit_unlisted.get(p, False) or (
                    "unlisted_test_mode" in f.model_fields_set
                )
            for entry in f.tests:
                for pat in entry.patterns:
                    out += _check_pattern(
                        pat, entry, s.file, f.path, files, tests, compiled, listed
                    )
    out += _overlaps(specs, roots, tests)
    for p, message in sorted(tests.errors.items()):
        out.append(Finding("collection-error", SourceLoc(str(p), 1, 1), message))
    # Uncovered files: the whole tests root (upstream's test tree); for the device root only the
    # folders the specs point into (a backend repository holds much more than its test suites).
    candidates: set[Path] = set()
    if "${TORCH_ROOT}" in roots:
        candidates.update(roots["${TORCH_ROOT}"].rglob("test_*.py"))
    if "${TORCH_DEVICE_ROOT}" in roots:
        device = roots["${TORCH_DEVICE_ROOT}"].resolve()
        for folder in {p.parent for p in covered_files if p.resolve().is_relative_to(device)}:
            candidates.update(folder.glob("test_*.py"))
    for p in sorted(candidates):
        # files no spec covers are read from their source: collecting the whole tests root
        # would start one pytest per upstream test file
        names = (
            tests.names(p) if p in covered_files else {t.name: t.line for t in tests.of_source(p)}
        )
        if not names:
            continue
        if p not in covered_files:
            out.append(
                Finding(
                    "uncovered-file",
                    SourceLoc(str(p), min(names.values()), 1),
                    f"{len(names)} device-generic tests and no spec file entry covers this file",
                )
            )
            continue
        if explicit_unlisted.get(p):
            continue
        for name, line in names.items():
            if name not in listed.get(p, set()):
                out.append(
                    Finding(
                        "uncovered",
                        SourceLoc(str(p), line, 1),
                        f"{name} is listed by no entry and the file sets no unlisted_test_mode",
                    )
                )
    return out


def _overlaps(specs: list[LoadedSpec], roots: dict[str, Path], tests: _Tests) -> list[Finding]:
    """Tests matched by two entries of their file that rule 4 cannot tell apart, through
    different names (the same name twice is a duplicate, reported by :func:`_duplicates`)."""
    # (file, test name, scope) -> entries matching it, in spec order: (loc, matching names)
    owners: dict[tuple[Path, str, str], list[tuple[SourceLoc, tuple[str, ...]]]] = {}
    for s in specs:
        for f in s.document.files:
            files = resolve_spec_path(f.path, roots)
            for entry in f.tests:
                key = _scope_key(entry)
                for p in files:
                    for name in tests.names(p):
                        hit = tuple(pt.text for pt in entry.patterns if pt.matches(*_split(name)))
                        if hit:
                            owners.setdefault((p, name, key), []).append(
                                (_where(entry, s.file), hit)
                            )
    # one finding per later entry and first entry, naming the tests they share
    shared: dict[tuple[SourceLoc, SourceLoc, str], list[str]] = {}
    for (_, name, _), entries in owners.items():
        first_loc, first_names = entries[0]
        for loc, names in entries[1:]:
            if set(names) & set(first_names):
                continue  # the same name in both: a duplicate
            literal = any(parse_name(n).is_literal for n in names)
            kind = "overlap" if literal else "overlap-pattern"
            shared.setdefault((loc, first_loc, kind), []).append(name)
    out = []
    for (loc, first_loc, kind), group in sorted(shared.items(), key=lambda kv: str(kv[0][0])):
        tests_hit = sorted(set(group))
        more = len(tests_hit) - 5
        shown = ", ".join(tests_hit[:5]) + (f" and {more} more" if more > 0 else "")
        out.append(
            Finding(
                kind,
                loc,
                f"{len(tests_hit)} test(s) also matched by the entry at {first_loc}, which applies "
                f"first (rule 4): {shown}",
            )
        )
    return out


def _check_pattern(
    pat: NamePattern,
    entry: object,
    spec_file: str,
    spec_path: str,
    files: list[Path],
    tests: _Tests,
    compiled: CompiledSpec | None,
    listed: dict[Path, set[str]],
) -> list[Finding]:
    where = _where(entry, spec_file)
    hits: set[str] = set()
    variants: list[tuple[Path, CollectedVariant]] = []
    for p in files:
        names = tests.names(p)
        mine = {n for n in names if pat.matches(*_split(n))}
        listed.setdefault(p, set()).update(mine)
        hits |= mine
        variants += [(p, v) for v in tests.of_pytest(p) or [] if v.name in mine]
    if tests.collector is not None:
        # generated by pytest for the device: a name only the source has does not run there
        collected = {v.name for _, v in variants}
        restricted = sorted(
            {
                f"{t.name} (only_for={', '.join(t.only_for or ())})"
                for p in files
                for t in tests.of_source(p)
                if t.name in hits - collected
                and t.only_for is not None
                and "privateuse1" not in t.only_for
            }
        )
        if not collected:
            if restricted:
                return [
                    Finding(
                        "restricted",
                        where,
                        f"{pat.text!r} matches only tests of classes instantiated for other "
                        f"devices: {', '.join(restricted)}; they never run on the device "
                        "(`relay specs wrap` writes a wrapper module that instantiates them)",
                    )
                ]
            return [Finding("dead-pattern", where, f"{pat.text!r} matches no test of {spec_path}")]
        by_file: dict[Path, list[CollectedVariant]] = {}
        for p, v in variants:
            by_file.setdefault(p, []).append(v)
        removed = [
            _unrunnable(pat, vs, compiled, p.resolve().as_posix()) for p, vs in by_file.items()
        ]
        if removed and all(r is not None for r in removed):
            return [
                Finding(
                    "dtype-filtered",
                    where,
                    f"{pat.text!r} matches only variants of dtypes the spec's dtypes remove "
                    f"({', '.join(sorted(set(', '.join(r for r in removed if r).split(', '))))}); "
                    "none of them runs on the device",
                )
            ]
        return []
    matched = [t for p in files for t in tests.of_source(p) if pat.matches(t.cls, t.method)]
    if not matched:
        return [Finding("dead-pattern", where, f"{pat.text!r} matches no test of {spec_path}")]
    if all(t.only_for is not None and "privateuse1" not in t.only_for for t in matched):
        classes = sorted({f"{t.cls} (only_for={', '.join(t.only_for or ())})" for t in matched})
        return [
            Finding(
                "restricted",
                where,
                f"{pat.text!r} matches only tests of classes instantiated for other devices: "
                f"{', '.join(classes)}; they never run on the device",
            )
        ]
    return []


def _split(name: str) -> tuple[str | None, str]:
    cls, sep, method = name.rpartition("::")
    return (cls if sep else None), method
