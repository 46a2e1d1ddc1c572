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
        inert_functions: set[str] = set()
        for unit in ctx.units:
            if unit.kind != "symbol" or unit.status != "modified":
                continue
            qual = unit.key.split("::", 1)[1]
            if qual in ("<module>", "*"):
                continue
            old = _find(ctx.tree(unit.path, at_base=True), qual)
            new = _find(ctx.tree(unit.path), qual)
            if old is None or new is None:
                continue
            changed = changed_nodes(old.body, new.body)
            if changed and all(pattern.search(ast.unparse(n).lower()) for n in changed):
                devices = sorted(
                    {m for n in changed for m in pattern.findall(ast.unparse(n).lower())}
                )
                result.explained[unit.key] = f"changes only code for {', '.join(devices)}"
                if is_db_file(unit.path):
                    inert_functions.add(qual.split(".", 1)[0])
        self._entries(ctx, pattern, inert_functions, result)
        return result

    def _entries(
        self, ctx: SignalContext, pattern: re.Pattern[str], inert: set[str], result: SignalResult
    ) -> None:
        modified = [d for d in ctx.facts.db_entries if d.status == "modified"]
        if not modified:
            return
        calls: dict[tuple[str, bool], dict[str, ast.Call]] = {}
        for d in modified:
            sides = []
            for at_base in (True, False):
                key = (d.file, at_base)
                if key not in calls:
                    calls[key] = _calls(ctx, d.file, at_base)
                sides.append(calls[key].get(d.name))
            old, new = sides
            reasons_ok = all(
                _inert_reason(r, inert) for r in d.reasons if r != "definition changed"
            )
            if not reasons_ok:
                continue
            if "definition changed" in d.reasons:
                if old is None or new is None:
                    continue
                diff = changed_arguments(old, new)
                if not diff or not all(pattern.search(ast.unparse(n).lower()) for n in diff):
                    continue
            result.explained[f"{d.kind}:{d.name}"] = "entry changed only for other devices"


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
