"""A crash inside one test does not lose the results of the others.

The forced crash is real: the test calls the C++ core's ``crash()``, which aborts the process.
The workers' harness (the one that runs every shard) records that test as crashed and runs the
rest in a fresh process, started through the spyre backend's runner recipe.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from backends import get_backend
from store.outcomes import Outcome
from workers.harness.pools import launcher_for
from workers.harness.runner import ShardRun, run_shard

SUITE = """
import torch
import spyre_stack


def test_before():
    assert (torch.ones(2, dtype=torch.float16, device="spyre") * 2).sum().item() == 4


def test_crashes_the_device():
    from spyre_stack.runtime import state
    torch.ones(2, device="spyre")
    state.core().crash()


def test_after_one():
    assert torch.zeros(3, device="spyre").cpu().tolist() == [0, 0, 0]


def test_fails_normally():
    assert 1 == 2


def test_after_two():
    assert torch.arange(4, device="spyre").sum().item() == 6
"""


NAMES = [
    "test_before",
    "test_crashes_the_device",
    "test_after_one",
    "test_fails_normally",
    "test_after_two",
]


def _run(tmp_path: Path, source: str, names: list[str]) -> ShardRun:
    (tmp_path / "test_suite.py").write_text(source)
    runner = get_backend("spyre").runner_config(rootdir=tmp_path)
    return run_shard(
        [f"test_suite.py::{name}" for name in names],
        launcher=launcher_for(runner, warm=False),
        pytest_args=runner.pytest_args,
        per_test_timeout=600,
        device_time_property=runner.device_time_property,
        workdir=tmp_path / "run",
    )


def test_crash_is_isolated_and_the_rest_still_runs(tmp_path: Path) -> None:
    run = _run(tmp_path, SUITE, NAMES)
    by_name = {r.test_id.rsplit("::", 1)[1]: r for r in run.results}
    assert by_name["test_before"].outcome == Outcome.PASSED
    assert by_name["test_crashes_the_device"].outcome == Outcome.CRASHED
    assert "SIGABRT" in (by_name["test_crashes_the_device"].message or "")
    assert by_name["test_after_one"].outcome == Outcome.PASSED
    assert by_name["test_fails_normally"].outcome == Outcome.FAILED
    assert by_name["test_after_two"].outcome == Outcome.PASSED
    assert run.children == 2
    assert Counter(r.outcome.value for r in run.results) == {"crashed": 1, "failed": 1, "passed": 3}
    before = by_name["test_before"].device_time_us
    assert before is not None and before > 0


def test_a_clean_run_takes_one_process(tmp_path: Path) -> None:
    run = _run(
        tmp_path,
        "def test_one():\n    pass\n\ndef test_two():\n    pass\n",
        ["test_one", "test_two"],
    )
    assert run.children == 1
    assert [r.outcome for r in run.results] == [Outcome.PASSED, Outcome.PASSED]
