"""The promoted spec's xfail reasons by dtype and device, not by the message alone: precision only
for floating dtypes computed on the device, unsupported where the device spec never generates
the variant (read from the bundled device spec and op table)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from backends.spyre import SPECS_DIR
from evaluation.labels import (
    FLOATING,
    UNSUPPORTED_REASON,
    DeviceFacts,
    counts_under_spec,
    device_facts,
    label,
    record_node,
    relabel,
)
from selector import Variant
from testspecs.promote import PRECISION_REASON, Record, counts, summarize

FILE = "spyre_stack/conformance/test_ops.py"
NOT_CLOSE = "AssertionError: Tensor-likes are not close!"


def _module(dtype: str) -> Variant:
    f = "spyre_stack/conformance/test_modules.py"
    name = f"test_forward_nn_Linear_spyre_{dtype}"
    return Variant(
        test_id=f"{f}::TestModulePRIVATEUSE1::{name}",
        file=f,
        cls="TestModulePRIVATEUSE1",
        name=name,
        base="test_forward",
        suite="modules",
        module="nn.Linear",
        dtype=dtype,
    )


def test_the_device_spec_and_op_table_say_what_runs_and_where(
    ops_variant: Callable[[str, str], Variant],
) -> None:
    variants = [
        ops_variant("abs", "float16"),
        ops_variant("abs", "int64"),
        ops_variant("abs", "float64"),
        ops_variant("_native_batch_norm_legit", "float16"),
        ops_variant("nn.functional.gelu", "float32"),
        ops_variant("add", "bool"),
        _module("float32"),
    ]
    facts = device_facts(variants, spec=SPECS_DIR / "device.yaml")
    got = [(facts[v.test_id].generated, facts[v.test_id].on_device) for v in variants]
    assert got == [
        (True, True),  # abs is native at float16
        (True, True),  # ... and at int64
        (False, False),  # float64 is not a dtype of the device: never generated
        (True, False),  # a host fallback
        (True, True),  # nn.functional.gelu answers to the table's gelu
        (False, False),
        (True, True),  # a module counts as computed on the device
    ]


def test_precision_only_for_floating_dtypes_computed_on_the_device() -> None:
    device, host = DeviceFacts(True, True), DeviceFacts(True, False)
    assert label(NOT_CLOSE, dtype="float16", facts=device) == ("precision", PRECISION_REASON)
    assert label(NOT_CLOSE, dtype="int64", facts=device) == (
        "error",
        "wrong result at int64: an exact dtype differs from the CPU's",
    )
    assert label(NOT_CLOSE, dtype="bool", facts=device)[0] == "error"
    assert label(NOT_CLOSE, dtype="float32", facts=host) == (
        "error",
        "wrong result computed on the host: no native kernel at this dtype",
    )
    never = DeviceFacts(False, False)
    assert label(NOT_CLOSE, dtype="float64", facts=never) == ("unsupported", UNSUPPORTED_REASON)
    assert label("RuntimeError: boom", dtype="float64", facts=never)[0] == "unsupported"
    # any other failure keeps the message's class
    assert label("NotImplementedError: aten::x", dtype="int64", facts=host)[0] == "unsupported"
    assert label("RuntimeError: boom 12", dtype="float16", facts=device) == (
        "error",
        "RuntimeError: boom N",
    )


def test_a_summary_is_relabelled_variant_by_variant() -> None:
    def rec(op: str, dtype: str, outcomes: str, message: str | None = NOT_CLOSE) -> Record:
        return Record(
            file="${TORCH_DEVICE_ROOT}/" + FILE,
            name="TestCommon::test_compare_cpu",
            op=op,
            module=None,
            dtype=dtype,
            outcomes=outcomes,
            message=message,
        )

    records = [
        rec("abs", "float16", "f"),
        rec("abs", "int64", "f"),
        rec("abs", "int32", "p", None),  # fine: no entry
        rec("abs", "float64", "f"),
        rec("abs", "bfloat16", "m", None),  # crashed: not a failure class
        rec("abs", "float32", "f"),  # no facts: the message's class stays
    ]
    facts = {
        records[0]: DeviceFacts(True, True),
        records[1]: DeviceFacts(True, True),
        records[3]: DeviceFacts(False, False),
        records[4]: DeviceFacts(True, True),
    }
    before = summarize(records, runs=["r1"], universe="u")
    assert counts(before) == {"mandatory_success": 1, "skip": 1, "xfail precision": 4}
    after = relabel(before, records, facts)
    other = after["tests"]["${TORCH_DEVICE_ROOT}/" + FILE]["TestCommon::test_compare_cpu"]["other"]
    assert [(dtype, kind) for _, dtype, _, kind, _ in other] == [
        ("bfloat16", "crash"),
        ("float16", "fail/precision"),
        ("float32", "fail/precision"),
        ("float64", "fail/unsupported"),
        ("int64", "fail/error"),
    ]
    assert counts(after) == {
        "mandatory_success": 1,
        "skip": 1,
        "xfail error": 1,
        "xfail precision": 2,
        "xfail unsupported": 1,
    }


def test_the_counts_over_the_variants_that_run_under_the_spec_leave_out_the_skipped_ones(
    ops_variant: Callable[[str, str], Variant],
) -> None:
    """``relay specs promote`` prints its counts twice: over every variant of the runs, and over
    the ones the bundled spec runs (a passing variant the device spec never generates is not a
    gating test anyone runs)."""
    outcomes = {
        ("abs", "float16"): "f",
        ("abs", "int32"): "p",
        ("abs", "float64"): "f",  # never generated: unsupported
        ("abs", "int64"): "p",  # passed, but say the spec skips it
    }
    variants = [ops_variant(op, dtype) for op, dtype in outcomes]
    records = [
        Record(
            file=record_node(v)[0],
            name=record_node(v)[1],
            op=v.op,
            module=None,
            dtype=v.dtype,
            outcomes=outcomes[(v.op or "", v.dtype or "")],
            message=NOT_CLOSE,
        )
        for v in variants
    ]
    summary = summarize(records, runs=["r1"], universe="u")
    generated = {"float16": True, "int32": True, "float64": False, "int64": False}
    facts = {v.test_id: DeviceFacts(generated[v.dtype or ""], True) for v in variants}
    summary = relabel(
        summary, records, {r: facts[v.test_id] for r, v in zip(records, variants, strict=True)}
    )
    assert counts(summary) == {
        "mandatory_success": 2,
        "xfail precision": 1,
        "xfail unsupported": 1,
    }
    # a variant the summary has no node for is not counted
    unknown = replace(ops_variant("cos", "float16"), base="test_other")
    facts[unknown.test_id] = DeviceFacts(True, True)
    n, under = counts_under_spec(summary, [*variants, unknown], facts)
    assert (n, under) == (2, {"mandatory_success": 1, "xfail precision": 1})


def _header_counts(text: str, prefix: str) -> dict[str, int]:
    line = next(line for line in text.splitlines() if line.startswith(prefix))
    found = re.findall(r"([a-z_]+(?: [a-z]+)?) (\d+)", line.split("): ")[-1].split(": ")[-1])
    return {k: int(n) for k, n in found}


def test_the_committed_spec_header_counts_are_a_recount_by_dtype() -> None:
    """The bundled promoted spec's header counts (over every variant and over those the bundled
    spec runs) recounted from its summary variant by variant, with the device facts of the
    stored universe of the runs' torch: a precision label only at a floating dtype computed on
    the device, every failing variant the device spec never generates labelled unsupported."""
    from backends.spyre import BASELINE_SUMMARY, PROMOTED_SPEC
    from evaluation.stepinputs import read_universe, universe_file
    from testspecs.promote import count_label, load_summary

    summary = load_summary(BASELINE_SUMMARY.read_text(encoding="utf-8"))
    version = summary["sources"][0]["torch_build"].split("+")[0]
    universe = read_universe(universe_file(version)).universe
    assert universe.label == summary["universe"]
    facts = device_facts(universe.variants, spec=SPECS_DIR / "device.yaml")
    kinds = {
        (file, name, target, dtype): kind
        for file, names in summary["tests"].items()
        for name, node in names.items()
        for target, dtype, _codes, kind, _reason in node["other"]
    }
    every: Counter[str] = Counter()
    under: Counter[str] = Counter()
    for v in universe.variants:
        file, name = record_node(v)
        target = v.op if v.op is not None else (f"module:{v.module}" if v.module else None)
        kind, fact = kinds.get((file, name, target, v.dtype), "ok"), facts[v.test_id]
        if kind == "fail/precision":
            assert v.dtype in FLOATING and fact.on_device, v.test_id
        if not fact.generated and kind.startswith("fail/"):
            assert kind == "fail/unsupported", v.test_id
        every[count_label(kind)] += 1
        under[count_label(kind)] += fact.generated
    header = PROMOTED_SPEC.read_text(encoding="utf-8")
    assert _header_counts(header, "# variants:") == every == counts(summary)
    assert _header_counts(header, "# run under the bundled spec") == {
        k: n for k, n in under.items() if n
    }
    assert f"# run under the bundled spec ({sum(under.values())} of {len(universe)})" in header
    flaky = summary["flaky"]
    assert len(summary["sources"]) >= 2 and flaky, "the flaky count is measured from two runs"
    for torch, measured in flaky.items():
        assert f"{measured['flaky']} of {measured['variants']} variants at torch {torch}" in header
