"""Run the benchmark modules and print their tables (see benchmarks/__init__.py)."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time
from pathlib import Path

from benchmarks.report import Report
from config.settings import get_settings


def main(argv: list[str]) -> int:
    here = Path(__file__).parent
    names = sorted(m.name for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("bench_"))
    wanted = [a if a.startswith("bench_") else f"bench_{a}" for a in argv]
    if wanted:
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(names)}")
            return 2
        names = wanted
    report = Report()
    for name in names:
        start = time.perf_counter()
        print(f"== {name}", flush=True)
        module = importlib.import_module(f"benchmarks.{name}")
        before = len(report.tables)
        module.run(report)
        for table in report.tables[before:]:
            print(table.markdown(), flush=True)
        print(f"({name} took {time.perf_counter() - start:.1f} s)\n", flush=True)
    out = get_settings().var_dir / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / "latest.md").write_text(report.markdown())
    print(f"tables written to {out / 'latest.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
