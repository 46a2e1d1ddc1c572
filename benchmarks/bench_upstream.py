"""Change facts for the real 2.13 -> 2.14 release wheels: cold, warm, and against listing.

Baseline (same run): opening both wheels and listing their zip members. Then: resolving the
two revisions through pip (wheels already cached), the changed-file list from the zip
directories, the full change facts computed cold (empty facts cache) and warm (read back from
the facts cache). Every row, the baseline included, is the fastest of ``BENCH_UPSTREAM_RUNS``
runs (default 3; each cold run in an empty facts cache of its own). The 2.14 wheel is downloaded into the user cache first if it is missing;
that one-time download is not part of any timed row.
"""

from __future__ import annotations

import os
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from benchmarks.report import Report
from upstream import FileChange, ReleasedWheels, default_cache_dir
from upstream.changes import ChangeFacts, compute_change_facts

T = TypeVar("T")

#: every row, the baseline included, is the fastest of this many runs
RUNS = int(os.environ.get("BENCH_UPSTREAM_RUNS", "3"))


def _timed(fn: Callable[[], T]) -> tuple[float, T]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def _best(fn: Callable[[], T]) -> tuple[float, T]:
    """The fastest of RUNS runs of ``fn`` and its value: each row is measured alike."""
    return min((_timed(fn) for _ in range(RUNS)), key=lambda r: r[0])


def run(report: Report) -> None:
    wheels = ReleasedWheels(default_cache_dir())
    base, head = wheels.resolve("2.13"), wheels.resolve("2.14")  # downloads once if missing

    def list_members() -> int:
        total = 0
        for rev in (base, head):
            with zipfile.ZipFile(rev.location) as zf:
                total += len(zf.infolist())
        return total

    def changed_files() -> list[FileChange]:
        fresh = ReleasedWheels(default_cache_dir())  # nothing remembered from an earlier run
        return fresh.changed_files(fresh.resolve(base.resolved), fresh.resolve(head.resolved))

    baseline, members = _best(list_members)
    t_resolve, _ = _best(lambda: (wheels.resolve("2.13"), wheels.resolve("2.14")))
    t_files, files = _best(changed_files)
    with tempfile.TemporaryDirectory() as tmp:
        runs = iter(range(RUNS))

        def cold() -> ChangeFacts:  # each run in an empty facts cache of its own
            folder = Path(tmp) / f"cold-{next(runs)}"
            return compute_change_facts(wheels, base, head, cache_dir=folder)

        t_cold, facts = _best(cold)
        warm_cache = Path(tmp) / "cold-0"
        t_warm, again = _best(
            lambda: compute_change_facts(wheels, base, head, cache_dir=warm_cache)
        )
    assert again.counts() == facts.counts()
    c = facts.counts()
    table = report.table(
        f"Change facts, torch {base.resolved} -> {head.resolved} (wheels)",
        ["step", "seconds", "x baseline"],
        note=(
            f"Every row is the fastest of {RUNS} runs, the baseline too. "
            f"Baseline: list the zip members of both wheels ({members} members), "
            f"{baseline * 1000:.0f} ms. Facts: {c['files']} files, {c['symbols']} symbols, "
            f"{c['native_functions']} native_functions and {c['derivatives']} derivatives "
            f"entries, {c['opinfos']} OpInfo and {c['moduleinfos']} ModuleInfo entries. "
            f"Cold / warm = {t_cold / t_warm:.0f}x."
        ),
    )
    for step, seconds in (
        ("list zip members (baseline)", baseline),
        ("resolve 2.13 and 2.14 through pip (cached wheels)", t_resolve),
        (f"changed files from zip directories ({len(files)})", t_files),
        ("change facts, cold (empty facts cache)", t_cold),
        ("change facts, warm (facts cache)", t_warm),
    ):
        table.rows.append([step, f"{seconds:.3f}", f"{seconds / baseline:.1f}"])
