"""Run a set of inventory variants and check each outcome against its spec decision.

Used to verify the inventory end to end (a random sample of the bundled suites must run green or
as the specs declare). Each test file runs in its own pytest process, the way upstream runs test
files and the way the inventory was collected, with the backend's plugin and the testspecs plugin;
outcomes come from the testspecs JSON report.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from selector.inventory import Inventory, Variant
from selector.inventory_sources import PROJECT_ROOT, get_backend

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
    timeout: float = 1800,
) -> list[VariantOutcome]:
    be = get_backend(backend)
    by_file: dict[str, list[Variant]] = defaultdict(list)
    for v in variants:
        by_file[v.file].append(v)
    spec_args = [a for p in specs for a in ("--spec", str(Path(p).resolve()))]
    results: list[VariantOutcome] = []
    for _file, group in sorted(by_file.items()):
        with tempfile.TemporaryDirectory(prefix="relay-sample-") as tmp:
            report = Path(tmp) / "report.json"
            cmd = [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider"]
            cmd += ["-p", "no:warnings", "--rootdir", str(root)]
            for plugin in be.plugins:
                cmd += ["-p", plugin]
            cmd += ["-p", "testspecs.pytest_plugin", *spec_args, "--spec-report", str(report)]
            if not spec_args:  # the plugin only writes its report when a spec is given
                cmd += ["--junitxml", str(Path(tmp) / "junit.xml")]
            cmd += [v.test_id for v in group]
            proc = subprocess.run(
                cmd,
                cwd=root,
                env={**os.environ, **be.env},
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            outcomes = _read_outcomes(report, Path(tmp) / "junit.xml")
            for v in group:
                outcome, message = outcomes.get(v.test_id, ("missing", proc.stdout[-500:]))
                results.append(VariantOutcome(v.test_id, v.decision, outcome, message))
    return results


def _read_outcomes(report: Path, junit: Path) -> dict[str, tuple[str, str | None]]:
    if report.exists():
        data = json.loads(report.read_text())
        return {t["nodeid"]: (t["outcome"], t.get("message")) for t in data["tests"]}
    if not junit.exists():
        return {}
    import xml.etree.ElementTree as ET

    out: dict[str, tuple[str, str | None]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        file = case.get("file") or ""
        classname = (case.get("classname") or "").rsplit(".", 1)[-1]
        test_id = f"{file}::{classname}::{case.get('name')}"
        outcome, message = "passed", None
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, message = "failed", child.get("message")
            elif child.tag == "skipped":
                xfail = child.get("type") == "pytest.xfail"
                outcome, message = ("xfailed" if xfail else "skipped"), child.get("message")
        out[test_id] = (outcome, message)
    return out
