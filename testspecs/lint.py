"""Health checks over a set of spec files (torch-spyre runs the same ones on its configs).

* duplicates: one name listed by two entries of the same test file that rule 4 cannot tell apart;
* dead patterns: names that match no collectable test of their file;
* uncovered tests: collectable tests that no entry lists, in files with no explicit
  ``unlisted_test_mode`` (nobody decided what happens to them) or with no spec file entry at all;
* expired xfails: ``x-relay/v1.expires`` in the past on an xfail / xfail_strict entry;
* variant names: a generated variant (``test_add_spyre_float16``) where a base name belongs.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path

from testspecs.collect import CollectedTest, collect_file
from testspecs.errors import SourceLoc, SpecError
from testspecs.loader import LoadedSpec, load_files
from testspecs.names import DTYPE_TOKENS

_DEVICE_TOKENS = ("spyre", "privateuse1", "cpu", "cuda", "meta")
_VARIANT_RE = re.compile(
    r"_(" + "|".join(_DEVICE_TOKENS) + r")(_(" + "|".join(DTYPE_TOKENS) + r"))*$"
)


@dataclass(frozen=True)
class Finding:
    kind: (
        str  # error | duplicate | dead-pattern | uncovered | expired | variant-name | missing-file
    )
    loc: SourceLoc
    message: str

    def __str__(self) -> str:
        return f"{self.loc}: {self.kind}: {self.message}"


def _resolve_path(spec_path: str, roots: dict[str, Path]) -> list[Path]:
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
) -> list[Finding]:
    try:
        specs = load_files(paths)
    except SpecError as e:
        return [
            Finding("error", i.loc, f"{'.'.join(map(str, i.path))}: {i.message}") for i in e.issues
        ]
    today = today or dt.date.today()
    findings: list[Finding] = []
    findings += _expired(specs, today)
    findings += _variant_names(specs)
    findings += _duplicates(specs)
    roots: dict[str, Path] = {}
    if tests_root is not None:
        roots["${TORCH_ROOT}"] = tests_root
    if device_root is not None:
        roots["${TORCH_DEVICE_ROOT}"] = device_root
    if roots:
        findings += _against_tests(specs, roots)
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


def _variant_names(specs: list[LoadedSpec]) -> list[Finding]:
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
                    if (p.is_literal and _VARIANT_RE.search(p.method.text)) or cls_variant:
                        out.append(
                            Finding(
                                "variant-name",
                                _where(t, s.file),
                                f"{p.text!r} is a generated variant; list the base name instead",
                            )
                        )
    return out


def _duplicates(specs: list[LoadedSpec]) -> list[Finding]:
    seen: dict[tuple[str, str, str], tuple[SourceLoc, str]] = {}
    out = []
    for s in specs:
        for f in s.document.files:
            for t in f.tests:
                dtype_key = t.edits.dtypes.model_dump_json()
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


def _against_tests(specs: list[LoadedSpec], roots: dict[str, Path]) -> list[Finding]:
    out: list[Finding] = []
    covered_files: set[Path] = set()
    collected: dict[Path, list[CollectedTest]] = {}

    def tests_of(p: Path) -> list[CollectedTest]:
        if p not in collected:
            try:
                collected[p] = collect_file(p)
            except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
                collected[p] = []
        return collected[p]

    listed: dict[Path, set[str]] = {}
    explicit_unlisted: dict[Path, bool] = {}
    for s in specs:
        for f in s.document.files:
            files = _resolve_path(f.path, roots)
            if not files:
                out.append(Finding("missing-file", _where(f, s.file), f"{f.path} matches no file"))
                continue
            covered_files.update(files)
            tests = [t for p in files for t in tests_of(p)]
            for p in files:
                explicit_unlisted[p] = explicit_unlisted.get(p, False) or (
                    "unlisted_test_mode" in f.model_fields_set
                )
            for entry in f.tests:
                for pat in entry.patterns:
                    hits = [t for t in tests if pat.matches(t.cls, t.method)]
                    if not hits:
                        out.append(
                            Finding(
                                "dead-pattern",
                                _where(entry, s.file),
                                f"{pat.text!r} matches no test of {f.path}",
                            )
                        )
                    for p in files:
                        listed.setdefault(p, set()).update(t.name for t in hits if t in tests_of(p))
    # Uncovered files: the whole tests root (upstream's test tree); for the device root only the
    # folders the specs point into (a backend repository holds much more than its test suites).
    candidates: set[Path] = set()
    if "${TORCH_ROOT}" in roots:
        candidates.update(roots["${TORCH_ROOT}"].rglob("test_*.py"))
    if "${TORCH_DEVICE_ROOT}" in roots:
        device = roots["${TORCH_DEVICE_ROOT}"].resolve()
        for folder in {p.parent for p in covered_files if p.resolve().is_relative_to(device)}:
            candidates.update(folder.glob("test_*.py"))
    if candidates:
        for p in sorted(candidates):
            tests = tests_of(p)
            if not tests:
                continue
            if p not in covered_files:
                out.append(
                    Finding(
                        "uncovered",
                        SourceLoc(str(p), tests[0].line, 1),
                        f"{len(tests)} device-generic tests and no spec file entry covers this file",
                    )
                )
                continue
            if explicit_unlisted.get(p):
                continue
            for t in tests:
                if t.name not in listed.get(p, set()):
                    out.append(
                        Finding(
                            "uncovered",
                            SourceLoc(str(p), t.line, 1),
                            f"{t.name} is listed by no entry and the file sets no unlisted_test_mode",
                        )
                    )
    return out
