"""How far the simulated outcomes of a spec's tests agree with the modes the spec records.

A backend's spec records what its real hardware does: a ``mandatory_success`` entry passes on the
card, an ``xfail`` entry fails there. Run the same tests on a simulator under that spec and
compare, name by name (the granularity a torch-spyre config writes its reasons at, one YAML
comment per name):

* ``agree``: every variant of the name that ran did what the mode says;
* ``xpass``: the card's record says it fails, the simulator passed at least one variant;
* ``unexpected-failure``: the card's record says it passes, the simulator failed a variant;
* not compared: ``skipped-by-spec`` (mode ``skip``: never generated), ``not-run`` (every variant
  was skipped by upstream, e.g. ``@onlyCPU``), ``shadowed`` (another entry decides its tests),
  ``no-test`` (the name matches no test the device collects).

The percentage is ``agree`` over the three compared statuses. XPASS entries are grouped by the
reason the spec gives for the failure (``x-relay/v1.reason``, else the YAML comment on the name's
line, else the comment on its ``- names:`` line); unexpected failures by the simulator's first
failure line. This module is pure: the caller runs the tests (the spec plugin's JSON report,
:mod:`testspecs.report`) and collects the device's tests (:mod:`testspecs.collect`).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from testspecs.loader import LoadedSpec
from testspecs.report import TestRecord

COMPARED = ("agree", "xpass", "unexpected-failure")
NOT_COMPARED = ("skipped-by-spec", "not-run", "shadowed", "no-test")
_RAN = ("passed", "failed", "error", "xfailed", "xpassed")
_NAME_LINE = re.compile(r"^\s*-\s+(?:name:\s*)?['\"]?([^\s'\"#]+)['\"]?\s*(?:#\s*(.*?))?\s*$")
_BLOCK_LINE = re.compile(r"^\s*-\s+names:\s*(?:#\s*(.*?))?\s*$")
_SKIP_MODE = re.compile(r"^(\s*(?:-\s+)?mode:\s*)skip\b", re.MULTILINE)


@dataclass
class NameResult:
    """One name of one entry, and what the simulator did with the variants it decides."""

    name: str
    mode: str  # the mode the spec records (skip entries run as xfail keep ``skip`` here)
    line: int
    reason: str | None
    status: str = "not-run"
    outcomes: dict[str, int] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)  # the simulator's failure lines


@dataclass
class FileAgreement:
    """The agreement of one spec file's entries for one upstream test file."""

    config: str
    test_file: str
    names: list[NameResult] = field(default_factory=list)
    unlisted: dict[str, int] = field(default_factory=dict)  # "mode outcome" -> variants
    unlisted_failures: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)  # lint: dead names, two entries, errors
    error: str | None = None  # the file could not be collected or run
    seconds: float = 0.0

    def count(self, status: str) -> int:
        return sum(1 for n in self.names if n.status == status)

    @property
    def compared(self) -> int:
        return sum(self.count(s) for s in COMPARED)

    @property
    def percent(self) -> float | None:
        return 100.0 * self.count("agree") / self.compared if self.compared else None

    def by_reason(self, status: str) -> dict[str, list[str]]:
        """Names of one status grouped by the spec's reason (xpass) or the simulator's first
        failure line (unexpected failures)."""
        groups: dict[str, list[str]] = {}
        for n in self.names:
            if n.status != status:
                continue
            key = (n.messages[0] if n.messages else None) if status != "xpass" else n.reason
            groups.setdefault(key or "(no reason given)", []).append(n.name)
        return dict(sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])))

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["counts"] = {s: self.count(s) for s in (*COMPARED, *NOT_COMPARED)}
        body["percent"] = self.percent
        body["xpass_by_reason"] = self.by_reason("xpass")
        body["failures_by_message"] = self.by_reason("unexpected-failure")
        return body


def reason_comments(text: str) -> dict[int, str]:
    """Line number -> the reason a torch-spyre config writes for the name on that line: the
    comment after the name, else its block's: the comment after ``- names:``, or the comment
    lines just above the block or at the head of its list (commented-out names aside)."""
    out: dict[int, str] = {}
    block: str | None = None
    pending: str | None = None
    in_names = after_comment = False
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("#"):
            note = stripped.lstrip("#").strip().strip("#-").strip()
            if note and not note.startswith("- ") and re.search(r"[A-Za-z]", note):
                if in_names and block is None:
                    block = note
                elif not in_names and not (after_comment and pending):
                    pending = note  # the first line of a run of comments heads it
            after_comment = True
            continue
        after_comment = False
        head = _BLOCK_LINE.match(line)
        if head:
            block, pending, in_names = head.group(1) or pending, None, True
            continue
        if re.match(r"^\s*(-\s+)?\w+:(?!:)", line):  # another key ends the names list
            in_names = False
            continue
        item = _NAME_LINE.match(line)
        if item and in_names and (item.group(2) or block):
            out[number] = (item.group(2) or block or "").strip()
    return out


def run_skipped_text(text: str) -> str:
    """The spec text with every entry of mode ``skip`` turned into ``xfail`` (the file's
    ``unlisted_test_mode`` untouched, lines and columns kept): a torch-spyre config skips what
    crashes or fails on the card, and run as xfail those entries can be compared too."""
    return _SKIP_MODE.sub(r"\1xfail", text)


def _split(base: str) -> tuple[str | None, str]:
    cls, sep, method = base.rpartition("::")
    return (cls if sep else None), method


def _entry_key(line: int, column: int, index: int) -> str:
    return f":{line}:{column}: tests[{index}]"


def _status(mode: str, ran: list[TestRecord]) -> str:
    if not ran:
        return "not-run"
    outcomes = {r.outcome for r in ran}
    if mode == "mandatory_success":
        return "unexpected-failure" if outcomes & {"failed", "error"} else "agree"
    strict_pass = any((r.message or "").startswith("[XPASS(strict)]") for r in ran)
    return "xpass" if "xpassed" in outcomes or "passed" in outcomes or strict_pass else "agree"


def agreement(
    spec: LoadedSpec,
    text: str,
    records: list[TestRecord],
    collected: list[str] | None,
    *,
    test_file: str,
    run_skipped: bool = False,
) -> FileAgreement:
    """Compare ``records`` (one run of ``test_file`` under ``spec``, whose text is ``text``)
    with the spec's modes.

    ``collected``: the base names (``Class::method``) the device collects from the file, or None
    when unknown. ``run_skipped``: the run used :func:`run_skipped_text` (skip entries ran as
    xfail; lines and columns are the same, so records still name this spec's entries)."""
    result = FileAgreement(config=spec.file, test_file=test_file)
    reasons = reason_comments(text)
    claimed: set[str] = set()
    for fi, f in enumerate(spec.document.files):
        for index, entry in enumerate(f.tests):
            loc = entry.loc
            key = _entry_key(loc.line, loc.column, index) if loc else None
            mine = [r for r in records if key and r.entry and key in r.entry]
            recorded = entry.effective_mode
            ran_as = "xfail" if recorded == "skip" and run_skipped else recorded
            for j, pattern in enumerate(entry.patterns):
                where = spec.value_locs.get(
                    ("test_suite_config", "files", fi, "tests", index, "names", j)
                )
                line = where.line if where else 0
                hits = [r for r in mine if r.base and pattern.matches(*_split(r.base))]
                claimed.update(r.nodeid for r in hits)
                name = NameResult(
                    name=pattern.text,
                    mode=recorded,
                    line=line,
                    reason=entry.reason or reasons.get(line),
                )
                name.outcomes = dict(Counter(r.outcome for r in hits))
                ran = [r for r in hits if r.outcome in _RAN]
                name.messages = [
                    r.message for r in ran if r.outcome in ("failed", "error") and r.message
                ]
                if collected is not None and not any(
                    pattern.matches(*_split(c)) for c in collected
                ):
                    name.status = "no-test"
                elif ran_as == "skip":
                    name.status = "skipped-by-spec"
                elif not hits and any(
                    r.base and pattern.matches(*_split(r.base)) for r in records if r not in mine
                ):
                    name.status = "shadowed"
                else:
                    name.status = _status(ran_as, ran)
                result.names.append(name)
    for r in records:
        if r.nodeid in claimed or r.entry:
            continue
        # no mode: the spec plugin decided nothing for it (a test that is not device-generic)
        label = f"{r.mode or 'no-mode'} {r.outcome}"
        result.unlisted[label] = result.unlisted.get(label, 0) + 1
        if r.mode == "mandatory_success" and r.outcome in ("failed", "error"):
            result.unlisted_failures.append(f"{r.base}: {r.message or r.outcome}")
    return result
