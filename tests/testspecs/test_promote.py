"""A spec promoted from evidence: verdicts per variant, the rendered spec resolving every variant
to the mode its runs earned, hand-written entries winning on re-promotion, and the committed
bundled spec fresh against the committed baseline summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from backends.spyre import BASELINE_SUMMARY, PROMOTED_SPEC
from testspecs.compiled import CompiledSpec
from testspecs.loader import load_file, load_text
from testspecs.promote import (
    PRECISION_REASON,
    PromoteError,
    Record,
    classify,
    counts,
    load_summary,
    render,
    summarize,
)
from testspecs.resolve import resolve

FILE = "${TORCH_DEVICE_ROOT}/suite/test_ops.py"
TEST_FILE = "suite/test_ops.py"
NOT_CLOSE = "AssertionError: Tensor-likes are not close! Mismatched elements: 3 / 40 (7.5%)"
NO_KERNEL = "NotImplementedError: spyre: aten::linalg_qr is unsupported on the device"


def rec(name: str, op: str | None, dtype: str | None, codes: str, message: str | None = None):  # type: ignore[no-untyped-def]
    return Record(FILE, name, op, None, dtype, codes, message)


RECORDS = [
    rec("TestOps::test_compare", "add", "float16", "pp"),
    rec("TestOps::test_compare", "add", "float32", "pp"),
    rec("TestOps::test_compare", "sin", "float16", "ff", NOT_CLOSE),  # sin fails in fp16 only
    rec("TestOps::test_compare", "sin", "float32", "pp"),
    rec("TestOps::test_compare", "cos", "float16", "ff", NOT_CLOSE),
    rec("TestOps::test_compare", "cos", "float32", "ps"),  # skipped once: still fine
    rec("TestOps::test_compare", "qr", "float32", "ee", NO_KERNEL),
    rec("TestOps::test_compare", "qr", "float16", "ff", NO_KERNEL),
    rec("TestOps::test_compare", "mul", "float16", "pf", NOT_CLOSE),  # flaky
    rec("TestOps::test_compare", "div", "float16", "mm"),  # crashed in both runs
    rec("TestOps::test_out", "add", "float16", "pp"),
    rec("TestOps::test_out", "sin", "float16", "ff", "RuntimeError: out= dtype 17 mismatch"),
]

# what each variant must resolve to: (op, dtype) -> (mode, reason or None, tags)
EXPECTED = {
    ("test_compare", "add", "float16"): "mandatory_success",
    ("test_compare", "add", "float32"): "mandatory_success",
    ("test_compare", "sin", "float16"): "xfail",
    ("test_compare", "sin", "float32"): "mandatory_success",
    ("test_compare", "cos", "float16"): "xfail",
    ("test_compare", "cos", "float32"): "mandatory_success",
    ("test_compare", "qr", "float32"): "xfail",
    ("test_compare", "qr", "float16"): "xfail",
    ("test_compare", "mul", "float16"): "xfail",
    ("test_compare", "div", "float16"): "skip",
    ("test_out", "add", "float16"): "mandatory_success",
    ("test_out", "sin", "float16"): "xfail",
}


def summary():  # type: ignore[no-untyped-def]
    return summarize(RECORDS, runs=["a.json", "b.json"], universe="test universe")


def decide(text: str, base: str, op: str, dtype: str):  # type: ignore[no-untyped-def]
    spec = CompiledSpec(load_text(text, "promoted.yaml").document, device="spyre")
    variant = f"{TEST_FILE}::TestOpsPRIVATEUSE1::{base}_{op}_spyre_{dtype}"
    return resolve(spec, variant, op=op, dtype=dtype, base=f"TestOps::{base}")


def test_failure_classes_from_the_message() -> None:
    assert classify(NOT_CLOSE) == ("precision", PRECISION_REASON)
    assert classify(NO_KERNEL)[0] == "unsupported"
    assert classify("AssertionError: The values for attribute 'dtype' do not match")[0] == (
        "metadata"
    )
    # anything else: the message's prefix, numbers and quoted values blanked out
    assert classify("RuntimeError: shape '[2, 3]' is invalid for input of size 7") == (
        "error",
        "RuntimeError: shape '?' is invalid for input of size N",
    )


def test_every_variant_resolves_to_the_mode_its_runs_earned() -> None:
    text = render(summary())
    for (base, op, dtype), mode in EXPECTED.items():
        d = decide(text, base, op, dtype)
        assert (d.mode if d.run else "skip") == mode, (base, op, dtype, d.explain())
    sin = decide(text, "test_compare", "sin", "float16")
    assert sin.reason == PRECISION_REASON
    qr = decide(text, "test_compare", "qr", "float32")
    assert qr.reason == "unsupported op on the device (NotImplementedError)"
    mul = decide(text, "test_compare", "mul", "float16")
    assert "flaky" in mul.tags and mul.reason and mul.reason.startswith("flaky:")
    div = decide(text, "test_compare", "div", "float16")
    assert div.reason == "crashed or hung: no outcome in 2 of 2 run(s)"
    # an op the runs never saw stays unlisted (xfail, not gating) under a scoped base name
    new = decide(text, "test_compare", "tan", "float16")
    assert new.mode == "mandatory_success"  # the base name passed for every op it ran


def test_the_file_is_grouped_by_op_with_dtype_lists() -> None:
    text = render(summary())
    doc = load_text(text, "promoted.yaml").document
    entries = doc.files[0].tests
    precision = [e for e in entries if e.reason == PRECISION_REASON]
    assert len(precision) == 1  # sin and cos in fp16, one entry
    assert precision[0].ext is not None
    assert precision[0].ext.ops == ["cos", "sin"] and precision[0].ext.dtypes == ["float16"]
    assert precision[0].ext.owner == "spyre-numerics"
    mandatory = [e for e in entries if e.effective_mode == "mandatory_success"]
    assert [e.names for e in mandatory] == [["TestOps::test_compare", "TestOps::test_out"]]
    assert counts(summary()) == {
        "mandatory_success": 5,
        "skip": 1,
        "xfail metadata": 1,  # out= dtype mismatch
        "xfail flaky": 1,
        "xfail precision": 2,
        "xfail unsupported": 2,
    }


def test_hand_written_entries_win_on_re_promotion() -> None:
    text = render(summary())
    hand = text.replace(
        "      tests:\n",
        "      tests:\n"
        "        - names: [TestOps::test_compare]\n"
        "          mode: skip\n"
        "          x-relay/v1: {reason: sin hangs the card, owner: alice, ops: [sin]}\n",
        1,
    )
    again = render(summary(), existing=load_text(hand, "p.yaml").document)
    assert again.count("reason: sin hangs the card") == 1
    d = decide(again, "test_compare", "sin", "float32")
    assert not d.run and d.reason == "sin hangs the card"  # the hand entry, not the evidence
    assert decide(again, "test_compare", "add", "float16").mode == "mandatory_success"
    # promoting that output again changes nothing
    assert render(summary(), existing=load_text(again, "p.yaml").document) == again


def test_a_hand_entry_without_a_reason_is_refused() -> None:
    text = render(summary()).replace(
        "      tests:\n", "      tests:\n        - names: [TestOps::test_out]\n", 1
    )
    with pytest.raises(PromoteError, match=r"has no x-relay/v1.reason"):
        render(summary(), existing=load_text(text, "p.yaml").document)


def test_cli_refuses_a_broken_summary_in_one_line(tmp_path: Path) -> None:
    from cli import build_app

    bad = tmp_path / "summary.json"
    bad.write_text("{not json")
    out = tmp_path / "promoted.yaml"
    result = CliRunner().invoke(
        build_app(), ["specs", "promote", "--summary", str(bad), "--spec", str(out), "--write"]
    )
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0 and "not JSON" in result.output
    assert not out.exists()
    good = tmp_path / "good.json"
    good.write_text(json.dumps(summary()))
    args = ["specs", "promote", "--summary", str(good), "--spec", str(out), "--write"]
    assert CliRunner().invoke(build_app(), args).exit_code == 0
    assert load_file(out).document.files[0].path == FILE


def test_the_bundled_promoted_spec_is_fresh_against_the_committed_summary() -> None:
    """`make promote-spec` reproduces the committed spec from the committed summary."""
    data = load_summary(BASELINE_SUMMARY.read_text(encoding="utf-8"), str(BASELINE_SUMMARY))
    committed = PROMOTED_SPEC.read_text(encoding="utf-8")
    fresh = render(data, existing=load_file(PROMOTED_SPEC).document, command="make promote-spec")
    assert fresh == committed, "stale: run `make promote-spec`"


def test_the_readme_and_docs_quote_the_promoted_counts() -> None:
    """The README's and docs/specs.md's counts of the promoted spec are the summary's."""
    c = counts(load_summary(BASELINE_SUMMARY.read_text(encoding="utf-8"), str(BASELINE_SUMMARY)))
    root = Path(__file__).resolve().parents[2]
    quoted = [
        f"{c['mandatory_success']:,} `mandatory_success`",
        f"{c.get('xfail precision', 0):,} fp16 precision",
        f"{c.get('xfail unsupported', 0):,} unsupported op",
        f"{c.get('xfail error', 0):,} other",
    ]
    for page in ("README.md", "docs/specs.md"):
        text = " ".join((root / page).read_text(encoding="utf-8").split())
        missing = [q for q in quoted if q not in text]
        assert not missing, (page, missing)


def test_a_rerun_under_the_device_spec_and_runs_of_other_files() -> None:
    """Runs made without the spec fail on tolerances the spec gives: a failure the rerun under
    the device spec does not reproduce is no failure. A run that did not cover a variant's file
    ("-") says nothing about it."""
    records = [
        Record(FILE, "TestOps::test_compare", "sin", None, "float32", "ff", None, rerun="p"),
        Record(FILE, "TestOps::test_compare", "tan", None, "float32", "ff", NOT_CLOSE, rerun="f"),
        Record(FILE, "TestOps::test_compare", "cos", None, "float32", "p-"),
        Record(FILE, "TestOps::test_compare", "exp", None, "float32", "pm"),
    ]
    data = summarize(records, runs=["a", "b"], universe="u", rerun="once more under device.yaml")
    assert counts(data) == {"mandatory_success": 2, "xfail flaky": 1, "xfail precision": 1}
    other = data["tests"][FILE]["TestOps::test_compare"]["other"]
    assert [row[:4] for row in other] == [
        ["exp", "float32", "pm", "flaky"],
        ["tan", "float32", "ff/f", "fail/precision"],
    ]
