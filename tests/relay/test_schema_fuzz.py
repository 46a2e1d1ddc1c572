"""Schemathesis over every operation of the app's OpenAPI document (issue #31): requests
generated from the schema against the real app (in process, a migrated SQLite database with a
little history), checked for server errors, for answers that do not match their declared
schema, and for status codes the schema does not declare.

``make test`` runs a bounded budget (``RELAY_SCHEMA_EXAMPLES``, default 20 per operation); the
``long`` run (``make test-long``) 200 per operation.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():
    # starlette's TestClient (schemathesis calls an ASGI app through it) warns that it prefers
    # httpx2 to the httpx this project pins: nothing to act on
    warnings.simplefilter("ignore")
    import schemathesis
    from hypothesis import HealthCheck, settings
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        response_schema_conformance,
        status_code_conformance,
    )
    from starlette.testclient import TestClient

CHECKS = [not_a_server_error, response_schema_conformance, status_code_conformance]
EXAMPLES = int(os.environ.get("RELAY_SCHEMA_EXAMPLES", "20"))


def _app(tmp: Path) -> Any:
    from pydantic import SecretStr

    from config.settings import Settings
    from relay.app import create_app
    from store import migrate

    database_url = f"sqlite:///{tmp}/relay.sqlite"
    migrate.upgrade(database_url)
    settings = Settings(
        env="development",
        database_url=database_url,
        broker_url=f"sqla+sqlite:///{tmp}/broker.sqlite",
        var_dir=tmp / "var",
        webhook_secrets=[SecretStr("fuzz-secret")],
        hud_bot_token=SecretStr("bot"),
        operator_token=SecretStr("operator"),
        max_body_bytes=1 << 20,
        log_json=False,
        log_level="ERROR",
    )
    return create_app(settings)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    made = _app(tmp_path_factory.mktemp("schema-fuzz"))
    with TestClient(made):  # its lifespan: the group-commit writer is stopped at the end
        yield made


def _fuzz(app: Any, examples: int) -> list[str]:
    """Every operation of the app's schema, ``examples`` generated cases each (derandomized:
    the same cases every run); the failures, one line each (an operation stops at its first)."""
    from hypothesis import given

    api = schemathesis.openapi.from_asgi("/openapi.json", app)
    failures: list[str] = []
    operations = [result.ok() for result in api.get_all_operations()]
    declared = sum(len(methods) for methods in app.openapi()["paths"].values())
    assert len(operations) == declared > 20, "an operation of the schema is not fuzzed"
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
        )
        def run(case: Any) -> None:
            case.call_and_validate(checks=CHECKS)

        try:
            run()
        except Exception as exc:  # a check's failure, with the case that made it
            failures.append(f"{operation.label}: {_said(exc)}")
    return failures


def _said(exc: BaseException) -> str:
    """What a failure says, its sub-exceptions' messages included, on one line."""
    parts = [f"{type(exc).__name__}: {exc}"]
    parts += [_said(sub) for sub in getattr(exc, "exceptions", ())]
    return " | ".join(" ".join(p.split()) for p in parts)[:1500]


def test_every_operation(app: Any) -> None:
    failures = _fuzz(app, EXAMPLES)
    assert failures == [], "\n".join(failures)


@pytest.mark.long
def test_every_operation_long(app: Any) -> None:
    failures = _fuzz(app, 200)
    assert failures == [], "\n".join(failures)
