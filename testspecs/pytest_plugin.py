"""pytest plugin applying YAML specs to device-generic tests: ``pytest -p testspecs.pytest_plugin --spec PATH``.

* At configure time (before any test module imports common_device_type) it points
  ``TORCH_TEST_DEVICES`` at :mod:`testspecs.device_base`, which extends the backend's device test
  base so that instantiation applies the spec (see :mod:`testspecs.apply`).
* Each instantiated test gets its mode as a mark (``xfail``, ``xfail_strict`` or
  ``mandatory_success``; CI gates with ``-m "not xfail"``), its tags as marks, and JUnit XML
  properties (mode, tags, op, dtype, deciding entry, rule, reason).
* Outcomes are rewritten in ``pytest_runtest_makereport`` (unittest-style tests ignore
  ``pytest.mark.xfail`` when run outside pytest): xfail fails -> XFAIL, passes -> XPASS;
  xfail_strict fails -> XFAIL, passes -> FAILED ("XPASS(strict)"). A test that upstream skips
  (``unittest.skip``, ``self.skipTest``, "Only runs on cuda") never ran: it stays SKIPPED with
  upstream's reason under every mode, since an expected failure describes only tests that ran.
* ``--spec-report PATH`` writes a JSON report with the same fields per test.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from testspecs.apply import DECISIONS, SpecConfig, activate
from testspecs.errors import SpecError
from testspecs.outcomes import fold
from testspecs.report import TestRecord, write_report
from testspecs.resolve import Decision

DEVICE_BASE_FILE = str(Path(__file__).with_name("device_base.py"))
_SPYRE_BASE = Path(__file__).resolve().parent.parent / "spyre_stack" / "testing" / "device_base.py"
_MODE_MARKS = {
    "mandatory_success": "mandatory_success: spec mode; must pass (gates)",
    "xfail_strict": "xfail_strict: spec mode; must fail, a pass fails the run (gates)",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("testspecs", "YAML test specs")
    group.addoption("--spec", action="append", default=[], help="spec file or folder (repeatable)")
    group.addoption("--spec-device", default="spyre", help="device token in variant names")
    group.addoption(
        "--spec-device-base",
        default=None,
        help="the backend's TORCH_TEST_DEVICES file whose TEST_CLASS the spec extends "
        "(default: spyre_stack/testing/device_base.py when present)",
    )
    group.addoption("--spec-report", default=None, help="write a JSON report here")


def _prepared(spec_config: SpecConfig) -> bool:
    """common_device_type was imported by a process that had set this very spec configuration in
    its environment first (a warm pool that forks test processes): its device test bases already
    include a spec-applying base for the same spec files and device."""
    cdt = sys.modules["torch.testing._internal.common_device_type"]
    for base in getattr(cdt, "device_type_test_bases", []):
        config = getattr(base, "spec_config", None)
        if (
            isinstance(config, SpecConfig)
            and sorted(config.spec_paths) == sorted(spec_config.spec_paths)
            and config.device == spec_config.device
        ):
            return True
    return False


@pytest.hookimpl(trylast=True)  # after the backend's own plugin set TORCH_TEST_DEVICES
def pytest_configure(config: pytest.Config) -> None:
    paths = config.getoption("spec")
    if not paths:
        return
    base = config.getoption("spec_device_base")
    if base is None and _SPYRE_BASE.is_file():
        base = str(_SPYRE_BASE)
    spec_config = SpecConfig(
        [str(Path(p).resolve()) for p in paths],
        device=config.getoption("spec_device"),
        backend_base=str(Path(base).resolve()) if base else None,
    )
    if "torch.testing._internal.common_device_type" in sys.modules and not _prepared(spec_config):
        raise pytest.UsageError(
            "testspecs: common_device_type was imported before the plugin could set "
            "TORCH_TEST_DEVICES; load it with -p testspecs.pytest_plugin"
        )
    try:
        compiled = spec_config.compiled
    except SpecError as e:
        raise pytest.UsageError(f"invalid spec:\n{e}") from None
    activate(spec_config)
    os.environ.update(spec_config.env())
    # Only our base: it extends the backend's own, which must not be instantiated a second time.
    os.environ["TORCH_TEST_DEVICES"] = DEVICE_BASE_FILE
    os.environ.setdefault("PYTORCH_TESTING_DEVICE_ONLY_FOR", "privateuse1")
    for line in _MODE_MARKS.values():
        config.addinivalue_line("markers", line)
    for tag in sorted({t for f in compiled.document.files for e in f.tests for t in e.tags}):
        config.addinivalue_line("markers", f"{tag}: spec tag")
    config.pluginmanager.register(
        SpecPlugin(config.getoption("spec_report")), "testspecs-spec-plugin"
    )


def decision_for(item: pytest.Item) -> Decision | None:
    cls = getattr(item, "cls", None)
    if cls is None:
        return None
    name = getattr(item, "originalname", None) or item.name
    return DECISIONS.get((cls.__module__, cls.__name__, name))


def _failure_line(text: str) -> str:
    """The most telling line of a failure: the first ``E ...`` line, else the last line."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    errors = [ln[1:].strip() for ln in lines if ln.startswith("E ")]
    return (errors[0] if errors else lines[-1])[:300]


class SpecPlugin:
    def __init__(self, report_path: str | None) -> None:
        self.report_path = report_path
        self.records: dict[str, TestRecord] = {}
        self.decisions: dict[str, Decision] = {}

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            d = decision_for(item)
            if d is None:
                continue
            self.decisions[item.nodeid] = d
            if d.mode == "xfail":
                item.add_marker(pytest.mark.xfail(reason=d.reason or "spec: xfail", strict=False))
            else:
                item.add_marker(getattr(pytest.mark, d.mode))
            for tag in d.tags:
                item.add_marker(getattr(pytest.mark, tag))
            item.user_properties += [
                ("spec_mode", d.mode),
                ("spec_tags", ",".join(d.tags)),
                ("spec_op", d.op or ""),
                ("spec_dtype", d.dtype or ""),
                ("spec_entry", str(d.entry) if d.entry else ""),
                ("spec_rule", d.rule),
                ("spec_base", d.base),
            ]
            if d.reason:
                item.user_properties.append(("spec_reason", d.reason))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[Any]) -> Any:
        outcome = yield
        rep = outcome.get_result()
        d = decision_for(item)
        if d is None or d.mode not in ("xfail", "xfail_strict") or hasattr(rep, "wasxfail"):
            return
        reason = d.reason or f"spec: {d.mode}"
        if rep.skipped:
            return  # the test never ran: upstream's skip and its reason stand
        if rep.failed and rep.when in ("setup", "call"):
            rep.outcome = "skipped"
            rep.wasxfail = reason
        elif rep.passed and rep.when == "call":
            if d.mode == "xfail_strict":
                rep.outcome = "failed"
                rep.longrepr = f"[XPASS(strict)] {reason}"
            else:
                rep.wasxfail = reason

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "setup" and report.passed:
            return
        if report.when == "teardown" and not report.failed:
            return
        props = {str(k): str(v) for k, v in report.user_properties}
        message = None
        if (
            report.skipped
            and not hasattr(report, "wasxfail")
            and isinstance(report.longrepr, tuple)
        ):
            message = str(report.longrepr[2]).removeprefix("Skipped: ")[:300]  # upstream's reason
        elif (report.failed or hasattr(report, "wasxfail")) and report.longreprtext.strip():
            message = _failure_line(report.longreprtext)
        rec = self.records.get(report.nodeid)
        if rec is None:
            test_file = report.nodeid.partition("::")[0]
            rec = TestRecord(nodeid=report.nodeid, outcome=fold(None, report), test_file=test_file)
            d = self.decisions.get(report.nodeid)
            if d is not None:
                # the upstream file the spec matched (a wrapper module runs another file's tests)
                first = d.variant.split("::", 1)[0]
                rec.test_file = first if first.endswith(".py") else rec.test_file
                rec.base, rec.rule, rec.reason = d.base, d.rule, d.reason
                rec.entry = str(d.entry) if d.entry else None
            self.records[report.nodeid] = rec
        else:
            rec.outcome = fold(rec.outcome, report)
        rec.mode = props.get("spec_mode") or rec.mode
        tags = props.get("spec_tags")
        rec.tags = tags.split(",") if tags else rec.tags
        rec.op = props.get("spec_op") or rec.op
        rec.dtype = props.get("spec_dtype") or rec.dtype
        rec.message = message or rec.message
        rec.duration += report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.report_path:
            write_report(self.report_path, list(self.records.values()))
