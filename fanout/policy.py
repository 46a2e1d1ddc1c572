"""The policy file (our extension of CRCR's allowlist) and the admission decision.

    version: 1
    defaults:                       # every allowlisted downstream
      start_timeout: 3600
    downstreams:
      org/repo-c:
        events: [pull_request]      # narrows the allowlist's events
        actions: [opened, synchronize]
        branches: [main, "release/*"]
        merged_only: false
        paths: ["aten/**", "torch/**"]
        drafts: false
        author_trust: trusted       # forks and first-time contributors wait for a ciflow/crcr/ label
        nightly: "0 2 * * *"
        start_timeout: 1800         # seconds
        run_timeout: 21600
        max_in_flight: 4
        target: github              # or runner (this service's in-process runner)
        workflow: upstream-tests    # L3/L4 check run crcr/<repo>/<workflow>
        repository_id: 123456       # callbacks' OIDC repository_id must be this (a renamed or
                                    # re-created repository under the same name is refused)

A repository in the policy must be in the allowlist (the allowlist decides who is served, the
policy only how). Every problem is reported at once as ``<file>:<line>: <problem>``.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode

from fanout.model import (
    TRUSTED_ASSOCIATIONS,
    Admission,
    AllowlistedDownstream,
    Policy,
    Subject,
    Target,
)
from wire.crcr.allowlist import KNOWN_EVENTS, AllowlistEntry, AllowlistError, Level, compose
from wire.github.events import PR_ACTIONS

POLICY_VERSION = 1
_LISTS = {"events", "actions", "branches", "paths"}
_BOOLS = {"merged_only", "drafts"}
_INTS = {"start_timeout", "run_timeout", "max_in_flight", "repository_id"}
_STRINGS = {"author_trust", "trust_label_prefix", "nightly", "target", "workflow"}
_KEYS = _LISTS | _BOOLS | _INTS | _STRINGS


class PolicyError(AllowlistError):
    """Every problem of one policy file; each problem reads ``<path>:<line>: <what>``."""


def _plain(node: Node) -> Any:
    return yaml.SafeLoader("").construct_document(node)


def _fields(node: Node, where: str, path: str, problems: list[str]) -> dict[str, Any]:
    line = node.start_mark.line + 1
    if not isinstance(node, MappingNode):
        problems.append(f"{path}:{line}: {where}: expected a mapping of policy keys")
        return {}
    out: dict[str, Any] = {}
    for key_node, value_node in node.value:
        key = _plain(key_node)
        value = _plain(value_node)
        at = f"{path}:{key_node.start_mark.line + 1}: {where}.{key}"
        if key not in _KEYS:
            problems.append(f"{at}: unknown key (expected one of {', '.join(sorted(_KEYS))})")
        elif key in _LISTS:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                problems.append(f"{at}: expected a list of strings")
                continue
            if key == "events" and (bad := sorted(set(value) - KNOWN_EVENTS)):
                problems.append(f"{at}: unknown events {bad}")
            out[key] = tuple(value)
        elif key in _BOOLS:
            if not isinstance(value, bool):
                problems.append(f"{at}: expected true or false")
                continue
            out[key] = value
        elif key in _INTS:
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                problems.append(f"{at}: expected a positive number of seconds or jobs")
                continue
            out[key] = value
        else:
            if not isinstance(value, str):
                problems.append(f"{at}: expected a string")
                continue
            if key == "author_trust" and value not in ("any", "trusted"):
                problems.append(f"{at}: expected 'any' or 'trusted'")
            elif key == "target" and value not in (Target.GITHUB, Target.RUNNER):
                problems.append(f"{at}: expected '{Target.GITHUB}' or '{Target.RUNNER}'")
            elif key == "nightly" and (reason := cron_problem(value)):
                problems.append(f"{at}: {reason}")
            out[key] = value
    return out


def cron_problem(text: str) -> str | None:
    """Why ``text`` is not a five-field crontab, or None."""
    fields = text.split()
    if len(fields) != 5:
        return f"{text!r} is not a crontab of five fields (minute hour day month weekday)"
    allowed = set("0123456789*/,-")
    for value in fields:
        if not value or set(value) - allowed:
            return f"{text!r}: field {value!r} is not a crontab field"
    return None


def parse(
    text: str, *, entries: list[AllowlistEntry], path: str = "<policy>"
) -> list[AllowlistedDownstream]:
    """The allowlist's entries with their policies (defaults, then the repository's keys)."""
    problems: list[str] = []
    root = compose(text, path, PolicyError)
    defaults: dict[str, Any] = {}
    per_repo: dict[str, tuple[int, dict[str, Any]]] = {}
    if root is not None and not (isinstance(root, ScalarNode) and _plain(root) is None):
        if not isinstance(root, MappingNode):
            raise PolicyError(path, [f"{path}:1: the top level must be a mapping"])
        listed = {e.repo for e in entries}
        for key_node, value_node in root.value:
            key = _plain(key_node)
            line = key_node.start_mark.line + 1
            if key == "version":
                if _plain(value_node) != POLICY_VERSION:
                    problems.append(f"{path}:{line}: version: only {POLICY_VERSION} is known")
            elif key == "defaults":
                defaults = _fields(value_node, "defaults", path, problems)
            elif key == "downstreams":
                if not isinstance(value_node, MappingNode):
                    problems.append(f"{path}:{line}: downstreams: expected a mapping of repos")
                    continue
                for repo_node, body in value_node.value:
                    repo = _plain(repo_node)
                    repo_line = repo_node.start_mark.line + 1
                    if repo not in listed:
                        problems.append(
                            f"{path}:{repo_line}: {repo!r} is not in the allowlist "
                            "(the policy says how a listed downstream is served)"
                        )
                        continue
                    per_repo[repo] = (repo_line, _fields(body, str(repo), path, problems))
            else:
                problems.append(
                    f"{path}:{line}: unknown key {key!r} (expected version, defaults, downstreams)"
                )
    if problems:
        raise PolicyError(path, problems)
    out = []
    for entry in entries:
        line, own = per_repo.get(entry.repo, (0, {}))
        out.append(
            AllowlistedDownstream(entry=entry, policy=Policy(**{**defaults, **own}, line=line))
        )
    return out


def with_defaults(entries: list[AllowlistEntry]) -> list[AllowlistedDownstream]:
    return [AllowlistedDownstream(entry=e) for e in entries]


def _branch(subject: Subject) -> str | None:
    event = subject.event
    if event.event == "pull_request":
        return event.base_ref
    if event.event == "push" and event.ref and event.ref.startswith("refs/heads/"):
        return event.ref.removeprefix("refs/heads/")
    if event.event == "push" and event.ref:
        return event.ref
    return None


@functools.lru_cache(maxsize=1024)
def glob_regex(glob: str) -> re.Pattern[str]:
    """A path glob: ``*`` and ``?`` stay within one path segment, ``**`` crosses segments
    (``aten/**`` is everything under aten/, ``**/*.py`` every Python file)."""
    out, i = [], 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def _matches(path: str, globs: tuple[str, ...]) -> bool:
    return any(glob_regex(g).match(path) for g in globs)


def admit(downstream: AllowlistedDownstream, subject: Subject) -> Admission:
    """Whether ``downstream`` gets this upstream event, and why. Changed paths are checked only
    when ``subject.changed_files`` is known; otherwise the decision is ``deferred``."""
    event, policy, repo = subject.event, downstream.policy, downstream.repo

    def no(reason: str) -> Admission:
        return Admission(repo=repo, admitted=False, reason=reason)

    if not event.actionable:
        return no(event.reason or "the event is not forwarded")
    name = event.event
    if name in ("check_run", "check_suite"):
        # a re-run of one downstream's crcr/<repo>[/<workflow>] check goes to that one only
        check = event.check_name or ""
        if check == f"crcr/{repo}" or check.startswith(f"crcr/{repo}/"):
            return Admission(repo=repo, admitted=True, reason=f"re-run of {check}")
        return no(f"the re-run of {check!r} is not for {repo}")
    if event.event == "pull_request" and event.action == "labeled":
        label = f"ciflow/crcr/{downstream.entry.device}"
        if downstream.level is not Level.L3 or label not in event.labels:
            return no("a ciflow/crcr/<device> label backfills the L3 downstreams of that device")
        name = "pull_request"
    allowed_events = downstream.entry.events
    if allowed_events is not None and name not in allowed_events:
        return no(f"the allowlist gives {repo} only {', '.join(allowed_events) or 'no events'}")
    if policy.events is not None and name not in policy.events:
        return no(f"the policy gives {repo} only {', '.join(policy.events) or 'no events'}")
    if name == "pull_request":
        actions = policy.actions if policy.actions is not None else tuple(sorted(PR_ACTIONS))
        if event.action not in actions and event.action != "labeled":
            return no(f"pull_request action {event.action!r} is not in the policy's actions")
        if policy.merged_only and not (event.action == "closed" and event.merged):
            return no("the policy takes merged pull requests only")
        if subject.draft and not policy.drafts:
            return no("the policy skips draft pull requests")
        if policy.author_trust == "trusted" and (
            subject.fork or (event.author_association or "NONE") not in TRUSTED_ASSOCIATIONS
        ):
            labelled = any(lb.startswith(policy.trust_label_prefix) for lb in event.labels)
            if not labelled:
                who = "a fork" if subject.fork else f"a {event.author_association or 'NONE'} author"
                return no(
                    f"a pull request from {who} waits for a maintainer's "
                    f"{policy.trust_label_prefix}* label"
                )
    if policy.branches is not None and name in ("pull_request", "push"):
        branch = _branch(subject)
        if branch is None or not _matches(branch, policy.branches):
            return no(f"branch {branch!r} matches none of {', '.join(policy.branches)}")
    if policy.paths is not None and name in ("pull_request", "push"):
        if subject.changed_files is None:
            return Admission(
                repo=repo, admitted=True, reason="paths checked at send", deferred=True
            )
        if not any(_matches(f, policy.paths) for f in subject.changed_files):
            return no(f"no changed file matches {', '.join(policy.paths)}")
    return Admission(repo=repo, admitted=True, reason="admitted")
