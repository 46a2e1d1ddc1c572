"""The upstream under test's cost (issue #26): a pull request on a new head SHA of an upstream
checkout, through `relay up` and the default planner (the overlay made, its pool warmed), and
the same shard in an overlay environment against the installed torch.

The checkout is a small upstream repository over the installed torch (the tests' overlay
repository: its base holds the installed torch's own files; each head changes
``torch/functional.py``, adds a module and changes a compiled file); the stack keeps its
database in ``RELAY_VAR_DIR/bench/environments`` and shares this checkout's RELAY_VAR_DIR (its inventory
kept between runs, as a deployment's is); a first pull request warms the stack before the
measured one, whose head SHA is new.
N = BENCH_ENV_TESTS (default 60) bundled spyre variants, a fixed seed, for the shard ratio.
"""

from __future__ import annotations

import itertools
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from sqlalchemy import func, select

from backends import get_backend
from benchmarks.report import Report
from config.settings import get_settings
from inventory.build import universe_from_inventory
from store.db import session_scope
from store.models import Shard, TestResult
from tests.support.overlay_repo import OverlayUpstream, overlay_upstream
from tests.support.services import free_port
from tests.support.stack import Stack, pull_request_opened, start_stack
from upstream.undertest import (
    RunEnvironment,
    UpstreamUnderTest,
    installed_environment,
    resolve_environment,
)
from workers.harness.pools import close_pools, launcher_for
from workers.harness.runner import run_shard

N = int(os.environ.get("BENCH_ENV_TESTS", "60"))
REPEATS = int(os.environ.get("BENCH_ENV_REPEATS", "3"))
SPYRE = get_backend("spyre")
RUNNER = SPYRE.runner_config(SPYRE.default_specs)


def _new_head(repo: OverlayUpstream, n: int) -> str:
    functional = (repo.torch / "functional.py").read_text()
    return repo.repo.commit({"torch/functional.py": functional + f"\nRELAY_BENCH_HEAD = {n}\n"})


def _first_result_seconds(stack: Stack, delivery_id: str, start: float) -> float:
    def first() -> bool:
        job = stack.job_for(delivery_id)
        if job is None:
            return False
        with session_scope(stack.database_url) as s:
            return bool(
                s.scalar(
                    select(func.count()).select_from(TestResult).where(TestResult.job_pk == job.id)
                )
            )

    stack.wait_for(first, timeout=1800, what="the first result")
    return time.perf_counter() - start


def _shard_gaps(stack: Stack, job_pk: int) -> list[float]:
    """Seconds from one shard's end to the next shard's start on the one shard worker."""
    with session_scope(stack.database_url) as s:
        rows = s.execute(
            select(Shard.started_at, Shard.finished_at).where(Shard.job_pk == job_pk)
        ).all()
    spans = sorted((a, b) for a, b in rows if a is not None and b is not None)
    return [(nxt[0] - prev[1]).total_seconds() for prev, nxt in itertools.pairwise(spans)]


def _pull_requests(repo: OverlayUpstream) -> tuple[float, list[float], int]:
    """(seconds from the webhook to the first result of a new head SHA, the gaps between its
    shards, its shard count)."""
    var = get_settings().var_dir.absolute()
    stack_dir = var / "bench" / "environments"
    stack_dir.mkdir(parents=True, exist_ok=True)
    for name in ("relay.sqlite", "broker.sqlite"):
        (stack_dir / name).unlink(missing_ok=True)
    stack = start_stack(
        tmp=stack_dir,
        database_url=f"sqlite:///{stack_dir / 'relay.sqlite'}",
        broker_url=f"sqla+sqlite:///{stack_dir / 'broker.sqlite'}",
        port=free_port(),
        extra_env={
            # the inventory and the environments of this checkout's RELAY_VAR_DIR, made once
            "RELAY_VAR_DIR": str(var),
            "RELAY_RUNNER_ENABLED": "true",
            "RELAY_EVENT_HANDLERS": "[]",
            "RELAY_UPSTREAM_PATH": str(repo.repo.path),
            "RELAY_PER_TEST_TIMEOUT": "300",
            "RELAY_RUNNER_BUDGET_SECONDS": "40",
            "RELAY_RUNNER_SHARD_SECONDS": "8",
        },
    )
    try:
        warm = stack.submit(pull_request_opened(repo.base, repo.head, login="bench"))
        stack.wait_job(warm, timeout=3600)
        head = _new_head(repo, time.time_ns())
        start = time.perf_counter()
        delivery_id = stack.submit(pull_request_opened(repo.base, head, login="bench"))
        first = _first_result_seconds(stack, delivery_id, start)
        job = stack.wait_job(delivery_id, timeout=3600)
        if job.upstream_under_test.get("kind") != "overlay" or not job.tests_total:
            raise RuntimeError(
                f"the measured job did not run an overlay: {job.upstream_under_test}"
            )
        gaps = _shard_gaps(stack, job.id)
        return first, gaps, len(gaps) + 1
    finally:
        stack.stop()


def _variants() -> list[str]:
    universe = universe_from_inventory(backend="spyre", specs=SPYRE.default_specs)
    pool = sorted(v.node_id for v in universe.variants if v.decision != "skip" and not v.via)
    return sorted(random.Random(26).sample(pool, min(N, len(pool))))


def _shard_seconds(ids: list[str], environment: RunEnvironment, key: str, workdir: Path) -> float:
    launcher = launcher_for(RUNNER, warm=True, environment=environment, environment_key=key)
    start = time.perf_counter()
    run = run_shard(
        ids,
        launcher=launcher,
        pytest_args=RUNNER.pytest_args,
        per_test_timeout=300,
        workdir=workdir,
    )
    seconds = time.perf_counter() - start
    if len(run.results) != len(ids):
        raise RuntimeError(f"{key}: {len(run.results)} of {len(ids)} results")
    return seconds


def _overlay_ratio(repo: OverlayUpstream, tmp: Path) -> tuple[float, float]:
    """Median seconds of the same shard on the installed torch and in the head's overlay (warm
    pools for both, the runs alternating)."""
    under_test = UpstreamUnderTest(kind="overlay", head_sha=repo.head)
    overlay = resolve_environment(under_test, envs=tmp / "envs", checkout=repo.repo.path)
    ids = _variants()
    installed: list[float] = []
    laid: list[float] = []
    try:
        for key, env in (("installed", installed_environment()), (under_test.key(), overlay)):
            _shard_seconds(ids[:2], env, key, tmp / f"warm-{len(key)}")  # pools warm
        for i in range(REPEATS):
            installed.append(
                _shard_seconds(ids, installed_environment(), "installed", tmp / f"i{i}")
            )
            laid.append(_shard_seconds(ids, overlay, under_test.key(), tmp / f"o{i}"))
    finally:
        close_pools()
    return statistics.median(installed), statistics.median(laid)


def run(report: Report) -> None:
    load_before = os.getloadavg()[0]
    table = report.table(
        "The upstream under test: a new head SHA's first result, shard starts, overlay cost",
        ["measure", "value", "goal", "value / goal"],
        note="A pull request on a new head SHA of a small upstream checkout over the installed "
        "torch, through `relay up` (one shard worker) and the default planner: from the "
        "webhook to its first stored result (planning from the git diff, the overlay of the "
        "head's Python files made, a warm pool for that new environment started), after a "
        "first pull request warmed the stack. The shard gap: from one shard's end to the next "
        "one's start in that job (its environment warm). The overlay's cost: the median wall "
        f"time of one shard of {N} bundled spyre variants in the head's overlay against the "
        f"same shard on the installed torch, {REPEATS} runs each, alternating, warm pools.",
    )
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        repo = overlay_upstream(tmp)
        first, gaps, shards = _pull_requests(repo)
        installed, laid = _overlay_ratio(repo, tmp)
    worst = max(gaps) if gaps else float("nan")
    ratio = laid / installed
    table.rows += [
        ["new head SHA: webhook to first result", f"{first:.1f} s", "60 s", f"{first / 60:.2f}"],
        [
            f"next shard start after the previous one's end (worst of {len(gaps)} gaps, "
            f"{shards} shards)",
            f"{worst:.2f} s",
            "2 s",
            f"{worst / 2:.2f}",
        ],
        [
            f"shard in the overlay / on the installed torch ({laid:.1f} s / {installed:.1f} s)",
            f"{ratio:.3f}x",
            "1.05x",
            f"{ratio / 1.05:.2f}",
        ],
    ]
    table.note += (
        f" Machine: {os.cpu_count()} cores, load average {load_before:.1f} before and "
        f"{os.getloadavg()[0]:.1f} after (shared: ratios are of the same run)."
    )
