"""What a completed release-replay job changed, read from a running relay's API: every result
whose outcome is not the one the base release predicts (a gating failure, an expected failure
that passed), and every variant new at the head release (the base cannot even collect it), each
with the change units that selected it (the selection's reasons).

The base's outcome is what the spec promoted from the base's runs says: ``mandatory_success``
passed there, ``xfail`` failed there; a variant without history runs as ``run``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

#: outcomes that differ from the base's (a gating failure, or an expected failure that passed)
CHANGED = ("failed", "error", "crashed", "timeout", "xpassed")
NEW_AT_HEAD = "new-at-head"
REASONS_SHOWN = 3

Get = Callable[..., Any]


def _pages(get: Get, path: str, **params: Any) -> Iterator[dict[str, Any]]:
    """Every item of a list endpoint, page by page (keyset cursor)."""
    cursor = None
    while True:
        page = get(path, limit=5000, **params, **({"cursor": cursor} if cursor else {})) or {}
        yield from page.get("items") or []
        cursor = page.get("next_cursor")
        if not cursor:
            return


def _short(test_id: str) -> str:
    """``Class::test`` of a node id (a test id and its wrapper's node id share it)."""
    return "::".join(test_id.split("::")[-2:])


def changed_outcomes(get: Get, job_id: int) -> dict[str, list[dict[str, Any]]]:
    """``{"changed": [...], "new": [...]}``: each an item ``{test_id, outcome, message,
    reasons}`` (reasons: the selection's "why" lines naming the change units)."""
    selected = {}
    for item in _pages(get, f"/api/v1/jobs/{job_id}/selection/tests", kind="selected"):
        selected[item["test_id"]] = item
        selected.setdefault(_short(item["test_id"]), item)
    changed: list[dict[str, Any]] = []
    new: list[dict[str, Any]] = []
    for result in _pages(get, f"/api/v1/jobs/{job_id}/results"):
        chosen = selected.get(result["test_id"]) or selected.get(_short(result["test_id"])) or {}
        row = {
            "test_id": result["test_id"],
            "outcome": result["outcome"],
            "message": result.get("message") or "",
            "reasons": list(chosen.get("reasons") or []),
        }
        if chosen.get("flag") == NEW_AT_HEAD:
            new.append(row)
        elif result["outcome"] in CHANGED:
            changed.append(row)
    return {"changed": changed, "new": new}


def report_lines(found: dict[str, list[dict[str, Any]]], head: str) -> list[str]:
    """The changed outcomes for a person: one line a variant, failures with their message and
    the units that selected them."""
    changed, new = found["changed"], found["new"]
    lines = [f"changed outcomes under torch {head}: {len(changed)} of the selected variants"]
    lines += [line for row in changed for line in _row(row)]
    counts: dict[str, int] = {}
    for row in new:
        counts[row["outcome"]] = counts.get(row["outcome"], 0) + 1
    tally = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
    lines.append(
        f"new at {head} (not collectable under the base): {len(new)} variant(s) ran"
        + (f": {tally}" if tally else "")
    )
    lines += [line for row in new for line in _row(row)]
    return lines


def _row(row: dict[str, Any]) -> list[str]:
    out = [f"  {row['outcome']:<8} {row['test_id']}"]
    if row["outcome"] in CHANGED:
        if row["message"]:
            out.append(f"           message: {row['message'].splitlines()[0][:200]}")
        reasons = row["reasons"]
        shown = "; ".join(reasons[:REASONS_SHOWN]) or "(no reason stored)"
        more = f" (+{len(reasons) - REASONS_SHOWN} more)" if len(reasons) > REASONS_SHOWN else ""
        out.append(f"           selected by: {shown}{more}")
    return out
