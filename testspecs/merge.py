"""Merging several spec files into one (reference rule 5).

* file entries with the same path concatenate their test blocks; the first ``unlisted_test_mode``
  wins and a different later one is a warning;
* test blocks de-duplicate only when names, tags and edits are identical (the same block with a
  different mode is a conflict);
* global lists are unions by name; a scalar set to different values in two places is an error that
  names both places.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from testspecs.edits import CpuMove
from testspecs.errors import SourceLoc, SpecError, SpecIssue
from testspecs.loader import LoadedSpec
from testspecs.models import FileEntry, GlobalConfig, SpecDocument, SuiteConfig, TestEntry
from testspecs.vocabulary import DtypeNamedItem

_UNKNOWN = SourceLoc("<merged>", 1, 1)


@dataclass
class MergedSpec:
    document: SpecDocument
    sources: list[str]
    warnings: list[SpecIssue] = field(default_factory=list)


def _where(obj: BaseModel) -> SourceLoc:
    return getattr(obj, "loc", None) or _UNKNOWN


class _Merger:
    def __init__(self) -> None:
        self.issues: list[SpecIssue] = []
        self.warnings: list[SpecIssue] = []

    def conflict(
        self, path: tuple[str | int, ...], what: str, a: Any, b: Any, la: SourceLoc, lb: SourceLoc
    ) -> None:
        self.issues.append(SpecIssue(lb, path, f"conflicting {what}: {b!r} here, {a!r} at {la}"))

    def scalars(
        self, path: tuple[str | int, ...], first: BaseModel, other: BaseModel, names: Iterable[str]
    ) -> dict[str, Any]:
        """Combine explicitly set scalars; a value set differently in both is a conflict."""
        update: dict[str, Any] = {}
        for name in names:
            a_set = name in first.model_fields_set
            b_set = name in other.model_fields_set
            a, b = getattr(first, name), getattr(other, name)
            if a_set and b_set and a != b:
                self.conflict((*path, name), name, a, b, _where(first), _where(other))
            elif b_set and not a_set:
                update[name] = b
        return update

    # ---- global ---------------------------------------------------------------------------

    def dtype_items(
        self, path: tuple[str | int, ...], a: list[DtypeNamedItem], b: list[DtypeNamedItem]
    ) -> list[DtypeNamedItem]:
        by_name = {d.name: d for d in a}
        out = list(a)
        for d in b:
            if d.name not in by_name:
                by_name[d.name] = d
                out.append(d)
                continue
            first = by_name[d.name]
            update = self.scalars((*path, d.name), first, d, ["force_xfail"])
            update.update(self.precision((*path, d.name), first, d))
            if update:
                merged = first.model_copy(update=update)
                out[out.index(first)] = merged
                by_name[d.name] = merged
        return out

    def precision(self, path: tuple[str | int, ...], first: Any, other: Any) -> dict[str, Any]:
        pa, pb = first.precision, other.precision
        if pb is None:
            return {}
        if pa is None:
            return {"precision": pb}
        update = self.scalars((*path, "precision"), pa, pb, ["atol", "rtol"])
        return {"precision": pa.model_copy(update=update)} if update else {}

    def named_configs(
        self, path: tuple[str | int, ...], a: list[Any] | None, b: list[Any] | None
    ) -> list[Any] | None:
        if a is None or b is None:
            return a if b is None else b
        by_name = {x.name: x for x in a}
        out = list(a)
        for x in b:
            if x.name not in by_name:
                by_name[x.name] = x
                out.append(x)
                continue
            first = by_name[x.name]
            update = self.scalars((*path, x.name), first, x, ["force_xfail"])
            dtypes = list(first.dtypes)
            known = {d.name: d for d in dtypes}
            for d in x.dtypes:
                if d.name not in known:
                    dtypes.append(d)
                    continue
                upd = self.precision((*path, x.name, "dtypes", d.name), known[d.name], d)
                if upd:
                    dtypes[dtypes.index(known[d.name])] = known[d.name].model_copy(update=upd)
            update["dtypes"] = dtypes
            merged = first.model_copy(update=update)
            out[out.index(first)] = merged
            by_name[x.name] = merged
        return out

    def global_config(self, configs: list[GlobalConfig]) -> GlobalConfig:
        result = configs[0]
        for g in configs[1:]:
            path: tuple[str | int, ...] = ("test_suite_config", "global")
            seed_update = self.scalars(
                (*path, "input_config"), result.input_config, g.input_config, ["seed"]
            )
            result = GlobalConfig.model_construct(
                supported_dtypes=self.dtype_items(
                    (*path, "supported_dtypes"), result.supported_dtypes, g.supported_dtypes
                ),
                supported_ops=self.named_configs(
                    (*path, "supported_ops"), result.supported_ops, g.supported_ops
                ),
                supported_modules=self.named_configs(
                    (*path, "supported_modules"), result.supported_modules, g.supported_modules
                ),
                input_config=g.input_config if seed_update else result.input_config,
                cpu_move=CpuMove.model_construct(
                    functions=list(dict.fromkeys(result.cpu_move.functions + g.cpu_move.functions))
                ),
            )
        return result

    # ---- files ----------------------------------------------------------------------------

    def files(self, entries: list[FileEntry]) -> list[FileEntry]:
        by_path: dict[str, FileEntry] = {}
        order: list[str] = []
        for f in entries:
            if f.path not in by_path:
                by_path[f.path] = f.model_copy(update={"tests": list(f.tests)})
                order.append(f.path)
                continue
            first = by_path[f.path]
            if f.unlisted_test_mode != first.unlisted_test_mode:
                self.warnings.append(
                    SpecIssue(
                        _where(f),
                        ("test_suite_config", "files", f.path, "unlisted_test_mode"),
                        f"unlisted_test_mode {f.unlisted_test_mode!r} ignored: the first file entry "
                        f"for this path ({first.unlisted_test_mode!r} at {_where(first)}) wins",
                        severity="warning",
                    )
                )
            first.tests.extend(self.dedupe(first.tests, f.tests))
        return [by_path[p] for p in order]

    def dedupe(self, existing: list[TestEntry], new: list[TestEntry]) -> list[TestEntry]:
        known = {t.identity(): t for t in existing}
        out = []
        for t in new:
            twin = known.get(t.identity())
            if twin is None:
                known[t.identity()] = t
                out.append(t)
            elif twin.effective_mode != t.effective_mode:
                self.conflict(
                    ("tests", ", ".join(t.names), "mode"),
                    "mode for an identical test block",
                    twin.effective_mode,
                    t.effective_mode,
                    _where(twin),
                    _where(t),
                )
        return out


def merge(specs: Iterable[LoadedSpec]) -> MergedSpec:
    """Merge loaded spec files; raise :class:`SpecError` on conflicting scalars."""
    specs = list(specs)
    if not specs:
        raise SpecError([SpecIssue(_UNKNOWN, (), "no spec files to merge")])
    m = _Merger()
    files = m.files([f for s in specs for f in s.document.files])
    gconf = m.global_config([s.document.global_config for s in specs])
    labels = list(dict.fromkeys(lbl for s in specs for lbl in s.document.test_suite_config.labels))
    if m.issues:
        raise SpecError(m.issues)
    suite = SuiteConfig.model_construct(files=files, global_=gconf, labels=labels, ext=None)
    doc = SpecDocument.model_construct(test_suite_config=suite)
    warnings = [w for s in specs for w in s.warnings] + m.warnings
    return MergedSpec(doc, [s.file for s in specs], warnings)
