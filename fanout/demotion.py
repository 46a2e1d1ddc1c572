"""CRCR's freeze of a demoted L3 downstream: while a pull request from the upstream branch
``crcr-demotion/<repo>`` is open (HUD's level sync opens it to move the repository to L2), the
relay creates no new check run for that repository; its dispatches, callbacks and HUD rows carry
on. The sweeper reconciles it: each L3 downstream's demotion PR looked up, ``demoted_since``
recorded or cleared. A downstream whose PRs cannot be listed is left as it was.
"""

from __future__ import annotations

import logging

from config.settings import Settings
from fanout.github import GitHubApi, GitHubError
from store import outbox
from store.db import session_scope
from wire.crcr.allowlist import Level

log = logging.getLogger("fanout.demotion")

#: the demotion PR of ``org/repo`` is on the upstream branch ``crcr-demotion/org/repo``
BRANCH_PREFIX = "crcr-demotion/"


def demotion_head(upstream_repo: str, repo: str) -> str:
    """The ``head`` filter of the demotion PR (its branch is in the upstream repository)."""
    return f"{upstream_repo.split('/', 1)[0]}:{BRANCH_PREFIX}{repo}"


def reconcile(settings: Settings, api: GitHubApi) -> dict[str, int]:
    """Record which L3 downstreams have an open demotion PR; counts of what changed."""
    with session_scope(settings.database_url) as session:
        rows = [(d.id, d.repo) for d in outbox.downstreams_at(session, level=Level.L3.value)]
    counts = {"demoted": 0, "restored": 0, "unknown": 0}
    for pk, repo in rows:
        try:
            demoted = api.has_open_pull(
                settings.upstream_repo, head=demotion_head(settings.upstream_repo, repo)
            )
        except GitHubError as exc:
            log.warning("demotion of %s not reconciled: %s", repo, exc)
            counts["unknown"] += 1
            continue
        with session_scope(settings.database_url) as session:
            if outbox.set_demoted(session, pk=pk, demoted=demoted):
                counts["demoted" if demoted else "restored"] += 1
                log.info(
                    "%s: %s",
                    repo,
                    "demotion PR open, check runs held back"
                    if demoted
                    else "demotion PR closed, check runs again",
                )
    return counts
