"""`GET /metrics`: Prometheus text for the relay role. What the database knows is read at scrape
time (so every process's work counts, whichever process answers): deliveries by state,
dispatches by downstream and state, failed dispatch attempts, dispatch latency (created ->
sent), jobs by downstream, status and conclusion, overdue relayed jobs, the sweeper's
timeouts, the broker's queue depths. Callbacks by answer status are counted by this process.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from config.broker import CONTROL_QUEUE, SHARD_QUEUE, queue_depth
from config.settings import Settings
from fanout.sweep import count_overdue
from store import metrics as ops
from store.db import session_scope
from store.models import utcnow

router = APIRouter(tags=["ops"])

LATENCY_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600)


class StoreCollector(Collector):
    def __init__(self, settings: Settings, producer: Any) -> None:
        self.settings = settings
        self.producer = producer

    def collect(self) -> Iterator[Any]:
        with session_scope(self.settings.database_url) as session:
            yield _deliveries(session)
            yield from _dispatches(session)
            yield _latency(session)
            yield _jobs(session)
            yield GaugeMetricFamily(
                "relay_jobs_overdue",
                "Relayed jobs past their start or run timeout",
                value=count_overdue(self.settings),
            )
            sweeper = GaugeMetricFamily(
                "relay_sweeper_timeouts",
                "Jobs the sweepers completed as timed_out",
                labels=["source"],
            )
            sweeper.add_metric(["sweeper"], ops.sweeper_timeouts(session))
            yield sweeper
        depth = GaugeMetricFamily("relay_queue_depth", "Messages waiting", labels=["queue"])
        for queue in (CONTROL_QUEUE, SHARD_QUEUE):
            waiting = queue_depth(self.producer, queue)
            if waiting is not None:
                depth.add_metric([queue], waiting)
        yield depth


def _deliveries(session: Session) -> GaugeMetricFamily:
    deliveries = GaugeMetricFamily(
        "relay_deliveries", "Stored webhook deliveries by state", labels=["state"]
    )
    for state, count in ops.deliveries_by_state(session):
        deliveries.add_metric([state], count)
    return deliveries


def _dispatches(session: Session) -> Iterator[GaugeMetricFamily]:
    dispatches = GaugeMetricFamily(
        "relay_dispatches",
        "Dispatches by downstream and state",
        labels=["downstream", "state"],
    )
    failures = GaugeMetricFamily(
        "relay_dispatch_failed_attempts",
        "Failed send attempts by downstream",
        labels=["downstream"],
    )
    failed: dict[str, int] = {}
    for repo, state, count, attempts in ops.dispatches_by_downstream(session):
        dispatches.add_metric([repo, state], count)
        spent = int(attempts or 0) - (count if state == "sent" else 0)
        failed[repo] = failed.get(repo, 0) + max(0, spent)
    for repo, count in failed.items():
        failures.add_metric([repo], count)
    yield dispatches
    yield failures


def _latency(session: Session) -> HistogramMetricFamily:
    latency: dict[str, list[float]] = {}
    since = utcnow() - timedelta(days=1)
    for repo, created, sent in ops.sent_dispatch_times(session, since=since):
        if sent is not None and created is not None:
            seconds = (sent - created).total_seconds()
            latency.setdefault(repo, []).append(max(0.0, seconds))
    histogram = HistogramMetricFamily(
        "relay_dispatch_latency_seconds",
        "Delivery stored -> dispatch sent (last 24 h)",
        labels=["downstream"],
    )
    for repo, values in latency.items():
        bounds = [(str(b), float(sum(1 for v in values if v <= b))) for b in LATENCY_BUCKETS]
        buckets = [*bounds, ("+Inf", float(len(values)))]
        histogram.add_metric([repo], buckets, sum_value=sum(values))
    return histogram


def _jobs(session: Session) -> GaugeMetricFamily:
    jobs = GaugeMetricFamily(
        "relay_jobs",
        "Jobs by downstream, status and conclusion",
        labels=["downstream", "status", "conclusion"],
    )
    for repo, status, conclusion, count in ops.jobs_by_status(session):
        jobs.add_metric([repo, status, conclusion or ""], count)
    return jobs


def make_registry(settings: Settings, producer: Any) -> tuple[CollectorRegistry, Counter]:
    registry = CollectorRegistry()
    registry.register(StoreCollector(settings, producer))
    callbacks = Counter(
        "relay_callbacks", "Callbacks by answer status", ["code"], registry=registry
    )
    return registry, callbacks


@router.get("/metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    """Prometheus exposition format."""
    registry = request.app.state.metrics_registry
    body = await run_in_threadpool(generate_latest, registry)
    return Response(content=body, media_type=CONTENT_TYPE_LATEST)
