"""Workers on many machines, no shared disk: PostgreSQL and Redis; host A (this project folder)
runs the API, the control and planner workers and the beat; two shard hosts are `git clone`s of
HEAD at other paths, each with its own RELAY_VAR_DIR and HOME, running only `relay worker
--queues shards` from their own code. A pull request's job is split across both shard hosts; its
results and a failing test's full failure text are served by host A's API; a shard host killed
mid-shard (its whole process group, SIGKILL) loses no result and runs nothing twice: the other
host resumes the shard once the sweeper hands it back.

Each shard host runs in a mount namespace of its own where the machine allows it (`unshare -m`):
host A's folder and the other hosts' are empty there. The shard hosts keep their scratch (RELAY_RUNS_KEEP_SECONDS) so the test can see which host ran
which shard. Needs RELAY_TEST_POSTGRES_URL and RELAY_TEST_REDIS_URL (`make test-long` in CI).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from store.db import session_scope
from store.models import Job, Selection, Shard, TestResult

pytestmark = pytest.mark.long

SLOW = {"SAMPLE_SLOW_SECONDS": "1.5"}


def _wait(what: str, check: Callable[[], Any], hosts: list[Any], timeout: float = 180) -> Any:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    logs = "\n".join(
        f"--- {h.name} {p.name}:\n{p.read_text(errors='replace')[-3000:]}"
        for h in hosts
        for p in sorted(h.var.glob("*.log"))
    )
    pytest.fail(f"no {what} after {timeout:.0f} s\n{logs}")


@dataclass
class Cluster:
    a: Any  # tests.support.hosts.Host (through the multi_hosts fixture)
    shard_hosts: list[Any]
    api: str
    database_url: str

    @property
    def hosts(self) -> list[Any]:
        return [self.a, *self.shard_hosts]

    def job(self, delivery_id: str) -> Job | None:
        with session_scope(self.database_url) as s:
            job = s.scalar(select(Job).where(Job.delivery_id == delivery_id))
            if job is not None:
                s.expunge(job)
            return job

    def completed(self, delivery_id: str) -> Job:
        return _wait(
            f"job of {delivery_id} completed",
            lambda: (j := self.job(delivery_id)) is not None and j.status == "completed" and j,
            self.hosts,
            timeout=300,
        )

    def ran_on(self, job_pk: int) -> dict[str, set[str]]:
        """{host name: the shard scratch folders it kept for the job}."""
        return {
            h.name: {p.name for p in (h.var / "runs" / f"job-{job_pk}").glob("shard-*")}
            for h in self.shard_hosts
        }


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
    repo_root: Path,
    fresh_postgres_database: Any,
    fresh_redis_url: Any,
    free_port: Callable[[], int],
    sample_runs: Any,
    relay_up: Any,
    multi_hosts: Any,
) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("multi-host")
    broker = fresh_redis_url()
    plans = dict(sample_runs.PLANS)
    plans["split"] = {
        "shards": [
            sample_runs.ids("test_slow_a", "test_slow_b", "test_fails"),
            sample_runs.ids("test_slow_c", "test_passes_one"),
            sample_runs.ids("test_slow_d", "test_passes_two"),
        ],
        "env": SLOW,
    }
    with fresh_postgres_database() as database_url:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("RELAY_", "PYTHONPATH"))}
        shared = {
            **base,
            **sample_runs.runner_env(tmp, "http://127.0.0.1:9/unused"),
            "RELAY_ENV": "development",
            "RELAY_DATABASE_URL": database_url,
            "RELAY_BROKER_URL": broker,
            "RELAY_UPSTREAM_REPO": relay_up.UPSTREAM,
            "RELAY_WEBHOOK_SECRETS": json.dumps(relay_up.SECRETS),
            "RELAY_TEST_PLANS": str(sample_runs.write_plans(tmp, plans)),
            "RELAY_LOG_JSON": "true",
            "RELAY_DEMO_REPLAY": "",
            "RELAY_NIGHTLY_CRON": "",
            "RELAY_CALLBACK_URL": "",
        }
        a = multi_hosts.make_host("A", repo_root, tmp, shared)
        shard_hosts = [multi_hosts.clone_host(n, repo_root, tmp, shared) for n in ("B1", "B2")]
        for host in shard_hosts:  # they keep their scratch: the test sees which host ran what
            host.env["RELAY_RUNS_KEEP_SECONDS"] = "3600"
        hosts = [a, *shard_hosts]
        if multi_hosts.namespaces_allowed():  # else different paths only
            for host in shard_hosts:
                host.hide = [a.root, tmp / "A", *(tmp / h.name for h in shard_hosts if h != host)]
        for host in shard_hosts:  # it runs its own code: the project is where it is installed
            probe = host.start(
                "probe",
                "-c",
                "import backends.base as b, os; print(b.PROJECT_ROOT, "
                f"os.path.exists({str(a.root / 'Makefile')!r}))",
            )
            assert probe.wait(timeout=120) == 0, host.log("probe")
            assert host.log("probe").split() == [str(host.root), str(not host.hide)]
            host.procs.remove(probe)
        port = free_port()
        api = f"http://127.0.0.1:{port}"
        try:
            a.start_control(port)
            for host in shard_hosts:
                host.start("shards", "-m", "cli", "worker", "--queues", "shards")

            def up() -> bool:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{api}/readyz", timeout=2).status_code != 200:
                        return False
                    return all(
                        "ready." in h.log(n)
                        for h, n in [(a, "control"), (a, "planner")]
                        + [(h, "shards") for h in shard_hosts]
                    ) and "beat: Starting" in a.log("beat")
                return False

            _wait("the API, the workers and the beat", up, hosts)
            yield Cluster(a, shard_hosts, api, database_url)
        finally:
            for host in hosts:
                host.stop()


def _submit(cluster: Cluster, body: bytes, relay_up: Any) -> str:
    import uuid

    from wire.github.signature import sign

    delivery_id = str(uuid.uuid4())
    response = httpx.post(
        f"{cluster.api}/github/webhook",
        content=body,
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": "pull_request",
            "X-GitHub-Delivery": delivery_id,
            "X-Hub-Signature-256": sign(relay_up.SECRETS[0], body),
        },
        timeout=30,
    )
    assert response.status_code == 202, response.text
    return delivery_id


def _results(cluster: Cluster, job_pk: int) -> dict[str, str]:
    with session_scope(cluster.database_url) as s:
        rows = s.execute(
            select(TestResult.test_id, TestResult.outcome).where(TestResult.job_pk == job_pk)
        ).all()
    return {test_id.split("::")[-1]: outcome for test_id, outcome in rows}


def test_a_pull_request_is_split_across_both_shard_hosts(
    cluster: Cluster, sample_runs: Any, relay_up: Any
) -> None:
    job = cluster.completed(_submit(cluster, sample_runs.pr_body("split"), relay_up))
    assert job.conclusion == "failure"  # test_fails fails, everything else passes
    passing = ["test_slow_a", "test_slow_b", "test_slow_c", "test_slow_d", "test_passes_one"]
    assert _results(cluster, job.id) == {
        **dict.fromkeys([*passing, "test_passes_two"], "passed"),
        "test_fails": "failed",
    }
    ran = cluster.ran_on(job.id)
    assert all(ran.values()), ran  # both shard hosts ran some of it
    with session_scope(cluster.database_url) as s:
        runner = s.scalar(select(Selection.plan).where(Selection.job_pk == job.id))["runner"]
        failed = s.scalar(
            select(TestResult.id).where(TestResult.job_pk == job.id, TestResult.outcome == "failed")
        )
    stored = json.dumps(runner)
    assert str(cluster.a.root) not in stored and "${RELAY_PROJECT}" in stored
    # the failure text a shard host wrote, served by host A, whose disk never had it
    text = httpx.get(f"{cluster.api}/runs/{job.id}/artifacts/{failed}", timeout=10)
    assert text.status_code == 200 and "arithmetic is broken" in text.text
    page = httpx.get(f"{cluster.api}/api/v1/jobs/{job.id}/results", timeout=10)
    assert page.status_code == 200


def test_a_shard_host_killed_mid_shard_loses_nothing_and_runs_nothing_twice(
    cluster: Cluster, sample_runs: Any, relay_up: Any
) -> None:
    delivery_id = _submit(cluster, sample_runs.pr_body("long"), relay_up)

    def running_owner() -> str | None:
        job = cluster.job(delivery_id)
        if job is None:
            return None
        with session_scope(cluster.database_url) as s:
            shard = s.scalar(select(Shard).where(Shard.job_pk == job.id))
            done = s.scalar(
                select(func.count()).select_from(TestResult).where(TestResult.job_pk == job.id)
            )
        return shard.owner if shard and shard.state == "running" and done and shard.owner else None

    owner = _wait("the shard running with a result stored", running_owner, cluster.hosts)
    group = os.getpgid(int(owner.split(":")[1]))
    (lost,) = [h for h in cluster.shard_hosts if h.procs[0].pid == group]
    (other,) = [h for h in cluster.shard_hosts if h is not lost]
    os.killpg(group, signal.SIGKILL)  # the host is gone: its worker, pool and test processes
    job = cluster.completed(delivery_id)
    assert job.conclusion == "success"
    assert _results(cluster, job.id) == dict.fromkeys(
        ["test_slow_a", "test_slow_b", "test_slow_c", "test_slow_d", "test_passes_one"], "passed"
    )
    with session_scope(cluster.database_url) as s:
        shard = s.scalar(select(Shard).where(Shard.job_pk == job.id))
        total = s.scalar(
            select(func.count()).select_from(TestResult).where(TestResult.job_pk == job.id)
        )
    assert shard is not None and shard.attempts == 2 and total == 5
    assert cluster.ran_on(job.id)[other.name] == {"shard-0-attempt-2"}
    assert cluster.ran_on(job.id)[lost.name] == {"shard-0-attempt-1"}
    resumed = [
        json.loads(line) for line in other.log("shards").splitlines() if line.startswith("{")
    ]
    assert any(
        r.get("event") == "shard starting" and r.get("already_done", 0) >= 1 for r in resumed
    )
    # the sweeper (sent by the beat, run by host A's control worker) said what it re-queued
    swept = [json.loads(x) for x in cluster.a.log("control").splitlines() if x.startswith("{")]
    assert any(
        e["owner"] == owner
        for r in swept
        if r.get("event") == "re-queued shards whose worker was lost"
        for e in r["shards"]
    )
