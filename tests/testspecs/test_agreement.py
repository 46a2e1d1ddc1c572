"""testspecs.agreement: a run's records against the modes a torch-spyre style config records,
name by name, with the config's YAML comments as the reasons (no pytest run: the records are
written here as the spec plugin's report writes them)."""

from __future__ import annotations

from pathlib import Path

from testspecs.agreement import agreement, reason_comments, run_skipped_text
from testspecs.loader import load_files
from testspecs.report import TestRecord

CONFIG = """\
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_tiny.py
      unlisted_test_mode: mandatory_success
      tests:
        - names: # pass on the card
            - TestTiny::test_add
            - TestTiny::test_cpu_only
          mode: mandatory_success
        ## fails on the card
        - names:
            - TestTiny::test_double   # RuntimeError: Spyre backend does not support dtype Double (#1)
            - TestTiny::test_copy     # RuntimeError: Error: In-device copy not implemented (#2)
            - TestTiny::test_gone     # an old test
          mode: xfail
        - names:
            # -------- crashes the card --------
            - TestTiny::test_crash
          mode: skip
"""


def _record(
    test: str, outcome: str, mode: str, entry: str | None, message: str | None = None
) -> TestRecord:
    return TestRecord(
        nodeid=f"test/test_tiny.py::TestTinyPRIVATEUSE1::{test}_spyre",
        outcome=outcome,
        mode=mode,
        base=f"TestTiny::{test}",
        entry=entry,
        message=message,
    )


def _spec(tmp_path: Path, text: str = CONFIG) -> tuple[object, str]:
    path = tmp_path / "test_tiny.yaml"
    path.write_text(text)
    return load_files([path])[0], text


def test_reasons_come_from_the_name_line_else_its_block(tmp_path: Path) -> None:
    reasons = reason_comments(CONFIG)
    assert reasons[7] == "pass on the card"  # the `- names:` comment, for a name without one
    assert reasons[12] == "RuntimeError: Spyre backend does not support dtype Double (#1)"
    assert reasons[18] == "crashes the card"  # the comment heading the list
    assert 17 not in reasons and 4 not in reasons


def test_skip_entries_become_xfail_and_nothing_else_moves() -> None:
    text = run_skipped_text(CONFIG + "      unlisted_test_mode: skip\n")
    assert text.count("mode: xfail") == 2 and "mode: skip" not in text.replace("_mode: skip", "")
    assert text.endswith("unlisted_test_mode: skip\n")
    assert len(text.splitlines()) == len(CONFIG.splitlines()) + 1


def test_each_name_is_compared_with_its_recorded_mode(tmp_path: Path) -> None:
    spec, text = _spec(tmp_path)
    first = f"{spec.file}:6:11: tests[0] [...]"
    second = f"{spec.file}:11:11: tests[1] [...]"
    records = [
        _record("test_add", "passed", "mandatory_success", first),
        _record("test_cpu_only", "skipped", "mandatory_success", first),
        _record("test_double", "xpassed", "xfail", second),
        _record("test_copy", "xfailed", "xfail", second, "RuntimeError: Error: In-device copy"),
        _record("test_unlisted", "failed", "mandatory_success", None, "AssertionError: no"),
        TestRecord(nodeid="test/test_tiny.py::TestHost::test_host", outcome="passed"),
    ]
    collected = ["TestTiny::test_add", "TestTiny::test_cpu_only", "TestTiny::test_double",
                 "TestTiny::test_copy", "TestTiny::test_crash", "TestTiny::test_unlisted"]  # fmt: skip
    result = agreement(spec, text, records, collected, test_file="test/test_tiny.py")
    status = {n.name.split("::")[1]: n.status for n in result.names}
    assert status == {
        "test_add": "agree",
        "test_cpu_only": "not-run",
        "test_double": "xpass",
        "test_copy": "agree",
        "test_gone": "no-test",
        "test_crash": "skipped-by-spec",
    }
    assert (result.count("agree"), result.compared, result.percent) == (2, 3, 200 / 3)
    assert result.by_reason("xpass") == {
        "RuntimeError: Spyre backend does not support dtype Double (#1)": ["TestTiny::test_double"]
    }
    assert result.unlisted == {"mandatory_success failed": 1, "no-mode passed": 1}
    assert result.unlisted_failures == ["TestTiny::test_unlisted: AssertionError: no"]


def test_run_skipped_compares_skip_entries_as_recorded_failures(tmp_path: Path) -> None:
    spec, text = _spec(tmp_path)
    third = "run-copy/test_tiny.yaml:16:11: tests[2] [...]"  # the changed copy: same lines
    records = [_record("test_crash", "failed", "xfail", third, "AssertionError")]
    records[0].outcome = "xfailed"
    result = agreement(spec, text, records, None, test_file="t.py", run_skipped=True)
    crash = next(n for n in result.names if n.name.endswith("test_crash"))
    assert (crash.status, crash.mode, crash.reason) == ("agree", "skip", "crashes the card")
    # without a collection nothing is "no-test"; names with no records did not run
    assert {n.status for n in result.names if not n.name.endswith("test_crash")} == {"not-run"}


def test_a_name_another_entry_decides_is_shadowed(tmp_path: Path) -> None:
    text = CONFIG.replace("            - TestTiny::test_gone     # an old test\n",
                          "            - TestTiny::test_add\n")  # fmt: skip
    spec, text = _spec(tmp_path, text)
    first = f"{spec.file}:6:11: tests[0] [...]"
    records = [_record("test_add", "passed", "mandatory_success", first)]
    result = agreement(spec, text, records, None, test_file="t.py")
    add = [n.status for n in result.names if n.name == "TestTiny::test_add"]
    assert add == ["agree", "shadowed"]
