"""`relay eval --kind mutation` for real on a tiny suite (tests/evaluation/mutation_suite/
sampled_cases.py): source mutants of ``torch/nn/functional.py`` committed on a local upstream
repository, laid over the installed torch, their ground truth restricted by a traced import map
learned from the suite, the product's plan of each change scored against it, the restriction
checked over the whole universe, and a second evaluation resuming from the stored records."""

from __future__ import annotations

import shutil
from dataclasses import replace

import pytest

from backends.base import package_dir, torch_build
from cli.mutation import Setting, commit_mutant, evaluate_mutants
from evaluation.localrepo import local_upstream, read_base
from evaluation.mutants import Mutant
from evaluation.sampled import Records
from evaluation.scores import evaluate
from inventory.importmap import learn_import_map
from selector.model import Universe, Variant

FILE = "tests/evaluation/mutation_suite/sampled_cases.py"
NAMES = [
    "test_relu_on_cpu",
    "test_relu_on_device",
    "test_softsign_on_device",
    "test_nothing_mutated",
]
FUNCTIONAL = "torch/nn/functional.py"


def _id(name: str) -> str:
    return f"{FILE}::{name}"


def _universe() -> Universe:
    # each test its own op, named after no function (the operators signal maps none of them):
    # only the traced coverage of the learned import map reaches a test from a changed function
    variants = [
        Variant(test_id=_id(n), file=FILE, cls=None, name=n, base=n, suite="cases", op=f"case_{n}")
        for n in NAMES
    ]
    return Universe(variants=variants, label="sampled cases", key=f"cases-{torch_build()}")


def _edit(text: str, function: str, old: str, new: str) -> tuple[str, int]:
    """``text`` with the first ``old`` inside ``def function(`` replaced, and its line."""
    at = text.index(old, text.index(f"\ndef {function}("))
    return text[:at] + new + text[at + len(old) :], text.count("\n", 0, at) + 1


def _mutants(base: str) -> list[Mutant]:
    relu, relu_line = _edit(base, "relu", "    return result\n", "    return None\n")
    softmax, softmax_line = _edit(base, "softmax", "if dim is None:", "if not (dim is None):")
    softsign, softsign_line = _edit(base, "softsign", "input.abs() + 1)", "input.abs() + 2)")
    return [
        Mutant("m001", FUNCTIONAL, "relu", "return", relu_line, "returns None", relu, base),
        Mutant("m002", FUNCTIONAL, "softmax", "negate", softmax_line, "negated", softmax, base),
        Mutant("m003", FUNCTIONAL, "softsign", "constant", softsign_line, "1 -> 2", softsign, base),
    ]


@pytest.fixture(scope="module")
def setting(tmp_path_factory: pytest.TempPathFactory) -> Setting:
    """A local upstream repository holding the installed torch's own ``__init__.py`` and
    ``nn/functional.py`` (an overlay of a branch lays over only what the branch changed), the
    tiny universe and its traced import map."""
    root = tmp_path_factory.mktemp("mutation")
    torch_dir = package_dir("torch")
    assert torch_dir is not None
    wheel = root / "wheel" / "torch"
    (wheel / "nn").mkdir(parents=True)
    shutil.copyfile(torch_dir / "__init__.py", wheel / "__init__.py")
    shutil.copyfile(torch_dir / "nn" / "functional.py", wheel / "nn" / "functional.py")
    repo = local_upstream(
        root / "eval",
        torch_dir=wheel,
        torch_build=f"cases-{torch_build()}",
        torchgen_dir=package_dir("torchgen"),
    )
    universe = _universe()
    import_map = learn_import_map(
        universe.variants, key="cases", sweep=1, cache_dir=root / "selector"
    )
    return Setting(
        repo=repo,
        universe=universe,
        records=Records(root / "eval", universe, (), 300),
        envs=root / "envs",
        import_map=import_map,
    )


# a traced run, then about ten pytest runs of the tiny suite in overlays: over a minute on a
# loaded 2-core machine
@pytest.mark.long
@pytest.mark.timeout(1200)
def test_sampled_mutants_are_scored_checked_and_resumed(setting: Setting) -> None:
    mutants = _mutants(read_base(setting.repo, FUNCTIONAL))
    logs: list[str] = []
    setting = replace(setting, log=logs.append)

    # a first run stops after two mutants (as a killed one would): their records are stored
    first = evaluate_mutants(setting, mutants[:2], run=True, check=0)
    assert [e.name for e in first.truth.events] == ["m001", "m002"]
    started = [line for line in logs if line.startswith("m00") and line.endswith("...")]
    assert [line.split()[0] for line in started] == ["m001", "m002"]

    logs.clear()
    full = evaluate_mutants(setting, mutants, run=True, check=3)
    started = [line.split()[0] for line in logs if line.startswith("m00") and " torch/" in line]
    assert started == ["m003"]  # the first two were read back, not run again
    events = {e.name: e for e in full.truth.events}
    assert events["m001"].failing == [_id("test_relu_on_cpu"), _id("test_relu_on_device")]
    assert events["m002"].failing == [] and "0 traced caller(s), 0 variants run" in (
        events["m002"].detail
    )
    assert events["m003"].failing == [_id("test_softsign_on_device")]
    assert events["m001"].changed_symbols == {FUNCTIONAL: ["relu"]}

    # the restriction check over the whole universe: nothing broken outside a restricted set
    assert "restriction check: 3 mutant(s) drawn, 3 run" in full.text
    for name in ("m001", "m002", "m003"):
        assert f"  {name}: 4 variants (the whole runnable universe (4 variants)): " in full.text
    assert "outside the restricted set" in full.text and "outside: " not in full.text
    assert "sampled mutants: 3; ground truth known for 3; observable 2; unobservable 1" in full.text

    # the product's plan of each mutant's change, scored against the truth
    for mutant in mutants:
        plan = full.plans[mutant.id]
        head = commit_mutant(setting.repo, mutant, seed=setting.seed)
        assert (plan.base_resolved, plan.head_resolved) == (setting.repo.base, head)
        assert plan.errors == [] and plan.source_kind == "git"
    scores = {s.selector: s for s in evaluate(full.truth, setting.universe, full.plans)}
    ours = scores["ours"]
    caught = sum(bool(set(e.failing) & set(full.plans[e.name].test_ids)) for e in events.values())
    assert (ours.failing, ours.observable, ours.caught) == (3, 2, caught)
    assert scores["run-all"].caught == 2 and scores["run-all"].failing_selected == 3
    # planned as the planner plans a pull request: with the learned import map, whose traced
    # coverage reaches the one test that calls softsign (the operators signal reaches nothing)
    softsign = full.plans["m003"]
    assert _id("test_softsign_on_device") in softsign.test_ids
    assert any(
        why.startswith("traced-coverage: softsign: called by the traced tests of 1 op")
        for why in softsign.explained[f"{FUNCTIONAL}::softsign"]
    ), softsign.explained

    # everything is stored: without --run the same report comes back, nothing runs
    logs.clear()
    again = evaluate_mutants(setting, mutants, run=False, check=3)
    assert again.text == full.text and not [line for line in logs if "outcomes in" in line]


@pytest.mark.long
@pytest.mark.timeout(1200)
def test_the_restriction_check_reports_a_broken_variant_outside_the_restricted_set(
    setting: Setting,
) -> None:
    """With the restricted set capped at one variant, the relu mutant's truth holds one of the
    two tests it breaks; the check over the whole universe names the other."""
    relu = _mutants(read_base(setting.repo, FUNCTIONAL))[0]
    records = Records(setting.records.root, setting.universe, (), 1)
    capped = replace(setting, cap=1, records=records)
    result = evaluate_mutants(capped, [relu], run=True, check=1)
    assert [e.failing for e in result.truth.events] == [[_id("test_relu_on_cpu")]]
    assert "  m001: 4 variants (the whole runnable universe (4 variants)): 2 broken, 1 outside" in (
        result.text
    )
    assert f"    outside: {_id('test_relu_on_device')}" in result.text
    assert "| m001 | `torch/nn/functional.py::relu` | return: returns None" in result.text
    assert "| 2 | 1 of 2 | 1 |" in result.text  # two traced callers, one run
