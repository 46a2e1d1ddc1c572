"""A spec promoted from evidence: stored run results -> the modes a backend's spec declares.

Two steps, both pure:

* :func:`summarize` folds the outcomes of one or more full runs (plus the last line of each
  failure's message) into a **baseline summary**: per test file and base name, how many variants
  were fine in every run, and every other variant with its op or module, dtype, one outcome code
  per run and a verdict. The summary is small enough to commit; it is what the spec is
  reproduced from.
* :func:`render` turns a summary into the spec file's text. Per variant: passed (or skipped by
  upstream) in every run -> ``mandatory_success``; failed in every run -> ``xfail`` with the
  failure's class as the reason (fp16 precision, unsupported op, wrong metadata, or the error
  message's prefix) and an owner; no outcome (crashed or hung) -> ``skip`` with the reason;
  different outcomes between runs -> ``xfail`` (non-strict) tagged ``flaky``. The file stays
  reviewable: one entry per base name, verdict and reason, scoped with ``x-relay/v1`` ``ops`` /
  ``modules`` and ``dtypes`` lists, and one ``mandatory_success`` entry per test file listing the
  base names. Entries a maintainer wrote by hand (no ``x-relay/v1.promoted``) are kept, first in
  their file, so they win; each must say why in ``x-relay/v1.reason``.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from testspecs.errors import SpecError
from testspecs.models import SpecDocument
from testspecs.vocabulary import DTYPE_NAMES, EXTENSION_KEY

SUMMARY_VERSION = 1

#: one letter per run outcome in a summary ("-": the run did not cover the variant's file)
CODES = {
    "passed": "p",
    "skipped": "s",
    "xfailed": "x",
    "xpassed": "X",
    "failed": "f",
    "error": "e",
    "missing": "m",
}
OK = frozenset("psx")  # fine: passed, skipped by upstream, an upstream expected failure
BAD = frozenset("feX")

#: who looks at each class of failure first
OWNERS = {
    "precision": "spyre-numerics",
    "unsupported": "spyre-ops",
    "metadata": "spyre-runtime",
    "error": "spyre-triage",
    "crash": "spyre-runtime",
    "flaky": "spyre-triage",
}

PRECISION_REASON = "fp16 precision: the device's result differs from the CPU's beyond the tolerance"


class PromoteError(ValueError):
    """Input the promotion cannot use (one line)."""


@dataclass(frozen=True)
class Record:
    """One variant's evidence: where it lives, what it exercises, its outcome in each run."""

    file: str  # the spec path of its test file (``${TORCH_DEVICE_ROOT}/...``)
    name: str  # Class::base (the generic class, without the device suffix)
    op: str | None
    module: str | None
    dtype: str | None
    outcomes: str  # one CODES letter per run
    message: str | None = None  # the first line of a failure's report (of the rerun, if any)
    rerun: str | None = None  # the CODES letter of a rerun under the device's spec


def classify(message: str | None) -> tuple[str, str]:
    """(class, reason) of a failure from the last line of its report."""
    text = (message or "").strip()
    low = text.lower()
    if any(
        k in low
        for k in ("not close", "mismatched elements", "greatest absolute difference", "tolerance")
    ):
        return "precision", PRECISION_REASON
    if any(k in low for k in ("notimplementederror", "not implemented", "unsupported")) or (
        "not supported" in low
    ):
        return "unsupported", f"unsupported op on the device ({_exception(text)})"
    found = re.search(r"\b(dtype|stride|shape|size|device|layout)s?\b", low)
    if found and re.search(r"do not match|don't match|mismatch|expected|but got", low):
        return "metadata", f"wrong metadata: {found.group(1)} ({_exception(text)})"
    return "error", _prefix(text) if text else "failed without a message"


def _exception(text: str) -> str:
    head = re.match(r"\s*([A-Za-z_][\w.]*(Error|Exception|Warning))\b", text)
    return head.group(1) if head else "no exception type"


def _prefix(text: str, width: int = 72) -> str:
    """The message's stable prefix: numbers, quoted values and addresses blanked out, so one
    defect in many variants reads the same."""
    text = re.sub(r"0x[0-9a-fA-F]+", "0x?", text)
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'?'", text)
    text = re.sub(r"\d+(\.\d+)?(e-?\d+)?", "N", text)
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= width else text[: width - 3].rstrip() + "..."


def verdict(outcomes: str, message: str | None, rerun: str | None = None) -> tuple[str, str]:
    """(verdict, reason): ok, fail/<class>, crash or flaky.

    ``rerun`` is the outcome code of one more run of a failing variant under the device's own
    spec (its tolerances), whose message ``message`` is: runs made without the spec fail on
    tolerances the spec gives, so a failure the rerun does not reproduce is no failure."""
    outcomes = outcomes.replace("-", "")  # runs that did not cover the variant's file
    letters = set(outcomes)
    if letters <= OK:
        return "ok", ""
    runs = len(outcomes)
    if letters <= BAD:
        if rerun is not None and rerun in OK:
            return "ok", ""
        cls, reason = classify(message)
        return f"fail/{cls}", reason
    if letters == {"m"}:
        return "crash", f"crashed or hung: no outcome in {runs} of {runs} run(s)"
    if "m" in letters and not (letters & OK):
        missing = outcomes.count("m")
        return "crash", f"crashed or hung: no outcome in {missing} of {runs} run(s)"
    seen = ", ".join(sorted({_WORDS[c] for c in outcomes}))
    return "flaky", f"flaky: outcomes differ between runs ({seen})"


_WORDS = {v: k for k, v in CODES.items()}


def summarize(
    records: Iterable[Record], *, runs: Sequence[str], universe: str, rerun: str | None = None
) -> dict[str, Any]:
    """The baseline summary of ``records`` (outcome codes in the order of ``runs``; ``rerun``
    says how the failing variants were run once more, when they were)."""
    tests: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    n = 0
    for r in sorted(records, key=lambda r: (r.file, r.name, r.op or r.module or "", r.dtype or "")):
        if len(r.outcomes) != len(runs):
            raise PromoteError(f"{r.name}: {len(r.outcomes)} outcome(s) for {len(runs)} run(s)")
        n += 1
        node = tests[r.file].setdefault(r.name, {"ok": 0, "other": []})
        kind, reason = verdict(r.outcomes, r.message, r.rerun)
        if kind == "ok":
            node["ok"] += 1
            continue
        target = r.op if r.op is not None else (f"module:{r.module}" if r.module else None)
        codes = r.outcomes + (f"/{r.rerun}" if r.rerun else "")
        node["other"].append([target, r.dtype, codes, kind, reason])
    return {
        "version": SUMMARY_VERSION,
        "universe": universe,
        "runs": list(runs),
        "rerun": rerun,
        "variants": n,
        "tests": {f: dict(sorted(v.items())) for f, v in sorted(tests.items())},
    }


def load_summary(text: str, source: str = "summary") -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise PromoteError(f"{source}: not JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(data, dict) or data.get("version") != SUMMARY_VERSION:
        raise PromoteError(f"{source}: not a baseline summary of version {SUMMARY_VERSION}")
    return data


def counts(summary: dict[str, Any]) -> dict[str, Any]:
    """Variants by what the promoted spec makes of them."""
    out: Counter[str] = Counter()
    for names in summary["tests"].values():
        for node in names.values():
            out["mandatory_success"] += node["ok"]
            for _target, _dtype, _codes, kind, _reason in node["other"]:
                out[count_label(kind)] += 1
    return dict(sorted(out.items()))


def count_label(kind: str) -> str:
    """The name :func:`counts` gives a summary entry's kind (``fail/precision`` -> ``xfail
    precision``, ``crash`` -> ``skip``, ``ok`` -> ``mandatory_success``)."""
    fixed = {"ok": "mandatory_success", "crash": "skip", "flaky": "xfail flaky"}
    return fixed.get(kind, kind.replace("fail/", "xfail "))


# ---- rendering ----------------------------------------------------------------------------


def _hand_entries(existing: SpecDocument | None) -> dict[str, list[dict[str, Any]]]:
    """The hand-written test entries of a previously promoted spec, per file path."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    if existing is None:
        return out
    for f in existing.files:
        for t in f.tests:
            if t.ext is not None and t.ext.promoted:
                continue
            if not t.reason:
                where = f"{t.loc}: " if t.loc else ""
                raise PromoteError(
                    f"{where}hand-written entry {t.names} has no {EXTENSION_KEY}.reason: say why "
                    "it overrides the evidence (or mark it promoted: true to let it be replaced)"
                )
            out[f.path].append(t.model_dump(by_alias=True, exclude_defaults=True, mode="json"))
    return out


def _flow(value: Any) -> str:
    if isinstance(value, str):
        return value if re.fullmatch(r"[A-Za-z_][\w:.]*", value) else json.dumps(value)
    return yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False).strip()


def _entry(names: list[str], mode: str, ext: dict[str, Any], tags: Sequence[str] = ()) -> list[str]:
    lines = [f"        - names: {_flow(names)}", f"          mode: {mode}"]
    if tags:
        lines.append(f"          tags: {_flow(list(tags))}")
    lines.append(f"          {EXTENSION_KEY}: {_flow(ext)}")
    return lines


def _scoped(name: str, other: list[list[Any]]) -> list[list[str]]:
    """The promoted entries of one base name's variants that are not fine: one per verdict,
    reason and dtype list, each listing its ops or modules."""
    # target -> verdict/reason -> dtypes
    by_target: dict[Any, dict[tuple[str, str], set[str | None]]] = defaultdict(
        lambda: defaultdict(set)
    )
    for target, dtype, _codes, kind, reason in other:
        by_target[target][(kind, reason)].add(dtype)
    groups: dict[tuple[str, str, tuple[str, ...] | None, bool], list[Any]] = defaultdict(list)
    for target, verdicts in by_target.items():
        for (kind, reason), dtypes in verdicts.items():
            known = sorted(d for d in dtypes if d is not None)
            # a dtype the grammar cannot name: the entry covers every dtype of its ops
            nameable = known and all(d in DTYPE_NAMES for d in known)
            scope = tuple(known) if nameable else None
            groups[(kind, reason, scope, str(target).startswith("module:"))].append(target)
    order = {"crash": 0, "flaky": 2}
    entries = []
    for (kind, reason, scope, is_module), targets in sorted(
        groups.items(), key=lambda kv: (order.get(kv[0][0], 1), kv[0][0], kv[0][1], kv[0][2] or ())
    ):
        ext: dict[str, Any] = {"promoted": True, "reason": reason}
        ext["owner"] = OWNERS[kind.removeprefix("fail/")]
        named = sorted(t for t in targets if t is not None)
        if named:
            key = "modules" if is_module else "ops"
            ext[key] = [t.removeprefix("module:") for t in named]
        if scope is not None:
            ext["dtypes"] = list(scope)
        mode = "skip" if kind == "crash" else "xfail"
        tags = ["flaky"] if kind == "flaky" else []
        entries.append(_entry([name], mode, ext, tags))
    return entries


def provenance(summary: dict[str, Any]) -> list[str]:
    """The header's lines on the runs (stored runs: torch build, run number, date), the flaky
    variants measured per torch, and how the failures were classified; none for a summary
    made before these were kept."""
    lines = []
    for source in summary.get("sources") or []:
        if "torch_build" in source:
            lines.append(
                f"# run: {source['path']} (torch {source['torch_build']}, run {source['run']}, "
                f"{source['date']})"
            )
        else:
            lines.append(f"# run: {source['path']}")
    flaky = summary.get("flaky")
    if flaky is not None:
        measured = [
            f"{f['flaky']} of {f['variants']} variants at torch {torch} ({f['runs']} runs)"
            for torch, f in flaky.items()
        ]
        lines.append(
            "# flaky (outcome differs between runs of one torch): "
            + ("; ".join(measured) if measured else "not measured (one run per torch)")
        )
    if "sources" in summary:
        how = summary.get("rerun") or "no variant run again"
        lines.append(f"# failure classes: by message (stored in the runs; {how}), dtype and device")
    return lines


def under_spec_line(summary: dict[str, Any]) -> list[str]:
    """The header's counts over the variants that run under the bundled spec, when kept."""
    under = summary.get("under_spec")
    if not isinstance(under, dict):
        return []
    shown = ", ".join(f"{k} {v}" for k, v in under["counts"].items())
    return [f"# run under the bundled spec ({under['variants']} of {summary['variants']}): {shown}"]


def render(
    summary: dict[str, Any], *, existing: SpecDocument | None = None, command: str = ""
) -> str:
    """The promoted spec's text for ``summary``, keeping ``existing``'s hand-written entries."""
    hand = _hand_entries(existing)
    c = counts(summary)
    lines = [
        f"# GENERATED by `{command or 'relay specs promote'}` from a baseline summary of "
        f"{len(summary['runs'])} run(s)",
        f"# ({summary['universe']}; {summary['variants']} variants). Promoted entries carry "
        f"{EXTENSION_KEY}.promoted;",
        "# edit an entry by removing that key and giving a reason: hand-written entries are kept",
        "# and win on the next promotion.",
        *provenance(summary),
        "# variants: " + ", ".join(f"{k} {v}" for k, v in c.items()),
        *under_spec_line(summary),
        "test_suite_config:",
        f"  {EXTENSION_KEY}:",
        "    description: modes promoted from full runs of the bundled suites",
        "  files:",
    ]
    paths = sorted(set(summary["tests"]) | set(hand))
    for path in paths:
        names = summary["tests"].get(path, {})
        lines += [f"    - path: {path}", "      unlisted_test_mode: xfail", "      tests:"]
        for entry in hand.get(path, []):
            dumped = yaml.safe_dump([entry], sort_keys=False, width=100, allow_unicode=True)
            lines += ["        " + line for line in dumped.rstrip().splitlines()]
        mandatory = []
        for name, node in names.items():
            for entry_lines in _scoped(name, node["other"]):
                lines += entry_lines
            if node["ok"]:
                mandatory.append(name)
        if mandatory:
            lines.append("        - names:")
            lines += [f"            - {_flow(n)}" for n in mandatory]
            lines.append("          mode: mandatory_success")
            lines.append(
                f"          {EXTENSION_KEY}: {{promoted: true, reason: passed in every run}}"
            )
        elif not hand.get(path):
            lines[-1] = "      tests: []"
    return "\n".join(lines) + "\n"


def check_renders(text: str, source: str) -> SpecDocument:
    """The rendered text loads as a spec (never write a broken one)."""
    from testspecs.loader import load_text

    try:
        return load_text(text, source).document
    except SpecError as e:
        raise PromoteError(f"the promoted spec does not load: {e.messages[0]}") from None
