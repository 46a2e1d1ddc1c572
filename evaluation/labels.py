"""Labels that are true: the promoted spec's xfail reasons read from the dtype and the device
as well as the failure's message.

:func:`testspecs.promote.classify` reads a message alone, so "Tensor-likes are not close" is
called fp16 precision for an int64 variant too, or for one an op's host fallback computed. Here:

* **unsupported op or dtype**: the device spec never generates the variant (it resolves to
  ``skip`` under ``backends/spyre/specs/device.yaml``): it would not run under the bundled
  spec, whatever its run without the spec said;
* **precision** only for a floating (or complex) dtype computed on the device: the op table
  (``spyre_stack/ops.yaml``) has the op native at that dtype; a module variant counts as
  computed on the device (its ops are not known one by one here);
* a precision-looking message anywhere else is a **wrong result** (class ``error``), saying
  whether the dtype is exact or the op ran on the host;
* every other failure keeps the message's class.

:func:`relabel` applies this to a baseline summary (:func:`testspecs.promote.summarize`), as
``relay specs promote`` does.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inventory.build import spec_resolver
from selector import Variant
from selector.model import op_keys
from spyre_stack import optable
from testspecs.collect import generic_class
from testspecs.promote import Record, classify, count_label, verdict

FLOATING = frozenset(
    {"float16", "bfloat16", "float32", "float64", "complex32", "complex64", "complex128"}
)
UNSUPPORTED_REASON = (
    "unsupported op or dtype: the device spec never generates this variant (it does not run "
    "under the bundled spec)"
)


@dataclass(frozen=True)
class DeviceFacts:
    generated: bool  # the device spec runs the variant (does not resolve it to skip)
    on_device: bool  # computed by a native kernel of the device at its dtype


def on_device(v: Variant, table: optable.OpTable) -> bool:
    """Whether the device computes ``v`` itself: its op native in the table at its dtype (an
    OpInfo name is looked up by its aten-style keys, ``nn.functional.gelu`` -> ``gelu``)."""
    if v.op is None:
        return v.module is not None
    for key in op_keys(v.op):
        if "." in key:
            continue
        entry = table.entry(key)
        if entry is not None:
            return entry.status == "native" and (v.dtype is None or v.dtype in entry.dtypes)
    return False


def device_facts(
    variants: Iterable[Variant], *, spec: Path, backend: str = "spyre"
) -> dict[str, DeviceFacts]:
    """Per test id: whether ``spec`` (the device spec) generates the variant, and whether the
    op table has it computed on the device."""
    decide = spec_resolver([spec], backend=backend, torch_root=None)
    table = optable.load()
    out = {}
    for v in variants:
        mode = decide(v)[0] if decide is not None else None
        out[v.test_id] = DeviceFacts(generated=mode != "skip", on_device=on_device(v, table))
    return out


def label(message: str | None, *, dtype: str | None, facts: DeviceFacts) -> tuple[str, str]:
    """(class, reason) of a failing variant from its message, its dtype and the device."""
    if not facts.generated:
        return "unsupported", UNSUPPORTED_REASON
    cls, reason = classify(message)
    if cls != "precision":
        return cls, reason
    if dtype is not None and dtype not in FLOATING:
        return "error", f"wrong result at {dtype}: an exact dtype differs from the CPU's"
    if not facts.on_device:
        return "error", "wrong result computed on the host: no native kernel at this dtype"
    return cls, reason


def relabel(
    summary: dict[str, Any], records: Sequence[Record], facts: Mapping[Record, DeviceFacts]
) -> dict[str, Any]:
    """``summary`` (made by :func:`testspecs.promote.summarize` from ``records``) with each
    failing variant's class and reason from :func:`label` where its facts are known (a record
    without facts keeps the message's class)."""

    def key(r: Record) -> tuple[str, str, str, str]:  # summarize's order
        return (r.file, r.name, r.op or r.module or "", r.dtype or "")

    cursor: dict[tuple[str, str], int] = defaultdict(int)
    for r in sorted(records, key=key):
        kind, _ = verdict(r.outcomes, r.message, r.rerun)
        if kind == "ok":
            continue
        index = cursor[(r.file, r.name)]
        cursor[(r.file, r.name)] += 1
        entry = summary["tests"][r.file][r.name]["other"][index]
        if kind.startswith("fail/") and r in facts:
            cls, reason = label(r.message, dtype=r.dtype, facts=facts[r])
            entry[3], entry[4] = f"fail/{cls}", reason
    return summary


def record_node(v: Variant) -> tuple[str, str]:
    """The summary's (file, test name) of a bundled variant, as ``relay specs promote`` writes
    them: the file under ``${TORCH_DEVICE_ROOT}``, the test's generic class and base name."""
    name = f"{generic_class(v.cls, ('PRIVATEUSE1', 'SPYRE'))}::{v.base}" if v.cls else v.base
    return "${TORCH_DEVICE_ROOT}/" + v.file, name


def counts_under_spec(
    summary: dict[str, Any], variants: Iterable[Variant], facts: Mapping[str, DeviceFacts]
) -> tuple[int, dict[str, int]]:
    """The summary's counts (:func:`testspecs.promote.counts`) over the variants that run
    under the bundled spec only (``facts[test_id].generated``): how many there are, and what
    the promoted spec makes of them. A variant the summary has no node for is not counted."""
    kinds: dict[tuple[str, str, str | None, str | None], str] = {}
    for file, names in summary["tests"].items():
        for name, node in names.items():
            for target, dtype, _codes, kind, _reason in node["other"]:
                kinds[(file, name, target, dtype)] = kind
    out: Counter[str] = Counter()
    n = 0
    for v in variants:
        file, name = record_node(v)
        if not facts[v.test_id].generated or name not in summary["tests"].get(file, {}):
            continue
        n += 1
        target = v.op if v.op is not None else (f"module:{v.module}" if v.module else None)
        out[count_label(kinds.get((file, name, target, v.dtype), "ok"))] += 1
    return n, dict(sorted(out.items()))
