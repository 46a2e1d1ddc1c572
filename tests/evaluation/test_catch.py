"""`relay eval --kind catch`: a mutant of the ground truth through a real `relay up` (signed
webhook over HTTP, the selector, Celery workers under the bundled specs, the report read back
from the HTTP API) turns the job red naming a gating test; the same event without the fault is
green. The verdicts' other branches are judged in-process."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from backends import get_backend
from cli import build_app
from cli.catch import EventRun, catch_table, judge, run_catch
from evaluation.groundtruth import mutation_event
from evaluation.scores import GroundTruth, GroundTruthEvent
from inventory.build import universe_from_inventory

MODULES = "spyre_stack/conformance/test_modules.py::TestModulesPRIVATEUSE1"
GELU = f"{MODULES}::test_module_forward_compare_cpu_nn_GELU_spyre_float32"


def _truth(*events: GroundTruthEvent) -> GroundTruth:
    return GroundTruth(kind="mutation", universe="modules", variants=532, events=list(events))


# a relay start, one planning (it collects the modules suite on first use) and two jobs of 28
# tests: about 100 s on an idle 2-core machine, more than 10 min at load average 11
@pytest.mark.long
@pytest.mark.timeout(1800)
def test_a_mutant_is_caught_and_its_clean_twin_is_green(tmp_path: Path) -> None:
    gelu = mutation_event("F.gelu")
    gelu.failing = [GELU]  # the ground truth: the fault breaks this variant
    silent = mutation_event("F.mish")  # unobservable: no variant breaks; not run
    catches = run_catch(_truth(gelu, silent), var_dir=tmp_path / "relay", suites=["modules"])
    assert [c.mutant for c in catches] == ["F.gelu"]
    (c,) = catches
    assert c.verdict == "caught", c
    assert c.planted.conclusion == "failure" and c.clean.conclusion == "success"
    assert c.gating_failed[0] == GELU  # the ground truth's variant is named first
    assert {r["spec_mode"] for r in c.planted.failing} <= {"mandatory_success", "xfail_strict"}
    # the selection ran: a slice of the modules suite, the same on both events
    universe = universe_from_inventory(
        specs=list(get_backend("spyre").default_specs), suites=["modules"]
    )
    assert 0 < c.planted.planned == c.clean.planned < len(universe)
    text = catch_table(catches, observable=1, unobservable=1)
    assert text.startswith("caught 1 of 1 observable mutants; false reds 0 of 1 clean events")
    assert "| F.gelu | 1 |" in text and "test_module_forward_compare_cpu_nn_GELU" in text


def _run(conclusion: str | None, *failing: tuple[str, str]) -> EventRun:
    return EventRun(
        conclusion, 10, [{"test_id": t, "spec_mode": m} for t, m in failing], seconds=1.0
    )


def test_the_verdict_says_why_a_mutant_was_missed() -> None:
    event = GroundTruthEvent(name="m", kind="mutation", failing=["a", "b"])
    green = _run("success")
    assert judge(event, _run("failure", ("a", "mandatory_success")), green, {"a"}).caught
    assert judge(event, green, green, set()).verdict == (
        "missed: none of the 2 broken variants was selected"
    )
    assert judge(event, _run("success", ("a", "xfail")), green, {"a"}).verdict == (
        "missed: the broken variants failed but none gates (xfail in the spec)"
    )
    assert judge(event, green, green, {"b"}).verdict == (
        "missed: the selected broken variants passed or were xfail"
    )
    assert judge(event, _run(None), green, {"a"}).verdict == "missed: the job concluded nothing"
    red_clean = judge(event, _run("failure", ("a", "xfail_strict")), _run("failure"), {"a"})
    assert red_clean.caught and red_clean.false_red


def test_catch_needs_mutation_ground_truth(tmp_path: Path) -> None:
    release = tmp_path / "release.json"
    release.write_text(
        GroundTruth(kind="release", universe="u", variants=1, events=[]).model_dump_json()
    )
    result = CliRunner().invoke(
        build_app(), ["eval", "--kind", "catch", "--ground-truth", str(release)]
    )
    assert result.exit_code == 2
    assert "--kind catch needs mutation ground truth, not release" in result.output
