"""``relay eval --kind release``'s step report on a small universe: the per-event table from
stored runs (written here) and the leave-one-step-out table over the stored steps and the
ones ``--all`` scored (the stored steps' own path: tests/evaluation/test_stepinputs.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from cli.evaluate_release import ReleaseStep, step_report, stored_loso
from evaluation.groundtruth import event_facts
from evaluation.release import step_truth, stored_step
from evaluation.scores import FLAT_RUNNER_PRIOR, GroundTruthEvent
from evaluation.storedruns import RunHeader, StoredRun, write_run
from selector.signals import SignalConfig


def _write(folder: Path, version: str, run: int, outcomes: dict[str, str]) -> None:
    header = RunHeader(
        torch_version=version,
        torch_build=f"{version}+git0",
        backend_version="1",
        suites="bundled:x",
        suites_commit="",
        date="2026-12-06",
        run=run,
    )
    write_run(StoredRun(header=header, outcomes=outcomes), folder)


def _step(tmp_path: Path, small_upstream: Any, select: Any, base: str, head: str) -> ReleaseStep:
    universe = small_upstream.make_universe()
    event = GroundTruthEvent(
        name="s",
        kind="release",
        changed_files=["test/test_ops.py"],
        changed_symbols={"test/test_ops.py": ["TestCommon.test_out"]},
    )
    plan = select(event_facts(event), universe, config=SignalConfig(profiling_map=None))
    chosen = [t.test_id for t in sorted(plan.tests, key=lambda t: t.rank)]
    others = [v.test_id for v in universe.variants if v.test_id not in set(chosen)]
    before = dict.fromkeys(universe.by_id, "passed")
    after = {**before, chosen[-1]: "failed", others[0]: "failed"}  # ours reaches one of the two
    folder = tmp_path / "stored"
    _write(folder, base, 1, before)
    _write(folder, head, 1, after)
    _write(folder, head, 2, after)
    runs = stored_step(base, head, folder=folder)
    name = f"{base} -> {head}"
    truth, events = step_truth(
        runs, name=name, changed_files=event.changed_files, base=universe, head=universe
    )
    return ReleaseStep(
        name=name,
        truth=truth,
        events=events,
        runs=runs,
        head=universe,
        changed_files=event.changed_files,
        plans={"ours": plan},
        uncut=plan,
        folder=folder,
    )


def test_the_step_report_scores_events_and_chooses_the_share_on_the_other_steps(
    tmp_path: Path, small_upstream: Any, select: Any, fresh_host: Path
) -> None:
    step = _step(tmp_path, small_upstream, select, "2.12.0", "2.13.0")
    text = step_report(step, profiling_map=None, estimator=FLAT_RUNNER_PRIOR, shipped=0.12)
    regressions = step.events.count("regression")
    assert regressions >= 1 and step.events.flaky == {"2.13.0": 0}
    assert "flaky variants (two runs of a torch disagree): 2.13.0: 0" in text
    assert "| run-all | " + f"{regressions}/{regressions}" in text
    assert "| random (equal cost, mean of 20) |" in text and "| pytorch-td top 25% |" in text
    assert "| 2.12.0 -> 2.13.0 | no other step scored |" in text
    assert f"regression: all {regressions} by " in text
    assert re.search(r"goal \(every regression event by 15 %\): (met|missed: \S+ at )", text)
    assert not (fresh_host / "eval" / "steps").exists()  # nothing this host scored is read back
    # two steps scored as ``--all`` scores them: each at the share the other one chose
    scored: dict[str, Any] = {}
    for one in (step, _step(tmp_path / "b", small_upstream, select, "2.13.0", "2.14.1")):
        step_report(
            one,
            profiling_map=None,
            estimator=FLAT_RUNNER_PRIOR,
            shipped=0.12,
            loso=False,
            scored=scored,
        )
    text = stored_loso({}, tmp_path / "stored", shipped=0.12, scored=scored)
    rows = [line for line in text.splitlines() if line.startswith("| 2.1")]
    assert len(rows) == 2 and all("no other step" not in row for row in rows)
    assert "default chosen on all 2 step(s): " in text
