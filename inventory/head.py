"""Release replay: the universe at the head revision, and the whole step through the stages.

When the head torch is not the one installed, the universe starts from the installed inventory
and is adjusted by the change facts, each adjusted variant flagged:

* entries removed at head: their variants are flagged ``removed-at-head`` (applicability drops
  them with that reason);
* entries added at head: new variants for every template that covers most of the op database
  (computed from the inventory: the templates parametrized by at least ``BROAD_TEMPLATE`` of
  the ops the widest one is; gradient templates only for entries that do not say
  ``supports_autograd=False``), over the entry's dtypes evaluated from its ``dtypes=``
  argument in the head source; templates for fewer ops (``out=``, variants, error inputs)
  depend on entry traits not read here, and are not predicted;
* modified entries whose dtypes grew or shrank: the new dtypes become new variants, the
  dropped ones are flagged removed.

New variants are decided by the specs the installed inventory was decided by (``resolve``:
:func:`inventory.build.spec_resolver`), as a collection under the head torch would decide them:
one the spec never generates (an op missing from ``global.supported_ops``) is ``skip`` with the
spec's reason, so applicability removes it with that reason instead of the plan ranking a test
the runner's spec plugin will not even generate.

Evaluating ``dtypes=`` uses the installed torch's dtype helpers (``all_types_and`` ...) in a
namespace without builtins; an expression it cannot evaluate gives no new dtypes, said in the
notes.
"""

from __future__ import annotations

import ast
import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from backends.base import torch_build
from inventory.build import Resolver
from selector.model import NEW_AT_HEAD, REMOVED_AT_HEAD, Universe, Variant, generic_class
from selector.signals.dbentries import entry_calls_with_nodes
from upstream import UpstreamSource
from upstream.changes import ChangeFacts, DbEntryChange

log = logging.getLogger(__name__)


@dataclass
class HeadUniverse:
    universe: Universe
    added: int = 0
    removed: int = 0
    notes: list[str] = field(default_factory=list)


def installed_matches(facts: ChangeFacts) -> bool:
    """Whether the installed torch is the head release (then the inventory is the head's)."""
    installed = torch_build().split("+git", 1)[0]
    return (
        facts.head.resolved == installed
        or facts.head.resolved.split("+")[0] == installed.split("+")[0]
    )


def head_universe(
    installed: Universe,
    facts: ChangeFacts,
    source: UpstreamSource | None,
    *,
    resolve: Resolver | None = None,
) -> HeadUniverse:
    """The head universe estimated from ``installed`` and ``facts``; ``resolve`` (the specs
    ``installed`` was decided by; None: no specs) decides the variants new at head."""
    if installed_matches(facts):
        return HeadUniverse(installed, notes=["installed torch is the head release"])
    by_op = installed.by_op
    flags: dict[str, str] = dict(installed.flags)
    notes: list[str] = []
    templates = _full_templates(installed)
    removed = 0
    new: list[Variant] = []
    opinfo = [d for d in facts.db_entries if d.kind == "opinfo"]
    read = entry_dtype_facts(source, facts)
    head_dtypes = {k: set(v) for k, v in read["head"]["dtypes"].items()}
    base_dtypes = {k: set(v) for k, v in read["base"]["dtypes"].items()}
    no_autograd = set(read["head"]["no_autograd"])
    notes += [*read["head"]["notes"], *read["base"]["notes"]]
    for d in opinfo:
        name = d.name.split("#", 1)[0]
        if d.status == "removed":
            for v in by_op.get(name, []):
                flags[v.test_id] = REMOVED_AT_HEAD
                removed += 1
            continue
        dtypes = head_dtypes.get(d.name)
        if dtypes is None:
            continue
        fits = [t for t in templates if d.name not in no_autograd or not _is_gradient(t)]
        if d.status == "added":
            new += _new_variants(fits, name, dtypes)
        elif d.status == "modified" and d.name in base_dtypes:
            gained = dtypes - base_dtypes[d.name]
            lost = base_dtypes[d.name] - dtypes
            if gained:
                have = {v.dtype for v in by_op.get(name, [])}
                new += _new_variants(fits, name, gained - have)
            for v in by_op.get(name, []):
                if v.dtype in lost:
                    flags[v.test_id] = REMOVED_AT_HEAD
                    removed += 1
    existing = installed.by_id
    new = [v for v in new if v.test_id not in existing]
    new = list({v.test_id: v for v in new}.values())
    for v in new:
        flags[v.test_id] = NEW_AT_HEAD
    if resolve is not None:
        _decide(new, resolve, notes)
    if any(d.kind == "moduleinfo" and d.status == "added" for d in facts.db_entries):
        notes.append("ModuleInfo entries added at head are not synthesized (collect with --run)")
    universe = Universe(
        variants=[*installed.variants, *new],
        label=f"{installed.label} + facts {facts.head.resolved}",
        kind="installed+facts",
        flags=flags,
        key=installed.key,
    )
    return HeadUniverse(universe, added=len(new), removed=removed, notes=notes)


def _decide(new: list[Variant], resolve: Resolver, notes: list[str]) -> None:
    """Each new variant's spec decision (its tags kept beside the spec's); a note counts the
    ones the spec never generates."""
    skipped: dict[str, int] = {}
    for v in new:
        mode, rule, tags = resolve(v)
        v.decision, v.rule, v.tags = mode, rule, [*v.tags, *(t for t in tags if t not in v.tags)]
        if mode == "skip":
            skipped[rule] = skipped.get(rule, 0) + 1
    if skipped:
        shown = "; ".join(f"{rule} ({n})" for rule, n in sorted(skipped.items())[:3])
        more = f"; +{len(skipped) - 3} more rules" if len(skipped) > 3 else ""
        notes.append(
            f"{sum(skipped.values())} of {len(new)} variants new at head are not generated by "
            f"the specs: {shown}{more}"
        )


@dataclass(frozen=True)
class _Template:
    file: str
    cls: str
    base: str
    suite: str
    device: str
    dtypes: frozenset[str | None]


#: a template parametrized by at least this share of the ops the widest one is parametrized by
#: is predicted for an entry added at head (measured on the bundled suites: compare-with-CPU and
#: dtype coverage 1.0, backward 0.77; out=, variants 0.51 and error inputs 0.32 are not)
BROAD_TEMPLATE = 0.75


def _is_gradient(t: _Template) -> bool:
    return "backward" in t.base or "grad" in t.base


def _full_templates(universe: Universe) -> list[_Template]:
    """Templates parametrized by most ops the universe knows (``BROAD_TEMPLATE``)."""
    ops: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    dtypes: dict[tuple[str, str, str], set[str | None]] = defaultdict(set)
    sample: dict[tuple[str, str, str], Variant] = {}
    for v in universe.variants:
        if v.op and v.cls:
            key = (v.file, v.cls, v.base)
            ops[key].add(v.op)
            dtypes[key].add(v.dtype)
            sample.setdefault(key, v)
    if not ops:
        return []
    widest = max(len(s) for s in ops.values())
    out = []
    for key, names in sorted(ops.items()):
        if len(names) < BROAD_TEMPLATE * widest:
            continue
        v = sample[key]
        device = _device_token(v)
        out.append(_Template(v.file, v.cls or "", v.base, v.suite, device, frozenset(dtypes[key])))
    return out


def _device_token(v: Variant) -> str:
    tail = v.name.removeprefix(v.base)
    if v.dtype:
        tail = tail.removesuffix(f"_{v.dtype}")
    return tail.rsplit("_", 1)[-1] if "_" in tail else "spyre"


def _new_variants(templates: Iterable[_Template], op: str, dtypes: set[str]) -> list[Variant]:
    out = []
    formatted = op.replace(".", "_")
    for t in templates:
        if None in t.dtypes:  # a template that is not parametrized by dtype
            wanted: list[str | None] = [None]
        else:
            wanted = [d for d in sorted(dtypes) if d in t.dtypes]
        for dtype in wanted:
            name = f"{t.base}_{formatted}_{t.device}" + (f"_{dtype}" if dtype else "")
            out.append(
                Variant(
                    test_id=f"{t.file}::{t.cls}::{name}",
                    file=t.file,
                    cls=t.cls,
                    name=name,
                    base=t.base,
                    suite=t.suite,
                    op=op,
                    dtype=dtype,
                    tags=[NEW_AT_HEAD],
                )
            )
    return out


def entry_dtype_facts(source: UpstreamSource | None, facts: ChangeFacts) -> dict[str, Any]:
    """What :func:`head_universe` reads of the OpInfo files, as JSON data: per side (``head``:
    every changed OpInfo entry, ``base``: the modified ones) the evaluated ``dtypes=`` of each
    entry, the entries saying ``supports_autograd=False`` (head) and the notes. A source that
    keeps them (a stored step's: ``entry_dtype_facts()``, None when it has none) answers
    without the files."""
    kept = getattr(source, "entry_dtype_facts", None)
    known = kept() if callable(kept) else None
    if known is not None:
        return dict(known)
    opinfo = [d for d in facts.db_entries if d.kind == "opinfo"]
    out: dict[str, Any] = {}
    for side, entries in (
        ("head", opinfo),
        ("base", [d for d in opinfo if d.status == "modified"]),
    ):
        notes: list[str] = []
        no_autograd: set[str] = set()
        dtypes = _entry_dtypes(
            source, facts, entries, at_base=side == "base", notes=notes, no_autograd=no_autograd
        )
        out[side] = {
            "dtypes": {name: sorted(d) for name, d in sorted(dtypes.items())},
            "no_autograd": sorted(no_autograd) if side == "head" else [],
            "notes": notes,
        }
    return out


def _entry_dtypes(
    source: UpstreamSource | None,
    facts: ChangeFacts,
    entries: list[DbEntryChange],
    *,
    at_base: bool,
    notes: list[str],
    no_autograd: set[str] | None = None,
) -> dict[str, set[str]]:
    """The ``dtypes=`` of each entry, evaluated; entries that say ``supports_autograd=False``
    are added to ``no_autograd``."""
    if source is None or not entries:
        return {}
    revision = facts.base if at_base else facts.head
    files = sorted({d.file for d in entries})
    texts = source.read_files(revision, files)
    wanted = {d.name for d in entries}
    out: dict[str, set[str]] = {}
    namespace = _dtype_namespace()
    failed = 0
    for path in files:
        try:
            tree = ast.parse(texts.get(path, b""), filename=path)
        except SyntaxError:
            continue
        seen: dict[str, int] = {}
        for _cls, name, call in entry_calls_with_nodes(tree):
            seen[name] = seen.get(name, 0) + 1
            key = name if seen[name] == 1 else f"{name}#{seen[name]}"
            if key not in wanted:
                continue
            if no_autograd is not None and any(
                kw.arg == "supports_autograd"
                and isinstance(kw.value, ast.Constant)
                and kw.value.value is False
                for kw in call.keywords
            ):
                no_autograd.add(key)
            expr = next((kw.value for kw in call.keywords if kw.arg == "dtypes"), None)
            if expr is None:
                continue
            try:
                value = eval(
                    compile(ast.Expression(expr), path, "eval"), {"__builtins__": {}}, namespace
                )
                out[key] = {str(d).removeprefix("torch.") for d in value}
            except Exception:
                failed += 1
    if failed:
        side = "base" if at_base else "head"
        notes.append(f"{failed} entr(ies) with dtypes not statically evaluable at {side}")
    return out


def _dtype_namespace() -> dict[str, Any]:
    import torch
    from torch.testing._internal import common_dtype

    ns: dict[str, Any] = {
        k: getattr(common_dtype, k) for k in dir(common_dtype) if not k.startswith("__")
    }
    ns["torch"] = torch
    return ns


__all__ = ["HeadUniverse", "generic_class", "head_universe", "installed_matches"]
