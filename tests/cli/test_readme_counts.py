"""The counts the README (and any page under docs/) quotes about the code, computed from the code:
the op table's statuses (what `relay device info` prints), how many worker processes `relay up`
starts, and the bundled universe `relay tests count` reports (by suite, ops and modules, dtypes).

The universe's headline numbers need the whole bundled inventory (minutes of collection): that
check is `slow`; the `errors` suite alone, collected the same way, keeps its number true in
`make test`.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest

WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}


@pytest.fixture(scope="module")
def pages(repo_root: Path) -> str:
    """The README and the docs pages, as one text (whitespace folded: numbers wrap lines)."""
    files = [repo_root / "README.md", *sorted((repo_root / "docs").glob("*.md"))]
    return " ".join(" ".join(f.read_text().split()) for f in files if f.is_file())


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def test_op_table_counts_are_what_relay_device_info_prints(pages: str) -> None:
    from typer.testing import CliRunner

    from cli import build_app

    info = CliRunner().invoke(build_app(), ["device", "info", "--json"])
    assert info.exit_code == 0, info.output
    table = json.loads(info.output)["op_table"]
    quoted = re.findall(r"\((\d+) native, (\d+) fallback, (\d+) unsupported", pages)
    assert quoted, "the op table's counts are quoted somewhere"
    assert set(quoted) == {
        (str(table["native"]), str(table["fallback"]), str(table["unsupported"]))
    }


def test_worker_processes_are_the_ones_relay_up_starts(pages: str) -> None:
    from cli import serve

    started = len(serve.WORKER_QUEUES)
    assert "_start_workers(" in inspect.getsource(serve.up)
    assert "for name, queues in WORKER_QUEUES" in inspect.getsource(serve._start_workers)
    quoted = re.findall(r"\b(\w+) (?:real )?(?:Celery )?worker processes\b", pages)
    assert quoted, "the README says how many worker processes `relay up` starts"
    assert set(quoted) == {WORDS[started]}, (started, quoted)


def test_the_errors_suite_count_is_collected(pages: str, tmp_path: Path) -> None:
    from inventory.build import build_inventory
    from inventory.sources import BundledSuites

    inv = build_inventory(BundledSuites(("errors",)), backend="spyre", specs=[], cache_dir=tmp_path)
    assert inv.errors == []
    quoted = re.search(r"errors ([\d,]+); ([\d,]+) ops/modules", pages)
    assert quoted is not None
    assert _number(quoted.group(1)) == len(inv.select(suites=["errors"]))


@pytest.mark.slow
def test_the_universe_counts_are_collected(pages: str, tmp_path: Path) -> None:
    from backends import get_backend
    from inventory.build import build_inventory
    from inventory.sources import BundledSuites

    inv = build_inventory(
        BundledSuites(),
        backend="spyre",
        specs=list(get_backend("spyre").default_specs),
        cache_dir=tmp_path,
    )
    assert inv.errors == []
    line = re.search(
        r"reports ([\d,]+) spyre variants \(common ([\d,]+), out ([\d,]+), variants ([\d,]+), "
        r"gradients ([\d,]+), modules ([\d,]+), errors ([\d,]+); ([\d,]+) ops/modules, "
        r"([\d,]+) dtypes \(([\d,]+) variants take none\); ([\d,]+) run under the bundled spec, "
        r"([\d,]+) skipped\)",
        pages,
    )
    assert line is not None, "the universe's counts are quoted in the README's shape"
    by_suite = inv.count_by("suite")
    by_dtype = inv.count_by("dtype")
    targets = inv.count_by("op", [v for v in inv.variants if v.op]) + inv.count_by(
        "module", [v for v in inv.variants if v.module]
    )
    skipped = sum(1 for v in inv.variants if v.decision == "skip")
    assert [_number(n) for n in line.groups()] == [
        len(inv.variants),
        *(by_suite[s] for s in ("common", "out", "variants", "gradients", "modules", "errors")),
        len(targets),
        len([d for d in by_dtype if d != "-"]),
        by_dtype["-"],
        len(inv.variants) - skipped,
        skipped,
    ]
