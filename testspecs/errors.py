"""Spec problems with their place in the source, and the one exception type the loader raises."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def format_path(path: Sequence[str | int]) -> str:
    """Render a key path as ``test_suite_config.files[0].tests[2].mode``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out or "<root>"


@dataclass(frozen=True)
class SourceLoc:
    """A place in a spec file: 1-based line and column."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class SpecIssue:
    """One problem found in a spec: where, which key path, and what."""

    loc: SourceLoc
    path: tuple[str | int, ...]
    message: str
    severity: str = "error"  # "error" or "warning"

    def __str__(self) -> str:
        prefix = "" if self.severity == "error" else "warning: "
        return f"{self.loc}: {prefix}{format_path(self.path)}: {self.message}"

    def sort_key(self) -> tuple[str, int, int, str]:
        return (self.loc.file, self.loc.line, self.loc.column, self.message)


class SpecError(Exception):
    """Raised for any invalid spec; carries every issue found, not just the first."""

    def __init__(self, issues: Iterable[SpecIssue]) -> None:
        self.issues: list[SpecIssue] = sorted(issues, key=SpecIssue.sort_key)
        super().__init__("\n".join(str(i) for i in self.issues) or "invalid spec")

    @property
    def messages(self) -> list[str]:
        return [str(i) for i in self.issues]
