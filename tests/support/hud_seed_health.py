"""The downstreams' job histories whose CRCR health verdicts are known, for the HUD's tests,
screenshots and benchmark: one passes every L3 rule, each other fails exactly the rules named in
:data:`HEALTH_CASES` (a P50 over 3 h necessarily puts most jobs over 3 h too), one L3
downstream is demoted on its 7-day pass rate. All times are relative to ``now``."""

from __future__ import annotations

from datetime import datetime, timedelta

from store.db import session_scope
from store.models import Downstream
from tests.support.hud_seed import H, add_job, sha_of

#: downstream -> (level, days listed, the L3 rules it fails (14 d), verdict)
HEALTH_CASES: dict[str, tuple[str, int, set[str], str]] = {
    "acme/npu-ready": ("L2", 45, set(), "ready for L3"),
    "acme/npu-slow": ("L2", 45, {"p50_e2e", "over_3h_share"}, "not ready for L3"),
    "acme/npu-long-tail": ("L2", 45, {"over_3h_share"}, "not ready for L3"),
    "acme/npu-queue": ("L2", 45, {"avg_queue"}, "not ready for L3"),
    "acme/npu-timeouts": ("L2", 45, {"timeout_rate"}, "not ready for L3"),
    "acme/npu-red": ("L2", 45, {"pass_rate"}, "not ready for L3"),
    "acme/npu-new": ("L2", 10, {"time_at_l2"}, "not ready for L3"),
    "acme/npu-l3": ("L3", 90, {"pass_rate"}, "demote"),
}


#: (passed, failed, skipped) of a health job by its conclusion (the verdicts read only timings)
_HEALTH_COUNTS = {"success": (180, 0, 20), "failure": (172, 8, 20), "timed_out": (95, 0, 5)}


def seed_health(database_url: str, *, now: datetime) -> dict[str, tuple[str, set[str]]]:
    """20 jobs per downstream over the last 14 days (4 in the last 7); {repo: (verdict, failed
    L3 rules)}."""
    with session_scope(database_url) as session:
        for repo, (level, listed_days, _, _) in HEALTH_CASES.items():
            session.add(
                Downstream(
                    repo=repo,
                    level=level,
                    device="npu",
                    enabled=True,
                    created_at=now - timedelta(days=listed_days),
                )
            )
            for i in range(20):
                at = now - timedelta(days=13.5) + timedelta(hours=16 * i)
                queue, e2e, conclusion = 300.0, 1 * H, "success"
                if repo == "acme/npu-slow":
                    e2e = 4 * H
                elif repo == "acme/npu-long-tail" and i == 3:
                    e2e = 5 * H
                elif repo == "acme/npu-queue":
                    queue, e2e = 40 * 60.0, 1.5 * H
                elif repo == "acme/npu-timeouts" and i == 5:
                    conclusion, e2e = "timed_out", 2.5 * H
                elif repo == "acme/npu-red" and i in (1, 4, 7, 10):
                    conclusion = "failure"
                elif repo == "acme/npu-l3" and i >= 16 and i % 2 == 0:
                    conclusion = "failure"  # 2 of the 10 jobs of the 7-day window: 80 %
                key = f"{repo}-{i}"
                sha = sha_of(f"upstream-{i}")  # every downstream tests the same upstream commits
                if repo == "acme/npu-ready" and i == 2:
                    # a failed first attempt re-run green: only the latest attempt counts
                    add_job(
                        session,
                        repo=repo,
                        key=key,
                        attempt=1,
                        conclusion="failure",
                        dispatched=at,
                        queue_s=queue,
                        e2e_s=e2e,
                        head_sha=sha,
                        counts=_HEALTH_COUNTS["failure"],
                    )
                    at = at + timedelta(hours=2)
                    add_job(
                        session,
                        repo=repo,
                        key=key,
                        attempt=2,
                        conclusion="success",
                        dispatched=at,
                        queue_s=queue,
                        e2e_s=e2e,
                        head_sha=sha,
                        counts=_HEALTH_COUNTS["success"],
                    )
                    continue
                add_job(
                    session,
                    repo=repo,
                    key=key,
                    conclusion=conclusion,
                    dispatched=at,
                    queue_s=queue,
                    e2e_s=e2e,
                    head_sha=sha,
                    counts=_HEALTH_COUNTS[conclusion],
                )
        session.commit()
    return {r: (verdict, fails) for r, (_, _, fails, verdict) in HEALTH_CASES.items()}
