"""The values every edge accepts, checked once where they come in (a webhook, a callback, the
HUD's ingest, a query parameter, a path id) and passed along typed.

Text is valid UTF-8 without NUL (a lone surrogate, which JSON's ``\\ud800`` escape can carry,
cannot be encoded for a column or a log line; PostgreSQL refuses NUL in text); an integer is
within its column (INTEGER for counts and numbers, BIGINT for ids); a moment is within the years
the store and date arithmetic can hold. The constrained types below are Pydantic's, so FastAPI
parameters and the wire models use the same rule; :func:`text_problem` and
:func:`json_problem` say the same for values that are not parsed by a model.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, Field

#: PostgreSQL's INTEGER (a count, a PR number)
MAX_INT = 2**31 - 1
#: PostgreSQL's BIGINT and SQLite's INTEGER (an id)
MAX_ID = 2**63 - 1
#: the moments a query may name: date arithmetic over weeks on either side stays in range
MIN_MOMENT = datetime(1970, 1, 1, tzinfo=UTC)
MAX_MOMENT = datetime(9000, 1, 1, tzinfo=UTC)
#: the one-line reason of text that is not valid UTF-8 without NUL
NOT_TEXT = "is not valid UTF-8 without NUL"


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot reach a column or a log line (None: it can)."""
    if "\x00" in value:
        return "contains a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate (not valid UTF-8)"
    return None


def is_text(value: object) -> bool:
    """A string that is valid UTF-8 without NUL."""
    return isinstance(value, str) and text_problem(value) is None


def check_text(value: str) -> str:
    problem = text_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def check_moment(value: datetime) -> datetime:
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if not MIN_MOMENT <= aware <= MAX_MOMENT:
        raise ValueError(f"out of range ({MIN_MOMENT:%Y-%m-%d} to {MAX_MOMENT:%Y-%m-%d})")
    return value


#: a string that is valid UTF-8 without NUL
Text = Annotated[str, AfterValidator(check_text)]
#: an integer of an INTEGER column that counts (0 and up)
Count = Annotated[int, Field(ge=0, le=MAX_INT)]
#: a row's id in a path or a body (1 and up, within BIGINT)
Id = Annotated[int, Field(ge=1, le=MAX_ID)]
#: a date-time within range
Moment = Annotated[datetime, AfterValidator(check_moment)]


def openapi_body(*headers: tuple[str, str], form: bool = False) -> dict[str, Any]:
    """The OpenAPI of an endpoint that reads its body itself (``openapi_extra``): a JSON object
    (and, with ``form``, the form-encoded ``payload=<JSON>`` GitHub may send instead) and the
    ``(name, description)`` headers it reads."""
    content: dict[str, Any] = {"application/json": {"schema": {"type": "object"}}}
    if form:
        content["application/x-www-form-urlencoded"] = {
            "schema": {"type": "object", "properties": {"payload": {"type": "string"}}}
        }
    return {
        "requestBody": {"required": True, "content": content},
        "parameters": [
            {
                "name": name,
                "in": "header",
                "required": False,
                "description": what,
                "schema": {"type": "string"},
            }
            for name, what in headers
        ],
    }


def json_problem(value: Any, *, max_int: int = MAX_ID) -> str | None:
    """Where the parsed JSON ``value`` holds a string (or key) that is not text, or an integer
    past ``max_int``, and why: ``workflow.job_name contains a NUL character`` (None: nowhere).
    Iterative (a deep value cannot exhaust the stack)."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item)
            if problem is not None:
                return f"{where or 'the value'} {problem}"
        elif isinstance(item, int) and not isinstance(item, bool):
            if not -max_int - 1 <= item <= max_int:
                return f"{where or 'the value'} is out of range ({-max_int - 1} to {max_int})"
        elif isinstance(item, dict):
            for key, child in item.items():
                problem = text_problem(key) if isinstance(key, str) else None
                if problem is not None:
                    return f"a key of {where or 'the object'} {problem}"
                stack.append((f"{where}.{key}" if where else str(key), child))
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", child) for i, child in enumerate(item))
    return None


def nonfinite_at(value: Any) -> str | None:
    """Where the parsed JSON ``value`` holds NaN or an infinity (which Python's parser takes and
    JSON, so a JSON column, cannot hold): ``pull_request.title`` (None: nowhere). Iterative."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return where or "the value"
        if isinstance(item, dict):
            stack.extend((f"{where}.{k}" if where else str(k), v) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", child) for i, child in enumerate(item))
    return None
