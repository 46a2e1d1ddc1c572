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
the mutant's overlay (those that fail there again in the twin's); when no outcome differs the
mutant is unobservable by the bundled suites, else it is missed. The probes run in a thread beside
the next mutants' jobs, on the traced import map learned from the start (:mod:`cli.catch_probe`),
and the report is rewritten after every verdict, so a run stopped by its deadline keeps what it
decided. A job with nothing to test (every change unit reaches no variant of the backend)
concludes ``success`` and is probed like any green one.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from cli.catch_probe import Prober, make_prober
from config.settings import get_settings
from evaluation.localrepo import LocalUpstream, commit_file
from evaluation.mutants import Mutant
from evaluation.observability import Probe

GATING = frozenset({"mandatory_success", "xfail_strict"})
PENDING = "undecided: no gating failure, probe pending"
OUT_OF_TIME = "undecided: no gating failure, not probed (out of time)"
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
    reason: str = ""  # why it failed before tests ran, or had none to run (its failure_reason)

    @property
    def names_overlay(self) -> bool:
        u = self.under_test
        return u.get("kind") == "overlay" and u.get("head_sha") == self.head_sha


@dataclass(frozen=True)
class Sent:
    """A webhook posted: the head, its pull request number, when (monotonic and wall clock)."""

    head: str
    number: int
    start: float
    at: datetime


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
        c.verdict = OUT_OF_TIME
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
            # the command learns the traced import map itself (cli.catch_probe) in this host's
            # var dir, the relay's seed: its planner copies it from there once learned and
            # never starts a second learning of it
            "RELAY_IMPORT_MAP_LEARNING": "false",
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
        return self.wait(self.send(base, head), timeout=timeout)

    def send(self, base: str, head: str) -> Sent:
        """Post one signed ``pull_request`` (opened) event for ``base..head``."""
        from wire.github.signature import sign

        payload = json.loads(EXAMPLE.read_text(encoding="utf-8"))
        number = uuid.uuid4().int % 10**7 + 10**6
        payload["number"] = payload["pull_request"]["number"] = number
        payload["pull_request"]["labels"] = []
        payload["pull_request"]["head"]["sha"] = head
        payload["pull_request"]["base"]["sha"] = base
        body = json.dumps(payload).encode()
        sent = Sent(head, number, time.monotonic(), datetime.now(UTC))
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
        return sent

    def wait(self, sent: Sent, *, timeout: float) -> EventRun:
        """The job of a sent event once it completed: conclusion, failing results, timings."""

        def finished() -> dict[str, Any] | None:
            page = self._get("/api/v1/jobs", pr=sent.number)
            items = (page or {}).get("items", [])
            return items[0] if items and items[0]["status"] == "completed" else None

        job = self._wait(finished, timeout, f"the job of PR {sent.number}")
        seconds = time.monotonic() - sent.start
        detail = self._get(f"/api/v1/jobs/{job['id']}")
        failing = [
            r
            for outcome in ("failed", "error")
            for r in self._items(f"/api/v1/jobs/{job['id']}/results", outcome=outcome)
        ]
        self._planned_modes(job["id"], failing)
        first = min((_when(r["created_at"]) for r in failing), default=None)
        return EventRun(
            sent.head,
            job["conclusion"],
            job["planned"],
            failing,
            seconds,
            (first - sent.at).total_seconds() if first else None,
            under_test=detail.get("upstream_under_test") or {},
            reason=job.get("failure_reason") or "",
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
    changed: Callable[[list[Catch]], None] = lambda _: None,
) -> list[Catch]:
    """Each mutant and its twin as two pull requests through a real relay (the twin's webhook
    sent right after the mutant's: it is planned while the mutant's shards run); each mutant
    whose job showed no gating failure is probed with ``prober`` beside the next mutants' jobs
    (:class:`ProbeQueue`). No mutant is started, and no probe, after ``deadline``
    (``time.monotonic()``): those left are reported as such. ``changed(catches)`` is called
    after every verdict (the report is written as the run goes)."""
    catches: list[Catch] = []
    probes = (
        ProbeQueue(prober, deadline=deadline, changed=lambda: changed(catches), log=log)
        if prober
        else None
    )
    lock = probes.lock if probes else contextlib.nullcontext()
    relay = LocalRelay(var_dir, upstream=repo.path, budget=budget)
    try:
        for mutant in mutants:
            if deadline is not None and time.monotonic() > deadline:
                log(f"deadline reached: {len(catches)} of {len(mutants)} mutants sent")
                break
            branches = commit_mutant(repo, mutant, seed=seed)
            log(f"{mutant.id} {mutant.symbol} {mutant.operator} ({mutant.description}) ...")
            sent = [relay.send(repo.base, head) for head in (branches.mutant, branches.twin)]
            planted, clean = (relay.wait(one, timeout=timeout) for one in sent)
            catch = judge(mutant, planted, clean, None)
            log(
                f"{mutant.id}: {planted.conclusion} ({len(gating_failures(planted))} gating "
                f"failures{'; ' + planted.reason if planted.reason else ''}), twin "
                f"{clean.conclusion}"
            )
            with lock:
                catches.append(catch)
                if probes and needs_probe(catch):
                    probes.put(catch, branches)
                changed(catches)
    finally:
        relay.stop()
        if probes:
            probes.finish()
    return catches


def needs_probe(catch: Catch) -> bool:
    """A mutant whose job concluded with no gating failure: was there anything to catch?"""
    return catch.planted.conclusion in ("success", "failure") and not catch.gating_failed


class ProbeQueue:
    """Probes queued mutants one after another in a thread of its own, each as soon as it is
    queued; none is started after ``deadline`` (``time.monotonic()``). ``changed`` is called
    under :attr:`lock` after each verdict."""

    def __init__(
        self,
        prober: Prober,
        *,
        deadline: float | None,
        changed: Callable[[], None],
        log: Callable[[str], None],
    ) -> None:
        self._prober, self._deadline, self._changed, self._log = prober, deadline, changed, log
        self._items: queue.Queue[tuple[Catch, Branches] | None] = queue.Queue()
        self.lock = threading.Lock()
        self._thread = threading.Thread(target=self._work, daemon=True, name="probes")
        self._thread.start()

    def put(self, catch: Catch, branches: Branches) -> None:
        catch.verdict = PENDING
        self._items.put((catch, branches))

    def _work(self) -> None:
        while (item := self._items.get()) is not None:
            catch, branches = item
            found, verdict = None, OUT_OF_TIME
            if self._deadline is None or time.monotonic() < self._deadline:
                try:
                    found = self._prober(catch.mutant, branches.mutant, branches.twin)
                    verdict = judge(catch.mutant, catch.planted, catch.clean, found).verdict
                except Exception as exc:  # a probe that could not run leaves one undecided
                    first = (str(exc).strip().splitlines() or [""])[0][:160]
                    verdict = f"undecided: the probe did not run ({type(exc).__name__}: {first})"
            with self.lock:
                catch.probe, catch.verdict = found, verdict
                self._log(f"{catch.mutant.id}: {verdict}")
                self._changed()

    def finish(self) -> None:
        """Probe what is queued (none started after the deadline) and stop the thread."""
        self._items.put(None)
        self._thread.join()


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
        "| mutant | function | operator | tests run | mutant job | twin job "
        "| s webhook -> done (mutant, twin) | verdict |",
        "|---|---|---|---:|---|---|---:|---|",
    ]
    for c in catches:
        m, named = c.mutant, ""
        if c.gating_failed:
            more = len(c.gating_failed) - 1
            named = f" ({c.gating_failed[0].rpartition('::')[2]}" + (f" +{more})" if more else ")")
        elif c.planted.reason.startswith("nothing to test"):
            named = " (nothing to test)"
        lines.append(
            f"| {m.id} | `{m.symbol}` | {m.operator}: {m.description} (line {m.line}) "
            f"| {c.planted.planned} | {c.planted.conclusion}{named} | {c.clean.conclusion} "
            f"| {c.planted.seconds:.0f}, {c.clean.seconds:.0f} | {c.verdict} |"
        )
    return "\n".join(lines)


def catch_command(
    *,
    sample: int,
    seed: int,
    suites: Sequence[str],
    budget: float | None,
    var_root: Path,
    minutes: float | None,
    log: Callable[[str], None],
    write: Callable[[str], None] = lambda _: None,
) -> tuple[list[Catch], str]:
    """The whole evaluation: the repository, the sample, the relay, the probes; the table.
    ``write(text)`` gets the table as it stands after every verdict (marked in progress)."""
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
    var_dir = (var_root / "eval" / "catch" / time.strftime("%Y%m%d-%H%M%S")).resolve()
    log(f"{len(mutants)} mutant(s) sampled (seed {seed}); relay up in {var_dir}")
    deadline = time.monotonic() + 60 * minutes if minutes else None
    prober = make_prober(
        repo,
        suites=suites,
        envs=var_dir / "probe-envs",
        cache_dir=var_dir / "probes",
        deadline=deadline,
        log=log,
    )

    def changed(catches: list[Catch]) -> None:
        pending = sum(c.verdict == PENDING for c in catches)
        write(
            catch_table(catches, sampled=len(mutants))
            + f"\n\nin progress ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC): {len(catches)} of "
            f"{len(mutants)} mutants' jobs in, {pending} probe(s) pending"
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
        changed=changed,
    )
    return catches, catch_table(catches, sampled=len(mutants))
