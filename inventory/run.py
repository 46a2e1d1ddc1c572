"""Run a set of inventory variants and check each outcome against its spec decision.

Used to verify the inventory end to end (a random sample of the bundled suites must run green or
as the specs declare). Each test file runs in its own pytest process, the way upstream runs test
files and the way the inventory was collected, with the backend's plugin and the testspecs plugin
(which rewrites outcomes by spec mode); outcomes are recorded by inventory.collect_plugin.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from backends import get_backend
from backends.base import PROJECT_ROOT, fresh_pytest
from inventory.build import Inventory
from selector.model import Variant

# What each spec mode accepts. "skip" variants are never generated, so never run.
ACCEPTED: dict[str | None, frozenset[str]] = {
    None: frozenset({"passed", "skipped"}),  # no spec: green
    "mandatory_success": frozenset({"passed", "skipped"}),
    "xfail": frozenset({"passed", "skipped", "xfailed", "xpassed"}),
    "xfail_strict": frozenset({"xfailed"}),
}


@dataclass(frozen=True)
class VariantOutcome:
    test_id: str
    decision: str | None
    outcome: str  # passed failed error skipped xfailed xpassed missing
    message: str | None

    @property
    def as_declared(self) -> bool:
        return self.outcome in ACCEPTED.get(self.decision, frozenset())


def sample(inventory: Inventory, n: int, *, seed: int) -> list[Variant]:
    """``n`` variants drawn at random (seeded) among those the specs let run."""
    pool = sorted(inventory.runnable(), key=lambda v: v.test_id)
    return random.Random(seed).sample(pool, min(n, len(pool)))


def run_variants(
    variants: Sequence[Variant],
    *,
    root: Path = PROJECT_ROOT,
    backend: str = "spyre",
    specs: Iterable[Path] = (),
    per_file: bool = True,
    timeout: float = 1800,
) -> list[VariantOutcome]:
    """Run ``variants``; one pytest process per test file unless ``per_file`` is False."""
    be = get_backend(backend)
    groups: dict[str, list[Variant]] = defaultdict(list)
    for v in variants:
        groups[(v.via or v.file) if per_file else ""].append(v)
    results: list[VariantOutcome] = []
    for _file, group in sorted(groups.items()):
        with tempfile.TemporaryDirectory(prefix="relay-sample-") as tmp:
            report = Path(tmp) / "outcomes.jsonl"
            args = be.pytest_args(
                plugins=["inventory.collect_plugin"],
                options=["--inventory-outcomes", str(report)],
                specs=list(specs),
                rootdir=root,
                targets=[v.node_id for v in group],
            )
            proc = subprocess.run(
                fresh_pytest(args),
                cwd=root,
                env={**os.environ, **be.env},
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            outcomes = _read_outcomes(report)
            for v in group:
                found = outcomes.get(v.test_id) or outcomes.get(_tail(v.node_id))
                outcome, message = found or ("missing", proc.stdout[-500:])
                results.append(VariantOutcome(v.test_id, v.decision, outcome, message))
    return results


def _tail(test_id: str) -> str:
    return "::".join(test_id.split("::")[-2:])


def _read_outcomes(report: Path) -> dict[str, tuple[str, str | None]]:
    if not report.exists():
        return {}
    rows = [json.loads(line) for line in report.read_text(encoding="utf-8").splitlines()]
    out = {r["test_id"]: (r["outcome"], r.get("message")) for r in rows}
    # wrapped tests are reported under the wrapper's path: also key them by Class::method
    out.update({_tail(r["test_id"]): (r["outcome"], r.get("message")) for r in rows})
    return out
