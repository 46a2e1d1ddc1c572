"""The sampled-mutant ground truth's bookkeeping (evaluation.sampled), without running anything:
records keyed by setting and mutant content, the seeded draw of the restriction check and its
set, and what the report says (the runs themselves: tests/cli/test_eval_mutation.py)."""

from __future__ import annotations

from pathlib import Path

from evaluation.mutants import Mutant
from evaluation.sampled import (
    MutantTruth,
    Records,
    RestrictionCheck,
    breaks,
    check_ids,
    drawn_for_check,
    ground_truth,
    mutant_rows,
    summary_lines,
)
from selector.model import Universe, Variant

F = "test/test_x.py"


def _universe(count: int = 20) -> Universe:
    variants = [
        Variant(
            test_id=f"{F}::t{i:02d}",
            file=F,
            cls=None,
            name=f"t{i:02d}",
            base=f"t{i:02d}",
            suite="x",
            decision="skip" if i == 0 else "mandatory_success",
        )
        for i in range(count)
    ]
    return Universe(variants=variants, label="x", key="k1")


def _mutant(mid: str = "m001", source: str = "def g():\n    return 2\n") -> Mutant:
    return Mutant(mid, "torch/f.py", "g", "constant", 2, "1 -> 2", source, "twin")


def _truth(mid: str = "m001", ran: int = 3, broken: int = 1, candidates: int = 3) -> MutantTruth:
    ids = [f"{F}::t{i:02d}" for i in range(1, ran + 1)]
    return MutantTruth(
        mutant_id=mid,
        symbol="torch/f.py::g",
        operator="constant",
        description="1 -> 2",
        line=2,
        head_sha="a" * 40,
        traced_callers=2 if ran else 0,
        candidates=candidates,
        ran=ids,
        broken={t: ["passed", "failed"] for t in ids[:broken]},
    )


def test_records_round_trip_and_are_keyed_by_setting_and_mutant_content(tmp_path: Path) -> None:
    universe = _universe()
    records = Records(tmp_path, universe, (), 300)
    mutant = _mutant()
    assert records.truth(mutant) is None
    truth = _truth()
    records.save(mutant, truth, "truth")
    assert records.truth(mutant) == truth
    assert not list(records.folder.glob(".*.tmp"))  # written atomically
    # the same id with another edit (another seed's m001) is another mutant
    assert records.truth(_mutant(source="def g():\n    return 3\n")) is None
    # another cap, another torch build or backend (the universe's key): nothing stored yet
    assert Records(tmp_path, universe, (), 100).truth(mutant) is None
    other = Universe(variants=universe.variants, label="x", key="k2")
    assert Records(tmp_path, other, (), 300).truth(mutant) is None
    spec = tmp_path / "spec.yaml"
    spec.write_text("version: 1\n")
    assert Records(tmp_path, universe, (spec,), 300).truth(mutant) is None
    check = RestrictionCheck("m001", "somewhere", 19, broken=["b"], outside=["b"])
    records.save(mutant, check, "check-all")
    assert records.check(mutant, "all") == check and records.check(mutant, "sample5-s0") is None


def test_the_check_draw_is_seeded_and_independent_of_progress() -> None:
    ids = [f"m{i:03d}" for i in range(1, 151)]
    drawn = drawn_for_check(ids, 10, seed=0)
    assert len(drawn) == 10 and drawn == sorted(drawn)
    assert drawn_for_check(ids, 10, seed=0) == drawn
    assert drawn_for_check(ids, 10, seed=1) != drawn
    assert drawn_for_check(ids[:3], 10, seed=0) == ids[:3]
    assert drawn_for_check(ids, 0, seed=0) == []


def test_the_check_runs_the_whole_runnable_universe_or_says_which_sample() -> None:
    universe = _universe()
    truth = _truth(ran=3)
    ids, words, key = check_ids(universe, truth, cap=0, seed=0)
    assert len(ids) == 19 and f"{F}::t00" not in ids  # the spec's skip is not runnable
    assert (words, key) == ("the whole runnable universe (19 variants)", "all")
    ids, words, key = check_ids(universe, truth, cap=5, seed=0)
    assert set(truth.ran) < set(ids) and len(ids) == 8
    assert words == (
        "its 3 restricted variants and a seeded sample of 5 of the 16 other runnable variants"
    )
    assert key == "sample5-s0" and check_ids(universe, truth, cap=5, seed=0)[0] == ids
    assert check_ids(universe, truth, cap=50, seed=0)[2] == "all"


def test_the_report_counts_the_sample_the_check_and_each_mutant() -> None:
    truths = [
        _truth("m001"),
        _truth("m002", ran=0, broken=0, candidates=0),
        _truth("m003", 2, 0, 9),
    ]
    checks = [
        RestrictionCheck(
            "m001", "the whole runnable universe (19 variants)", 19, ["x", "y"], ["y"]
        ),
        RestrictionCheck("m002", "the whole runnable universe (19 variants)", 19),
    ]
    lines = summary_lines(5, truths, checks, 3)
    assert lines[0] == (
        "sampled mutants: 5; ground truth known for 3 (partial: 2 not run); observable 1; "
        "unobservable 2 (1 with no traced caller); restricted sets capped: 1"
    )
    assert lines[1:] == [
        "restriction check: 3 mutant(s) drawn, 2 run",
        "  m001: 19 variants (the whole runnable universe (19 variants)): 2 broken, "
        "1 outside the restricted set",
        "    outside: y",
        "  m002: 19 variants (the whole runnable universe (19 variants)): 0 broken, "
        "0 outside the restricted set",
    ]
    rows = mutant_rows(truths, {"m001": {f"{F}::t01", f"{F}::t05"}})
    assert rows[2] == "| m001 | `torch/f.py::g` | constant: 1 -> 2 (line 2) | 2 | 3 | 1 | 2 | 1 |"
    assert rows[4].startswith("| m003 |") and "| 2 of 9 | 0 | 0 | 0 |" in rows[4]
    truth = ground_truth(truths, _universe())
    assert [e.failing for e in truth.events] == [[f"{F}::t01"], [], []]
    assert truth.events[2].detail.endswith("2 traced caller(s), 2 variants run (capped from 9)")
    assert truth.method == "traced" and truth.variants == 20


def test_a_variant_is_broken_when_it_newly_fails_or_can_no_longer_run() -> None:
    before = {"a": "passed", "b": "passed", "c": "failed", "d": "skipped", "e": "xfailed"}
    after = {"a": "failed", "b": "passed", "c": "error", "e": "error", "f": "failed"}
    assert breaks(["a", "b", "c", "d", "e", "f", "g"], before, after) == {
        "a": ["passed", "failed"],
        "d": ["skipped", "not run"],  # its module no longer collects under the mutant
        "e": ["xfailed", "error"],
        "f": ["?", "failed"],  # not in the base's run, failing under the mutant
    }
    assert breaks(["a"], before, before) == {}
