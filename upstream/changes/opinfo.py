"""OpInfo and ModuleInfo database entries, found statically in the testing sources.

Entries are the ``XxxInfo(...)`` calls written outside functions in the OpInfo modules
(``torch/testing/_internal/opinfo/**``, ``common_methods_invocations.py``) and in
``common_modules.py``: ``OpInfo``, ``UnaryUfuncInfo``, ``PythonRefInfo``, ``ModuleInfo``, ...
(``DecorateInfo`` and ``AliasInfo`` are parts of entries, not entries). An entry's name is its
first argument (or ``name=``), with ``.variant`` appended for ``variant_test_name`` (Python
reference entries: ``torch_opinfo_variant_name``; ``.*`` when it is computed, as in
``*(OpInfo('index_reduce', variant_test_name=t) for t in ...)``), ``_foreach_`` prepended for ForeachFuncInfo,
as at run time; for ModuleInfo it is the module expression, e.g. ``torch.nn.Linear``. Python
reference entries also count as changed when the OpInfo they inherit from changed.

An entry counts as changed when its own call changed (normalized AST) or when a function it
names, such as ``sample_inputs_func=sample_inputs_add`` or ``ref=reference_foo``, changed
directly or through a helper it calls that is defined in the same set of files.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

TESTING_INTERNAL = "torch/testing/_internal/"
DB_FILES = (
    f"{TESTING_INTERNAL}common_methods_invocations.py",
    f"{TESTING_INTERNAL}common_modules.py",
)
DB_DIRS = (f"{TESTING_INTERNAL}opinfo/",)
NOT_ENTRIES = frozenset({"DecorateInfo", "AliasInfo", "SampleInput", "ErrorInput"})


def is_db_file(path: str) -> bool:
    return path.endswith(".py") and (path in DB_FILES or path.startswith(DB_DIRS))


@dataclass(frozen=True)
class DbEntry:
    key: str  # unique name in the database (duplicates get "#2", "#3", ...)
    kind: str  # "opinfo" | "moduleinfo"
    info_class: str
    file: str
    digest: str
    names: frozenset[str] = field(default_factory=frozenset)
    inherits: str = ""  # Python reference entries: the OpInfo they copy their arguments from


@dataclass(frozen=True)
class DbEntryDiff:
    name: str
    kind: str
    info_class: str
    file: str
    status: str  # "added" | "removed" | "modified"
    reasons: tuple[str, ...] = ()


def _callee(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _constant_kwargs(call: ast.Call) -> dict[str, str]:
    return {kw.arg: str(kw.value.value) for kw in call.keywords
            if kw.arg and isinstance(kw.value, ast.Constant) and kw.value.value is not None}


def _entry_name(call: ast.Call, info_class: str) -> str:
    first: ast.expr | None = call.args[0] if call.args else None
    for kw in call.keywords:
        if kw.arg in ("name", "module_cls") and first is None:
            first = kw.value
    consts = _constant_kwargs(call)
    # Python reference entries take the variant of the OpInfo they inherit from
    variant = consts.get("variant_test_name") or consts.get("torch_opinfo_variant_name", "")
    if not variant and any(kw.arg == "variant_test_name" for kw in call.keywords):
        variant = "*"  # computed in a loop or comprehension: every variant of the name
    if first is None:
        base = f"<{info_class}>"
    elif isinstance(first, ast.Constant):
        base = str(first.value)
        if info_class == "ForeachFuncInfo":  # ForeachFuncInfo("add") is "_foreach_add"
            base = f"_foreach_{base}"
    else:
        base = ast.unparse(first)
    return f"{base}.{variant}" if variant else base


def _entry_calls(tree: ast.Module) -> Iterable[ast.Call]:
    """Info calls in module-level code, outermost only, in source order."""
    stack: list[ast.AST] = [s for s in tree.body
                            if not isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
    stack.reverse()
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        if isinstance(node, ast.Call):
            name = _callee(node)
            if name.endswith("Info") and name not in NOT_ENTRIES:
                yield node
                continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def entries_of(trees: Mapping[str, ast.Module]) -> dict[str, DbEntry]:
    """key -> entry over several files (paths sorted, so duplicate numbering is stable)."""
    found: dict[str, DbEntry] = {}
    for path in sorted(trees):
        for call in _entry_calls(trees[path]):
            info_class = _callee(call)
            kind = "moduleinfo" if info_class == "ModuleInfo" else "opinfo"
            base = _entry_name(call, info_class)
            key, n = base, 1
            while key in found:
                n += 1
                key = f"{base}#{n}"
            text = ast.dump(call, annotate_fields=False, include_attributes=False)
            consts = _constant_kwargs(call)
            inherits = consts.get("torch_opinfo_name", "")
            if inherits and consts.get("torch_opinfo_variant_name"):
                inherits += "." + consts["torch_opinfo_variant_name"]
            found[key] = DbEntry(
                key=key, kind=kind, info_class=info_class, file=path,
                digest=hashlib.blake2b(text.encode(), digest_size=12).hexdigest(),
                names=frozenset(n.id for n in ast.walk(call) if isinstance(n, ast.Name)),
                inherits=inherits,
            )
    return found


def effectively_changed(
    functions: Mapping[str, frozenset[str]], changed: set[str]
) -> dict[str, str]:
    """Top-level function name -> the changed function that makes it changed: itself, or a
    helper it calls, transitively. ``functions`` maps each function to the names it uses."""
    callers: dict[str, set[str]] = {}
    for name, used in functions.items():
        for callee in used:
            if callee in functions and callee != name:
                callers.setdefault(callee, set()).add(name)
    why = {name: name for name in sorted(changed)}
    queue = list(why)
    while queue:
        callee = queue.pop(0)
        for caller in sorted(callers.get(callee, ())):
            if caller not in why:
                why[caller] = why[callee]
                queue.append(caller)
    return why


def diff_db_entries(
    old: Mapping[str, DbEntry],
    new: Mapping[str, DbEntry],
    changed_functions: Mapping[str, str],
) -> list[DbEntryDiff]:
    out: dict[str, DbEntryDiff] = {}
    for key in sorted(old.keys() | new.keys()):
        a, b = old.get(key), new.get(key)
        if a is None and b is not None:
            out[key] = DbEntryDiff(key, b.kind, b.info_class, b.file, "added", ("added",))
            continue
        if b is None and a is not None:
            out[key] = DbEntryDiff(key, a.kind, a.info_class, a.file, "removed", ("removed",))
            continue
        assert a is not None and b is not None
        reasons = []
        if a.digest != b.digest:
            reasons.append("definition changed")
        for name in sorted(b.names & changed_functions.keys()):
            origin = changed_functions[name]
            reasons.append(f"uses changed {name}" if origin == name
                           else f"uses {name}, which calls changed {origin}")
        if reasons:
            out[key] = DbEntryDiff(key, b.kind, b.info_class, b.file, "modified", tuple(reasons))
    # Python reference entries copy the arguments of the OpInfo they name
    for key, b in sorted(new.items()):
        parent = out.get(b.inherits) if b.inherits else None
        if parent is None or parent.status == "added" or key == b.inherits:
            continue
        reason = f"inherits from changed {b.inherits}"
        mine = out.get(key)
        if mine is None:
            out[key] = DbEntryDiff(key, b.kind, b.info_class, b.file, "modified", (reason,))
        elif mine.status == "modified":
            out[key] = DbEntryDiff(key, b.kind, b.info_class, b.file, "modified",
                                   (*mine.reasons, reason))
    return [out[k] for k in sorted(out)]
