"""Inventory of the bundled conformance suites on spyre with the backend's specs: cold and warm.

Baseline (same run): the cold build, which collects every suite file in a pytest subprocess
(one per file) into an empty cache. Compared with it: the warm build (same key: read from the
cache), and a spec change (same collection, decisions re-resolved through testspecs). Each row
gives seconds and the ratio to the cold build.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from benchmarks.report import Report
from inventory.build import build_inventory
from inventory.sources import PROJECT_ROOT, BundledSuites

SPECS = PROJECT_ROOT / "backends" / "spyre" / "specs"


def _timed(fn):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def run(report: Report) -> None:
    cache = Path(tempfile.mkdtemp(prefix="bench-inventory-"))
    try:
        source = BundledSuites()
        specs = [SPECS]

        def build(spec_paths):  # type: ignore[no-untyped-def]
            return build_inventory(source, backend="spyre", specs=spec_paths, cache_dir=cache)

        cold, cold_s = _timed(lambda: build(specs))
        warm, warm_s = _timed(lambda: build(specs))
        if not warm.cached:
            # the backend's sources changed between the two builds (the key moved): the second
            # build was a cold one; measure warm against it
            cold, cold_s = warm, warm_s
            warm, warm_s = _timed(lambda: build(specs))
        changed_dir = cache / "changed-spec"
        changed_dir.mkdir()
        for path in SPECS.glob("*.yaml"):
            text = path.read_text()
            (changed_dir / path.name).write_text(text + "\n# changed\n")
        changed, changed_s = _timed(lambda: build([changed_dir]))
        if not (warm.cached and changed.cached):
            raise RuntimeError("the inventory key kept changing during the benchmark")
        n = len(cold.variants)
        runnable = len(cold.runnable())
        table = report.table(
            "Inventory of the bundled suites (spyre, backends/spyre/specs)",
            ["build", "seconds", "ratio to cold", "variants"],
            note=(
                f"{n} variants, {runnable} runnable under the specs; cold = pytest collection "
                f"of {len(source.targets())} suite files, one subprocess each, into an empty cache"
            ),
        )
        table.rows.append(["cold (collect + resolve)", f"{cold_s:.1f}", "1.00", str(n)])
        table.rows.append(
            ["warm (same key, from cache)", f"{warm_s:.2f}", f"{warm_s / cold_s:.3f}", str(n)]
        )
        table.rows.append(
            [
                "spec changed (re-resolve only)",
                f"{changed_s:.2f}",
                f"{changed_s / cold_s:.3f}",
                str(len(changed.variants)),
            ]
        )
    finally:
        shutil.rmtree(cache, ignore_errors=True)
