"""The relay role's model: a downstream as the relay serves it (its allowlist entry and its
policy), what an upstream event offers a downstream (:class:`Subject`), and the admission
decision with its reason. Everything in ``fanout`` imports its vocabulary from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wire.crcr.allowlist import AllowlistEntry, Level
from wire.github.events import CIFLOW_LABEL_PREFIX, UpstreamEvent

#: author associations GitHub gives to people who may run CI on their own (the rest wait)
TRUSTED_ASSOCIATIONS = frozenset({"OWNER", "MEMBER", "COLLABORATOR"})
#: the key of our additions inside a dispatch's ``client_payload`` (CRCR's keys stay as they are)
PAYLOAD_KEY = "crcr_relay"
#: the largest ``client_payload`` we send (GitHub refuses past about 65 KB)
MAX_CLIENT_PAYLOAD = 60_000


class Target:
    GITHUB = "github"  # GitHub's repository_dispatch to the downstream repository
    RUNNER = "runner"  # the in-process runner of this service


@dataclass(frozen=True)
class Policy:
    """Our extension of an allowlist entry (the policy file); every field has CRCR's behaviour
    as its default, so a downstream without a policy is served exactly as CRCR serves it."""

    events: tuple[str, ...] | None = None  # narrows the allowlist's events; None: no narrowing
    actions: tuple[str, ...] | None = None  # pull_request actions; None: CRCR's forwarded set
    branches: tuple[str, ...] | None = None  # globs on the PR's base ref or the pushed branch
    merged_only: bool = False  # PRs only once merged (pushes always pass)
    paths: tuple[str, ...] | None = None  # globs; at least one changed file must match
    drafts: bool = True  # draft PRs are dispatched
    author_trust: str = "any"  # "any" (CRCR) or "trusted": forks / first-timers wait for a label
    trust_label_prefix: str = CIFLOW_LABEL_PREFIX  # a maintainer's label that lets them through
    nightly: str | None = None  # crontab (UTC) of a nightly dispatch
    start_timeout: int = 3600  # seconds from dispatch to in_progress before timed_out
    run_timeout: int = 6 * 3600  # seconds in progress before timed_out
    max_in_flight: int | None = None  # dispatched and not completed; None: unlimited
    target: str = Target.GITHUB
    workflow: str | None = None  # names the check run crcr/<repo>/<workflow> (L3/L4)
    repository_id: int | None = None  # pins callbacks to the OIDC repository_id claim
    line: int = 0  # where the downstream's policy is written (0: defaults only)


@dataclass(frozen=True)
class AllowlistedDownstream:
    """One allowlisted repository with its policy."""

    entry: AllowlistEntry
    policy: Policy = field(default_factory=Policy)

    @property
    def repo(self) -> str:
        return self.entry.repo

    @property
    def level(self) -> Level:
        return self.entry.level


@dataclass(frozen=True)
class Subject:
    """What an upstream delivery offers a downstream: its normalized event and the facts the
    policy needs beyond it (a draft PR, a PR from a fork; changed files once known)."""

    event: UpstreamEvent
    draft: bool = False
    fork: bool = False
    changed_files: tuple[str, ...] | None = None  # None: not known yet (a PR before the API call)


@dataclass(frozen=True)
class Admission:
    """Whether a downstream gets an event, and why (shown by the API and `relay downstreams`)."""

    repo: str
    admitted: bool
    reason: str
    deferred: bool = False  # admitted now; a later check (changed paths) may still skip it
