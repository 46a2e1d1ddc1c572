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

A repo may appear once across all levels. Every problem in the file is reported at once.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class Level(enum.StrEnum):
    L1 = "L1"  # events only
    L2 = "L2"  # results on the HUD
    L3 = "L3"  # plus a non-blocking check run when the device label is on the PR
    L4 = "L4"  # a blocking check on every PR


REPO_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
KNOWN_EVENTS = {"pull_request", "push", "nightly", "periodic", "check_run", "check_suite"}


class AllowlistError(ValueError):
    def __init__(self, path: str, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(f"{path}: " + "; ".join(problems))


@dataclass(frozen=True)
class AllowlistEntry:
    repo: str
    level: Level
    oncalls: tuple[str, ...] = ()
    events: tuple[str, ...] | None = None  # None: every event
    device: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


def parse(text: str, *, path: str = "<allowlist>") -> list[AllowlistEntry]:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise AllowlistError(path, [f"not valid YAML: {exc}"]) from exc
    doc = doc or {}
    problems: list[str] = []
    if not isinstance(doc, dict):
        raise AllowlistError(path, ["the top level must be a mapping of levels L1-L4"])
    entries: list[AllowlistEntry] = []
    for key, body in doc.items():
        if key not in Level.__members__:
            problems.append(f"unknown level {key!r} (expected one of L1, L2, L3, L4)")
            continue
        level = Level(key)
        if body is None:
            continue
        if level is Level.L3 and isinstance(body, dict):
            for device, repos in body.items():
                items = [{r: v} for r, v in repos.items()] if isinstance(repos, dict) else repos
                entries += _entries(items, level, str(device), problems)
        elif isinstance(body, list):
            entries += _entries(body, level, None, problems)
        else:
            problems.append(f"{key}: expected a list of repositories")
    seen: dict[str, Level] = {}
    for entry in entries:
        if entry.repo in seen:
            problems.append(
                f"{entry.repo} appears in {seen[entry.repo].value} and {entry.level.value}"
            )
        seen[entry.repo] = entry.level
    if problems:
        raise AllowlistError(path, problems)
    return entries


def _entries(
    items: Any, level: Level, device: str | None, problems: list[str]
) -> list[AllowlistEntry]:
    out: list[AllowlistEntry] = []
    if not isinstance(items, list):
        problems.append(f"{level.value}: expected a list of repositories")
        return out
    for item in items:
        if isinstance(item, str):
            repo, spec = item, None
        elif isinstance(item, dict) and len(item) == 1:
            repo, spec = next(iter(item.items()))
        else:
            problems.append(f"{level.value}: cannot read entry {item!r}")
            continue
        if not isinstance(repo, str) or not REPO_RE.match(repo):
            problems.append(f"{level.value}: {repo!r} is not an owner/name repository")
            continue
        oncalls: tuple[str, ...] = ()
        events: tuple[str, ...] | None = None
        if isinstance(spec, str):
            oncalls = tuple(s.strip() for s in spec.split(",") if s.strip())
        elif isinstance(spec, list):
            oncalls = tuple(str(s) for s in spec)
        elif isinstance(spec, dict):
            unknown = set(spec) - {"events", "oncalls"}
            if unknown:
                problems.append(f"{repo}: unknown keys {sorted(unknown)}")
            raw_oncalls = spec.get("oncalls") or []
            oncalls = tuple(
                s.strip()
                for s in (raw_oncalls.split(",") if isinstance(raw_oncalls, str) else raw_oncalls)
            )
            if "events" in spec:
                events = tuple(spec["events"] or ())
                bad = sorted(set(events) - KNOWN_EVENTS)
                if bad:
                    problems.append(f"{repo}: unknown events {bad}")
        elif spec is not None:
            problems.append(f"{repo}: cannot read {spec!r}")
        out.append(
            AllowlistEntry(repo=repo, level=level, oncalls=oncalls, events=events, device=device)
        )
    return out


def load(path: Path) -> list[AllowlistEntry]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise AllowlistError(str(path), [f"cannot read: {exc.strerror}"]) from exc
    return parse(text, path=str(path))
