"""upgrade -> downgrade -> upgrade on SQLite and PostgreSQL; autogenerate finds no difference."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from store import migrate
from store.db import make_engine
from store.models import Base


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(  # empty databases here (tests/store/conftest.py's are migrated)
    request: pytest.FixtureRequest, tmp_path: Path, fresh_postgres_database: Any
) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'm.sqlite'}"
    else:
        with fresh_postgres_database() as url:
            yield url


def _tables(url: str) -> set[str]:
    engine = make_engine(url, null_pool=True)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def _diff(url: str) -> list[object]:
    engine = make_engine(url, null_pool=True)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            return list(compare_metadata(ctx, Base.metadata))
    finally:
        engine.dispose()


def test_upgrade_downgrade_upgrade(database_url: str) -> None:
    model_tables = set(Base.metadata.tables)
    migrate.upgrade(database_url)
    assert migrate.current_revision(database_url) == migrate.head_revision()
    assert _tables(database_url) == model_tables
    migrate.downgrade(database_url)
    assert migrate.current_revision(database_url) is None
    assert _tables(database_url) == set()
    migrate.upgrade(database_url)
    assert _tables(database_url) == model_tables


def test_autogenerate_against_the_models_is_empty(database_url: str) -> None:
    migrate.upgrade(database_url)
    assert _diff(database_url) == []


def test_the_history_is_the_top_level_migrations_package(repo_root: Path) -> None:
    """Alembic's script location is ``migrations/`` beside the packages (the design's tree),
    installed with them; `relay db upgrade` finds it from any working folder."""
    assert migrate.script_location() == repo_root / "migrations"
    versions = sorted(p.name for p in (repo_root / "migrations" / "versions").glob("*.py"))
    assert versions[0] == "0001_initial_schema.py"
    assert migrate.head_revision() is not None
    assert not (repo_root / "store" / "migrations").exists()


def _store_old_deliveries(url: str, rows: list[tuple[str, str, str, str, bytes, Any]]) -> None:
    """``(delivery id, event, source, state, raw body, stored event)`` rows as revision 0011
    stored them, and a pending dispatch of each to one downstream."""
    import hashlib
    from datetime import UTC, datetime

    import sqlalchemy as sa

    now = datetime.now(UTC)
    engine = make_engine(url, null_pool=True)
    tables = sa.MetaData()
    tables.reflect(engine, only=["delivery", "downstream", "dispatch"])
    delivery, downstream, dispatch = (
        tables.tables[n] for n in ("delivery", "downstream", "dispatch")
    )
    try:
        with engine.begin() as conn:
            conn.execute(
                downstream.insert().values(
                    repo="org/down", level="L2", oncalls=[], policy={}, enabled=True, created_at=now
                )
            )
            for delivery_id, event, source, state, body, stored in rows:
                pk = conn.execute(
                    delivery.insert().values(
                        delivery_id=delivery_id,
                        event=event,
                        source=source,
                        state=state,
                        raw_body=body,
                        body_sha256=hashlib.sha256(body).hexdigest(),
                        attempts=0,
                        received_at=now,
                        normalized=stored,
                        last_error="old reason" if state == "rejected" else None,
                    )
                ).inserted_primary_key[0]
                conn.execute(
                    dispatch.insert().values(
                        delivery_pk=pk,
                        downstream_pk=1,
                        state="pending",
                        attempts=0,
                        created_at=now,
                        updated_at=now,
                        target="github",
                    )
                )
    finally:
        engine.dispose()


def test_the_typed_event_of_old_deliveries_is_filled_once(
    database_url: str, github_fixtures: Path
) -> None:
    """0012_h29_delivery_event: rows stored before (an event of schema 1, or none) get the typed
    event of schema 2 and the upstream payload, parsed from their raw body with ingress's code
    (a CRCR dispatch unwrapped, a form-encoded body decoded); a body that is not its event's
    shape, or holds NaN, is rejected with the reason and its unsent dispatch dead-lettered; a
    rejected row is left as it was."""
    import json
    import urllib.parse

    import sqlalchemy as sa

    from store.db import session_scope
    from store.models import Delivery, Dispatch
    from wire.github.events import load_event, normalize

    migrate.upgrade(database_url, "0011_h27b_job_failure_reason")
    pr = (github_fixtures / "pull_request/opened.payload.json").read_bytes()
    inner = json.loads(pr)
    push = json.loads((github_fixtures / "push/with-new-branch.payload.json").read_bytes())
    v1 = normalize(event="pull_request", payload=inner, delivery_id="pr").model_dump(
        exclude={"draft", "fork", "changed_files"}
    )
    crcr = {"client_payload": {"event_type": "push", "delivery_id": "up-1", "payload": push}}
    no_ref = json.dumps({k: v for k, v in push.items() if k != "ref"}).encode()
    _store_old_deliveries(
        database_url,
        [
            ("pr", "pull_request", "webhook", "processed", pr, {**v1, "schema_version": "1"}),
            ("crcr", "push", "repository_dispatch", "received", json.dumps(crcr).encode(), None),
            (
                "form",
                "push",
                "webhook",
                "received",
                b"payload=" + urllib.parse.quote(json.dumps(push)).encode(),
                None,
            ),
            ("no-ref", "push", "webhook", "received", no_ref, None),
            (
                "nan",
                "pull_request",
                "webhook",
                "failed",
                json.dumps({**inner, "x": float("nan")}).encode(),
                None,
            ),
            ("rejected", "push", "webhook", "rejected", no_ref, None),
        ],
    )

    migrate.upgrade(database_url)
    with session_scope(database_url) as session:
        got = {r.delivery_id: r for r in session.scalars(sa.select(Delivery))}
        dispatch = {d.delivery_pk: d.state for d in session.scalars(sa.select(Dispatch))}
        pr_event = load_event(got["pr"].normalized)
        assert (pr_event.schema_version, pr_event.pr_number) == ("2", inner["number"])
        assert pr_event.fork is False and got["pr"].upstream_payload == inner
        crcr_event = load_event(got["crcr"].normalized)
        assert (crcr_event.upstream_delivery_id, crcr_event.ref) == ("up-1", push["ref"])
        assert got["crcr"].upstream_payload == push  # the CRCR dispatch unwrapped
        assert got["form"].upstream_payload == push
        assert load_event(got["form"].normalized).changed_files is not None
        assert (got["no-ref"].state, got["no-ref"].normalized) == ("rejected", None)
        assert got["no-ref"].last_error == "EventError: payload has no ref"
        assert (got["nan"].state, got["nan"].last_error) == (
            "rejected",
            "payload's x is not a finite number",
        )
        assert got["nan"].processed_at is not None
        old = got["rejected"]
        assert (old.state, old.last_error, old.normalized, old.upstream_payload) == (
            "rejected",
            "old reason",
            None,
            None,
        )
        # the unsent dispatches of what is rejected now are dead letters; the others wait
        assert {name: dispatch[got[name].id] for name in got} == {
            "pr": "pending",
            "crcr": "pending",
            "form": "pending",
            "no-ref": "dead",
            "nan": "dead",
            "rejected": "pending",
        }
