"""A spec compiled for resolution: entries with their edits pre-digested, regexes compiled at
load time, literal names indexed by base name and file matching cached per test file
(:func:`compile_spec`, once per spec); the name normalisers and the reference to the entry that
decided. :mod:`testspecs.resolve` decides variants over it.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any

from testspecs.errors import SourceLoc
from testspecs.models import FileEntry, SpecDocument, SupportedModule, SupportedOp, TestEntry
from testspecs.names import NamePattern
from testspecs.vocabulary import DtypeNamedItem

_ALIASES = {"half": "float16"}


def norm_dtype(name: str | None) -> str | None:
    if name is None:
        return None
    bare = str(name).removeprefix("torch.")
    return _ALIASES.get(bare, bare)


def norm_op(name: str) -> str:
    """OpInfo full names use dots (``linalg.norm``); variant names use underscores."""
    return name.replace(".", "_")


@dataclass(frozen=True)
class EntryRef:
    """The spec entry that decided: its file entry path, index and source location."""

    spec_path: str
    index: int
    names: tuple[str, ...]
    loc: SourceLoc | None

    def __str__(self) -> str:
        where = f"{self.loc}: " if self.loc else ""
        return f"{where}tests[{self.index}] {list(self.names)}"


class CompiledEntry:
    """A test entry with its dtype / op / module edits pre-digested."""

    __slots__ = (
        "cpu_move",
        "entry",
        "include",
        "index",
        "mod_exclude",
        "mod_include",
        "op_exclude",
        "op_include",
        "ref",
        "restricted",
        "scope_dtypes",
        "scope_modules",
        "scope_ops",
        "xclude",
    )

    def __init__(self, file: FileEntry, index: int, entry: TestEntry) -> None:
        self.entry = entry
        self.index = index
        e = entry.edits
        self.include: dict[str, DtypeNamedItem] = {
            norm_dtype(d.name) or d.name: d for d in e.dtypes.include
        }
        self.xclude = frozenset(norm_dtype(d.name) for d in e.dtypes.exclude)
        self.restricted = e.is_dtype_restricted()
        self.op_include = {norm_op(o.name): o for o in e.ops.include}
        self.op_exclude = frozenset(norm_op(o.name) for o in e.ops.exclude)
        self.mod_include = frozenset(m.name.rsplit(".", 1)[-1] for m in e.modules.include)
        self.mod_exclude = frozenset(m.name.rsplit(".", 1)[-1] for m in e.modules.exclude)
        self.cpu_move = tuple(e.cpu_move_functions())
        self.ref = EntryRef(file.path, index, tuple(entry.names), entry.loc)
        ext = entry.ext
        self.scope_ops = (
            None if ext is None or ext.ops is None else frozenset(map(norm_op, ext.ops))
        )
        self.scope_modules = (
            None
            if ext is None or ext.modules is None
            else frozenset(m.rsplit(".", 1)[-1] for m in ext.modules)
        )
        self.scope_dtypes = (
            None if ext is None or ext.dtypes is None else frozenset(map(norm_dtype, ext.dtypes))
        )

    def in_scope(self, op_key: str | None, module: str | None, dtype: str | None) -> bool:
        """Whether the entry's x-relay scope (ops / modules / dtypes) admits the variant."""
        if self.scope_ops is not None and op_key not in self.scope_ops:
            return False
        if self.scope_modules is not None and (
            module is None or module.rsplit(".", 1)[-1] not in self.scope_modules
        ):
            return False
        return self.scope_dtypes is None or dtype in self.scope_dtypes


class CompiledFile:
    def __init__(self, file: FileEntry, roots: dict[str, str]) -> None:
        self.file = file
        self.literal: dict[str, list[tuple[CompiledEntry, NamePattern]]] = {}
        self.patterned: list[tuple[CompiledEntry, NamePattern]] = []
        for i, t in enumerate(file.tests):
            ce = CompiledEntry(file, i, t)
            for p in t.patterns:
                if p.is_literal:
                    self.literal.setdefault(p.method.text, []).append((ce, p))
                else:
                    self.patterned.append((ce, p))
        self._file_res = self._file_patterns(file.path, roots)

    @staticmethod
    def _file_patterns(path: str, roots: dict[str, str]) -> list[re.Pattern[str]]:
        pats = []
        expanded = path
        for token, root in roots.items():
            expanded = expanded.replace(token, root.rstrip("/"))
        if "${" not in expanded:
            pats.append(re.compile(fnmatch.translate(expanded)))
        rel = re.sub(r"^\$\{[^}]*\}/?", "", path).lstrip("/")
        pats.append(re.compile(fnmatch.translate(rel)))
        pats.append(re.compile(fnmatch.translate("*/" + rel)))
        return pats

    def covers(self, test_file: str) -> bool:
        return any(p.match(test_file) for p in self._file_res)

    def lookup(self, cls: str | None, method: str) -> list[CompiledEntry]:
        found = [ce for ce, p in self.literal.get(method, ()) if p.matches(cls, method)]
        found += [ce for ce, p in self.patterned if p.matches(cls, method)]
        if len(found) > 1:
            found = sorted({id(c): c for c in found}.values(), key=lambda c: c.index)
        return found


class CompiledSpec:
    """A merged spec prepared for fast resolution."""

    def __init__(
        self,
        document: SpecDocument,
        *,
        device: str = "spyre",
        torch_root: str | None = None,
        device_root: str | None = None,
    ) -> None:
        self.document = document
        self.device = device
        roots = {}
        if torch_root:
            roots["${TORCH_ROOT}"] = torch_root
        if device_root:
            roots["${TORCH_DEVICE_ROOT}"] = device_root
        self.files = [CompiledFile(f, roots) for f in document.files]
        g = document.global_config
        self.g_dtypes = {norm_dtype(d.name) or d.name: d for d in g.supported_dtypes}
        self.g_dtype_set = frozenset(self.g_dtypes) or None
        self.ops: dict[str, SupportedOp] | None = (
            None if g.supported_ops is None else {norm_op(o.name): o for o in g.supported_ops}
        )
        self.modules: dict[str, SupportedModule] | None = (
            None if g.supported_modules is None else {m.name: m for m in g.supported_modules}
        )
        self.cpu_move = tuple(g.cpu_move.functions)
        self._file_cache: dict[str | None, list[CompiledFile]] = {}
        self._lookup_cache: dict[tuple[int, str | None, str], list[CompiledEntry]] = {}
        self._keep_alive: dict[int, list[CompiledFile]] = {}
        self._dtype_cache: dict[
            tuple[str | None, frozenset[str] | None], frozenset[str] | None
        ] = {}

    def files_for(self, test_file: str | None) -> list[CompiledFile]:
        hit = self._file_cache.get(test_file)
        if hit is None:
            hit = (
                self.files if test_file is None else [f for f in self.files if f.covers(test_file)]
            )
            self._file_cache[test_file] = hit
        return hit

    def lookup(
        self, files: list[CompiledFile], cls: str | None, method: str
    ) -> list[CompiledEntry]:
        """Entries listing ``cls::method`` in ``files`` (memoised: variants share base names)."""
        key = (id(files), cls, method)
        hit = self._lookup_cache.get(key)
        if hit is None:
            if len(self._lookup_cache) > 500_000:
                self._lookup_cache.clear()
            self._keep_alive[id(files)] = files  # the id in the key must stay this list's
            hit = []
            for f in files:
                hit += f.lookup(cls, method)
            self._lookup_cache[key] = hit
        return hit

    def module_config(self, module: str) -> SupportedModule | None:
        if self.modules is None:
            return None
        hit = self.modules.get(module)
        if hit is None:  # torch.nn.Linear, nn.Linear and Linear name the same module
            short = module.rsplit(".", 1)[-1]
            hit = next((m for n, m in self.modules.items() if n.rsplit(".", 1)[-1] == short), None)
        return hit


def compile_spec(spec: Any, **kwargs: Any) -> CompiledSpec:
    if isinstance(spec, CompiledSpec):
        return spec
    document = getattr(spec, "document", spec)
    if not isinstance(document, SpecDocument):
        raise TypeError(f"not a spec: {type(spec).__name__}")
    return CompiledSpec(document, **kwargs)
