"""Change facts between two revisions of an upstream source: stage 1's raw material.

``compute_change_facts(source, base, head)`` returns a :class:`ChangeFacts`: the changed files,
and for Python files the changed functions and classes, the changed native_functions.yaml /
derivatives.yaml entries, and the changed OpInfo / ModuleInfo entries, each with a status and
the reasons. Every model is pydantic and JSON-serializable; the ``changed_*`` helpers give the
sets later stages consume.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from upstream.base import FileChange, FileStatus, ResolvedRevision, UpstreamSource
from upstream.changes import opinfo as opinfo_mod
from upstream.changes import parsers
from upstream.changes import python as py
from upstream.changes import yaml_entries as ye

log = logging.getLogger(__name__)

# Bump when the shape or meaning of ChangeFacts changes; cached facts of another version are
# recomputed. 1: first version.
FACTS_VERSION = 1

Status = Literal["added", "removed", "modified"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class SymbolChange(_Model):
    qualname: str
    kind: Literal["function", "class", "module"]
    status: Status


class PythonFileChange(_Model):
    path: str
    status: Status
    symbols: list[SymbolChange] = Field(default_factory=list)
    parse_error: str | None = None  # set when a side could not be parsed: treat as all changed


class YamlEntryChange(_Model):
    name: str  # overload name: "add.Tensor"
    op: str  # base operator: "add"
    status: Status
    fields: list[str] = Field(default_factory=list)
    dispatch_keys: list[str] = Field(default_factory=list)


class DbEntryChange(_Model):
    name: str  # "add", "linalg.norm.subgradients_at_zero", "torch.nn.Linear"
    kind: Literal["opinfo", "moduleinfo"]
    info_class: str
    file: str
    status: Status
    reasons: list[str] = Field(default_factory=list)


class BehaviourChange(_Model):
    """An OpInfo entry that behaves differently on CPU at head (its fingerprints under both
    torches differ: :mod:`upstream.changes.behaviour`), at ``dtypes`` (empty: every dtype)."""

    name: str  # "combinations", "linalg.norm.subgradients_at_zero"
    dtypes: list[str] = Field(default_factory=list)
    reasons: list[str] = Field(default_factory=list)


class ChangeFacts(_Model):
    facts_version: int = FACTS_VERSION
    source_kind: str
    base: ResolvedRevision
    head: ResolvedRevision
    files: list[FileChange]
    python: list[PythonFileChange]
    native_functions: list[YamlEntryChange]
    derivatives: list[YamlEntryChange]
    db_entries: list[DbEntryChange]
    changed_info_classes: list[str] = Field(default_factory=list)
    # what no source diff shows: OpInfo entries whose CPU behaviour changed (filled in by the
    # release planner when both torches can run; not part of the cached source facts)
    behaviour: list[BehaviourChange] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
    seconds: float = 0.0

    # -- sets for the selector ---------------------------------------------------------

    def changed_paths(self, prefix: str = "") -> set[str]:
        return {f.path for f in self.files if f.path.startswith(prefix)}

    def changed_symbols(self) -> dict[str, set[str]]:
        """path -> qualified names of changed functions / classes (``<module>`` for top-level
        code); files that could not be parsed map to ``{"*"}``."""
        out: dict[str, set[str]] = {}
        for change in self.python:
            names = {s.qualname for s in change.symbols}
            if change.parse_error:
                names.add("*")
            if names:
                out[change.path] = names
        return out

    def changed_tests(self) -> dict[str, set[str]]:
        """Test files under test/ -> changed test functions (``Class.test_x`` or ``test_x``)."""
        return {
            path: {n for n in names if n.rsplit(".", 1)[-1].startswith("test")}
            for path, names in self.changed_symbols().items()
            if path.startswith("test/")
        }

    def changed_ops(self) -> set[str]:
        """Base operator names whose native_functions or derivatives entry changed."""
        return {e.op for e in (*self.native_functions, *self.derivatives)}

    def changed_overloads(self) -> set[str]:
        return {e.name for e in (*self.native_functions, *self.derivatives)}

    def changed_opinfos(self) -> set[str]:
        return {e.name for e in self.db_entries if e.kind == "opinfo"}

    def changed_moduleinfos(self) -> set[str]:
        return {e.name for e in self.db_entries if e.kind == "moduleinfo"}

    def counts(self) -> dict[str, int]:
        def by_status(items: Iterable[FileChange | SymbolChange | YamlEntryChange | DbEntryChange]) -> dict[str, int]:
            result = {"added": 0, "removed": 0, "modified": 0}
            for item in items:
                result[str(item.status)] += 1
            return result

        symbols = [s for f in self.python for s in f.symbols]
        counts = {"files": len(self.files), "python_files": len(self.python),
                  "symbols": len(symbols)}
        for label, items in (
            ("files", self.files),
            ("symbols", symbols),
            ("native_functions", self.native_functions),
            ("derivatives", self.derivatives),
            ("opinfos", [e for e in self.db_entries if e.kind == "opinfo"]),
            ("moduleinfos", [e for e in self.db_entries if e.kind == "moduleinfo"]),
        ):
            for status, n in by_status(items).items():
                counts[f"{label}_{status}"] = n
        counts["native_functions"] = len(self.native_functions)
        counts["derivatives"] = len(self.derivatives)
        counts["changed_ops"] = len(self.changed_ops())
        counts["opinfos"] = len(self.changed_opinfos())
        counts["moduleinfos"] = len(self.changed_moduleinfos())
        return counts


# -- computation ------------------------------------------------------------------------

def compute_change_facts(
    source: UpstreamSource,
    base: ResolvedRevision,
    head: ResolvedRevision,
    *,
    cache_dir: str | Path | None = None,
    paths: Callable[[str], bool] | None = None,
    workers: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> ChangeFacts:
    """Everything that changed from ``base`` to ``head``.

    With ``cache_dir`` the result is stored as JSON keyed by the two resolved revisions and
    read back next time (revisions are immutable once resolved). ``paths`` restricts the
    analysis to the files it accepts (the file list is filtered too). Python files are parsed
    in ``workers`` child processes (default: up to 2, only when there are many files). ``progress``
    hears a line per step of a computation (a cached result is one line).
    """
    say = progress or (lambda _: None)
    cache_file = None
    if cache_dir is not None and paths is None:
        key = hashlib.blake2b(
            f"{source.kind}|{base.resolved}|{head.resolved}|{source.layout.model_dump_json()}|"
            f"{_code_fingerprint()}".encode(),
            digest_size=10,
        ).hexdigest()
        cache_file = Path(cache_dir) / "facts" / f"v{FACTS_VERSION}-{key}.json"
        if cache_file.is_file():
            try:
                cached = ChangeFacts.model_validate_json(cache_file.read_bytes())
                say(f"change facts {base.resolved} -> {head.resolved}: cached ({cache_file})")
                return cached.model_copy(update={"base": base, "head": head})
            except ValueError:
                log.warning("ignoring unreadable change-facts cache %s", cache_file)
    start = time.perf_counter()
    say(f"change facts {base.resolved} -> {head.resolved}: computing (a minute or two, once)")
    facts = _compute(source, base, head, paths, _workers(workers), say)
    say(f"change facts: {len(facts.files)} files, {sum(len(p.symbols) for p in facts.python)} "
        f"Python symbols, {len(facts.db_entries)} OpInfo/ModuleInfo entries "
        f"({time.perf_counter() - start:.0f} s)")
    facts = facts.model_copy(update={"seconds": round(time.perf_counter() - start, 3)})
    if cache_file is not None:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_name(f".{cache_file.name}.{os.getpid()}.tmp")
        tmp.write_text(facts.model_dump_json())
        tmp.replace(cache_file)
    return facts


@functools.cache
def _code_fingerprint() -> str:
    """A hash of the analysis code, so cached facts never outlive a change to how they are
    computed (FACTS_VERSION covers the shape; this covers the details)."""
    digest = hashlib.blake2b(digest_size=8)
    for module in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(module.read_bytes())
    return digest.hexdigest()


class _Side:
    """Parsed Python files of one revision, read in batches and parsed once."""

    def __init__(self, source: UpstreamSource, revision: ResolvedRevision) -> None:
        self.source = source
        self.revision = revision
        self.trees: dict[str, ast.Module | None] = {}
        self.errors: dict[str, str] = {}
        self.symbols: dict[str, dict[str, py.SymbolInfo]] = {}
        self.texts: dict[str, bytes] = {}

    def load(self, paths: Iterable[str]) -> None:
        todo = [p for p in paths if p not in self.trees]
        for path, data in self.source.read_files(self.revision, todo).items():
            self.texts[path] = data
            try:
                self.trees[path] = py.parse(data, path)
            except (SyntaxError, ValueError) as exc:
                self.trees[path] = None
                self.errors[path] = f"{self.revision.label}: {type(exc).__name__}: {exc}"
        for path in todo:
            self.trees.setdefault(path, None)

    def symbols_of(self, path: str) -> dict[str, py.SymbolInfo]:
        if path not in self.symbols:
            tree = self.trees.get(path)
            self.symbols[path] = py.symbols_of(tree, self.texts.get(path, b"")) if tree is not None else {}
        return self.symbols[path]


def _compute(
    source: UpstreamSource,
    base: ResolvedRevision,
    head: ResolvedRevision,
    paths: Callable[[str], bool] | None,
    workers: int,
    say: Callable[[str], None] = lambda _: None,
) -> ChangeFacts:
    files = source.changed_files(base, head)
    if paths is not None:
        files = [f for f in files if paths(f.path)]
    say(f"{len(files)} files differ; parsing the Python ones at both revisions")
    status = {f.path: f.status for f in files}
    errors: list[str] = []
    old, new = _Side(source, base), _Side(source, head)

    py_paths = [f.path for f in files if f.path.endswith(".py")]
    python = _python_changes(source, old, new, py_paths, status, workers)
    say("native_functions.yaml, derivatives.yaml and the OpInfo/ModuleInfo databases")

    native = _yaml_changes(source, base, head, source.layout.native_functions, "func", status, errors)
    derivs = _yaml_changes(source, base, head, source.layout.derivatives, "name", status, errors)
    db_entries, info_classes = _db_changes(source, old, new, files, python)
    return ChangeFacts(
        source_kind=source.kind, base=base, head=head, files=files, python=python,
        native_functions=native, derivatives=derivs, db_entries=db_entries,
        changed_info_classes=info_classes, errors=errors,
    )


PARALLEL_MIN_FILES = 64
CHUNK = 32  # files per request to a parser child


def _workers(requested: int | None) -> int:
    if requested is not None:
        return max(1, requested)
    return max(1, min(2, os.cpu_count() or 1))


def _python_changes(
    source: UpstreamSource,
    old: _Side,
    new: _Side,
    py_paths: list[str],
    status: Mapping[str, FileStatus],
    workers: int,
) -> list[PythonFileChange]:
    """Symbol changes per Python file. OpInfo database files are parsed here (their trees are
    needed again for the entries); the rest go to parser children (:mod:`.parsers`:
    subprocesses, so this works inside a Celery prefork child too) when there are many."""
    results: dict[str, parsers.Outcome] = {}
    rest = [p for p in py_paths if not opinfo_mod.is_db_file(p)]
    db_paths = [p for p in py_paths if opinfo_mod.is_db_file(p)]
    pool = parsers.Parsers(workers) if workers > 1 and len(rest) >= PARALLEL_MIN_FILES else None
    ok = False
    try:
        pending: list[tuple[list[str], list[Future[list[parsers.Outcome]]]]] = []
        for start in range(0, len(rest), 256):  # texts are read and handed over in batches
            batch = rest[start:start + 256]
            before = source.read_files(
                old.revision, [p for p in batch if status[p] != FileStatus.added])
            after = source.read_files(
                new.revision, [p for p in batch if status[p] != FileStatus.removed])
            tasks = [(p, before.get(p), after.get(p)) for p in batch]
            if pool is not None:  # submitted now, collected after the database files
                pending.append((batch, [pool.submit(tasks[i:i + CHUNK])
                                        for i in range(0, len(tasks), CHUNK)]))
            else:
                results.update(zip(batch, [py.file_symbol_changes(*t) for t in tasks], strict=True))
        # meanwhile, here: the OpInfo database files (their trees serve the entries too)
        old.load(p for p in db_paths if status[p] != FileStatus.added)
        new.load(p for p in db_paths if status[p] != FileStatus.removed)
        for path in db_paths:
            error = old.errors.get(path) or new.errors.get(path)
            changes = [] if error else py.diff_symbols(old.symbols_of(path), new.symbols_of(path))
            results[path] = (changes, error)
        for batch, futures in pending:
            outcomes = [o for future in futures for o in future.result()]
            results.update(zip(batch, outcomes, strict=True))
        ok = True
    finally:
        if pool is not None:
            pool.close(kill=not ok)

    python = []
    for path in py_paths:
        changes, error = results[path]
        python.append(PythonFileChange(
            path=path,
            status=status[path].value,
            symbols=[SymbolChange(qualname=n, kind=k, status=st)  # type: ignore[arg-type]
                     for n, k, st in changes],
            parse_error=error,
        ))
    return python


def _yaml_changes(
    source: UpstreamSource,
    base: ResolvedRevision,
    head: ResolvedRevision,
    path: str,
    key_field: str,
    status: Mapping[str, FileStatus],
    errors: list[str],
) -> list[YamlEntryChange]:
    if path not in status:
        return []
    sides = []
    for revision in (base, head):
        data = source.read_files(revision, [path]).get(path)
        try:
            sides.append(ye.load_entries(data, key_field))
        except ValueError as exc:
            errors.append(f"{path} at {revision.label}: {exc}")
            return []
    return [
        YamlEntryChange(name=d.name, op=d.op, status=d.status, fields=list(d.fields),  # type: ignore[arg-type]
                        dispatch_keys=list(d.dispatch_keys))
        for d in ye.diff_entries(sides[0], sides[1])
    ]


def _db_changes(
    source: UpstreamSource,
    old: _Side,
    new: _Side,
    files: list[FileChange],
    python: list[PythonFileChange],
) -> tuple[list[DbEntryChange], list[str]]:
    if not any(opinfo_mod.is_db_file(f.path) for f in files):
        return [], []
    prefix = opinfo_mod.TESTING_INTERNAL
    sides = []
    for side in (old, new):
        db_paths = [p for p in source.list_files(side.revision, prefix) if opinfo_mod.is_db_file(p)]
        side.load(db_paths)
        sides.append({p: t for p in db_paths if (t := side.trees.get(p)) is not None})
    old_entries = opinfo_mod.entries_of(sides[0])
    new_entries = opinfo_mod.entries_of(sides[1])

    changed: set[str] = set()
    info_classes: set[str] = set()
    for change in python:
        if not opinfo_mod.is_db_file(change.path):
            continue
        for sym in change.symbols:
            if sym.status == "removed" or "." in sym.qualname:
                continue
            if sym.kind == "function":
                changed.add(sym.qualname)
            elif sym.kind == "class" and sym.qualname.endswith("Info"):
                info_classes.add(sym.qualname)
    # methods of Info classes (e.g. OpInfo.sample_inputs) make their class count as changed
    for change in python:
        if opinfo_mod.is_db_file(change.path):
            for sym in change.symbols:
                owner = sym.qualname.split(".", 1)[0]
                if "." in sym.qualname and owner.endswith("Info"):
                    info_classes.add(owner)
    functions: dict[str, frozenset[str]] = {}
    for path in sides[1]:
        for name, info in new.symbols_of(path).items():
            if info.kind == "function" and "." not in name and name not in functions:
                functions[name] = info.names()
    why = opinfo_mod.effectively_changed(functions, changed)
    diffs = opinfo_mod.diff_db_entries(old_entries, new_entries, why)
    entries = [
        DbEntryChange(name=d.name, kind=d.kind, info_class=d.info_class, file=d.file,  # type: ignore[arg-type]
                      status=d.status, reasons=list(d.reasons))  # type: ignore[arg-type]
        for d in diffs
    ]
    return entries, sorted(info_classes)


def facts_to_json(facts: ChangeFacts, *, indent: int | None = 2) -> str:
    """JSON with the counts and the consumer sets alongside the raw facts."""
    payload = json.loads(facts.model_dump_json())
    payload["counts"] = facts.counts()
    payload["changed_ops"] = sorted(facts.changed_ops())
    payload["changed_opinfos"] = sorted(facts.changed_opinfos())
    payload["changed_moduleinfos"] = sorted(facts.changed_moduleinfos())
    return json.dumps(payload, indent=indent)
