"""Resolution: what a spec decides for one test variant, and why.

``resolve(spec, variant_id, op=..., dtype=..., module=...)`` is a pure function returning a
:class:`Decision`: skip (the variant is not generated) or run with a mode, tags, tolerances and a
reason, plus the deciding entry, the rule and an explanation. The reference rules it implements:

1. Mode: listed with a mode -> that mode; listed without -> mandatory_success; unlisted -> the
   file's unlisted_test_mode. ``force_xfail`` on the op, dtype or module turns mandatory_success
   into xfail (never the reverse).
2. Effective dtypes = (global.supported_dtypes ∩ op.dtypes ∩ @ops allowed) + include - exclude.
3. The dtype and op of a variant come from its name (see :mod:`testspecs.names`).
4. Several entries for one base name: the entry whose effective dtypes contain the variant's dtype,
   else one with no dtype restriction, else the first. (Our extension: an entry scoped with
   ``x-relay/v1`` ``ops`` / ``modules`` / ``dtypes`` is a candidate only for those variants.)

A spec is compiled once (:class:`testspecs.compiled.CompiledSpec`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from testspecs.compiled import (
    CompiledEntry,
    CompiledSpec,
    EntryRef,
    compile_spec,
    norm_dtype,
    norm_op,
)
from testspecs.models import SupportedOp
from testspecs.names import parse_variant
from testspecs.vocabulary import Precision


@dataclass
class Decision:
    variant: str
    base: str
    op: str | None
    dtype: str | None
    module: str | None
    run: bool
    mode: str
    rule: str
    tags: tuple[str, ...] = ()
    atol: float | None = None
    rtol: float | None = None
    reason: str | None = None
    entry: EntryRef | None = None
    cpu_move: tuple[str, ...] = ()
    explanation: list[str] = field(default_factory=list)

    def explain(self) -> str:
        head = f"{self.variant}: " + (f"run as {self.mode}" if self.run else "skip (not generated)")
        lines = [
            head,
            f"  base name: {self.base}; op: {self.op}; dtype: {self.dtype}; module: {self.module}",
        ]
        lines += [f"  - {line}" for line in self.explanation]
        lines.append(f"  decided by: {self.entry or 'no entry'} (rule: {self.rule})")
        if self.tags:
            lines.append(f"  tags: {', '.join(self.tags)}")
        if self.atol is not None or self.rtol is not None:
            lines.append(f"  tolerance: atol={self.atol} rtol={self.rtol}")
        if self.reason:
            lines.append(f"  reason: {self.reason}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "base": self.base,
            "op": self.op,
            "dtype": self.dtype,
            "module": self.module,
            "run": self.run,
            "mode": self.mode,
            "rule": self.rule,
            "tags": list(self.tags),
            "atol": self.atol,
            "rtol": self.rtol,
            "reason": self.reason,
            "entry": str(self.entry) if self.entry else None,
        }


def _op_dtypes(op_cfg: SupportedOp | None) -> frozenset[str] | None:
    if op_cfg is None or not op_cfg.dtypes:
        return None
    return frozenset(norm_dtype(d.name) or d.name for d in op_cfg.dtypes)


def _base_set(*sets: Collection[str] | None) -> frozenset[str] | None:
    out: frozenset[str] | None = None
    for s in sets:
        if s is None:
            continue
        s = frozenset(norm_dtype(x) or x for x in s)
        out = s if out is None else out & s
    return out


def _base_dtypes(
    cs: CompiledSpec,
    op_key: str | None,
    op_cfg: SupportedOp | None,
    allowed: Collection[str] | None,
) -> frozenset[str] | None:
    """Rule 2's intersection part, memoised per (op, @ops allowed dtypes)."""
    key = (op_key, None if allowed is None else frozenset(allowed))
    if key not in cs._dtype_cache:
        cs._dtype_cache[key] = _base_set(cs.g_dtype_set, _op_dtypes(op_cfg), allowed)
    return cs._dtype_cache[key]


def _contains(base: frozenset[str] | None, ce: CompiledEntry | None, dtype: str) -> bool:
    if ce is not None:
        if dtype in ce.xclude:
            return False
        if dtype in ce.include:
            return True
    return base is None or dtype in base


def _choose(
    candidates: list[CompiledEntry], base: frozenset[str] | None, dtype: str | None
) -> tuple[CompiledEntry, str]:
    if len(candidates) == 1:
        return candidates[0], "the only entry listing this test"
    if dtype is not None:
        for ce in candidates:
            if _contains(base, ce, dtype):
                return (
                    ce,
                    f"rule 4: first of {len(candidates)} entries whose effective dtypes contain {dtype}",
                )
    for ce in candidates:
        if not ce.restricted:
            return (
                ce,
                f"rule 4: no entry's dtypes contain {dtype}; first entry without a dtype restriction",
            )
    return candidates[
        0
    ], f"rule 4: no entry fits dtype {dtype}; the first of {len(candidates)} entries"


def _precision(*sources: Precision | None) -> tuple[float | None, float | None]:
    atol = rtol = None
    for p in sources:
        if p is None:
            continue
        atol = p.atol if atol is None else atol
        rtol = p.rtol if rtol is None else rtol
    return atol, rtol


def resolve(
    spec: Any,
    variant: str,
    *,
    op: str | None = None,
    dtype: str | None = None,
    module: str | None = None,
    base: str | None = None,
    allowed_dtypes: Collection[str] | None = None,
) -> Decision:
    """Decide one variant. ``base`` (``Class::method`` or ``method``) skips name inference."""
    cs = compile_spec(spec)
    v = parse_variant(variant, cs.device)
    dtype = norm_dtype(dtype or v.dtype)
    files = cs.files_for(v.file)
    why: list[str] = []
    base_name, candidates, op = _candidates(cs, files, v, base, op)
    if v.file is not None and not files:
        why.append(f"no spec file entry covers {v.file}")

    op_key = norm_op(op) if op else None
    op_cfg = cs.ops.get(op_key) if (cs.ops is not None and op_key) else None
    base_dtypes = _base_dtypes(cs, op_key, op_cfg, allowed_dtypes)

    scoped = [c for c in candidates if c.in_scope(op_key, module, dtype)]
    if len(scoped) < len(candidates):
        why.append(
            f"{len(candidates) - len(scoped)} of {len(candidates)} entries scoped (x-relay ops / "
            "modules / dtypes) to other variants"
        )
        candidates = scoped
    ce, mode, rule = _listed_mode(candidates, files, base_dtypes, dtype, why)

    def decision(run: bool, mode: str, rule: str, **kw: Any) -> Decision:
        return Decision(
            variant=variant,
            base=base_name,
            op=op,
            dtype=dtype,
            module=module,
            run=run,
            mode=mode,
            rule=rule,
            entry=ce.ref if ce else None,
            reason=ce.entry.reason if ce else None,
            explanation=why,
            **kw,
        )

    if mode == "skip":
        return decision(False, "skip", rule)
    # Filters: op, module and dtype lists (the variant is then not generated at all).
    removed = _not_generated(cs, ce, op, op_key, op_cfg, module, dtype, base_dtypes)
    if removed is not None:
        return decision(False, "skip", removed)

    # force_xfail (rule 1, second half) and tolerances.
    inc = ce.include.get(dtype) if (ce is not None and dtype) else None
    gdt = cs.g_dtypes.get(dtype) if dtype else None
    if mode == "mandatory_success":
        forced = _forced_xfail(cs, op_cfg, inc, gdt, op=op, dtype=dtype, module=module)
        if forced:
            why.append(f"force_xfail on {forced} turns mandatory_success into xfail")
            mode, rule = "xfail", f"rule 1: force_xfail on {forced}"
    op_prec = None
    if op_cfg is not None and dtype:
        op_prec = next((d.precision for d in op_cfg.dtypes if norm_dtype(d.name) == dtype), None)
    atol, rtol = _precision(inc.precision if inc else None, op_prec, gdt.precision if gdt else None)
    tags: tuple[str, ...] = tuple(ce.entry.tags) if ce else ()
    if ce is not None and op_key in ce.op_include:
        tags += tuple(t for t in ce.op_include[op_key].tags if t not in tags)
    cpu_move = (ce.cpu_move if ce else ()) + cs.cpu_move
    return decision(True, mode, rule, tags=tags, atol=atol, rtol=rtol, cpu_move=cpu_move)


def _listed_mode(
    candidates: list[CompiledEntry],
    files: list[Any],
    base_dtypes: Any,
    dtype: str | None,
    why: list[str],
) -> tuple[CompiledEntry | None, str, str]:
    """Rule 1's first half: the entry chosen among ``candidates``, its mode and the rule."""
    if candidates:
        ce, how = _choose(candidates, base_dtypes, dtype)
        why.append(how)
        if ce.entry.mode is not None:
            return ce, ce.entry.mode, "rule 1: listed with a mode"
        return ce, "mandatory_success", "rule 1: listed without a mode -> mandatory_success"
    if files:
        mode = files[0].file.unlisted_test_mode
        why.append(f"not listed in {files[0].file.path}; unlisted_test_mode is {mode}")
        return None, mode, "rule 1: unlisted -> unlisted_test_mode"
    return None, "xfail", "rule 1: no file entry -> default unlisted_test_mode xfail"


def _candidates(
    cs: CompiledSpec, files: list[Any], v: Any, base: str | None, op: str | None
) -> tuple[str, list[CompiledEntry], str | None]:
    """The variant's base name (``Class::method``), the entries listing it and its op (inferred
    from the name when not given)."""
    cls = v.base_cls
    if base is not None:
        if "::" in base:
            cls, _, method = base.partition("::")
        else:
            method = base
        candidates = cs.lookup(files, cls, method)
    else:
        found, op_guess = _infer_base(cs, files, cls, v.prefix, op)
        candidates = cs.lookup(files, cls, found) if found else []
        if op is None and op_guess:
            op = op_guess
        method = found or v.prefix
    return (f"{cls}::{method}" if cls else method), candidates, op


def _not_generated(
    cs: CompiledSpec,
    ce: CompiledEntry | None,
    op: str | None,
    op_key: str | None,
    op_cfg: Any,
    module: str | None,
    dtype: str | None,
    base_dtypes: Any,
) -> str | None:
    """Why the op, module and dtype lists remove the variant (it is then not generated), or None."""
    if op_key is not None:
        if ce is not None and op_key in ce.op_exclude:
            return f"edits.ops.exclude removes {op}"
        included = ce is not None and op_key in ce.op_include
        if cs.ops is not None and op_cfg is None and not included:
            return f"op {op} is not in global.supported_ops"
    if module is not None:
        short = module.rsplit(".", 1)[-1]
        if ce is not None and short in ce.mod_exclude:
            return f"edits.modules.exclude removes {module}"
        mod_included = ce is not None and short in ce.mod_include
        if cs.modules is not None and cs.module_config(module) is None and not mod_included:
            return f"module {module} is not in global.supported_modules"
    if dtype is not None and not _contains(base_dtypes, ce, dtype):
        if ce is not None and dtype in ce.xclude:
            return f"rule 2: edits.dtypes.exclude removes {dtype}"
        return f"rule 2: {dtype} is not in the effective dtypes {sorted(base_dtypes or ())}"
    return None


def _forced_xfail(
    cs: CompiledSpec,
    op_cfg: Any,
    inc: Any,
    gdt: Any,
    *,
    op: str | None,
    dtype: str | None,
    module: str | None,
) -> str | None:
    """What a force_xfail is set on (the op, the dtype or the module), or None."""
    if op_cfg is not None and op_cfg.force_xfail:
        return f"op {op}"
    if (inc is not None and inc.force_xfail) or (gdt is not None and gdt.force_xfail):
        return f"dtype {dtype}"
    if module is not None and (mc := cs.module_config(module)) is not None and mc.force_xfail:
        return f"module {module}"
    return None


def _infer_base(
    cs: CompiledSpec, files: list[Any], cls: str | None, prefix: str, op: str | None
) -> tuple[str | None, str | None]:
    """Find the base name inside ``prefix`` (= base [+ '_' + op]).

    With a known op the base is the prefix without ``_<op>``. Otherwise the longest split at an
    underscore that some entry lists wins, and the rest is the op.
    """
    if op:
        suffix = "_" + norm_op(op)
        if prefix.endswith(suffix):
            return prefix[: -len(suffix)], None
        return prefix, None
    if cs.lookup(files, cls, prefix):
        return prefix, None
    cut = prefix.rfind("_")
    while cut > 0:
        head = prefix[:cut]
        if cs.lookup(files, cls, head):
            return head, prefix[cut + 1 :] or None
        cut = prefix.rfind("_", 0, cut)
    return None, None
