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
    for section in ("## Two commands", "## A five-minute tour", "## Architecture",
                    "## Against Redis and PostgreSQL", "## Against a real PyTorch checkout",
                    "## Benchmarks"):  # fmt: skip
        assert section in readme, section
    assert len(readme.splitlines()) < 250, "the README grows: move reference material to docs/"
