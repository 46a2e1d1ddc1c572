"""`relay eval --kind catch`: does the product turn a real upstream fault red, and a clean change
green, through the path a pull request takes?

A local upstream git repository is made from the installed torch's Python files
(:mod:`evaluation.localrepo`, one commit, cached per torch build under ``RELAY_VAR_DIR``). The
seeded sampler (:mod:`evaluation.mutants`) draws mutants over a fixed list of upstream files;
each mutant and its clean twin (a comment-only change of the same file) is committed on its own
branch. A real ``relay up`` (embedded database and broker, real Celery workers, the DEFAULT
planner) runs with ``RELAY_UPSTREAM_PATH`` at that repository, and each branch becomes a signed
``pull_request`` webhook with the real base and head SHAs: the job is planned from the git diff
and its shards run in the overlay of the head's Python files. The conclusion, the failing tests
and ``upstream_under_test`` are read back from the HTTP API.

A mutant is caught when its job concludes ``failure`` naming a failing test that gates
(``mandatory_success``, ``xfail_strict``); its twin must conclude ``success``; each job must name
its overlay (kind ``overlay``, its head SHA, one file laid over). A mutant whose job stays green
is probed (:mod:`evaluation.observability`): the variants that reach the mutated function run in
the mutant's overlay and in the twin's; when no outcome differs the mutant is unobservable by the
bundled suites, else it is missed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from config.settings import get_settings
from evaluation.localrepo import LocalUpstream, commit_file
from evaluation.mutants import Mutant
from evaluation.observability import Probe

GATING = frozenset({"mandatory_success", "xfail_strict"})
PROJECT = Path(__file__).resolve().parents[1]
EXAMPLE = PROJECT / "examples" / "events" / "pull_request.opened.json"


@dataclass
class EventRun:
    """One webhook event and the job it became."""

    head_sha: str
    conclusion: str | None
    planned: int
    failing: list[dict[str, Any]]  # failed/errored results, with their spec mode and message
    seconds: float  # webhook sent -> job completed
    first_failure_s: float | None  # webhook sent -> the first failing result stored
    under_test: dict[str, Any] = field(default_factory=dict)

    @property
    def names_overlay(self) -> bool:
        u = self.under_test
        return u.get("kind") == "overlay" and u.get("head_sha") == self.head_sha


@dataclass
class Catch:
    mutant: Mutant
    planted: EventRun
    clean: EventRun
    gating_failed: list[str] = field(default_factory=list)
    probe: Probe | None = None
    verdict: str = ""  # caught | missed: ... | unobservable: ... | undecided: ...

    @property
    def caught(self) -> bool:
        return self.verdict == "caught"

    @property
    def observable(self) -> bool:
        return self.caught or self.verdict.startswith("missed")

    @property
    def false_red(self) -> bool:
        return self.clean.conclusion != "success"


def gating_failures(run: EventRun) -> list[str]:
    return sorted(r["test_id"] for r in run.failing if r.get("spec_mode") in GATING)


def judge(mutant: Mutant, planted: EventRun, clean: EventRun, probe: Probe | None) -> Catch:
    """The verdict of one mutant: caught, missed (the probe shows variants it breaks),
    unobservable (the probe shows none) or undecided (its job did not conclude)."""
    gating = gating_failures(planted)
    c = Catch(mutant, planted, clean, gating_failed=gating, probe=probe)
    if planted.conclusion == "failure" and gating:
        c.verdict = "caught"
    elif planted.conclusion not in ("success", "failure"):
        c.verdict = f"undecided: the job concluded {planted.conclusion or 'nothing'}"
    elif probe is None:
        c.verdict = "undecided: no gating failure, not probed (out of time)"
    elif probe.observable:
        gate = [t for t in probe.broken if t in set(gating)]
        why = "none of them was selected or they do not gate" if not gate else "they ran"
        c.verdict = f"missed: {probe.describe()}; {why}"
    else:
        c.verdict = f"unobservable: {probe.describe()}"
    return c


class LocalRelay:
    """``relay up`` on the embedded default in ``var_dir`` with the default planner and
    ``RELAY_UPSTREAM_PATH`` at ``upstream``."""

    def __init__(
        self,
        var_dir: Path,
        *,
        upstream: Path,
        budget: float | None = None,
        per_test_timeout: float = 300,
    ) -> None:
        var_dir = var_dir.resolve()  # relay up runs in the project folder
        self.var_dir = var_dir
        var_dir.mkdir(parents=True, exist_ok=True)
        self.secret = secrets.token_hex(16)
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        env = {
            **{k: v for k, v in os.environ.items() if k != "RELAY_PLANNER"},
            "RELAY_ENV": "development",
            "RELAY_VAR_DIR": str(var_dir),
            "RELAY_DATABASE_URL": f"sqlite:///{var_dir / 'relay.sqlite'}",
            "RELAY_BROKER_URL": f"sqla+sqlite:///{var_dir / 'broker.sqlite'}",
            "RELAY_WEBHOOK_SECRETS": json.dumps([self.secret]),
            "RELAY_RUNNER_ENABLED": "true",
            "RELAY_UPSTREAM_PATH": str(upstream),
            "RELAY_EVENT_HANDLERS": "[]",
            "RELAY_DEMO_REPLAY": "",
            "RELAY_NIGHTLY_CRON": "",
            "RELAY_PER_TEST_TIMEOUT": str(per_test_timeout),
            # its caches (the inventory, the spyre core) are copied from this host's var dir
            "RELAY_CACHE_SEED": os.environ.get("RELAY_CACHE_SEED") or str(get_settings().var_dir),
        }
        if budget is not None:
            env["RELAY_RUNNER_BUDGET_SECONDS"] = f"{budget:g}"
        self.log = open(var_dir / "relay-up.log", "wb")  # noqa: SIM115 - the subprocess's
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli", "up", "--port", str(self.port), "--workers", "1"],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=PROJECT,
            start_new_session=True,
        )
        self._wait(lambda: self._get("/readyz", ok_only=False) == 200, 120, "relay up ready")

    def _get(self, path: str, *, ok_only: bool = True, **params: Any) -> Any:
        try:
            r = httpx.get(self.base_url + path, params=params, timeout=30)
        except httpx.HTTPError:
            return None
        if not ok_only:
            return r.status_code
        r.raise_for_status()
        return r.json()

    def _wait(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"relay up exited ({self.proc.returncode}); see {self.log.name}")
            value = predicate()
            if value:
                return value
            time.sleep(0.5)
        raise TimeoutError(f"{what}: not within {timeout:.0f} s; see {self.log.name}")

    def pull_request(self, base: str, head: str, *, timeout: float) -> EventRun:
        """Post one signed ``pull_request`` (opened) event for ``base..head``; wait for its job."""
        from wire.github.signature import sign

        payload = json.loads(EXAMPLE.read_text(encoding="utf-8"))
        number = uuid.uuid4().int % 10**7 + 10**6
        payload["number"] = payload["pull_request"]["number"] = number
        payload["pull_request"]["labels"] = []
        payload["pull_request"]["head"]["sha"] = head
        payload["pull_request"]["base"]["sha"] = base
        body = json.dumps(payload).encode()
        start, sent = time.monotonic(), datetime.now(UTC)
        response = httpx.post(
            self.base_url + "/github/webhook",
            content=body,
            headers={
                "Content-Type": "application/json",
                "X-GitHub-Event": "pull_request",
                "X-GitHub-Delivery": str(uuid.uuid4()),
                "X-Hub-Signature-256": sign(self.secret.encode(), body),
            },
            timeout=30,
        )
        response.raise_for_status()

        def finished() -> dict[str, Any] | None:
            page = self._get("/api/v1/jobs", pr=number)
            items = (page or {}).get("items", [])
            return items[0] if items and items[0]["status"] == "completed" else None

        job = self._wait(finished, timeout, f"the job of PR {number}")
        seconds = time.monotonic() - start
        detail = self._get(f"/api/v1/jobs/{job['id']}")
        failing = [
            r
            for outcome in ("failed", "error")
            for r in self._items(f"/api/v1/jobs/{job['id']}/results", outcome=outcome)
        ]
        self._planned_modes(job["id"], failing)
        first = min((_when(r["created_at"]) for r in failing), default=None)
        return EventRun(
            head,
            job["conclusion"],
            job["planned"],
            failing,
            seconds,
            (first - sent).total_seconds() if first else None,
            under_test=detail.get("upstream_under_test") or {},
        )

    def _planned_modes(self, job_id: int, failing: list[dict[str, Any]]) -> None:
        """A test that never ran (its file did not collect) has no spec mode of its own: the
        mode its job planned it with (what gates) is read from the job's selection."""
        if all(r.get("spec_mode") for r in failing):
            return
        rows = self._items(f"/api/v1/jobs/{job_id}/selection/tests", kind="selected", limit=5000)
        planned = {row["test_id"]: row["mode"] for row in rows}
        for r in failing:
            r["spec_mode"] = r.get("spec_mode") or planned.get(r["test_id"])

    def _items(self, path: str, **params: Any) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        cursor = None
        while True:
            page = self._get(path, **params, **({"cursor": cursor} if cursor else {}))
            out += page["items"]
            cursor = page.get("next_cursor")
            if not cursor:
                return out

    def stop(self) -> None:
        """SIGTERM: relay up stops its workers (up to 15 s each) and exits. Should it not, its
        group and the workers' groups (their pids are in its start banner) are killed."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=150)
            except subprocess.TimeoutExpired:
                banner = Path(self.log.name).read_text(encoding="utf-8", errors="replace")
                pids = {int(p) for p in re.findall(r"(?:control|planner|shards) pid (\d+)", banner)}
                for pgid in (self.proc.pid, *pids):
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pgid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def _when(stamp: str) -> datetime:
    moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Branches:
    mutant: str
    twin: str


def commit_mutant(repo: LocalUpstream, mutant: Mutant, *, seed: int) -> Branches:
    """The mutant and its clean twin, each on its own branch from the base."""
    name = f"catch/s{seed}/{mutant.id}"
    what = f"{mutant.symbol}: {mutant.operator} ({mutant.description}, line {mutant.line})"
    return Branches(
        commit_file(repo, branch=name, path=mutant.path, content=mutant.source, message=what),
        commit_file(
            repo,
            branch=f"{name}-twin",
            path=mutant.path,
            content=mutant.twin,
            message=f"{mutant.symbol}: a comment (clean twin of {mutant.id})",
        ),
    )


Prober = Callable[[Mutant, Branches], Probe]


def run_catch(
    repo: LocalUpstream,
    mutants: Sequence[Mutant],
    *,
    var_dir: Path,
    seed: int,
    prober: Prober | None,
    budget: float | None = None,
    timeout: float = 3600,
    deadline: float | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> list[Catch]:
    """Each mutant and its twin as two pull requests through a real relay; then each mutant whose
    job showed no gating failure is probed with ``prober``. No mutant is started, and no probe,
    after ``deadline`` (``time.monotonic()``): those left are reported as such."""
    relay = LocalRelay(var_dir, upstream=repo.path, budget=budget)
    runs: list[tuple[Mutant, Branches, EventRun, EventRun]] = []
    try:
        for mutant in mutants:
            if deadline is not None and time.monotonic() > deadline:
                log(f"deadline reached: {len(runs)} of {len(mutants)} mutants sent")
                break
            branches = commit_mutant(repo, mutant, seed=seed)
            log(f"{mutant.id} {mutant.symbol} {mutant.operator} ({mutant.description}) ...")
            planted = relay.pull_request(repo.base, branches.mutant, timeout=timeout)
            clean = relay.pull_request(repo.base, branches.twin, timeout=timeout)
            runs.append((mutant, branches, planted, clean))
            log(
                f"{mutant.id}: {planted.conclusion} ({len(gating_failures(planted))} gating "
                f"failures), twin {clean.conclusion}"
            )
    finally:
        relay.stop()
    catches: list[Catch] = []
    for mutant, branches, planted, clean in runs:
        probe = None
        unsure = planted.conclusion in ("success", "failure") and not gating_failures(planted)
        if unsure and prober and (deadline is None or time.monotonic() < deadline):
            probe = prober(mutant, branches)
        catches.append(judge(mutant, planted, clean, probe))
        log(f"{mutant.id}: {catches[-1].verdict}")
    return catches


def summary(catches: Sequence[Catch], *, sampled: int) -> dict[str, Any]:
    firsts = [c.planted.first_failure_s for c in catches if c.caught and c.planted.first_failure_s]
    return {
        "sampled": sampled,
        "run": len(catches),
        "observable": sum(c.observable for c in catches),
        "caught": sum(c.caught for c in catches),
        "missed": sum(c.verdict.startswith("missed") for c in catches),
        "unobservable": sum(c.verdict.startswith("unobservable") for c in catches),
        "undecided": sum(c.verdict.startswith("undecided") for c in catches),
        "false_reds": sum(c.false_red for c in catches),
        "overlay_named": sum(c.planted.names_overlay and c.clean.names_overlay for c in catches),
        "median_first_failure_s": round(statistics.median(firsts), 1) if firsts else None,
    }


def catch_table(catches: Sequence[Catch], *, sampled: int) -> str:
    s = summary(catches, sampled=sampled)
    median = "-" if s["median_first_failure_s"] is None else f"{s['median_first_failure_s']:.1f}"
    lines = [
        "| mutants sampled | run | observable | caught | missed | unobservable | undecided "
        "| false reds (twins) | jobs naming their overlay | median s webhook -> first failing result |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {s['sampled']} | {s['run']} | {s['observable']} | {s['caught']} | {s['missed']} "
        f"| {s['unobservable']} | {s['undecided']} | {s['false_reds']} of {s['run']} "
        f"| {2 * s['overlay_named']} of {2 * s['run']} | {median} |",
        "",
        "| mutant | function | operator | tests run | mutant job | twin job | s (mutant + twin) "
        "| verdict |",
        "|---|---|---|---:|---|---|---:|---|",
    ]
    for c in catches:
        m, named = c.mutant, ""
        if c.gating_failed:
            more = len(c.gating_failed) - 1
            named = f" ({c.gating_failed[0].rpartition('::')[2]}" + (f" +{more})" if more else ")")
        lines.append(
            f"| {m.id} | `{m.symbol}` | {m.operator}: {m.description} (line {m.line}) "
            f"| {c.planted.planned} | {c.planted.conclusion}{named} | {c.clean.conclusion} "
            f"| {c.planted.seconds + c.clean.seconds:.0f} | {c.verdict} |"
        )
    return "\n".join(lines)


def make_prober(
    repo: LocalUpstream,
    *,
    suites: Sequence[str],
    envs: Path,
    cache_dir: Path,
    log: Callable[[str], None],
) -> Prober:
    """The observability probe over the bundled universe (``suites``) under the backend's
    specs, in the overlays under ``envs`` (the relay's: the jobs made them)."""
    from backends import get_backend
    from evaluation.observability import probe
    from inventory.build import universe_from_inventory
    from inventory.importmap import import_map_for
    from upstream.undertest import UpstreamUnderTest, resolve_environment

    specs = list(get_backend("spyre").default_specs)  # the runner's (RELAY_RUNNER_SPECS unset)
    universe = universe_from_inventory(specs=specs, suites=suites)
    learned: list[Path] = []

    def prober(mutant: Mutant, branches: Branches) -> Probe:
        if not learned:
            log("learning the traced import map (once per torch build) ...")
            found = import_map_for(universe)
            if found is None:
                raise RuntimeError("no traced import map for this universe")
            learned.append(found)
        mutant_env, twin_env = (
            resolve_environment(
                UpstreamUnderTest(kind="overlay", head_sha=sha), envs=envs, checkout=repo.path
            )
            for sha in (branches.mutant, branches.twin)
        )
        return probe(
            universe,
            mutant.symbol,
            import_map=learned[0],
            mutant_env=mutant_env,
            twin_env=twin_env,
            cache_dir=cache_dir,
            log=log,
            specs=specs,
            labels={"mutant": branches.mutant[:12], "twin": branches.twin[:12]},
        )

    return prober


def catch_command(
    *,
    sample: int,
    seed: int,
    suites: Sequence[str],
    budget: float | None,
    var_root: Path,
    minutes: float | None,
    log: Callable[[str], None],
) -> tuple[list[Catch], str]:
    """The whole evaluation: the repository, the sample, the relay, the probes; the table."""
    from backends.base import package_dir, torch_build
    from evaluation.localrepo import local_upstream
    from evaluation.mutants import sample_mutants

    torch_dir = package_dir("torch")
    if torch_dir is None:
        raise RuntimeError("torch is not installed")
    repo = local_upstream(
        var_root / "eval",
        torch_dir=torch_dir,
        torch_build=torch_build(),
        torchgen_dir=package_dir("torchgen"),
    )
    log(f"local upstream repository {repo.path} (base {repo.base[:12]}, torch {repo.torch_build})")
    mutants = sample_mutants(repo.path, count=sample, seed=seed)
    var_dir = var_root / "eval" / "catch" / time.strftime("%Y%m%d-%H%M%S")
    log(f"{len(mutants)} mutant(s) sampled (seed {seed}); relay up in {var_dir}")
    deadline = time.monotonic() + 60 * minutes if minutes else None
    prober = make_prober(
        repo, suites=suites, envs=var_dir.resolve() / "envs", cache_dir=var_dir / "probes", log=log
    )
    catches = run_catch(
        repo,
        mutants,
        var_dir=var_dir,
        seed=seed,
        prober=prober,
        budget=budget,
        deadline=deadline,
        log=log,
    )
    return catches, catch_table(catches, sampled=len(mutants))
