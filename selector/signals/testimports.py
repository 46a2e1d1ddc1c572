"""Signal: a name the change removes from an upstream module (a function, class or variable
bound at its top level at base and not at head, or the whole file) breaks the test files that
import it by name (``from torch.testing._internal.common_modules import modules``): every variant of
such a file is selected, since none of them can even be collected at head.

The commonest way upstream breaks a backend's test run is a helper of ``torch.testing._internal``
renamed or removed; the database-entry signal sees no entry using it and the operator signals no
op, so without this one the change reached no test. Test files are read at head (a bundled
suite's files through the planner's reader); their imported names are kept per file content.
"""

from __future__ import annotations

import ast
from functools import partial

from selector.signals.base import SignalContext, SignalResult


def module_of(path: str) -> str:
    """``torch/testing/_internal/common_modules.py`` -> ``torch.testing._internal.common_modules``."""
    dotted = path.removesuffix(".py").replace("/", ".")
    return dotted.removesuffix(".__init__")


def imported_names(tree: ast.Module | None) -> list[list[str]]:
    """[module, name] for every ``from module import name`` of a file (any depth)."""
    if tree is None:
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out += [[node.module, alias.name] for alias in node.names]
    return out


def top_level_names(tree: ast.Module | None) -> set[str]:
    """The names a module binds at its top level (also under top-level ``if`` / ``try``)."""
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, ast.Import | ast.ImportFrom):
                names.update((a.asname or a.name).split(".", 1)[0] for a in node.names)
            elif isinstance(node, ast.If | ast.Try):
                visit(node.body)
                visit(node.orelse)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    if tree is not None:
        visit(tree.body)
    return names


def _imports(ctx: SignalContext, path: str) -> list[list[str]]:
    return imported_names(ctx.tree(path))


def _removed(ctx: SignalContext, path: str) -> list[str]:
    """Names bound at the top level of ``path`` at base and not at head (none when added)."""
    base = ctx.tree(path, at_base=True)
    if base is None:
        return []  # added: nothing of it was importable before
    return sorted(top_level_names(base) - top_level_names(ctx.tree(path)))


class TestImports:
    __test__ = False  # not a pytest class

    name = "test-imports"
    closeness = 1.0
    only_unexplained = False

    def map(self, ctx: SignalContext) -> SignalResult:
        result = SignalResult()
        removed: dict[tuple[str, str], str] = {}  # (module, name) -> the file that bound it
        changed = sorted({u.path for u in ctx.units if u.kind in ("symbol", "file")})
        for path in (p for p in changed if p.endswith(".py") and p not in ctx.universe.files):
            gone = ctx.file_fact(
                "removed-names", [(path, True), (path, False)], partial(_removed, ctx, path)
            )
            for name in gone:
                removed[(module_of(path), name)] = path
        if not removed:
            return result
        modules = {module for module, _ in removed}
        units = {u.key for u in ctx.units}
        for path, variants in sorted(ctx.universe.by_file.items()):
            names = ctx.file_fact("test-imports", [(path, False)], partial(_imports, ctx, path))
            for module, name in names:
                if module not in modules or (module, name) not in removed:
                    continue
                result.add(
                    (v.test_id for v in variants),
                    f"{path} imports {name} from {module}, which the change removes",
                )
                key = f"{removed[(module, name)]}::{name}"
                if key in units:
                    result.explained[key] = f"imported by name by {path}"
        return result
