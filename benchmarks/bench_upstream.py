"""Change facts for the real 2.13 -> 2.14 release wheels: cold, warm, and against listing.

Baseline (same run): opening both wheels and listing their zip members. Then: resolving the
two revisions through pip (wheels already cached), the changed-file list from the zip
directories, the full change facts computed cold (empty facts cache) and warm (read back from
the facts cache). The 2.14 wheel is downloaded into the user cache first if it is missing;
that one-time download is not part of any timed row.
"""

from __future__ import annotations

import tempfile
import time
import zipfile
from collections.abc import Callable
from typing import TypeVar

from benchmarks.report import Report
from upstream import ReleasedWheels, default_cache_dir
from upstream.changes import compute_change_facts

T = TypeVar("T")


def _timed(fn: Callable[[], T]) -> tuple[float, T]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def run(report: Report) -> None:
    wheels = ReleasedWheels(default_cache_dir())
    base, head = wheels.resolve("2.13"), wheels.resolve("2.14")  # downloads once if missing

    def list_members() -> int:
        total = 0
        for rev in (base, head):
            with zipfile.ZipFile(rev.location) as zf:
                total += len(zf.infolist())
        return total

    baseline, members = min((_timed(list_members) for _ in range(3)), key=lambda r: r[0])
    t_resolve, _ = _timed(lambda: (wheels.resolve("2.13"), wheels.resolve("2.14")))
    fresh = ReleasedWheels(default_cache_dir())
    t_files, files = _timed(lambda: fresh.changed_files(fresh.resolve(base.resolved),
                                                        fresh.resolve(head.resolved)))
    with tempfile.TemporaryDirectory() as cache:
        t_cold, facts = _timed(lambda: compute_change_facts(wheels, base, head, cache_dir=cache))
        t_warm, again = _timed(lambda: compute_change_facts(wheels, base, head, cache_dir=cache))
    assert again.counts() == facts.counts()
    c = facts.counts()
    table = report.table(
        f"Change facts, torch {base.resolved} -> {head.resolved} (wheels)",
        ["step", "seconds", "x baseline"],
        note=(f"Baseline: list the zip members of both wheels ({members} members), "
              f"{baseline * 1000:.0f} ms. Facts: {c['files']} files, {c['symbols']} symbols, "
              f"{c['native_functions']} native_functions and {c['derivatives']} derivatives "
              f"entries, {c['opinfos']} OpInfo and {c['moduleinfos']} ModuleInfo entries. "
              f"Cold / warm = {t_cold / t_warm:.0f}x."),
    )
    for step, seconds in (
        ("list zip members (baseline)", baseline),
        ("resolve 2.13 and 2.14 through pip (cached wheels)", t_resolve),
        (f"changed files from zip directories ({len(files)})", t_files),
        ("change facts, cold (empty facts cache)", t_cold),
        ("change facts, warm (facts cache)", t_warm),
    ):
        table.rows.append([step, f"{seconds:.3f}", f"{seconds / baseline:.1f}"])
