"""`relay eval --kind catch`: does the product turn a real regression red, and a clean change green?

For each observable mutant of the mutation ground truth (its fault makes at least one variant
fail), a signed ``pull_request`` webhook goes over HTTP to a real ``relay up`` (embedded
database and broker, real Celery workers). The runner plans it with :func:`mutant_planner`: the
selector's four stages over the bundled universe under the backend's bundled specs, from the
mutant's change facts (the function it breaks, as ``relay eval --kind mutation`` scores them),
and the fault planted in the shard runs (the mutation plugin with ``RELAY_MUTANT``). The workers
run the shards, the report concludes the job, and the job's conclusion and failing tests are
read back from the HTTP API. The same event without the fault must conclude ``success``.

A mutant is caught when its job concludes ``failure`` naming at least one failing test that
gates (``mandatory_success`` or ``xfail_strict``). A miss says why: none of the variants the
fault breaks was selected, they ran but do not gate (``xfail`` in the spec), or the job did
not conclude.

The events carry what the planner needs as pull-request labels (``mutant:<name>`` or
``clean:<name>``, ``catch-suite:<suite>``, ``catch-budget:<runner-seconds>``), so the planner
reads nothing but its event.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from backends import get_backend
from evaluation.scores import GroundTruth, GroundTruthEvent
from planner import RunPlan
from store.settings import Settings, get_settings
from wire.github.events import UpstreamEvent

PLANNER = "cli.catch:mutant_planner"
GATING = frozenset({"mandatory_success", "xfail_strict"})
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "events" / "pull_request.opened.json"


def _label(event: UpstreamEvent, prefix: str) -> list[str]:
    return [lbl.split(":", 1)[1] for lbl in event.labels if lbl.startswith(prefix + ":")]


def mutant_planner(event: UpstreamEvent, settings: Settings) -> RunPlan:
    """The plan of a catch event: the selector over the mutant's change facts, the fault planted
    in the shards of a ``mutant:`` event and absent from those of a ``clean:`` one."""
    from cli.event_selection import select_event
    from evaluation.groundtruth import mutation_event
    from inventory.build import universe_from_inventory
    from workers.harness.pools import runner_backend
    from workers.plan import default_planner

    planted, clean = _label(event, "mutant"), _label(event, "clean")
    if not (planted or clean):
        return default_planner(event, settings)
    name = (planted or clean)[0]
    backend, specs = runner_backend(settings)
    universe = universe_from_inventory(
        backend=backend.name, specs=specs, suites=_label(event, "catch-suite")
    )
    budgets = _label(event, "catch-budget")
    plan = select_event(
        mutation_event(name),
        universe,
        budget=float(budgets[0]) if budgets else settings.runner_budget_seconds,
    )
    runner = backend.runner_config(specs)
    env = {**runner.env, "RELAY_MUTANT": name} if planted else dict(runner.env)
    return RunPlan.for_selection(
        plan,
        {v.test_id: v.node_id for v in universe.variants},
        # nothing imported before pytest's configure plants the fault: a warm pool preloads
        # upstream's OpInfo database, whose entries would keep the unmutated function (the
        # ground truth's fresh runs import it after the plugin replaced it); the clean twin the same
        runner=runner.model_copy(
            update={
                "pytest_args": [*runner.pytest_args, "-p", "evaluation.mutations"],
                "env": env,
                "preload": [],
            }
        ),
        head_rev=event.head_sha,
    )


# ---- the run ------------------------------------------------------------------------------


@dataclass
class EventRun:
    """One webhook event and the job it became."""

    conclusion: str | None
    planned: int
    failing: list[dict[str, Any]]  # failed/errored results, with their spec mode
    seconds: float


@dataclass
class Catch:
    mutant: str
    truth: int  # variants the fault breaks in the ground truth
    planted: EventRun
    clean: EventRun
    gating_failed: list[str] = field(default_factory=list)
    verdict: str = ""  # caught | missed: <reason>

    @property
    def caught(self) -> bool:
        return self.verdict == "caught"

    @property
    def false_red(self) -> bool:
        return self.clean.conclusion != "success"


def judge(event: GroundTruthEvent, planted: EventRun, clean: EventRun, selected: set[str]) -> Catch:
    broken = set(event.failing)
    gating = [r["test_id"] for r in planted.failing if r.get("spec_mode") in GATING]
    gating.sort(key=lambda t: (t not in broken, t))  # a variant the ground truth names first
    c = Catch(event.name, len(event.failing), planted, clean, gating_failed=gating)
    if planted.conclusion == "failure" and gating:
        c.verdict = "caught"
    elif planted.conclusion not in ("success", "failure"):
        c.verdict = f"missed: the job concluded {planted.conclusion or 'nothing'}"
    elif not broken & selected:
        c.verdict = f"missed: none of the {len(broken)} broken variants was selected"
    elif planted.failing:
        c.verdict = "missed: the broken variants failed but none gates (xfail in the spec)"
    else:
        c.verdict = "missed: the selected broken variants passed or were xfail"
    return c


class LocalRelay:
    """``relay up`` on the embedded default in ``var_dir``, planning with :data:`PLANNER`."""

    def __init__(self, var_dir: Path, *, per_test_timeout: float = 300) -> None:
        var_dir = var_dir.resolve()  # relay up runs in the project folder
        self.var_dir = var_dir
        var_dir.mkdir(parents=True, exist_ok=True)
        self.secret = secrets.token_hex(16)
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        env = {
            **os.environ,
            "RELAY_ENV": "development",
            "RELAY_VAR_DIR": str(var_dir),
            "RELAY_DATABASE_URL": f"sqlite:///{var_dir / 'relay.sqlite'}",
            "RELAY_BROKER_URL": f"sqla+sqlite:///{var_dir / 'broker.sqlite'}",
            "RELAY_WEBHOOK_SECRETS": json.dumps([self.secret]),
            "RELAY_RUNNER_ENABLED": "true",
            "RELAY_PLANNER": PLANNER,
            "RELAY_EVENT_HANDLERS": "[]",
            "RELAY_DEMO_REPLAY": "",
            "RELAY_NIGHTLY_CRON": "",
            "RELAY_PER_TEST_TIMEOUT": str(per_test_timeout),
            # its caches (the inventory, the spyre core) are copied from this host's var dir
            "RELAY_CACHE_SEED": os.environ.get("RELAY_CACHE_SEED") or str(get_settings().var_dir),
        }
        self.log = open(var_dir / "relay-up.log", "wb")  # noqa: SIM115 - the subprocess's
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli", "up", "--port", str(self.port), "--workers", "1"],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=Path(__file__).resolve().parents[1],
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

    def event(self, labels: Sequence[str], *, timeout: float) -> EventRun:
        """Post one signed pull_request event labelled ``labels``; wait for its job."""
        from wire.github.signature import sign

        payload = json.loads(EXAMPLE.read_text(encoding="utf-8"))
        number = uuid.uuid4().int % 10**7 + 10**6
        payload["number"] = payload["pull_request"]["number"] = number
        payload["pull_request"]["labels"] = [{"name": lbl} for lbl in labels]
        payload["pull_request"]["head"]["sha"] = uuid.uuid4().hex + uuid.uuid4().hex[:8]
        body = json.dumps(payload).encode()
        start = time.monotonic()
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
        failing = [
            r
            for outcome in ("failed", "error")
            for r in self._items(f"/api/v1/jobs/{job['id']}/results", outcome=outcome)
        ]
        return EventRun(job["conclusion"], job["planned"], failing, time.monotonic() - start)

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
        import re
        import signal

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


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_catch(
    truth: GroundTruth,
    *,
    var_dir: Path,
    suites: Sequence[str] = (),
    budget: float | None = None,
    timeout: float = 3600,
    log: Callable[[str], None] = lambda _: None,
) -> list[Catch]:
    """Each observable mutant of ``truth`` as two events (planted, clean) through a real relay."""
    from cli.event_selection import select_event
    from inventory.build import universe_from_inventory

    observable = [e for e in truth.events if e.failing]
    extra = [f"catch-suite:{s}" for s in suites]
    if budget is not None:
        extra.append(f"catch-budget:{budget:g}")
    backend = get_backend("spyre")
    universe = universe_from_inventory(specs=list(backend.default_specs), suites=suites)
    relay = LocalRelay(var_dir)
    catches = []
    try:
        for event in observable:
            log(f"{event.name}: planted ...")
            planted = relay.event([f"mutant:{event.name}", *extra], timeout=timeout)
            log(f"{event.name}: {planted.conclusion}; clean ...")
            clean = relay.event([f"clean:{event.name}", *extra], timeout=timeout)
            # the selection the planner made, made again here: the same pure function and inputs
            selected = set(select_event(event, universe, budget=budget).test_ids)
            catches.append(judge(event, planted, clean, selected))
            log(f"{event.name}: {catches[-1].verdict}; clean {clean.conclusion}")
    finally:
        relay.stop()
    return catches


def catch_table(catches: Sequence[Catch], *, observable: int, unobservable: int) -> str:
    caught = sum(c.caught for c in catches)
    red = sum(c.false_red for c in catches)
    lines = [
        f"caught {caught} of {len(catches)} observable mutants; false reds {red} of "
        f"{len(catches)} clean events; {unobservable} mutant(s) unobservable (no variant breaks)",
        "",
        "| mutant | broken variants | tests run | planted | clean | wall s (planted + clean) "
        "| verdict |",
        "|---|---:|---:|---|---|---:|---|",
    ]
    for c in catches:
        named = ""
        if c.gating_failed:
            more = len(c.gating_failed) - 1
            named = f" ({c.gating_failed[0].rpartition('::')[2]}" + (f" +{more})" if more else ")")
        lines.append(
            f"| {c.mutant} | {c.truth} | {c.planted.planned} | {c.planted.conclusion}{named} | "
            f"{c.clean.conclusion} | {c.planted.seconds + c.clean.seconds:.0f} | {c.verdict} |"
        )
    assert observable == len(catches)
    return "\n".join(lines)
