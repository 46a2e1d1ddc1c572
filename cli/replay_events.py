"""`relay replay --events FILE` and `relay replay --from A --to B --run`.

Two ways of putting load on a running relay and watching what the selection makes of it:

- **recorded events**: a JSON Lines file (one ``{"event", "delivery_id"?, "payload"}`` object a
  line, the format `relay deliveries export` writes) or a folder of GitHub example payloads
  (``<event>/<name>.json`` or ``<event>.<name>.json``, like examples/events), signed with the
  first configured webhook secret and posted in order over real HTTP; then the relay's API is
  polled for each delivery and its job's selection.
- **a release step**: the relay's `workers.replay` task (one "periodic" delivery per version pair)
  sent through the broker, its job followed through the API.

Everything is read from what the relay answers (the webhook's JSON, /api/v1/deliveries,
/api/v1/jobs); nothing here touches the database. The HTTP and broker side (and following the
release step's job) is cli.relay_client.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from cli.progress import ProgressBar
from cli.recorded import RecordedEvent, load_events
from cli.relay_client import (
    Relay,
    ReplayError,
    broker_send,
    run_release_replay,
)

# ----------------------------------------------------------------------------- sending


@dataclass
class ReplayedEvent:
    """One replayed event as the relay saw it."""

    n: int
    origin: str
    event: str
    action: str | None
    delivery_id: str
    status: int | None = None
    outcome: str = ""  # accepted | duplicate | ignored | rejected
    answer: dict[str, Any] = field(default_factory=dict)
    accept_ms: float = 0.0
    delivery_state: str | None = None
    not_actionable: str | None = None
    job_id: int | None = None
    job_status: str | None = None
    conclusion: str | None = None
    planned: int | None = None  # tests in the job's plan
    candidates: int | None = None  # variants the impact stage proposed (applicability in)
    universe: int | None = None  # variants the plan chose from (older relays do not say)
    fallbacks: list[str] = field(default_factory=list)  # scopes of the plan's fallbacks
    test_results: dict[str, int] | None = None

    @property
    def state(self) -> str:
        if self.outcome == "rejected":
            return f"rejected: {self.answer.get('error', '')}".strip()
        if self.outcome == "ignored":
            return "ping" if self.answer.get("ping") else f"ignored: {self.answer.get('reason')}"
        if self.job_id is not None:
            return f"{self.job_status}" + (f"/{self.conclusion}" if self.conclusion else "")
        if self.not_actionable:
            return f"{self.delivery_state}, no run: {self.not_actionable}"
        return (
            f"{self.delivery_state}, no job yet" if self.delivery_state else "not seen in the API"
        )

    @property
    def settled(self) -> bool:
        """Nothing more to wait for: a plan exists, or no plan will come."""
        if self.outcome in ("ignored", "rejected"):
            return True
        if self.job_id is not None:
            return self.job_status != "planning"  # a job shows while it is being planned
        return self.delivery_state == "failed" or self.not_actionable is not None


def _outcome(status: int, answer: dict[str, Any]) -> str:
    if status == 202:
        return "accepted"
    if status == 200 and answer.get("duplicate"):
        return "duplicate"
    if status == 200:
        return "ignored"  # ping, events and repositories the relay does not serve
    return "rejected"


def parse_rate(rate: str | None) -> float | None:
    """``"20/s"`` or ``"20"`` -> 20.0 events per second; None: as fast as the relay answers."""
    if rate is None or not rate.strip():
        return None
    text = rate.strip().removesuffix("/s")
    try:
        value = float(text)
    except ValueError as exc:
        raise ReplayError([f"--rate {rate!r}: expected N/s, e.g. 20/s"]) from exc
    if value <= 0 or math.isinf(value) or math.isnan(value):
        raise ReplayError([f"--rate {rate!r}: must be a positive number of events per second"])
    return value


def send_all(
    relay: Relay,
    events: Iterable[RecordedEvent],
    *,
    secret: bytes,
    rate: float | None = None,
) -> tuple[list[ReplayedEvent], float]:
    """Post every event in order, one after the other (paced to ``rate`` per second when
    given); returns the rows and the wall time of the sending."""
    rows: list[ReplayedEvent] = []
    start = time.perf_counter()
    for i, item in enumerate(events):
        if rate is not None:
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        row = ReplayedEvent(
            n=item.n,
            origin=item.origin,
            event=item.event,
            action=item.action,
            delivery_id=item.delivery_id,
        )
        sent = time.perf_counter()
        try:
            response = relay.post(
                event=item.event, delivery_id=item.delivery_id, body=item.body, secret=secret
            )
        except httpx.HTTPError as exc:
            raise ReplayError(
                [
                    f"event {item.n} ({item.origin}): cannot reach {relay.url}: {exc}; "
                    f"{len(rows)} event(s) were sent before it"
                ]
            ) from exc
        row.accept_ms = (time.perf_counter() - sent) * 1000
        row.status = response.status_code
        try:
            body = response.json()
            row.answer = body if isinstance(body, dict) else {"body": body}
        except ValueError:
            row.answer = {"error": response.text[:200]}
        row.outcome = _outcome(response.status_code, row.answer)
        rows.append(row)
    return rows, time.perf_counter() - start


# ----------------------------------------------------------------------------- following


def _no_run_reason(delivery: dict[str, Any]) -> str | None:
    """Why a processed delivery will never get a job (read from its normalized event)."""
    normalized = delivery.get("normalized") or {}
    if delivery.get("state") != "processed":
        return None
    if not normalized.get("actionable", True):
        return str(normalized.get("reason") or "not actionable")
    # workers.plan skips a pull request closed without merge (it only cancels earlier runs)
    if (
        normalized.get("event") == "pull_request"
        and normalized.get("action") == "closed"
        and not normalized.get("merged")
    ):
        return "pull request closed without merge"
    return None


def _apply_job(row: ReplayedEvent, job: dict[str, Any], detail: dict[str, Any] | None) -> None:
    row.job_id = int(job["id"])
    row.job_status = job.get("status")
    row.conclusion = job.get("conclusion")
    row.planned = job.get("planned")
    row.test_results = job.get("test_results")
    if detail is not None:
        selection = detail.get("selection") or {}
        counts = selection.get("stage_counts") or {}
        applicability = counts.get("applicability") or {}
        row.candidates = applicability.get("in")
        row.universe = selection.get("universe_variants")
        if "budget" in counts:
            row.planned = counts["budget"].get("out", row.planned)
        row.fallbacks = [
            str(f.get("scope") if isinstance(f, dict) else f)
            for f in selection.get("fallbacks") or []
        ]


def follow(
    relay: Relay,
    rows: list[ReplayedEvent],
    events: list[RecordedEvent],
    *,
    wait: float,
    poll: float = 0.5,
) -> float:
    """Poll the API until every stored event has a planned job (or will never get one), or
    ``wait`` seconds passed; fills the rows in place. Polls at least once; returns the
    seconds it waited."""
    details: dict[int, dict[str, Any]] = {}
    start = time.monotonic()
    while True:
        listed = {job["id"]: job for job in relay.jobs()}
        # one request for the recent deliveries; older ones one by one, while unsettled
        recent = {d["delivery_id"]: d for d in relay.page("/api/v1/deliveries", limit=500)}
        for row in rows:
            if row.outcome not in ("accepted", "duplicate"):
                continue
            delivery = recent.get(row.delivery_id)
            if delivery is None and not row.settled:
                delivery = relay.get(f"/api/v1/deliveries/{row.delivery_id}")
            if delivery is None:
                continue
            row.delivery_state = delivery.get("state")
            row.not_actionable = _no_run_reason(delivery)
            if row.delivery_state == "failed":
                row.not_actionable = f"processing failed: {delivery.get('last_error')}"
            if row.delivery_state == "rejected":
                row.not_actionable = f"rejected: {delivery.get('last_error')}"
            job_ids = delivery.get("job_ids") or []
            if job_ids:  # the first run of the delivery (the delivery links to its jobs)
                job_id = int(job_ids[0])
                if details.get(job_id, {}).get("status") in (None, "planning"):
                    details[job_id] = relay.get(f"/api/v1/jobs/{job_id}") or {}
                _apply_job(row, listed.get(job_id) or details[job_id], details[job_id])
        waited = time.monotonic() - start
        if all(r.settled for r in rows) or waited >= wait:
            return waited
        time.sleep(poll)


# ----------------------------------------------------------------------------- reporting


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def totals(rows: list[ReplayedEvent], seconds: float, waited: float = 0.0) -> dict[str, Any]:
    outcomes = Counter(r.outcome for r in rows)
    latencies = [r.accept_ms for r in rows]
    with_job = [r for r in rows if r.job_id is not None]
    stored = [r for r in rows if r.outcome in ("accepted", "duplicate")]
    return {
        "events": len(rows),
        "accepted": outcomes["accepted"],
        "redelivered": sum(1 for r in rows if r.answer.get("redelivery")),
        "duplicate": outcomes["duplicate"],
        "ignored": outcomes["ignored"],
        "rejected": outcomes["rejected"],
        "send_seconds": round(seconds, 3),
        "events_per_second": round(len(rows) / seconds, 2) if seconds > 0 else None,
        "accept_ms_p50": _round(percentile(latencies, 50)),
        "accept_ms_p99": _round(percentile(latencies, 99)),
        "selection": {
            "jobs": len({r.job_id for r in with_job}),
            "stored_without_job": sum(1 for r in stored if r.job_id is None),
            # stored, actionable as far as we know, and no job when we stopped waiting
            "no_job_yet": sum(1 for r in stored if not r.settled),
            "waited_seconds": round(waited, 1),
            "selected_variants": sum(r.planned or 0 for r in with_job),
            # None when no job's selection reports its stage counts (e.g. a custom planner)
            "candidate_variants": sum(r.candidates for r in with_job if r.candidates is not None)
            if any(r.candidates is not None for r in with_job)
            else None,
            "with_fallback": sum(1 for r in with_job if r.fallbacks),
            "states": dict(Counter(r.state for r in stored if r.job_id is not None)),
        },
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def rows_json(rows: list[ReplayedEvent]) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        data = asdict(r)
        data["accept_ms"] = round(r.accept_ms, 1)
        data["state"] = r.state
        out.append(data)
    return out


def render_table(rows: list[ReplayedEvent], summary: dict[str, Any]) -> str:
    header = (
        "n",
        "event",
        "delivery",
        "http",
        "accept ms",
        "job",
        "selected/universe",
        "fallback",
        "state",
    )
    lines = [header]
    for r in rows:
        selected = "-" if r.planned is None else str(r.planned)
        of = r.universe if r.universe is not None else r.candidates
        cand = "-" if of is None else str(of) + ("" if r.universe is not None else " cand.")
        lines.append(
            (
                str(r.n),
                r.event + (f".{r.action}" if r.action else ""),
                r.delivery_id if len(r.delivery_id) <= 36 else r.delivery_id[:33] + "...",
                str(r.status or "-"),
                f"{r.accept_ms:.1f}",
                "-" if r.job_id is None else str(r.job_id),
                "-" if r.job_id is None else f"{selected}/{cand}",
                "-" if r.job_id is None else (",".join(r.fallbacks) or "no"),
                r.state[:70],
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    ]
    s, sel = summary, summary["selection"]
    text += [
        "",
        f"{s['events']} events: {s['accepted']} accepted ({s['redelivered']} redelivered), "
        f"{s['duplicate']} duplicate, {s['ignored']} ignored, {s['rejected']} rejected",
        f"sent in {s['send_seconds']} s: {s['events_per_second']} events/s; accept latency "
        f"p50 {s['accept_ms_p50']} ms, p99 {s['accept_ms_p99']} ms",
        (
            f"selection: {sel['jobs']} job(s) planned, {sel['selected_variants']} variants "
            "selected "
            + (
                f"of {sel['candidate_variants']} candidates"
                if sel["candidate_variants"] is not None
                else "(candidates not reported by the planner)"
            )
            + f", {sel['with_fallback']} with a fallback; "
            f"{sel['stored_without_job']} stored event(s) without a job"
            + (
                "; states " + ", ".join(f"{k} {v}" for k, v in sorted(sel["states"].items()))
                if sel["states"]
                else ""
            )
        )
        if sel["jobs"]
        else f"selection: no job planned; {sel['stored_without_job']} stored event(s)",
    ]
    if sel["no_job_yet"]:
        text.append(
            f"note: {sel['no_job_yet']} stored event(s) had no job after waiting "
            f"{sel['waited_seconds']} s: the relay's runner may be disabled "
            "(RELAY_RUNNER_ENABLED) or still planning (--wait)"
        )
    return "\n".join(text)


# ----------------------------------------------------------------------------- commands


def replay_events(
    path: Path,
    *,
    url: str,
    secret: bytes,
    rate: str | None = None,
    wait: float = 60.0,
    upstream_repo: str | None = None,
) -> dict[str, Any]:
    """Read, send in order, follow; the report (``{"file", "url", "events", "totals"}``).
    Raises ReplayError before sending anything when the file or the relay is unusable."""
    events = load_events(path, upstream_repo=upstream_repo)
    pace = parse_rate(rate)
    relay = Relay(url)
    try:
        relay.check_reachable()
        rows, seconds = send_all(relay, events, secret=secret, rate=pace)
        try:
            waited = follow(relay, rows, events, wait=wait)
        except httpx.HTTPError as exc:
            raise ReplayError([f"events sent, but the relay's API failed: {exc}"]) from exc
    finally:
        relay.close()
    return {
        "file": str(path),
        "url": relay.url,
        "events": rows_json(rows),
        "totals": totals(rows, seconds, waited),
        "_rows": rows,
    }


# ----------------------------------------------------------------------------- CLI glue


def default_url(settings: Any) -> str:
    return f"http://{settings.host}:{settings.port}"


def events_command(
    path: Path,
    *,
    url: str | None,
    rate: str | None,
    wait: float | None,
    as_json: bool,
    as_upstream: bool,
) -> None:
    """`relay replay --events FILE`: typer-facing (prints, exits)."""
    import typer

    from config.settings import get_settings

    settings = get_settings()
    try:
        report = replay_events(
            path,
            url=url or default_url(settings),
            secret=settings.secret_values()[0],
            rate=rate,
            wait=60.0 if wait is None else wait,
            upstream_repo=settings.upstream_repo if as_upstream else None,
        )
    except ReplayError as exc:
        for line in exc.errors:
            typer.echo(f"error: {line}", err=True)
        if len(exc.errors) > 1:
            typer.echo(f"{len(exc.errors)} problems; nothing was sent", err=True)
        raise typer.Exit(2) from exc
    rows = report.pop("_rows")
    if as_json:
        typer.echo(json.dumps(report, indent=2, default=str))
    else:
        typer.echo(render_table(rows, report["totals"]))
    if report["totals"]["rejected"]:
        raise typer.Exit(1)


def run_command(base: str, head: str, *, url: str | None, wait: float | None, err: bool) -> None:
    """`relay replay --from A --to B --run`: typer-facing (prints, exits)."""
    import typer

    from config.settings import get_settings

    settings = get_settings()

    def echo(line: str) -> None:
        typer.echo(line, err=err)

    try:
        with ProgressBar(f"replay {base} -> {head}") as bar:
            result = run_release_replay(
                base,
                head,
                url=url or default_url(settings),
                wait=wait or 0.0,
                send=broker_send(settings),
                echo=echo,
                progress=bar.update,
            )
    except ReplayError as exc:
        for line in exc.errors:
            typer.echo(f"error: {line}", err=True)
        raise typer.Exit(2) from exc
    if wait and result["status"] != "completed":
        raise typer.Exit(1)
