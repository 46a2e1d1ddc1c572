"""Signal: tests of operators whose schema, derivative, kernel, decomposition, reference or meta
function changed.

Sources of the mapping, all static:

* ``native_functions.yaml`` / ``derivatives.yaml`` entries: the entry's operator;
* Python symbols, through the AST of the file at head: functions registered for aten ops by a
  decorator (``register_decomposition(aten.gelu)``, ``register_meta([aten.add.Tensor])``...),
  functions whose name is the op in the reference / functional modules (``torch/_refs``,
  ``torch/nn/functional.py``, ``torch/functional.py``, ``Tensor`` methods), and nn module
  classes (``torch/nn/modules``) for ModuleInfo tests; a changed helper reaches every such
  function that calls it, transitively, within the file;
* C++ kernel sources under ``aten/src/ATen/native``: the kernel names the head's
  ``native_functions.yaml`` dispatches to, found as identifiers in the changed file.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache, partial
from typing import Any

from selector.model import ChangeUnit, Universe, aten_key, module_key
from selector.signals.base import SignalContext, SignalResult
from selector.signals.devices import changed_nodes
from upstream.changes.opinfo import is_db_file
from upstream.changes.yaml_entries import load_entries

# files whose top-level function names are operator names (prefix for the OpInfo name)
NAMED_BY_FUNCTION = {
    "torch/nn/functional.py": "nn.functional.",
    "torch/functional.py": "",
    "torch/_refs/__init__.py": "",
    "torch/_refs/nn/functional/__init__.py": "nn.functional.",
    "torch/_refs/special/__init__.py": "special.",
    "torch/_refs/linalg/__init__.py": "linalg.",
    "torch/_refs/fft.py": "fft.",
    "torch/_tensor.py": "",
}
REGISTRATION_HINTS = ("register", "impl", "decomp", "meta", "lowering", "ref")
KERNEL_DIR = "aten/src/ATen/native/"
YAML_FILES = ("native/native_functions.yaml", "autograd/derivatives.yaml")
_IDENT = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")


class Operators:
    name = "operators"
    closeness = 0.8
    only_unexplained = False

    def map(self, ctx: SignalContext) -> SignalResult:
        result = SignalResult()
        uni = ctx.universe
        relevant = ctx.config.relevant_dispatch_keys
        for e in ctx.facts.native_functions:
            if (
                e.status == "modified"
                and list(e.fields) == ["dispatch"]
                and e.dispatch_keys
                and not set(e.dispatch_keys) & relevant
            ):
                result.explained[f"native_functions:{e.name}"] = (
                    f"dispatch changed only for {', '.join(e.dispatch_keys)}: kernels the "
                    "backend never runs"
                )
                continue
            fields = f" ({', '.join(e.fields)})" if e.fields else ""
            _select_op(
                result,
                uni,
                e.op,
                f"native_functions:{e.name}",
                f"schema/dispatch of {e.name} {e.status}{fields}",
            )
        for e in ctx.facts.derivatives:
            _select_op(
                result, uni, e.op, f"derivatives:{e.name}", f"derivative of {e.name} {e.status}"
            )
        by_file: dict[str, list[ChangeUnit]] = {}
        for unit in ctx.units:
            if unit.kind == "symbol" and unit.path.endswith(".py") and not is_db_file(unit.path):
                if unit.path.startswith("torch/"):
                    by_file.setdefault(unit.path, []).append(unit)
            elif unit.kind == "file" and unit.path.endswith(YAML_FILES):
                n = len(ctx.facts.native_functions) + len(ctx.facts.derivatives)
                result.explained[unit.key] = f"{n} changed entries, each mapped to its operator"
            elif unit.kind == "file" and unit.path.startswith(KERNEL_DIR):
                self._kernel_file(ctx, unit, result)
        for path, units in by_file.items():
            self._python_file(ctx, path, units, result)
        return result

    # -- Python: registrations and op-named functions ----------------------------------

    def _python_file(
        self, ctx: SignalContext, path: str, units: list[ChangeUnit], result: SignalResult
    ) -> None:
        for at_base in (False, True):
            todo = [u for u in units if (u.status == "removed") == at_base]
            if not todo:
                continue
            facts = ctx.file_fact(
                "operators:file", ((path, at_base),), partial(_file_facts, ctx, path, at_base)
            )
            if facts is None or not facts["targets"]:
                continue
            targets: dict[str, list] = facts["targets"]  # name -> [kind, op keys]
            callers = _callers_index(facts["names"])
            for unit in todo:
                qual = unit.key.split("::", 1)[1]
                top = qual if qual in targets else qual.split(".", 1)[0]
                why = _reached(callers, top)
                if qual == "<module>":  # module-level bindings that changed
                    why = {n: n for n in changed_bindings(ctx, path)}
                hit = {name: origin for name, origin in why.items() if name in targets}
                if not hit:
                    continue
                parts = []
                if path == FUNCTIONAL:
                    users = functional_users(ctx)
                    for name in sorted(hit):
                        for cls in users.get(name, ()):
                            key = f"module:{module_key('nn.' + cls)}"
                            n = _select(
                                result,
                                uni=ctx.universe,
                                key=key,
                                reason=f"nn.{cls} calls F.{name} ({unit.status})",
                            )
                            parts.append(f"nn.{cls}:{n}")
                for name in sorted(hit):
                    kind, ops = targets[name]
                    via = "" if name == top else f" (calls changed {top})"
                    for op in ops:
                        n = _select(
                            result,
                            uni=ctx.universe,
                            key=op,
                            reason=f"{kind} {name} {unit.status}{via} -> {op}",
                        )
                        parts.append(f"{op}:{n}")
                result.explained[unit.key] = (
                    "ops "
                    + ", ".join(parts[:8])
                    + (f" (+{len(parts) - 8})" if len(parts) > 8 else "")
                )

    # -- C++ kernels ---------------------------------------------------------------------

    def _kernel_file(self, ctx: SignalContext, unit: ChangeUnit, result: SignalResult) -> None:
        kernels = _kernel_table(ctx)
        if not kernels:
            return
        texts = [t for t in (ctx.read(unit.path), ctx.read(unit.path, at_base=True)) if t]
        idents = {m.decode() for t in texts for m in _IDENT.findall(t)}
        ops = sorted({op for ident in idents & kernels.keys() for op in kernels[ident]})
        if not ops:
            return
        counts = [
            f"{op}:{_select_op(result, ctx.universe, op, None, f'kernel source {unit.path} {unit.status} -> {op}')}"
            for op in ops
        ]
        result.explained[unit.key] = (
            "kernels of "
            + ", ".join(counts[:8])
            + (f" (+{len(counts) - 8})" if len(counts) > 8 else "")
        )


@lru_cache(maxsize=64)
def used_names(tree: ast.Module) -> dict[str, set[str]]:
    """Top-level function / class (and ``Tensor.method``) -> the plain names and attributes its
    code refers to."""
    out: dict[str, set[str]] = {}

    def names(node: ast.AST) -> set[str]:
        return {
            n.id if isinstance(n, ast.Name) else n.attr
            for n in ast.walk(node)
            if isinstance(n, ast.Name | ast.Attribute)
        }

    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out[stmt.name] = names(stmt)
            if isinstance(stmt, ast.ClassDef):
                for item in stmt.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        out[f"{stmt.name}.{item.name}"] = names(item)
    return out


def _file_facts(ctx: SignalContext, path: str, at_base: bool) -> dict[str, Any] | None:
    """What this signal needs of one file: its op targets and, when it has any, the names
    each function uses; None when the file cannot be read or parsed."""
    tree = ctx.tree(path, at_base=at_base)
    if tree is None:
        return None
    targets = {name: [kind, list(ops)] for name, (kind, ops) in op_targets(path, tree).items()}
    used = {**binding_names(tree), **used_names(tree)} if targets else {}
    return {"targets": targets, "names": {fn: sorted(names) for fn, names in used.items()}}


def binding_names(tree: ast.Module) -> dict[str, set[str]]:
    """Module-level ``name = <expression>`` -> the names the expression refers to: a binding
    reaches what it is bound to (``max_pool2d = boolean_dispatch(if_true=
    max_pool2d_with_indices, if_false=_max_pool2d, ...)`` calls both)."""
    return {
        stmt.targets[0].id: {
            n.id if isinstance(n, ast.Name) else n.attr
            for n in ast.walk(stmt.value)
            if isinstance(n, ast.Name | ast.Attribute)
        }
        for stmt in tree.body
        if isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
    }


def _callers_index(functions: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    callers: dict[str, set[str]] = {}
    for name, used in functions.items():
        for callee in used:
            callers.setdefault(callee.rsplit(".", 1)[-1], set()).add(name)
    return callers


def _reached(callers: Mapping[str, set[str]], changed: str) -> dict[str, str]:
    found = {changed: changed}
    todo = [changed]
    while todo:
        for caller in sorted(callers.get(todo.pop(), ())):
            if caller not in found and caller != "<module>":
                found[caller] = changed
                todo.append(caller)
    return found


def _select(result: SignalResult, *, uni: Universe, key: str, reason: str) -> int:
    if key.startswith("module:"):
        variants = uni.by_module.get(key.removeprefix("module:"), [])
    else:
        # the op itself and every OpInfo variant of it (``norm``, ``norm.fro``, ``norm.inf``)
        exact = uni.by_op.get(key, [])
        ids = {v.test_id for v in exact}
        variants = exact + [v for v in uni.by_op_key.get(aten_key(key), []) if v.test_id not in ids]
    result.add((v.test_id for v in variants), reason)
    return len(variants)


def _select_op(
    result: SignalResult, uni: Universe, op: str, unit_key: str | None, reason: str
) -> int:
    n = _select(result, uni=uni, key=op, reason=reason)
    if unit_key is not None:
        result.explained[unit_key] = f"{n} variant(s) of {aten_key(op)}"
    return n


def op_targets(path: str, tree: ast.Module) -> dict[str, tuple[str, list[str]]]:
    """Top-level function (or ``Tensor.method`` / nn module class) -> (kind, op keys)."""
    found: dict[str, tuple[str, list[str]]] = {}
    prefix = NAMED_BY_FUNCTION.get(path)
    in_refs = path.startswith("torch/_refs/")
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            ops = registered_ops(stmt.decorator_list)
            if ops:
                found[stmt.name] = (_kind(path, stmt.decorator_list), ops)
            elif prefix is not None and not stmt.name.startswith("_"):
                kind = "reference" if in_refs else "python implementation"
                found[stmt.name] = (kind, [f"{prefix}{stmt.name}", stmt.name])
        elif (
            prefix is not None
            and isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and not stmt.targets[0].id.startswith("_")
        ):
            # ``gelu = _add_docstr(torch._C._nn.gelu, ...)``: a binding of a compiled op
            name = stmt.targets[0].id
            found[name] = ("python binding", [f"{prefix}{name}", name])
        elif isinstance(stmt, ast.ClassDef):
            if path == "torch/_tensor.py" and stmt.name == "Tensor":
                for item in stmt.body:
                    if isinstance(item, ast.FunctionDef) and not item.name.startswith("__"):
                        found[f"Tensor.{item.name}"] = ("Tensor method", [item.name.rstrip("_")])
            elif path.startswith("torch/nn/modules/") and not stmt.name.startswith("_"):
                found[stmt.name] = ("nn module", [f"module:{module_key('nn.' + stmt.name)}"])
    return found


def changed_bindings(ctx: SignalContext, path: str) -> set[str]:
    """Names (re)bound by module-level statements that differ between base and head."""
    return set(
        ctx.file_fact(
            "operators:bindings",
            ((path, True), (path, False)),
            lambda: sorted(_changed_bindings(ctx, path)),
        )
    )


def _changed_bindings(ctx: SignalContext, path: str) -> set[str]:
    old, new = ctx.tree(path, at_base=True), ctx.tree(path)
    if old is None or new is None:
        return set()
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    names: set[str] = set()
    for node in changed_nodes(
        [s for s in old.body if not isinstance(s, defs)],
        [s for s in new.body if not isinstance(s, defs)],
    ):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


FUNCTIONAL = "torch/nn/functional.py"
NN_MODULE_FILES = tuple(
    f"torch/nn/modules/{name}.py"
    for name in (
        "activation",
        "adaptive",
        "batchnorm",
        "channelshuffle",
        "conv",
        "distance",
        "dropout",
        "flatten",
        "fold",
        "instancenorm",
        "linear",
        "loss",
        "normalization",
        "padding",
        "pixelshuffle",
        "pooling",
        "rnn",
        "sparse",
        "transformer",
        "upsampling",
    )
)


def functional_users(ctx: SignalContext) -> dict[str, list[str]]:
    """``torch.nn.functional`` name -> public nn module classes whose code reaches ``F.<name>``.

    A class reaches what its own body calls, what its base classes reach (``ReLU6`` is a
    ``Hardtanh``; ``CircularPad1d`` runs ``_CircularPadNd.forward``) and what the module classes
    and helper functions it names reach (``TransformerEncoderLayer`` builds ``Linear``,
    ``LayerNorm`` and ``Dropout`` layers and picks its activation with
    ``_get_activation_fn``), all within ``torch/nn/modules``.
    """
    cached = getattr(ctx, "_functional_users", None)
    if cached is not None:
        return cached
    users: dict[str, list[str]] = ctx.file_fact(
        "operators:functional-users",
        tuple((path, False) for path in NN_MODULE_FILES),
        lambda: _functional_users(
            tuple(t for t in (ctx.tree(path) for path in NN_MODULE_FILES) if t is not None)
        ),
    )
    ctx._functional_users = users  # type: ignore[attr-defined]
    return users


@lru_cache(maxsize=8)
def _functional_users(trees: tuple[ast.Module, ...]) -> dict[str, list[str]]:
    """:func:`functional_users` over the parsed ``torch/nn/modules`` files (trees are kept
    across decisions, so a warm decision does not walk them again; callers only read it)."""
    calls: dict[str, set[str]] = {}  # class or helper -> F names its own code uses
    names: dict[str, set[str]] = {}  # class or helper -> every name it mentions
    public: list[str] = []
    for tree in trees:
        for stmt in tree.body:
            if not isinstance(stmt, ast.ClassDef | ast.FunctionDef):
                continue
            own: set[str] = set()
            mentioned: set[str] = set()
            for node in ast.walk(stmt):
                if isinstance(node, ast.Attribute):
                    mentioned.add(node.attr)
                    if isinstance(node.value, ast.Name) and node.value.id == "F":
                        own.add(node.attr)
                elif isinstance(node, ast.Name):
                    mentioned.add(node.id)
            calls.setdefault(stmt.name, set()).update(own)
            names.setdefault(stmt.name, set()).update(mentioned - {stmt.name})
            if isinstance(stmt, ast.ClassDef) and not stmt.name.startswith("_"):
                public.append(stmt.name)

    def reached(cls: str) -> set[str]:
        visited, todo = {cls}, [cls]
        while todo:
            for other in names.get(todo.pop(), ()):
                if other in calls and other not in visited:
                    visited.add(other)
                    todo.append(other)
        return set().union(*(calls[n] for n in visited))

    users: dict[str, list[str]] = {}
    for cls in public:
        for fn in sorted(reached(cls)):
            if cls not in users.setdefault(fn, []):
                users[fn].append(cls)
    return users


def _kind(path: str, decorators: Iterable[ast.expr]) -> str:
    text = " ".join(ast.unparse(d) for d in decorators).lower()
    if "meta" in text or "meta" in path:
        return "meta function"
    if "decomp" in text or "_decomp" in path:
        return "decomposition"
    if "lowering" in text:
        return "lowering"
    if "_refs" in path or "ref" in text:
        return "reference"
    return "registration"


def registered_ops(decorators: Iterable[ast.expr]) -> list[str]:
    """aten ops named in registration decorators: ``aten.gelu``, ``torch.ops.aten.add.Tensor``."""
    ops: list[str] = []
    for dec in decorators:
        if not isinstance(dec, ast.Call):
            continue
        callee = ast.unparse(dec.func).lower()
        if not any(h in callee for h in REGISTRATION_HINTS):
            continue
        for node in ast.walk(dec):
            if isinstance(node, ast.Attribute):
                chain = _chain(node)
                if "aten" in chain[:-1] or "prims" in chain[:-1]:
                    root = "aten" if "aten" in chain else "prims"
                    rest = chain[chain.index(root) + 1 :]
                    if rest:
                        ops.append(aten_key(rest[0]))
    return list(dict.fromkeys(ops))


def _chain(node: ast.expr) -> list[str]:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return list(reversed(parts))


def _kernel_table(ctx: SignalContext) -> dict[str, set[str]]:
    """kernel function name -> base ops, from the head's native_functions.yaml dispatch."""
    cache = getattr(ctx, "_kernel_cache", None)
    if cache is not None:
        return cache
    data = ctx.read(_layout_path(ctx))
    table: dict[str, set[str]] = {}
    try:
        entries = load_entries(data, "func") if data else {}
    except ValueError:
        entries = {}
    for name, entry in entries.items():
        dispatch = entry.get("dispatch")
        if isinstance(dispatch, dict):
            for kernel in dispatch.values():
                table.setdefault(str(kernel), set()).add(aten_key(name))
        if entry.get("structured"):
            table.setdefault(f"{name.replace('.', '_')}", set()).add(aten_key(name))
    ctx._kernel_cache = table  # type: ignore[attr-defined]
    return table


def _layout_path(ctx: SignalContext) -> str:
    return (
        "torchgen/packaged/ATen/native/native_functions.yaml"
        if ctx.facts.source_kind == "wheels"
        else "aten/src/ATen/native/native_functions.yaml"
    )
