"""The same bundled spyre variants run (a) by plain pytest in one process, (b) by `relay up` with
one shard worker, (c) with two; wall-time ratios, per-test overhead and start-up cost.

(b) and (c) go through the whole loop: a signed webhook, planning (a fixed plan of these
variants, so the selector's time is not in the numbers), Celery shard tasks, the warm pool, the
harness and result rows. N = BENCH_WORKERS_TESTS (default 2000) variants, drawn with a fixed
seed from the runnable inventory of the bundled suites.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sqlalchemy import func, select

from backends import get_backend
from backends.base import PROJECT_ROOT, fresh_pytest
from benchmarks.report import Report
from config.settings import Settings
from inventory.build import universe_from_inventory
from planner.sharding import shard_by_time
from store.db import session_scope
from store.models import TestResult
from tests.support.planners import LABELLED
from tests.support.runs import pr_body
from tests.support.services import free_port
from tests.support.stack import start_stack

N = int(os.environ.get("BENCH_WORKERS_TESTS", "2000"))


SPYRE = get_backend("spyre")
SETTINGS = Settings()
RUNNER = SPYRE.runner_config(SPYRE.default_specs)


def _variants() -> list[str]:
    universe = universe_from_inventory(backend="spyre", specs=SPYRE.default_specs)
    pool = sorted(v.test_id for v in universe.variants if v.decision != "skip" and not v.via)
    return sorted(random.Random(1234).sample(pool, min(N, len(pool))))


class BaselineFailed(RuntimeError):
    """The plain pytest run did not run what the workers run: its time means nothing."""


def _durations(junit: Path) -> dict[tuple[str, str], float]:
    """Each test's time in a JUnit report, by (class name, test name)."""
    out: dict[tuple[str, str], float] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        cls = case.get("classname", "").rsplit(".", 1)[-1]
        out[(cls, case.get("name", ""))] = float(case.get("time", 0) or 0)
    return out


def _history(ids: list[str], measured: dict[tuple[str, str], float]) -> dict[str, float]:
    """The plain run's times as the runner's history of ``ids`` (node ids)."""
    out = {}
    for t in ids:
        parts = t.split("::")
        if len(parts) >= 3 and (parts[-2], parts[-1]) in measured:
            out[t] = measured[(parts[-2], parts[-1])]
    return out


def _plain_pytest(ids: list[str], tmp: Path) -> tuple[float, dict[str, int]]:
    """(wall seconds, outcome counts) of plain pytest over ``ids``; raises BaselineFailed when
    pytest did not finish (exit status other than 0, all passed, or 1, some failed) or did not
    run every one of them, like the workers' run is checked."""
    argsfile = tmp / "ids.txt"
    argsfile.write_text("\n".join(ids) + "\n")
    junit = tmp / "plain.xml"
    start = time.perf_counter()
    done = subprocess.run(
        fresh_pytest([*RUNNER.pytest_args, f"@{argsfile}", f"--junitxml={junit}"]),
        cwd=PROJECT_ROOT,
        env={**os.environ, **RUNNER.env, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=7200,
    )
    wall = time.perf_counter() - start
    tail = done.stdout.decode(errors="replace").strip().splitlines()[-5:]
    if done.returncode not in (0, 1) or not junit.exists():
        raise BaselineFailed(f"plain pytest exited {done.returncode}: {' | '.join(tail)}")
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    if counts["tests"] != len(ids):
        raise BaselineFailed(f"plain pytest ran {counts['tests']} of {len(ids)} tests: {tail}")
    return wall, counts


def _shards(ids: list[str], workers: int, history: dict[str, float]) -> list[list[str]]:
    shards, _ = shard_by_time(
        ids,
        history,
        target_seconds=SETTINGS.runner_shard_seconds,
        max_shards=SETTINGS.runner_shards,
        parallel=workers,
    )
    return shards


def _plain_parallel(shards: list[list[str]], tmp: Path) -> float:
    """Wall seconds of one plain pytest process per shard, all at once: what the machine's cores
    give to independent processes, without the relay (its ceiling for the workers)."""
    subs = []
    for i in range(len(shards)):
        subs.append(tmp / f"plain-{i}")
        subs[-1].mkdir()
    start = time.perf_counter()
    with ThreadPoolExecutor(len(shards)) as pool:
        list(pool.map(_plain_pytest, shards, subs))
    return time.perf_counter() - start


def _through_workers(
    ids: list[str], workers: int, tmp: Path, history: dict[str, float]
) -> tuple[float, float, float]:
    """(wall seconds from webhook to job completed, seconds to the first result, sum of test
    durations). The shards are the runner's own cut (planner.sharding, the default target, one
    share per worker) with the plain run's times as the history, as a planner with history
    gives them."""
    shards = _shards(ids, workers, history)
    plans = tmp / "plans.json"
    plans.write_text(json.dumps({"bench": {"shards": shards, **RUNNER.model_dump()}}))
    stack = start_stack(
        tmp=tmp,
        database_url=f"sqlite:///{tmp / 'relay.sqlite'}",
        broker_url=f"sqla+sqlite:///{tmp / 'broker.sqlite'}",
        port=free_port(),
        workers=workers,
        extra_env={
            "RELAY_RUNNER_ENABLED": "true",
            "RELAY_EVENT_HANDLERS": "[]",
            "RELAY_PLANNER": LABELLED,
            "RELAY_TEST_PLANS": str(plans),
            "RELAY_PER_TEST_TIMEOUT": "300",
        },
    )
    try:
        delivery_id = str(uuid.uuid4())
        start = time.perf_counter()
        assert (
            stack.post("pull_request", pr_body("bench"), delivery_id=delivery_id).status_code == 202
        )

        def first() -> bool:
            job = stack.job_for(delivery_id)
            if job is None:
                return False
            with session_scope(stack.database_url) as s:
                return bool(
                    s.scalar(
                        select(func.count())
                        .select_from(TestResult)
                        .where(TestResult.job_pk == job.id)
                    )
                )

        stack.wait_for(first, timeout=3600, what="first result")
        first_result = time.perf_counter() - start
        job = stack.wait_job(delivery_id, timeout=7200)
        wall = time.perf_counter() - start
        with session_scope(stack.database_url) as s:
            busy = float(
                s.scalar(select(func.sum(TestResult.duration_s)).where(TestResult.job_pk == job.id))
                or 0.0
            )
            stored = int(
                s.scalar(
                    select(func.count()).select_from(TestResult).where(TestResult.job_pk == job.id)
                )
                or 0
            )
        if job.status != "completed" or stored != len(ids):
            raise BaselineFailed(
                f"the workers' job ended {job.status} with {stored} of {len(ids)} results"
            )
        return wall, first_result, busy
    finally:
        stack.stop()


def run(report: Report) -> None:
    ids = _variants()
    load_before = os.getloadavg()[0]
    table = report.table(
        f"Running {len(ids)} bundled spyre variants: plain pytest vs the workers",
        [
            "runner",
            "wall s",
            "wall vs plain",
            "throughput vs plain",
            "first result s",
            "overhead per test ms",
        ],
        note="Goals: wall <= 1.05x plain pytest's with one shard worker, throughput >= 1.8x with "
        "two. Overhead per test: (wall x workers - sum of test durations) / tests. First result: "
        "from the webhook to the first stored result (planning here is a fixed plan, cut into "
        "shards by the runner's own rule: one share of equal time per shard worker, tests of a "
        "file together, the plain run's per-test times as the history; each child collects "
        "the requested ids of its test files). The stack is "
        "measured ready, as a persistent one is: the clock starts after start_stack returned, "
        "which waits until every shard worker process has logged its warm pool ready (torch, "
        "the test databases and pytest imported at boot); plain pytest's time includes its "
        "imports.",
    )
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        plain, counts = _plain_pytest(ids, tmp)
        history = _history(ids, _durations(tmp / "plain.xml"))
        table.note += f" History found for {len(history)} of {len(ids)} variants."
        table.rows.append(["plain pytest, one process", f"{plain:.1f}", "1.00", "1.00", "-", "-"])
        table.note += (
            f" Plain pytest ran all {counts['tests']} (failed {counts['failures']}, errors "
            f"{counts['errors']}, skipped or xfailed {counts['skipped']}); each workers' run "
            "stored a result for every one of them."
        )
        two = _shards(ids, 2, history)
        ceiling = _plain_parallel(two, tmp)
        table.rows.append(
            [
                f"plain pytest, {len(two)} processes at once (the runner's {len(two)} shards)",
                f"{ceiling:.1f}",
                f"{ceiling / plain:.2f}",
                f"{plain / ceiling:.2f}",
                "-",
                "-",
            ]
        )
        table.note += (
            " The second row is the machine's own ceiling for two shards: the same two shards "
            "as two plain pytest processes at once, no relay (two vCPUs of a virtual machine "
            "need not give twice one's throughput)."
        )
        for workers in (1, 2):
            sub = tmp / f"w{workers}"
            sub.mkdir()
            wall, first, busy = _through_workers(ids, workers, sub, history)
            overhead = (wall * workers - busy) / len(ids) * 1000
            table.rows.append(
                [
                    f"relay up, {workers} shard worker(s)",
                    f"{wall:.1f}",
                    f"{wall / plain:.2f}",
                    f"{plain / wall:.2f}",
                    f"{first:.1f}",
                    f"{overhead:.1f}",
                ]
            )
    table.note += (
        f" Machine: {os.cpu_count()} cores, load average {load_before:.1f} before and "
        f"{os.getloadavg()[0]:.1f} after (shared with other work: ratios are measured in the "
        "same run, absolute times are not those of an idle machine)."
    )
