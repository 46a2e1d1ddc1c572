"""`relay up`, `relay worker`, `relay openapi`, `relay submit`: running and poking the service."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import typer

from config.broker import CONTROL_QUEUE, PLAN_QUEUE, SHARD_QUEUE
from config.settings import Settings, get_settings
from store import caches
from store.db import redacted
from workers.harness.procs import die_with_parent

#: shard workers ``relay up`` starts unless told: one per core (two shard workers on 2 cores ran
#: 2,000 variants 1.6x to 2.0x as fast as one, docs/benchmarks.md), at most this many
MAX_DEFAULT_SHARD_WORKERS = 4

#: the Celery worker processes ``relay up`` starts, by name, and the queues each consumes
WORKER_QUEUES = (("control", CONTROL_QUEUE), ("planner", PLAN_QUEUE), ("shards", SHARD_QUEUE))


def worker_command(
    *, concurrency: int = 1, beat: bool = True, var_dir: Path, queues: str, name: str = "worker"
) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "workers.celery_app",
        "worker",
        f"--concurrency={concurrency}",
        "--loglevel=INFO",
        "--queues",
        queues,
        "--hostname",
        f"{name}@%h",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]
    if beat:
        cmd += ["--beat", "--schedule", str(var_dir / "celerybeat-schedule")]
    return cmd


def beat_command(*, var_dir: Path) -> list[str]:
    """The beat schedule (the sweeper, the nightlies) as a process of its own. Not embedded in
    the control worker: Celery forks an embedded beat from the worker's main process, and that
    process runs the outbox publisher's thread, which polls SQLite; a fork while that thread is
    inside SQLite can leave the beat holding a lock nobody releases, hung at its first publish
    (the sweeper then never runs: seen in CI)."""
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "workers.celery_app",
        "beat",
        "--loglevel=INFO",
        "--schedule",
        str(var_dir / "celerybeat-schedule"),
    ]


def host_caches(settings: Settings) -> Path:
    """Make this host's var dir and point the workers' test processes at its torch_extensions
    (``SPYRE_EXTENSIONS_DIR``, unless the operator set it: the spyre_stack leaf reads no RELAY_
    variable), seeded from ``RELAY_CACHE_SEED``; the folder the spyre C++ core is built in."""
    from config import logs

    logs.configure(settings.log_level, settings.log_json)
    settings.var_dir.mkdir(parents=True, exist_ok=True)
    own = caches.cache_dir("torch_extensions", settings)
    os.environ.setdefault("SPYRE_EXTENSIONS_DIR", str(own))
    if Path(os.environ["SPYRE_EXTENSIONS_DIR"]) == own:
        caches.seed_folder("torch_extensions", settings)
        if not any(own.glob("*/built.json")):  # the first test process builds it (a minute)
            caches.building(own, "the spyre C++ core, by the first test process that needs it")
    return Path(os.environ["SPYRE_EXTENSIONS_DIR"])


def up(
    port: int = typer.Option(None, help="HTTP port (default RELAY_PORT, 8000)"),
    host: str = typer.Option(None, help="bind address (default RELAY_HOST, 127.0.0.1)"),
    workers: int = typer.Option(
        None, min=1, help="test shards run at once (default: one per core, at most 4)"
    ),
    planners: int = typer.Option(2, min=1, help="plans computed at once"),
    migrate_db: bool = typer.Option(
        True, "--migrate/--no-migrate", help="migrate the database first"
    ),
) -> None:
    """Migrate, start the Celery workers and the beat schedule, and serve the API.

    Three worker processes: one for control tasks (delivery processing, reporting, sweeping),
    one planning (selection over the universe) and one running test shards, so events never
    wait behind a plan being computed or a long shard; and the beat schedule, a fourth process
    (see :func:`beat_command`)."""
    import uvicorn

    from store import migrate

    settings = get_settings()
    host_caches(settings)
    if migrate_db:
        migrate.upgrade(settings.database_url)
    port = port or settings.port
    host = host or settings.host
    workers = workers or max(1, min(MAX_DEFAULT_SHARD_WORKERS, os.cpu_count() or 1))
    # the planners cut a short job into one shard per shard worker (planner.sharding)
    os.environ.setdefault("RELAY_RUNNER_PARALLEL", str(workers))
    workers_up = _start_workers(settings, workers=workers, planners=planners)
    halt = threading.Event()
    watcher = threading.Thread(target=_supervise, args=(workers_up, halt), daemon=True)
    watcher.start()
    demo = _request_demo_replay(settings)
    typer.echo(
        _banner(settings, f"http://{host}:{port}", workers_up, demo, workers, planners), err=True
    )
    stopped = False

    def stop_workers() -> None:
        nonlocal stopped
        if not stopped:
            stopped = True
            halt.set()
            watcher.join(timeout=5)
            _stop_all([w.proc for w in reversed(workers_up)])

    def on_signal(signum: int, _frame: object) -> None:
        # uvicorn handles SIGINT/SIGTERM while it serves, then re-raises the signal: we get
        # it here after its graceful shutdown.
        stop_workers()
        raise SystemExit(128 + signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    try:
        uvicorn.run("relay.app:app", host=host, port=port, log_level="warning")
    finally:
        stop_workers()


def _start_workers(settings: Settings, *, workers: int, planners: int) -> list[_Supervised]:
    """The control, planner and shard workers and the beat schedule, started (in that order)."""
    workers_up = [
        _Supervised(
            name,
            worker_command(
                concurrency=concurrency,
                beat=False,
                var_dir=settings.var_dir,
                queues=queues,
                name=name,
            ),
            nice=settings.worker_nice,
        )
        for name, queues in WORKER_QUEUES
        for concurrency in [{"control": 1, "planner": planners, "shards": workers}[name]]
    ]
    workers_up.append(
        _Supervised("beat", beat_command(var_dir=settings.var_dir), nice=settings.worker_nice)
    )
    return workers_up


def _banner(
    settings: Settings,
    base: str,
    workers_up: list[_Supervised],
    demo: str,
    workers: int,
    planners: int,
) -> str:
    """What ``relay up`` serves where, and its worker processes."""
    control, planner, runner, beat = (w.proc for w in workers_up)
    return "\n".join(
        [
            "relay up",
            f"  API        {base}  (docs {base}/docs, health {base}/healthz, ready {base}/readyz)",
            f"  deliveries {base}/api/v1/deliveries",
            f"  webhook    POST {base}/github/webhook  (try: relay submit --example pull_request.opened)",
            f"  database   {redacted(settings.database_url)}",
            f"  broker     {redacted(settings.broker_url)}",
            f"  workers    control pid {control.pid}, planner pid {planner.pid} "
            f"(concurrency {planners}), shards pid {runner.pid} (concurrency {workers}), "
            f"beat pid {beat.pid}",
            f"  jobs       {base}/api/v1/jobs" + (f"  ({demo})" if demo else ""),
        ]
    )


class _Supervised:
    """A worker process `relay up` keeps running: started at once, restarted if it exits."""

    def __init__(self, name: str, command: list[str], nice: int = 0) -> None:
        self.name, self.command, self.nice = name, command, nice
        self.proc = _spawn(command, nice)


def _spawn(command: list[str], nice: int = 0) -> subprocess.Popen[bytes]:
    """A worker process: it dies with `relay up`, however that ends (even SIGKILL), and runs
    ``nice`` steps nicer than `relay up` (RELAY_WORKER_NICE: the web server's answers first)."""

    def child() -> None:
        die_with_parent()
        if nice:
            os.nice(nice)

    return subprocess.Popen(command, preexec_fn=child, start_new_session=True)


def _supervise(workers: list[_Supervised], halt: threading.Event) -> None:
    """Restart a worker that exited while `relay up` runs (e.g. Celery giving up on a broker
    connection it lost): its queue would otherwise never be consumed again."""
    while not halt.wait(1.0):
        for w in workers:
            code = w.proc.poll()
            if code is None or halt.is_set():
                continue
            typer.echo(f"relay up: the {w.name} worker exited ({code}); restarting it", err=True)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(w.proc.pid, signal.SIGKILL)  # its pool processes
            w.proc = _spawn(w.command, w.nice)


def _request_demo_replay(settings: Settings) -> str:
    """On a first start (no job recorded yet) plan and run the bundled release replay."""
    if not settings.demo_replay.strip() or not settings.runner_enabled:
        return ""
    from sqlalchemy import func, select

    from config.broker import TASK_REPLAY, make_producer
    from store.db import session_scope
    from store.models import Delivery, Job

    base_version, _, head_version = settings.demo_replay.partition(":")
    with session_scope(settings.database_url) as session:
        if session.scalar(select(func.count()).select_from(Job)) or session.scalar(
            select(Delivery.id).where(Delivery.source == "replay")
        ):
            return ""
    make_producer(settings).send_task(TASK_REPLAY, args=[base_version, head_version])
    return f"first start: replaying upstream {base_version} -> {head_version} on the spyre runner"


def worker(
    concurrency: int = typer.Option(1, min=1),
    queues: str = typer.Option(
        f"{CONTROL_QUEUE},{PLAN_QUEUE},{SHARD_QUEUE}",
        help=f"comma list: {CONTROL_QUEUE} (control tasks), {PLAN_QUEUE} (planning) and/or "
        f"{SHARD_QUEUE} (test shards)",
    ),
    beat: bool = typer.Option(False, help="also run the beat schedule (one per deployment)"),
) -> None:
    """Run one Celery worker process in the foreground (production deployments run several)."""
    settings = get_settings()
    host_caches(settings)
    os.execv(
        sys.executable,
        worker_command(concurrency=concurrency, beat=beat, var_dir=settings.var_dir, queues=queues),
    )


def _stop_all(procs: list[subprocess.Popen[bytes]], *, grace: float = 15.0) -> None:
    """Stop workers and everything they started (a worker's pool and beat processes share its
    group): SIGTERM to every group at once, so their warm shutdowns (a few seconds each) overlap,
    then SIGKILL to what is left after ``grace`` seconds."""
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def openapi(output: Path = typer.Option(Path("openapi.json"), help="file to write")) -> None:
    """Write the API's OpenAPI document (committed; a test checks it is fresh)."""
    from relay.openapi_doc import render

    output.write_text(render())
    typer.echo(f"wrote {output}")


#: the example events shipped with the project, one <event>.<name>.json each
EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples" / "events"


def example_names() -> list[str]:
    return sorted(p.name.removesuffix(".json") for p in EXAMPLES_DIR.glob("*.json"))


def submit(
    example: str = typer.Option(
        None,
        help="one of the project's example events (examples/events: "
        + ", ".join(example_names())
        + "); the default when no --fixture is given: pull_request.opened",
    ),
    fixture: str = typer.Option(
        None,
        help="a payload file (its event from the name, <event>.<name>.json, or --event), or "
        "EVENT/ACTION under --fixtures-dir (GitHub's payload-examples layout)",
    ),
    event: str = typer.Option(None, help="X-GitHub-Event (default: from the file's name)"),
    fixtures_dir: Path = typer.Option(
        None, help="a folder of <event>/<action>.payload.json files, for --fixture EVENT/ACTION"
    ),
    url: str = typer.Option(
        None, help="webhook URL (default http://RELAY_HOST:RELAY_PORT/github/webhook)"
    ),
    as_upstream: bool = typer.Option(
        True, "--as-upstream/--verbatim", help="rewrite repository.full_name to RELAY_UPSTREAM_REPO"
    ),
) -> None:
    """Sign an example event with the first configured secret and post it to the relay."""
    from cli.recorded import as_upstream as rename
    from cli.recorded import event_of_file
    from wire.github.signature import sign

    settings = get_settings()
    path = _payload_file(example, fixture, fixtures_dir)
    try:
        body = path.read_bytes()
        payload = json.loads(body)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise typer.BadParameter(f"{path}: not a readable JSON payload: {exc}") from exc
    if not isinstance(payload, dict):
        raise typer.BadParameter(f"{path}: the payload must be a JSON object")
    name = event or event_of_file(path, fixtures_dir if fixtures_dir else None)
    if not name:
        raise typer.BadParameter(f"{path}: cannot tell its event: give --event")
    if as_upstream:
        body = json.dumps(rename(payload, settings.upstream_repo)).encode()
    delivery_id = str(uuid.uuid4())
    target = url or f"http://{settings.host}:{settings.port}/github/webhook"
    try:
        response = _post(target, body, name, delivery_id, sign(settings.secret_values()[0], body))
    except httpx.HTTPError as exc:
        typer.echo(f"cannot reach {target}: {exc} (is `relay up` running?)", err=True)
        raise typer.Exit(2) from exc
    typer.echo(f"{response.status_code} {response.text} (delivery {delivery_id})")
    if response.status_code >= 300:
        raise typer.Exit(1)


def _payload_file(example: str | None, fixture: str | None, fixtures_dir: Path | None) -> Path:
    if example and fixture:
        raise typer.BadParameter("give --example or --fixture, not both")
    if fixture is None:
        name = (example or "pull_request.opened").removesuffix(".json")
        # an exact name, or an event with one example (push, ping)
        matches = [n for n in example_names() if n == name] or [
            n for n in example_names() if n.split(".", 1)[0] == name
        ]
        if len(matches) != 1:
            raise typer.BadParameter(
                f"no example {name!r}; the examples are: {', '.join(example_names())}"
            )
        return EXAMPLES_DIR / f"{matches[0]}.json"
    as_file = Path(fixture)
    if as_file.is_file():
        return as_file
    if fixtures_dir is None:
        raise typer.BadParameter(
            f"{fixture!r} is not a file; for EVENT/ACTION give --fixtures-dir "
            f"(or use --example, one of: {', '.join(example_names())})"
        )
    kind, _, action = fixture.partition("/")
    for candidate in (
        fixtures_dir / kind / f"{action or 'payload'}.payload.json",
        fixtures_dir / kind / f"{action}.json",
        fixtures_dir / kind / "payload.json",
    ):
        if candidate.is_file():
            return candidate
    raise typer.BadParameter(f"no payload for {fixture!r} under {fixtures_dir}")


def _post(target: str, body: bytes, event: str, delivery_id: str, sig: str) -> httpx.Response:
    return httpx.post(
        target,
        content=body,
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery_id,
            "X-Hub-Signature-256": sig,
            "User-Agent": "GitHub-Hookshot/relay-submit",
        },
        timeout=30,
    )
