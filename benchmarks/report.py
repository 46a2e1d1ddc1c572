"""A tiny Markdown table collector shared by the benchmark modules."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]] = field(default_factory=list)
    note: str = ""

    def markdown(self) -> str:
        lines = [f"### {self.title}", ""]
        if self.note:
            lines += [self.note, ""]
        lines.append("| " + " | ".join(self.headers) + " |")
        lines.append("|" + "|".join("---" for _ in self.headers) + "|")
        lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in self.rows]
        return "\n".join(lines) + "\n"


@dataclass
class Report:
    tables: list[Table] = field(default_factory=list)

    def table(self, title: str, headers: list[str], note: str = "") -> Table:
        t = Table(title=title, headers=headers, note=note)
        self.tables.append(t)
        return t

    def markdown(self) -> str:
        return "\n".join(t.markdown() for t in self.tables)
