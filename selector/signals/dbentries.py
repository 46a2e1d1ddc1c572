"""Signals: tests parametrized by a changed OpInfo / ModuleInfo entry, across every dtype.

The change facts list the database entries whose call, sample-input function, reference or
helper changed. Every symbol of a database file is accounted for by these two signals: test
variants only see those files through the entries (``op_db``, ``module_db``), so a function no
entry uses reaches no variant. An entry's own change is close (:class:`DatabaseEntries`); a
changed ``*Info`` class reaches every entry built with it, but a definition that every entry
shares says less about any one of them, so it is a signal of its own, further away
(:class:`InfoClasses`): an entry whose own function changed ranks above one that only
inherits a changed class.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from functools import partial

from selector.model import module_key
from selector.signals.base import SignalContext, SignalResult
from upstream.changes.opinfo import is_db_file


class DatabaseEntries:
    name = "opinfo-moduleinfo"
    closeness = 0.9
    only_unexplained = False

    def map(self, ctx: SignalContext) -> SignalResult:
        result = SignalResult()
        uni = ctx.universe
        entry_users: dict[str, list[str]] = {}
        for d in ctx.facts.db_entries:
            name = d.name.split("#", 1)[0]
            unit_key = f"{d.kind}:{d.name}"
            if d.kind == "opinfo":
                variants = uni.by_op.get(name, [])
            else:
                variants = uni.by_module.get(module_key(name), [])
            why = "; ".join(d.reasons) or d.status
            result.add((v.test_id for v in variants), f"{d.kind} {name} {d.status}: {why}")
            dtypes = sorted({v.dtype or "-" for v in variants})
            result.explained[unit_key] = (
                f"{len(variants)} variant(s) over dtypes {', '.join(dtypes)}"
                if variants
                else "entry has no variant in the universe"
            )
            for reason in d.reasons:
                for word in reason.replace(",", " ").split():
                    entry_users.setdefault(word, []).append(name)
        for unit in ctx.units:
            if unit.kind != "symbol" or not is_db_file(unit.path):
                continue
            top = unit.key.split("::", 1)[1].split(".", 1)[0]
            if _is_info_class(top):
                continue  # InfoClasses
            if top in entry_users:
                result.explained[unit.key] = (
                    f"reaches entries {', '.join(sorted(set(entry_users[top]))[:5])}"
                )
            elif top in ("<module>", "*"):
                result.explained[unit.key] = "database lists: entry-level changes listed separately"
            else:
                result.explained[unit.key] = "no database entry uses it (directly or via a helper)"
        return result


class InfoClasses:
    """A changed ``*Info`` class (``OpInfo``, ``ModuleInfo``...): every entry built with it."""

    name = "opinfo-class"
    closeness = 0.6
    only_unexplained = False

    def map(self, ctx: SignalContext) -> SignalResult:
        result = SignalResult()
        uni = ctx.universe
        info_classes: dict[str, list[str]] | None = None
        for unit in ctx.units:
            if unit.kind != "symbol" or not is_db_file(unit.path):
                continue
            qual = unit.key.split("::", 1)[1]
            top = qual.split(".", 1)[0]
            if not _is_info_class(top):
                continue
            if info_classes is None:
                info_classes = _entries_by_class(ctx)
            names = info_classes.get(top, [])
            variants = [v for n in names for v in uni.by_op.get(n, [])]
            variants += [v for n in names for v in uni.by_module.get(module_key(n), [])]
            result.add((v.test_id for v in variants), f"{top} class changed ({qual})")
            result.explained[unit.key] = f"{len(names)} {top} entries, {len(variants)} variant(s)"
        return result


def _is_info_class(name: str) -> bool:
    return name.endswith("Info") and name[:1].isupper()


def _entries_by_class(ctx: SignalContext) -> dict[str, list[str]]:
    """Info class -> entry names at head, read from the database files the source has."""
    files = sorted({u.path for u in ctx.units if is_db_file(u.path)} | set(_db_files(ctx)))
    out: dict[str, list[str]] = {}
    for path in files:
        calls = ctx.file_fact(
            "opinfo-moduleinfo:entries", ((path, False),), partial(_entry_calls, ctx, path)
        )
        for cls, name in calls:
            out.setdefault(cls, []).append(name)
    return out


def _entry_calls(ctx: SignalContext, path: str) -> list[list[str]]:
    tree = ctx.tree(path)
    return [] if tree is None else [[cls, name] for cls, name in entry_calls(tree)]


def _db_files(ctx: SignalContext) -> Iterable[str]:
    return [
        "torch/testing/_internal/common_methods_invocations.py",
        "torch/testing/_internal/common_modules.py",
    ]


def entry_calls(tree: ast.Module) -> Iterable[tuple[str, str]]:
    """(info class, entry name) for ``XxxInfo(...)`` calls outside functions and classes."""
    for cls, name, _ in entry_calls_with_nodes(tree):
        yield cls, name


def entry_calls_with_nodes(tree: ast.Module) -> Iterable[tuple[str, str, ast.Call]]:
    """(info class, entry name, call) for ``XxxInfo(...)`` calls outside functions/classes."""
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for node in ast.walk(stmt):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            cls = (
                func.id
                if isinstance(func, ast.Name)
                else (func.attr if isinstance(func, ast.Attribute) else "")
            )
            if not cls.endswith("Info") or cls in ("DecorateInfo", "AliasInfo"):
                continue
            first = node.args[0] if node.args else None
            variant = ""
            for kw in node.keywords:
                if kw.arg in ("name", "module_cls") and first is None:
                    first = kw.value
                elif kw.arg == "variant_test_name" and isinstance(kw.value, ast.Constant):
                    variant = str(kw.value.value)
            if first is None:
                continue
            base = str(first.value) if isinstance(first, ast.Constant) else ast.unparse(first)
            yield cls, f"{base}.{variant}" if variant else base, node
