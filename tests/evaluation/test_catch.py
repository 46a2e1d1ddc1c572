"""`relay eval --kind catch` on the product path: a pull request on the local upstream
repository (the installed torch's Python files, one commit) goes as a signed webhook to a real
``relay up`` with the default planner and ``RELAY_UPSTREAM_PATH`` at that repository; the job is
planned from the git diff and runs in the overlay of the head's files. A fault turns it red
naming a gating variant, its comment-only twin is green, a head that breaks a test module's
import is red with the import error as the failing tests' message. The verdicts' branches and
the table are checked in-process."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from backends.base import package_dir, torch_build
from cli.catch import (
    OUT_OF_TIME,
    PENDING,
    Branches,
    Catch,
    EventRun,
    LocalRelay,
    ProbeQueue,
    catch_table,
    commit_mutant,
    judge,
    needs_probe,
    summary,
)
from evaluation.localrepo import LocalUpstream, commit_file, local_upstream, read_base
from evaluation.mutants import Mutant
from evaluation.observability import Probe

MODULES = "spyre_stack/conformance/test_modules.py::TestModulesPRIVATEUSE1"
GELU = "torch/nn/modules/activation.py"
GELU_LINE = "        return F.gelu(input, approximate=self.approximate)"
HELPERS = "torch/testing/_internal/common_modules.py"
IMPORT_ERROR = (
    "ImportError: cannot import name 'modules' from 'torch.testing._internal.common_modules'"
)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> LocalUpstream:
    torch_dir = package_dir("torch")
    assert torch_dir is not None
    return local_upstream(
        tmp_path_factory.mktemp("upstream"),
        torch_dir=torch_dir,
        torch_build=torch_build(),
        torchgen_dir=package_dir("torchgen"),
    )


@pytest.fixture(scope="module")
def relay(
    tmp_path_factory: pytest.TempPathFactory, upstream: LocalUpstream
) -> Iterator[LocalRelay]:
    running = LocalRelay(tmp_path_factory.mktemp("relay"), upstream=upstream.path)
    try:
        yield running
    finally:
        running.stop()


def _gelu_mutant(upstream: LocalUpstream) -> Mutant:
    """GELU.forward asks for a dimension its output lacks: every forward raises."""
    text = read_base(upstream, GELU)
    assert GELU_LINE in text
    source = text.replace(GELU_LINE, GELU_LINE + ".sum(dim=7)")
    twin = text.replace("class GELU(Module):", "# a comment\nclass GELU(Module):")
    line = text[: text.index(GELU_LINE)].count("\n") + 1
    return Mutant("m001", GELU, "GELU.forward", "constant", line, "dim 7", source, twin)


# the relay's start, two plannings (the first reads the universe) and two jobs in fresh overlay
# environments: minutes on a loaded 2-core machine
@pytest.mark.long
@pytest.mark.timeout(1800)
def test_a_mutant_is_caught_and_its_clean_twin_is_green(
    relay: LocalRelay, upstream: LocalUpstream
) -> None:
    mutant = _gelu_mutant(upstream)
    branches = commit_mutant(upstream, mutant, seed=0)
    planted = relay.pull_request(upstream.base, branches.mutant, timeout=1200)
    clean = relay.pull_request(upstream.base, branches.twin, timeout=1200)
    catch = judge(mutant, planted, clean, probe=None)
    assert catch.verdict == "caught", (planted, clean)
    assert any("nn_GELU" in t for t in catch.gating_failed), catch.gating_failed
    assert clean.conclusion == "success" and clean.planned == 0  # a comment: nothing to test
    for run, sha in ((planted, branches.mutant), (clean, branches.twin)):
        assert run.names_overlay and run.under_test["head_sha"] == sha
    assert planted.under_test["files_laid_over"] == 1
    assert planted.first_failure_s is not None and planted.first_failure_s > 0
    assert summary([catch], sampled=1)["caught"] == 1


@pytest.mark.long
@pytest.mark.timeout(1800)
def test_a_head_that_breaks_a_test_modules_import_gates_red_with_the_import_error(
    relay: LocalRelay, upstream: LocalUpstream
) -> None:
    text = read_base(upstream, HELPERS)
    head = commit_file(
        upstream,
        branch="rename-modules",
        path=HELPERS,
        content=text.replace(
            "class modules(_TestParametrizer):", "class module_parametrize(_TestParametrizer):"
        ),
        message="common_modules: rename the modules decorator",
    )
    run = relay.pull_request(upstream.base, head, timeout=1200)
    assert run.conclusion == "failure", run
    assert run.names_overlay
    broken = [r for r in run.failing if r["test_id"].startswith(MODULES)]
    gating = [r for r in broken if r["spec_mode"] in ("mandatory_success", "xfail_strict")]
    modes = {(r["outcome"], r["spec_mode"]) for r in run.failing}
    assert gating and len(broken) == len(run.failing) == run.planned, (modes, run.failing[:1])
    for result in broken:
        assert result["outcome"] == "error"
        assert result["message"].startswith("collection failed: "), result["message"]
        assert IMPORT_ERROR in result["message"]


def _run(conclusion: str | None, *failing: tuple[str, str], sha: str = "h") -> EventRun:
    return EventRun(
        sha,
        conclusion,
        10,
        [{"test_id": t, "spec_mode": m} for t, m in failing],
        5.0,
        2.0,
        under_test={"kind": "overlay", "head_sha": sha},
    )


def _mutant() -> Mutant:
    return Mutant("m001", "torch/f.py", "g", "return", 3, "returns None", "a", "b")


def test_the_verdict_tells_caught_missed_unobservable_and_undecided() -> None:
    m, green = _mutant(), _run("success")
    assert judge(m, _run("failure", ("a", "mandatory_success")), green, None).caught
    seen = Probe(
        "torch/f.py::g",
        traced_callers=2,
        candidates=4,
        ran=["a", "b"],
        broken={"b": ("passed", "failed")},
    )
    missed = judge(m, green, green, seen)
    assert (
        missed.verdict
        == "missed: 1 of 2 probed variants break; none of them was selected or they do not gate"
    )
    assert missed.observable and not missed.caught
    blind = Probe("torch/f.py::g", traced_callers=0, candidates=0)
    assert (
        judge(m, green, green, blind).verdict == "unobservable: no traced test calls the function"
    )
    capped = Probe("torch/f.py::g", traced_callers=1, candidates=400, ran=["a"] * 300)
    assert judge(m, green, green, capped).verdict == (
        "unobservable: none of the 300 variants that reach it (capped from 400) changes outcome"
    )
    not_gating = judge(m, _run("failure", ("a", "xfail")), green, blind)
    assert not_gating.verdict.startswith("unobservable")
    assert judge(m, _run(None), green, None).verdict == "undecided: the job concluded nothing"
    red_twin = judge(m, _run("failure", ("a", "xfail_strict")), _run("failure"), None)
    assert red_twin.caught and red_twin.false_red


def test_the_table_counts_and_the_median_time_to_first_failure() -> None:
    m, green = _mutant(), _run("success")
    caught = [judge(m, _run("failure", ("a", "mandatory_success")), green, None) for _ in range(3)]
    caught[0].planted.first_failure_s = 10.0
    red_twin = _run("failure", sha="t")
    red_twin.under_test = {"kind": "installed"}  # not its overlay
    blind = judge(m, green, red_twin, Probe("s", 0, 0))
    numbers: dict[str, Any] = summary([*caught, blind], sampled=5)
    assert numbers == {
        "sampled": 5,
        "run": 4,
        "observable": 3,
        "caught": 3,
        "missed": 0,
        "unobservable": 1,
        "undecided": 0,
        "false_reds": 1,
        "overlay_named": 3,
        "median_first_failure_s": 2.0,
    }
    text = catch_table([*caught, blind], sampled=5)
    assert "| 5 | 4 | 3 | 3 | 0 | 1 | 0 | 1 of 4 | 6 of 8 | 2.0 |" in text
    assert "| m001 | `torch/f.py::g` | return: returns None (line 3) |" in text


def _queued(prober: Any, *, deadline: float | None) -> tuple[list[Catch], list[int]]:
    """Three green mutants probed through a ProbeQueue; the verdicts and how many were pending
    at each report."""
    catches = [judge(_mutant(), _run("success"), _run("success"), None) for _ in range(3)]
    seen: list[int] = []
    probes = ProbeQueue(
        prober,
        deadline=deadline,
        changed=lambda: seen.append(sum(c.verdict == PENDING for c in catches)),
        log=lambda _: None,
    )
    for i, c in enumerate(catches):
        probes.put(c, Branches(f"m{i}", f"t{i}"))
    probes.finish()
    return catches, seen


def test_green_mutants_are_probed_as_they_come_and_a_failed_probe_is_undecided() -> None:
    def prober(mutant: Mutant, mutant_sha: str, twin_sha: str) -> Probe:
        if mutant_sha == "m1":
            raise RuntimeError("no traced import map for this universe\nmore")
        broken = {"x": ("passed", "failed")} if mutant_sha == "m2" else {}
        return Probe(mutant.symbol, traced_callers=1, candidates=1, ran=["x"], broken=broken)

    catches, seen = _queued(prober, deadline=None)
    assert [c.verdict for c in catches] == [
        "unobservable: none of the 1 variants that reach it changes outcome",
        "undecided: the probe did not run (RuntimeError: no traced import map for this universe)",
        "missed: 1 of 1 probed variants break; none of them was selected or they do not gate",
    ]
    assert len(seen) == 3 and seen[-1] == 0  # a report after every verdict, none left pending


def test_no_probe_starts_after_the_deadline() -> None:
    def prober(mutant: Mutant, mutant_sha: str, twin_sha: str) -> Probe:
        raise AssertionError("probed after the deadline")

    catches, _ = _queued(prober, deadline=time.monotonic() - 1)
    assert {c.verdict for c in catches} == {OUT_OF_TIME}
    assert summary(catches, sampled=3)["undecided"] == 3


def test_a_job_with_nothing_to_test_is_green_and_says_so_in_the_table() -> None:
    green = _run("success")
    nothing = _run("success")
    nothing.planned, nothing.reason = 0, "nothing to test: the change's 1 unit(s) reach ..."
    catch = judge(_mutant(), nothing, green, Probe("torch/f.py::g", 0, 0))
    assert catch.verdict == "unobservable: no traced test calls the function"
    assert needs_probe(judge(_mutant(), nothing, green, None))
    row = catch_table([catch], sampled=1).splitlines()[-1]
    assert "| 0 | success (nothing to test) | success | 5, 5 |" in row
