"""A running relay seen from outside: its webhook and /api/v1 over HTTP, and the broker.

Used by `relay replay --events` (post recorded events, follow their jobs) and `relay replay
--run` (send the `workers.replay` task with config.broker's producer, follow its job).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from cli.replay_outcomes import changed_outcomes, report_lines
from store.db import redacted
from wire.github.signature import sign

#: how long `--run` waits for the workers to plan the release step when --wait is shorter
PLAN_WAIT_SECONDS = 180.0

Echo = Callable[[str], None]


class ReplayError(Exception):
    """A replay that cannot start or cannot go on; ``errors`` are all the problems found."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = errors


def base_url(url: str) -> str:
    """The relay's base URL from --url (a base URL, or the webhook URL itself)."""
    url = url.rstrip("/")
    suffix = "/github/webhook"
    return url[: -len(suffix)] if url.endswith(suffix) else url


class Relay:
    """The running relay over HTTP: its webhook and its /api/v1 read API."""

    def __init__(self, url: str, *, timeout: float = 30.0) -> None:
        self.url = base_url(url)
        self.client = httpx.Client(timeout=timeout)

    def close(self) -> None:
        self.client.close()

    def check_reachable(self) -> None:
        try:
            response = self.client.get(f"{self.url}/healthz", timeout=5)
        except httpx.HTTPError as exc:
            raise ReplayError(
                [f"cannot reach the relay at {self.url}: {exc} (is `relay up` running? --url)"]
            ) from exc
        if response.status_code != 200:
            raise ReplayError(
                [f"{self.url}/healthz answered {response.status_code}: not a running relay?"]
            )

    def post(self, *, event: str, delivery_id: str, body: bytes, secret: bytes) -> httpx.Response:
        """One webhook delivery, signed like GitHub (wire.github.signature)."""
        return self.client.post(
            f"{self.url}/github/webhook",
            content=body,
            headers={
                "Content-Type": "application/json",
                "X-GitHub-Event": event,
                "X-GitHub-Delivery": delivery_id,
                "X-Hub-Signature-256": sign(secret, body),
                "User-Agent": "GitHub-Hookshot/relay-replay",
            },
        )

    def get(self, path: str, **params: Any) -> Any:
        """The JSON of a GET, None on 404."""
        response = self.client.get(f"{self.url}{path}", params=params or None)
        if response.status_code == 404:
            return None
        response.raise_for_status()
        return response.json()

    def page(self, path: str, **params: Any) -> list[dict[str, Any]]:
        """The items of the first page of a list endpoint (newest first)."""
        return list((self.get(path, **params) or {}).get("items") or [])

    def jobs(self) -> list[dict[str, Any]]:
        """The 500 newest jobs."""
        return self.page("/api/v1/jobs", limit=500)


# ----------------------------------------------------------------------------- release replay


def release_delivery_id(base: str, head: str) -> str:
    """The delivery the relay's `workers.replay` task stores for a version pair (once)."""
    return f"replay-{base}-{head}"


def find_release_job(relay: Relay, delivery: dict[str, Any]) -> dict[str, Any] | None:
    """The job of a release-replay delivery: the first job it started (the delivery links to
    its jobs)."""
    job_ids = delivery.get("job_ids") or []
    return relay.get(f"/api/v1/jobs/{job_ids[0]}") if job_ids else None


def run_release_replay(
    base: str,
    head: str,
    *,
    url: str,
    wait: float,
    send: Callable[[str, str], str],
    echo: Echo,
    poll: float = 1.0,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """Send the release step to the workers (``send(base, head) -> task id``, through the
    broker), then follow its job through the API (``progress("run", results, planned)`` at each
    poll once it is planned). Returns what was learned; raises ReplayError when the relay is
    unreachable, processing failed, or no job appeared in time."""
    relay = Relay(url)
    try:
        relay.check_reachable()
        result = _request(relay, base, head, send=send, echo=echo)
        job = _planned_job(relay, result["delivery_id"], wait=wait, poll=poll)
        result["job_id"] = job["id"]
        result["planned"] = job.get("planned")
        echo(
            f"job {job['id']}: {job.get('planned')} test(s) planned, status {job['status']}\n"
            f"  follow: curl -s {relay.url}/api/v1/jobs/{job['id']}\n"
            f"          curl -s {relay.url}/api/v1/jobs/{job['id']}/results"
        )
        deadline = time.monotonic() + wait
        while wait > 0 and job["status"] != "completed" and time.monotonic() < deadline:
            time.sleep(poll)
            job = relay.get(f"/api/v1/jobs/{job['id']}") or job
            if progress is not None and job.get("planned"):
                done = (job.get("test_results") or {}).get("total") or 0
                progress("run", int(done), int(job["planned"]))
        result["status"] = job["status"]
        result["conclusion"] = job.get("conclusion")
        result["test_results"] = job.get("test_results")
        if wait > 0:
            _say_how_it_ended(relay, job, result, wait=wait, echo=echo)
        return result
    except httpx.HTTPError as exc:
        raise ReplayError([f"the relay's API at {relay.url} failed: {exc}"]) from exc
    finally:
        relay.close()


def _request(
    relay: Relay, base: str, head: str, *, send: Callable[[str, str], str], echo: Echo
) -> dict[str, Any]:
    """Send the release step unless the relay already has it (once per version pair)."""
    delivery_id = release_delivery_id(base, head)
    delivery = relay.get(f"/api/v1/deliveries/{delivery_id}")
    result: dict[str, Any] = {"delivery_id": delivery_id, "url": relay.url}
    if delivery is not None:
        result["already_requested"] = True
        echo(
            f"upstream {base} -> {head} was already sent to the workers "
            f"(delivery {delivery_id}, received {delivery['received_at']}); the relay runs "
            "a release replay once per version pair: following that run"
        )
    else:
        result["task_id"] = send(base, head)
        echo(
            f"sent the release replay {base} -> {head} to the workers "
            f"(task {result['task_id']}, delivery {delivery_id})"
        )
    return result


def _planned_job(relay: Relay, delivery_id: str, *, wait: float, poll: float) -> dict[str, Any]:
    """The delivery's job once planned (or still planning at the deadline); ReplayError when
    the delivery failed or no job appeared in time."""
    plan_deadline = time.monotonic() + max(wait, PLAN_WAIT_SECONDS)
    job = None
    # the job shows while its tests are selected ("planning"): wait for its plan
    while job is None or (job["status"] == "planning" and time.monotonic() < plan_deadline):
        if job is not None:
            time.sleep(poll)
            job = relay.get(f"/api/v1/jobs/{job['id']}") or job
            continue
        delivery = relay.get(f"/api/v1/deliveries/{delivery_id}")
        if delivery is not None and delivery.get("state") == "failed":
            raise ReplayError(
                [f"the relay failed to process {delivery_id}: {delivery.get('last_error')}"]
            )
        if delivery is not None:
            job = find_release_job(relay, delivery)
        if job is None:
            if time.monotonic() >= plan_deadline:
                state = delivery.get("state") if delivery else "not stored yet"
                raise ReplayError(
                    [
                        f"no job for {delivery_id} after {max(wait, PLAN_WAIT_SECONDS):.0f} s "
                        f"(delivery: {state}); the workers may still be planning: "
                        f"follow {relay.url}/api/v1/jobs"
                    ]
                )
            time.sleep(poll)
    return job


def _say_how_it_ended(
    relay: Relay, job: dict[str, Any], result: dict[str, Any], *, wait: float, echo: Echo
) -> None:
    """The job's conclusion and counts with its changed outcomes, or how far it got."""
    counts = job.get("test_results") or {}
    if job["status"] == "completed":
        echo(
            f"job {job['id']} completed: {job.get('conclusion')}; tests passed "
            f"{counts.get('passed')}, failed {counts.get('failed')}, skipped "
            f"{counts.get('skipped')}, total {counts.get('total')}"
        )
        _report_changes(relay, job, result, echo)
    else:
        echo(
            f"job {job['id']} still {job['status']} after {wait:.0f} s "
            f"({counts.get('total')} of {job.get('planned')} tests done so far)"
        )


def _report_changes(relay: Relay, job: dict[str, Any], result: dict[str, Any], echo: Echo) -> None:
    """Every changed outcome of the completed job, with the change units that selected it."""
    tested = job.get("upstream_under_test") or {}
    if tested.get("summary"):
        echo(f"upstream under test: {tested['summary']}")
    found = changed_outcomes(relay.get, int(job["id"]))
    result["changed"] = found
    head = tested.get("torch_build") or tested.get("torch_version") or "the head"
    for line in report_lines(found, head):
        echo(line)


def broker_send(settings: Any) -> Callable[[str, str], str]:
    """Send `workers.replay` through the broker with config.broker's producer (the same way
    `relay up` requests its first-start replay)."""

    def send(base: str, head: str) -> str:
        from config.broker import TASK_REPLAY, broker_reachable, make_producer

        producer = make_producer(settings)
        ok, detail = broker_reachable(producer)
        if not ok:
            raise ReplayError(
                [f"cannot reach the broker {redacted(settings.broker_url)}: {detail}"]
            )
        return str(producer.send_task(TASK_REPLAY, args=[base, head]).id)

    return send
