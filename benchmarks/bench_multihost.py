"""The same jobs run by (a) one host with two shard workers and (b) two shard hosts with one
worker each: does spreading the shard workers over hosts that share no disk cost throughput?

PostgreSQL and Redis (RELAY_TEST_POSTGRES_URL, RELAY_TEST_REDIS_URL; `.ci/services.sh` starts
them). Host A (this project folder) runs the API, the control and planner workers and the beat
throughout. (a): host A also runs `relay worker --queues shards --concurrency 2`. (b): two
shard hosts, `git clone`s of HEAD at other paths with their own RELAY_VAR_DIR and HOME (each
process in its own mount namespace where the machine allows, tests.support.hosts), run `relay
worker --queues shards --concurrency 1` each. Every job is the same fixed plan of N =
BENCH_MULTIHOST_TESTS (default 300) bundled spyre variants, drawn with a fixed seed and cut into
8 shards (the planner's own rule), sent as a signed pull request; a round runs (a) then (b), the
next (b) then (a) (BENCH_MULTIHOST_ROUNDS, default 1). The clock runs from the webhook to the job
completed, once every shard worker of the configuration logged its warm pool ready.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import func, select

from backends import get_backend
from benchmarks.report import Report
from config.settings import get_settings
from inventory.build import universe_from_inventory
from planner.sharding import shard_by_time
from store.db import session_scope
from store.models import Job, TestResult
from tests.support.hosts import Host, clone_host, make_host, namespaces_allowed
from tests.support.planners import LABELLED
from tests.support.runs import pr_body
from tests.support.services import REPO_ROOT, free_port, fresh_postgres_database, fresh_redis_url
from tests.support.stack import SECRETS, UPSTREAM
from wire.github.signature import sign

N = int(os.environ.get("BENCH_MULTIHOST_TESTS", "300"))
ROUNDS = int(os.environ.get("BENCH_MULTIHOST_ROUNDS", "1"))
SHARDS = 8
SPYRE = get_backend("spyre")


class BenchFailed(RuntimeError):
    """A configuration did not run the job to the end: its time means nothing."""


def _variants() -> list[str]:
    universe = universe_from_inventory(backend="spyre", specs=SPYRE.default_specs)
    pool = sorted(v.test_id for v in universe.variants if v.decision != "skip" and not v.via)
    return sorted(random.Random(4321).sample(pool, min(N, len(pool))))


def _wait(what: str, check: Callable[[], Any], hosts: list[Host], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    tails = "\n".join(
        f"--- {h.name} {p.name}: {p.read_text(errors='replace')[-1500:]}"
        for h in hosts
        for p in sorted(h.var.glob("*.log"))
    )
    raise BenchFailed(f"no {what} after {timeout:.0f} s\n{tails}")


def _shared_env(tmp: Path, database_url: str, broker: str, ids: list[str]) -> dict[str, str]:
    shards, _ = shard_by_time(
        ids, {}, target_seconds=1e9, max_shards=SHARDS, parallel=SHARDS, min_shard_seconds=0
    )
    plans = tmp / "plans.json"
    runner = SPYRE.runner_config(SPYRE.default_specs)
    plans.write_text(json.dumps({"bench": {"shards": shards, **runner.model_dump()}}))
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RELAY_", "PYTHONPATH"))}
    return {
        **base,
        "RELAY_ENV": "development",
        "RELAY_DATABASE_URL": database_url,
        "RELAY_BROKER_URL": broker,
        "RELAY_UPSTREAM_REPO": UPSTREAM,
        "RELAY_WEBHOOK_SECRETS": json.dumps(SECRETS),
        "RELAY_LOG_JSON": "true",
        "RELAY_DEMO_REPLAY": "",
        "RELAY_NIGHTLY_CRON": "",
        "RELAY_CALLBACK_URL": "",
        "RELAY_EVENT_HANDLERS": "[]",
        "RELAY_RUNNER_ENABLED": "true",
        "RELAY_PLANNER": LABELLED,
        "RELAY_TEST_PLANS": str(plans),
        "RELAY_PER_TEST_TIMEOUT": "300",
        "RELAY_RUNNER_PARALLEL": "2",
    }


def _seed(tmp: Path) -> Path:
    """A seed every host can see (this project's var dir is hidden from the shard hosts): the
    spyre C++ core this process's var dir or its seed holds, as an image would carry it."""
    seed = tmp / "seed"
    settings = get_settings()
    for var in (settings.var_dir, settings.cache_seed):
        built = var / "torch_extensions" if var is not None else None
        if built is not None and built.is_dir():
            ignore = shutil.ignore_patterns("*.lock")
            shutil.copytree(built, seed / "torch_extensions", ignore=ignore, dirs_exist_ok=True)
    return seed


def _start_control(a: Host, port: int) -> None:
    a.start_control(port)

    def up() -> bool:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code != 200:
                return False
        except httpx.HTTPError:
            return False
        return all("ready." in a.log(n) for n in ("control", "planner"))

    _wait("the API and the control and planner workers", up, [a], timeout=180)


def _job(database_url: str, delivery_id: str) -> Job | None:
    with session_scope(database_url) as s:
        job = s.scalar(select(Job).where(Job.delivery_id == delivery_id))
        if job is not None:
            s.expunge(job)
        return job


def _run_job(api: str, database_url: str, hosts: list[Host], tests: int) -> float:
    """Wall seconds from the webhook to the job completed with every result stored."""
    body, delivery_id = pr_body("bench"), str(uuid.uuid4())
    start = time.perf_counter()
    answer = httpx.post(
        f"{api}/github/webhook",
        content=body,
        timeout=30,
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": "pull_request",
            "X-GitHub-Delivery": delivery_id,
            "X-Hub-Signature-256": sign(SECRETS[0], body),
        },
    )
    if answer.status_code != 202:
        raise BenchFailed(f"webhook answered {answer.status_code}: {answer.text}")
    job = _wait(
        "job completed",
        lambda: (
            (j := _job(database_url, delivery_id)) is not None and j.status == "completed" and j
        ),
        hosts,
        timeout=7200,
    )
    wall = time.perf_counter() - start
    with session_scope(database_url) as s:
        stored = s.scalar(
            select(func.count()).select_from(TestResult).where(TestResult.job_pk == job.id)
        )
    if stored != tests:
        raise BenchFailed(f"the job ended {job.conclusion} with {stored} of {tests} results")
    return wall


#: a configuration: its shard worker processes, (host, log name, concurrency) each
Workers = list[tuple[Host, str, int]]


def _shard_seconds(workers: Workers) -> list[float]:
    """The seconds of each shard the shard workers finished (their logs)."""
    out = []
    for h, name, _ in workers:
        for line in h.log(name).splitlines():
            if line.startswith("{") and '"shard finished"' in line:
                out.append(float(json.loads(line)["seconds"]))
    return out


def _shard_workers(workers: Workers) -> list[tuple[Host, Any]]:
    started = [
        (
            h,
            h.start(
                name, "-m", "cli", "worker", "--queues", "shards", "--concurrency", str(concurrency)
            ),
        )
        for h, name, concurrency in workers
    ]

    def warm() -> bool:
        return all(
            h.log(name).count("warm pool ready") + h.log(name).count("warm pool failed") >= n
            for h, name, n in workers
        )

    _wait("warm pools of the shard workers", warm, [h for h, _, _ in workers], timeout=900)
    return started


def run(report: Report) -> None:
    ids = _variants()
    load_before = os.getloadavg()[0]
    table = report.table(
        f"{len(ids)} bundled spyre variants in {SHARDS} shards: 2 shard hosts x 1 worker against "
        "1 host x 2 workers",
        [
            "shard workers",
            "jobs",
            "tests",
            "wall s",
            "tests/s",
            "throughput vs 1 host",
            "mean shard s",
        ],
        note="Goal: two hosts >= 0.95x the throughput of one host with two workers (spreading "
        "the shard workers over hosts that share no disk costs nothing measurable). Same jobs "
        "(one fixed plan, a signed pull request each), PostgreSQL and Redis, host A's API, "
        "control and planner workers and beat throughout; the clock runs from the webhook to the "
        "job completed with every result stored, after every shard worker logged its warm pool "
        "ready.",
    )
    walls: dict[str, list[float]] = {"one": [], "two": []}
    walls["one, 2 processes"] = []
    shard_s: dict[str, list[float]] = {name: [] for name in walls}
    with (
        tempfile.TemporaryDirectory(prefix="bench-multihost-") as d,
        fresh_postgres_database() as database_url,
    ):
        tmp = Path(d)
        shared = _shared_env(tmp, database_url, fresh_redis_url(), ids)
        a = make_host("A", REPO_ROOT, tmp, shared)
        seed = _seed(tmp)
        shard_hosts = [clone_host(n, REPO_ROOT, tmp, shared) for n in ("B1", "B2")]
        for h in [a, *shard_hosts]:
            h.env["RELAY_CACHE_SEED"] = str(seed)
        for h in shard_hosts:
            if namespaces_allowed():
                h.hide = [a.root, tmp / "A", *(tmp / o.name for o in shard_hosts if o is not h)]
        port = free_port()
        api = f"http://127.0.0.1:{port}"
        configs: dict[str, Workers] = {
            "one": [(a, "shards", 2)],
            "two": [(h, "shards", 1) for h in shard_hosts],
            "one, 2 processes": [(a, "shards-1", 1), (a, "shards-2", 1)],
        }
        try:
            _start_control(a, port)
            for r in range(ROUNDS):
                for name in list(configs) if r % 2 == 0 else list(configs)[::-1]:
                    started = _shard_workers(configs[name])
                    hosts = [a, *shard_hosts]
                    try:
                        walls[name].append(_run_job(api, database_url, hosts, len(ids)))
                        shard_s[name] += _shard_seconds(configs[name])
                    finally:
                        for h, proc in started:
                            h.stop(proc)
        finally:
            for h in [a, *shard_hosts]:
                h.stop()
    one = len(walls["one"]) * len(ids) / sum(walls["one"])
    for name, label in (
        ("one", "1 host x 2 workers (one process, --concurrency 2)"),
        ("two", "2 shard hosts x 1 worker"),
        ("one, 2 processes", "1 host x 2 workers (two processes, --concurrency 1)"),
    ):
        rate = len(walls[name]) * len(ids) / sum(walls[name])
        table.rows.append(
            [
                label,
                str(len(walls[name])),
                str(len(walls[name]) * len(ids)),
                f"{sum(walls[name]):.1f}",
                f"{rate:.2f}",
                f"{rate / one:.2f}",
                f"{sum(shard_s[name]) / max(1, len(shard_s[name])):.1f}",
            ]
        )
    table.note += (
        f" Mount namespaces: {'yes' if namespaces_allowed() else 'no (different paths only)'}."
        f" Machine: {os.cpu_count()} cores, load average {load_before:.1f} before and "
        f"{os.getloadavg()[0]:.1f} after (shared with other work: the ratio is measured in the "
        "same run, absolute times are not those of an idle machine)."
    )
