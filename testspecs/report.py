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
    """Read our JSON report, or a JUnit XML file written with the plugin's properties."""
    if str(path).endswith(".xml"):
        return read_junit(path)
    data: Any = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or data.get("version") != REPORT_VERSION:
        raise ValueError(f"{path}: not a testspecs report (version {REPORT_VERSION})")
    fields = set(TestRecord.__dataclass_fields__)
    return [TestRecord(**{k: v for k, v in t.items() if k in fields}) for t in data["tests"]]


def read_junit(path: str | Path) -> list[TestRecord]:
    """Records from JUnit XML; the spec_* properties say the mode (xfail passes are XPASS)."""
    import xml.etree.ElementTree as ET

    out = []
    for case in ET.parse(path).getroot().iter("testcase"):
        props = {p.get("name"): p.get("value") or "" for p in case.iter("property")}
        mode = props.get("spec_mode") or None
        outcome = "passed"
        message: str | None = None
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed" if child.tag == "failure" else "error"
                first = (child.get("message") or "").strip().splitlines()
                message = first[0] if first else None
            elif child.tag == "skipped":
                xfail = (child.get("type") or "") == "pytest.xfail"
                outcome = "xfailed" if xfail else "skipped"
        if mode in ("xfail", "xfail_strict") and outcome == "passed":
            outcome = "xpassed"
        classname = case.get("classname") or ""
        module, _, cls = classname.rpartition(".")
        test_file = module.replace(".", "/") + ".py" if module else None
        tags = props.get("spec_tags")
        out.append(
            TestRecord(
                nodeid=f"{test_file}::{cls}::{case.get('name')}",
                outcome=outcome,
                mode=mode,
                tags=tags.split(",") if tags else [],
                op=props.get("spec_op") or None,
                dtype=props.get("spec_dtype") or None,
                base=props.get("spec_base") or None,
                test_file=test_file,
                entry=props.get("spec_entry") or None,
                rule=props.get("spec_rule") or None,
                reason=props.get("spec_reason") or None,
                message=message,
                duration=float(case.get("time") or 0.0),
            )
        )
    return out
