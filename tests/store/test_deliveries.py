"""store.deliveries against SQLite and PostgreSQL: values a column cannot hold never reach the
database (PostgreSQL refuses them: INTEGER overflow, varchar width, NUL); the delivery is stored
rejected with the reason instead."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from store import deliveries
from store.db import session_scope
from store.deliveries import DeliveryCreate, Stored
from store.models import Delivery


def _data(**overrides: Any) -> DeliveryCreate:
    base: dict[str, Any] = {
        "delivery_id": "d-1",
        "event": "pull_request",
        "action": "opened",
        "repo": "pytorch/pytorch",
        "raw_body": b"{}",
        "pr_number": 7,
        "head_sha": "a" * 40,
        "normalized": {"event": "pull_request"},
    }
    return DeliveryCreate(**{**base, **overrides})


@pytest.mark.parametrize(
    ("overrides", "cleared", "reason"),
    [
        (
            {"pr_number": 2**80},
            "pr_number",
            "pr_number 1208925819614629174706176 is out of range (0 to 2147483647)",
        ),
        (
            {"head_sha": "f" * 65},
            "head_sha",
            "head_sha is not a string of at most 64 characters of UTF-8 without NUL",
        ),
        (
            {"action": "x\x00"},
            "action",
            "action is not a string of at most 50 characters of UTF-8 without NUL",
        ),
        (
            {"upstream_delivery_id": "u" * 101},
            "upstream_delivery_id",
            "upstream_delivery_id is not a string of at most 100 characters of UTF-8 without NUL",
        ),
    ],
)
def test_values_out_of_range_are_cleared_and_the_delivery_rejected(
    database_url: str, overrides: dict[str, Any], cleared: str, reason: str
) -> None:
    with session_scope(database_url) as session:
        outcome, pk = deliveries.store(session, data=_data(**overrides))
        assert outcome is Stored.NEW
        row = session.get(Delivery, pk)
        assert row is not None
        assert (row.state, row.last_error, row.normalized) == ("rejected", reason, None)
        assert getattr(row, cleared) is None
        assert row.raw_body == b"{}"  # nothing is lost
        assert row.processed_at is not None
        # a rejected delivery is never claimed for processing
        assert not deliveries.claim(session, pk=pk)


def test_a_fitting_delivery_is_received(database_url: str) -> None:
    with session_scope(database_url) as session:
        outcome, pk = deliveries.store(session, data=_data())
        assert outcome is Stored.NEW
        row = session.scalar(select(Delivery).where(Delivery.id == pk))
        assert row is not None and (row.state, row.last_error, row.pr_number) == (
            "received",
            None,
            7,
        )


def test_the_identity_of_a_delivery_must_fit(database_url: str) -> None:
    with session_scope(database_url) as session, pytest.raises(ValueError, match="delivery_id"):
        deliveries.store(session, data=_data(delivery_id="d" * 101))
