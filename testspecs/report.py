"""The JSON run report written by the pytest plugin and read by ``specs update``.

One record per test: its id, outcome (passed, failed, xfailed, xpassed, skipped, error), the spec's
mode, tags, op, dtype, base name and the deciding entry.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPORT_VERSION = 1


@dataclass
class TestRecord:
    __test__ = False

    nodeid: str
    outcome: str
    mode: str | None = None
    tags: list[str] = field(default_factory=list)
    op: str | None = None
    dtype: str | None = None
    base: str | None = None
    test_file: str | None = None
    entry: str | None = None
    rule: str | None = None
    reason: str | None = None
    message: str | None = None
    duration: float = 0.0


def write_report(path: str | Path, records: list[TestRecord]) -> None:
    body = {"version": REPORT_VERSION, "tests": [asdict(r) for r in records]}
    Path(path).write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")


def read_report(path: str | Path) -> list[TestRecord]:
    data: Any = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or data.get("version") != REPORT_VERSION:
        raise ValueError(f"{path}: not a testspecs report (version {REPORT_VERSION})")
    fields = set(TestRecord.__dataclass_fields__)
    return [TestRecord(**{k: v for k, v in t.items() if k in fields}) for t in data["tests"]]
