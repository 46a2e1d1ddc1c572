"""The README is a newcomer's page; the reference lives in docs/. Every docs page is linked from
the README, and every relative link in either points at a file (and heading) that exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\]\(([^)#\s]+\.md|[^)#\s]*)(?:#([^)\s]+))?\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces to '-'."""
    text = heading.strip().lstrip("#").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_anchor(line) for line in page.read_text().splitlines() if line.startswith("#")}


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_readme_links_every_docs_page() -> None:
    readme = (ROOT / "README.md").read_text()
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert pages, "docs/ has no pages"
    unlinked = [name for name in pages if f"](docs/{name})" not in readme]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"


def test_relative_links_resolve() -> None:
    broken = []
    for page in _pages():
        for target, anchor in LINK.findall(page.read_text()):
            if not target or target.startswith(("http://", "https://", "mailto:")):
                if anchor and not target and _anchor(anchor) not in _anchors(page):
                    broken.append(f"{page.name}: #{anchor}")
                continue
            path = (page.parent / target).resolve()
            if not path.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                broken.append(f"{page.name}: {target}#{anchor}")
    assert not broken, f"broken links: {broken}"


def test_readme_stays_a_newcomers_page() -> None:
    readme = (ROOT / "README.md").read_text()
    for section in (
        "## Two commands",
        "## A five-minute tour",
        "## Architecture",
        "## Against Redis and PostgreSQL",
        "## Against a real PyTorch checkout",
        "## Benchmarks",
    ):
        assert section in readme, section
    assert len(readme.splitlines()) < 250, "the README grows: move reference material to docs/"


# ----------------------------------------------------------------------------- README numbers

#: a number as the pages write it (``2,235.5``, ``0.013``, ``87.1``); not a piece of a name or a
#: commit (``p99``, ``a8a025f``), not the middle of a longer number
NUMBER = re.compile(r"(?<![\w.,])\d+(?:,\d{3})*(?:\.\d+)*(?![\d]|\.\d|,\d{3})")


def numbers(text: str) -> set[str]:
    """Every number of ``text``, thousands separators dropped."""
    return {n.replace(",", "") for n in NUMBER.findall(text)}


def _section(text: str, start: str, end: str) -> str:
    return text[text.index(start) : text.index(end, text.index(start))]


def _table_rows(text: str) -> list[str]:
    """The body rows of the Markdown tables in ``text`` (no header, no rule)."""
    headers = ("|---", "| selector |", "| benchmark |")
    lines = text.splitlines()
    return [line for line in lines if line.startswith("|") and not line.startswith(headers)]


def test_every_readme_benchmark_number_has_a_dated_entry_in_the_docs() -> None:
    """Each number of the README's benchmark table is copied from docs/benchmarks.md or, for
    the selector's evaluations, docs/selection.md, whose entries name the command, date and
    commit that measured it; the eval tables' numbers from docs/selection.md."""
    readme = (ROOT / "README.md").read_text()
    benchmarks = numbers((ROOT / "docs" / "benchmarks.md").read_text())
    selection = numbers((ROOT / "docs" / "selection.md").read_text())
    table = _table_rows(_section(readme, "## Benchmarks", "### Selector evaluation"))
    evals = _table_rows(_section(readme, "### Selector evaluation", "\n## "))
    assert len(table) > 15 and len(evals) >= 3  # the tables were found (the stored steps)
    missing = {
        row.split("|")[1].strip()[:60]: sorted(numbers(row) - benchmarks - selection)
        for row in table
        if numbers(row) - benchmarks - selection
    }
    assert missing == {}, "README benchmark numbers without a docs/benchmarks.md entry"
    missing = {
        row.split("|")[1].strip(): sorted(numbers(row) - selection)
        for row in evals
        if numbers(row) - selection
    }
    assert missing == {}, "README eval numbers without a docs/selection.md entry"


def test_the_number_check_reads_numbers_as_written() -> None:
    assert numbers("0.013 s, 2,235.5 runner-s, 87.1 % (27/31), 1.44x, p99 15-17 ms") == {
        "0.013",
        "2235.5",
        "87.1",
        "27",
        "31",
        "1.44",
        "15",
        "17",
    }
    assert numbers("commit a8a025f, torch 2.13.0, 500,000 variants") == {"2.13.0", "500000"}
    assert "2.97" not in numbers("3.49 s (was 2.972 s)") and "2.97" in numbers("2.97x")
