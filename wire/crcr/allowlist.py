"""The CRCR allowlist (`.github/allowlist.yml` in pytorch/pytorch): which downstream repos get
upstream events, at which level (L1-L4), with their oncalls, events and device.

Accepted shapes per level (see reference/crcr.md):

    L1:
      - org/repo-a                                  # bare name
      - org/repo-b: "oncall1, oncall2"              # oncalls as a comma list
    L2:
      - org/repo-c: {events: [pull_request, nightly], oncalls: [someone]}
    L3:                                             # grouped by device (ciflow/crcr/<device>)
      some-device:
        org/repo-d: [oncall3]
    L4: []

A repo may appear once across all levels. Every problem in the file is reported at once, each
as ``<file>:<line>: <problem>``.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode


class Level(enum.StrEnum):
    L1 = "L1"  # events only
    L2 = "L2"  # results on the HUD
    L3 = "L3"  # plus a non-blocking check run when the device label is on the PR
    L4 = "L4"  # a blocking check on every PR


REPO_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
KNOWN_EVENTS = {"pull_request", "push", "nightly", "periodic", "check_run", "check_suite"}


class AllowlistError(ValueError):
    """Every problem of one file; each problem reads ``<path>:<line>: <what>``."""

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass(frozen=True)
class AllowlistEntry:
    repo: str
    level: Level
    oncalls: tuple[str, ...] = ()
    events: tuple[str, ...] | None = None  # None: every event
    device: str | None = None
    line: int = field(default=0, compare=False)  # where the entry is written (1-based)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


class _Problems:
    def __init__(self, path: str) -> None:
        self.path = path
        self.items: list[str] = []

    def add(self, node: Node | None, message: str) -> None:
        line = node.start_mark.line + 1 if node is not None else 1
        self.items.append(f"{self.path}:{line}: {message}")


def _value(node: Node) -> Any:
    """The plain Python value of a node (for messages and scalars)."""
    return yaml.SafeLoader("").construct_document(node) if node is not None else None


def _scalar(node: Node) -> Any:
    return _value(node) if isinstance(node, ScalarNode) else None


def compose(
    text: str, path: str, error: type[AllowlistError] = AllowlistError
) -> Node | None:
    """The YAML node tree of ``text`` (nodes keep their lines); invalid YAML raises ``error``
    with one ``<path>:<line>: not valid YAML: <why>`` problem."""
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        reason = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise error(path, [f"{path}:{line}: not valid YAML: {reason}"]) from exc


def parse(text: str, *, path: str = "<allowlist>") -> list[AllowlistEntry]:
    problems = _Problems(path)
    root = compose(text, path)
    if root is None or (isinstance(root, ScalarNode) and _scalar(root) is None):
        return []
    if not isinstance(root, MappingNode):
        raise AllowlistError(path, [f"{path}:1: the top level must be a mapping of levels L1-L4"])
    entries: list[AllowlistEntry] = []
    for key_node, body in root.value:
        key = _scalar(key_node)
        if key not in Level.__members__:
            problems.add(key_node, f"unknown level {key!r} (expected one of L1, L2, L3, L4)")
            continue
        level = Level(key)
        if isinstance(body, ScalarNode) and _scalar(body) is None:
            continue
        if level is Level.L3 and isinstance(body, MappingNode):
            for device_node, repos in body.value:
                device = str(_scalar(device_node))
                if isinstance(repos, MappingNode):
                    items: list[tuple[Node, Node, Node | None]] = [
                        (k, k, v) for k, v in repos.value
                    ]
                    entries += _mapping_entries(items, level, device, problems)
                else:
                    entries += _entries(repos, level, device, problems)
        elif isinstance(body, SequenceNode):
            entries += _entries(body, level, None, problems)
        else:
            problems.add(body, f"{key}: expected a list of repositories")
    seen: dict[str, AllowlistEntry] = {}
    for entry in entries:
        if entry.repo in seen:
            first = seen[entry.repo]
            problems.items.append(
                f"{path}:{entry.line}: {entry.repo} appears in {first.level.value} "
                f"(line {first.line}) and {entry.level.value}"
            )
        else:
            seen[entry.repo] = entry
    if problems.items:
        raise AllowlistError(path, problems.items)
    return entries


def _entries(
    node: Node, level: Level, device: str | None, problems: _Problems
) -> list[AllowlistEntry]:
    if not isinstance(node, SequenceNode):
        problems.add(node, f"{level.value}: expected a list of repositories")
        return []
    items: list[tuple[Node, Node, Node | None]] = []
    for item in node.value:
        if isinstance(item, ScalarNode):
            items.append((item, item, None))
        elif isinstance(item, MappingNode) and len(item.value) == 1:
            key_node, spec = item.value[0]
            items.append((item, key_node, spec))
        else:
            problems.add(item, f"{level.value}: cannot read entry {_value(item)!r}")
    return _mapping_entries(items, level, device, problems)


def _mapping_entries(
    items: list[tuple[Node, Node, Node | None]],
    level: Level,
    device: str | None,
    problems: _Problems,
) -> list[AllowlistEntry]:
    out: list[AllowlistEntry] = []
    for where, key_node, spec_node in items:
        repo = _scalar(key_node)
        if not isinstance(repo, str) or not REPO_RE.match(repo):
            problems.add(key_node, f"{level.value}: {repo!r} is not an owner/name repository")
            continue
        spec = _value(spec_node) if spec_node is not None else None
        oncalls: tuple[str, ...] = ()
        events: tuple[str, ...] | None = None
        if isinstance(spec, str):
            oncalls = tuple(s.strip() for s in spec.split(",") if s.strip())
        elif isinstance(spec, list):
            oncalls = tuple(str(s) for s in spec)
        elif isinstance(spec, dict):
            unknown = set(spec) - {"events", "oncalls"}
            if unknown:
                problems.add(spec_node, f"{repo}: unknown keys {sorted(unknown)}")
            raw_oncalls = spec.get("oncalls") or []
            oncalls = tuple(
                str(s).strip()
                for s in (raw_oncalls.split(",") if isinstance(raw_oncalls, str) else raw_oncalls)
            )
            if "events" in spec:
                raw_events = spec["events"] or ()
                if not isinstance(raw_events, list):
                    problems.add(spec_node, f"{repo}: events must be a list")
                    raw_events = ()
                events = tuple(str(e) for e in raw_events)
                bad = sorted(set(events) - KNOWN_EVENTS)
                if bad:
                    problems.add(spec_node, f"{repo}: unknown events {bad}")
        elif spec is not None:
            problems.add(spec_node, f"{repo}: cannot read {spec!r}")
        out.append(
            AllowlistEntry(
                repo=repo,
                level=level,
                oncalls=oncalls,
                events=events,
                device=device,
                line=where.start_mark.line + 1,
            )
        )
    return out


def load(path: Path) -> list[AllowlistEntry]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise AllowlistError(str(path), [f"{path}:1: cannot read: {exc.strerror}"]) from exc
    return parse(text, path=str(path))
