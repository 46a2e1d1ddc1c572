"""Signal: changes that only touch code paths of other devices select nothing.

A changed function, method or database entry is compared statement by statement (and, for an
entry, argument by argument and list element by list element) between base and head; when every
difference mentions another device (``xpu``, ``cuda``, ``mps`` ...: an ``elif device_type ==
"xpu"`` branch, a ``backward_dtypesIfXPU`` attribute, a ``DecorateInfo(..., device_type="xpu")``)
the change cannot reach the backend. Such units are accounted for here and hidden from the
signals after this one; anything else is left to them.
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Iterable, Sequence
from functools import partial

from selector.signals.base import SignalContext, SignalResult
from selector.signals.dbentries import entry_calls_with_nodes
from upstream.changes.opinfo import is_db_file

_COMPOUND = (ast.If, ast.For, ast.While, ast.With, ast.Try)


class OtherDevicesOnly:
    name = "other-devices-only"
    closeness = 0.0
    only_unexplained = False
    excludes_units = True  # units it explains are not shown to later signals

    def map(self, ctx: SignalContext) -> SignalResult:
        result = SignalResult()
        pattern = _device_pattern(ctx.config.other_devices)
        kind = f"{self.name}:{','.join(sorted(d.lower() for d in ctx.config.other_devices))}"
        units: list[tuple[str, str, str]] = []  # (unit key, path, qualified name)
        by_path: dict[str, list[str]] = {}
        for unit in ctx.units:
            if unit.kind != "symbol" or unit.status != "modified":
                continue
            qual = unit.key.split("::", 1)[1]
            if qual in ("<module>", "*"):
                continue
            units.append((unit.key, unit.path, qual))
            by_path.setdefault(unit.path, []).append(qual)
        answers = {
            path: ctx.file_facts(
                kind,
                ((path, True), (path, False)),
                quals,
                partial(_symbols_only_for, ctx, path, pattern=pattern),
            )
            for path, quals in by_path.items()
        }
        inert_functions: set[str] = set()
        for key, path, qual in units:
            why = answers[path].get(qual)
            if why:
                result.explained[key] = why
                if is_db_file(path):
                    inert_functions.add(qual.split(".", 1)[0])
        self._entries(ctx, pattern, kind, inert_functions, result)
        return result

    def _entries(
        self,
        ctx: SignalContext,
        pattern: re.Pattern[str],
        kind: str,
        inert: set[str],
        result: SignalResult,
    ) -> None:
        modified = [d for d in ctx.facts.db_entries if d.status == "modified"]
        if not modified:
            return
        todo = [
            d
            for d in modified
            if all(_inert_reason(r, inert) for r in d.reasons if r != "definition changed")
        ]
        by_file: dict[str, list[str]] = {}
        for d in todo:
            if "definition changed" in d.reasons:
                by_file.setdefault(d.file, []).append(d.name)
        only_other = {
            path: ctx.file_facts(
                f"{kind}:entries",
                ((path, True), (path, False)),
                names,
                partial(_entries_only_for, ctx, path, pattern=pattern),
            )
            for path, names in by_file.items()
        }
        for d in todo:
            if "definition changed" in d.reasons and not only_other[d.file].get(d.name):
                continue
            result.explained[f"{d.kind}:{d.name}"] = "entry changed only for other devices"


def _symbols_only_for(
    ctx: SignalContext, path: str, quals: list[str], pattern: re.Pattern[str]
) -> dict[str, str | None]:
    """qualified name -> why its change reaches only other devices, None when it may reach
    ours (or is not found on both sides)."""
    old_tree, new_tree = ctx.tree(path, at_base=True), ctx.tree(path)
    out: dict[str, str | None] = {}
    for qual in quals:
        old, new = _find(old_tree, qual), _find(new_tree, qual)
        out[qual] = None
        if old is None or new is None:
            continue
        changed = changed_nodes(old.body, new.body)
        if changed and all(pattern.search(ast.unparse(n).lower()) for n in changed):
            devices = sorted({m for n in changed for m in pattern.findall(ast.unparse(n).lower())})
            out[qual] = f"changes only code for {', '.join(devices)}"
    return out


def _entries_only_for(
    ctx: SignalContext, path: str, names: list[str], pattern: re.Pattern[str]
) -> dict[str, bool]:
    """entry name -> whether every argument of its call that differs mentions another
    device."""
    old_calls, new_calls = _calls(ctx, path, True), _calls(ctx, path, False)
    out: dict[str, bool] = {}
    for name in names:
        old, new = old_calls.get(name), new_calls.get(name)
        if old is None or new is None:
            out[name] = False
            continue
        diff = changed_arguments(old, new)
        out[name] = bool(diff) and all(pattern.search(ast.unparse(n).lower()) for n in diff)
    return out


def _inert_reason(reason: str, inert: set[str]) -> bool:
    words = re.findall(r"changed (\w+)", reason)
    return bool(words) and all(w in inert for w in words)


def _calls(ctx: SignalContext, path: str, at_base: bool) -> dict[str, ast.Call]:
    tree = ctx.tree(path, at_base=at_base)
    out: dict[str, ast.Call] = {}
    if tree is None:
        return out
    for _cls, name, call in entry_calls_with_nodes(tree):
        key, n = name, 1
        while key in out:
            n += 1
            key = f"{name}#{n}"
        out[key] = call
    return out


def _device_pattern(devices: Iterable[str]) -> re.Pattern[str]:
    return re.compile("|".join(sorted(re.escape(d.lower()) for d in devices)) or "(?!)")


def _find(
    tree: ast.Module | None, qual: str
) -> ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | None:
    if tree is None:
        return None
    body: Sequence[ast.stmt] = tree.body
    node = None
    for part in qual.split("."):
        node = next(
            (
                s
                for s in body
                if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                and s.name == part
            ),
            None,
        )
        if node is None:
            return None
        body = node.body
    return node


def _dump(node: ast.AST) -> str:
    return ast.dump(node, annotate_fields=False, include_attributes=False)


def changed_nodes(old: Sequence[ast.AST], new: Sequence[ast.AST]) -> list[ast.AST]:
    """The smallest statements (or list elements) that differ between two sequences."""
    a, b = [_dump(n) for n in old], [_dump(n) for n in new]
    out: list[ast.AST] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        olds, news = list(old[i1:i2]), list(new[j1:j2])
        if tag == "replace" and len(olds) == len(news):
            for o, n in zip(olds, news, strict=True):
                out += _refine(o, n)
            continue
        if (
            tag == "replace"
            and len(news) == 1
            and isinstance(news[0], ast.If)
            and ([_dump(x) for x in news[0].orelse] == [_dump(x) for x in olds])
        ):
            # a new branch wrapped around the old code: only the new test and body changed
            out += [news[0].test, *news[0].body]
            continue
        out += olds + news
    return out


def _refine(o: ast.AST, n: ast.AST) -> list[ast.AST]:
    if type(o) is not type(n) or not isinstance(o, _COMPOUND):
        return [o, n]
    header = [f for f in o._fields if f not in ("body", "orelse", "finalbody", "handlers")]
    if any(_dump_field(getattr(o, f)) != _dump_field(getattr(n, f)) for f in header):
        return [o, n]
    out: list[ast.AST] = []
    for f in ("body", "orelse", "finalbody", "handlers"):
        if hasattr(o, f):
            out += changed_nodes(getattr(o, f), getattr(n, f))
    return out


def _dump_field(value: object) -> str:
    if isinstance(value, ast.AST):
        return _dump(value)
    if isinstance(value, list):
        return "[" + ",".join(_dump_field(v) for v in value) + "]"
    return repr(value)


def changed_arguments(old: ast.Call, new: ast.Call) -> list[ast.AST]:
    """Differing positional / keyword arguments; list and tuple values element by element."""
    if _dump(old.func) != _dump(new.func) or len(old.args) != len(new.args):
        return [old, new]
    out: list[ast.AST] = []
    for o, n in zip(old.args, new.args, strict=True):
        if _dump(o) != _dump(n):
            out += [o, n]
    okw = {k.arg: k.value for k in old.keywords}
    nkw = {k.arg: k.value for k in new.keywords}
    for key in sorted(okw.keys() | nkw.keys(), key=str):
        old_value, new_value = okw.get(key), nkw.get(key)
        if old_value is None or new_value is None:
            out.append(old_value if old_value is not None else new_value)  # type: ignore[arg-type]
            if key is not None and not any(d in key.lower() for d in ("xpu", "cuda", "hpu", "mps")):
                out[-1] = ast.Tuple(elts=[ast.Name(id=key), out[-1]], ctx=ast.Load())  # type: ignore[list-item]
            continue
        if _dump(old_value) == _dump(new_value):
            continue
        if isinstance(old_value, ast.List | ast.Tuple) and isinstance(
            new_value, ast.List | ast.Tuple
        ):
            out += changed_nodes(old_value.elts, new_value.elts)
        else:
            out += [old_value, new_value]
    return out
