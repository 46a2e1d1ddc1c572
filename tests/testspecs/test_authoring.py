"""`specs update --from-results`: proposals as a reviewable diff."""

from __future__ import annotations

from pathlib import Path

from testspecs.authoring import propose, propose_updates
from testspecs.loader import load_text
from testspecs.report import TestRecord, read_report, write_report

SPEC = """\
# keep this comment
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_alpha.py
      unlisted_test_mode: xfail
      tests:
        - names: [TestAlpha::test_add]
        - names:
            - TestAlpha::test_mul
            - TestAlpha::test_sub
        - names: [TestAlpha::test_pow]
          mode: xfail
"""
F = "test/test_alpha.py"


def rec(base: str, mode: str, outcome: str, msg: str | None = None) -> TestRecord:
    method = base.split("::")[1]
    return TestRecord(
        nodeid=f"{F}::TestAlphaPRIVATEUSE1::{method}_spyre_float16",
        outcome=outcome,
        mode=mode,
        base=base,
        test_file=F,
        message=msg,
    )


def test_propose_rules() -> None:
    run1 = [
        rec("TestAlpha::test_add", "mandatory_success", "failed", "AssertionError: 1 != 2\nmore"),
        rec("TestAlpha::test_pow", "xfail", "xpassed"),
        rec("TestAlpha::test_div", "xfail", "xpassed"),
        rec("TestAlpha::test_exp", "xfail", "xpassed"),
    ]
    run2 = [
        rec("TestAlpha::test_pow", "xfail", "xpassed"),
        rec("TestAlpha::test_div", "xfail", "xfailed"),
    ]
    assert propose([run1, run2]) == [
        (F, "TestAlpha::test_add", "xfail", "AssertionError: 1 != 2"),
        (F, "TestAlpha::test_pow", "mandatory_success", "passed in 2 runs"),
    ]
    # one pass is not "repeatedly"
    assert propose([run1], min_passes=2)[1:] == []


def test_update_diff(tmp_path: Path) -> None:
    spec = tmp_path / "alpha.yaml"
    spec.write_text(SPEC)
    runs = []
    for i in range(2):
        records = [
            rec("TestAlpha::test_add", "mandatory_success", "failed", "RuntimeError: boom"),
            rec("TestAlpha::test_sub", "mandatory_success", "error", "KeyError: 'x'"),
            rec("TestAlpha::test_pow", "xfail", "xpassed"),
            rec("TestAlpha::test_new", "xfail", "xpassed"),
        ]
        write_report(tmp_path / f"r{i}.json", records)
        runs.append(tmp_path / f"r{i}.json")
    assert read_report(runs[0])[0].message == "RuntimeError: boom"
    diff = propose_updates(runs, [spec])
    rel = str(spec).lstrip("/")
    assert diff == (
        f"--- a/{rel}\n+++ b/{rel}\n"
        "@@ -4,9 +4,18 @@\n"
        "     - path: ${TORCH_ROOT}/test/test_alpha.py\n"
        "       unlisted_test_mode: xfail\n"
        "       tests:\n"
        '+        - names: ["TestAlpha::test_new"]\n'
        "+          mode: mandatory_success\n"
        '+          x-relay/v1: {reason: "passed in 2 runs"}\n'
        "         - names: [TestAlpha::test_add]\n"
        "+          mode: xfail\n"
        '+          x-relay/v1: {reason: "RuntimeError: boom"}\n'
        '+        - names: ["TestAlpha::test_sub"]\n'
        "+          mode: xfail\n"
        "+          x-relay/v1: {reason: \"KeyError: 'x'\"}\n"
        "         - names:\n"
        "             - TestAlpha::test_mul\n"
        "             - TestAlpha::test_sub\n"
        "         - names: [TestAlpha::test_pow]\n"
        "-          mode: xfail\n"
        "+          mode: mandatory_success\n"
        '+          x-relay/v1: {reason: "passed in 2 runs"}\n'
    )
    assert spec.read_text() == SPEC  # never applied
    # the proposal, applied, is a valid spec that decides as proposed
    new = SPEC.splitlines()
    patched = _apply(diff, new)
    doc = load_text(patched, "p.yaml").document
    modes = {t.names[0]: t.effective_mode for t in doc.files[0].tests}
    assert modes["TestAlpha::test_add"] == "xfail"
    assert modes["TestAlpha::test_pow"] == "mandatory_success"
    assert modes["TestAlpha::test_new"] == "mandatory_success"


def _apply(diff: str, lines: list[str]) -> str:
    out = [line[1:] for line in diff.splitlines()[3:] if not line.startswith("-")]
    return "\n".join(lines[:3] + out) + "\n"


def test_no_results_no_diff(tmp_path: Path) -> None:
    spec = tmp_path / "alpha.yaml"
    spec.write_text(SPEC)
    write_report(tmp_path / "r.json", [rec("TestAlpha::test_add", "mandatory_success", "passed")])
    assert propose_updates([tmp_path / "r.json"], [spec]) == ""
