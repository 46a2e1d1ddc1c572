"""A crash inside one test does not lose the results of the others.

The forced crash is real: the test calls the C++ core's ``crash()``, which aborts the process.
``run_isolated`` records that test as crashed and runs the rest in a fresh process.
"""

from __future__ import annotations

from pathlib import Path

from spyre_stack.testing.isolate import run_isolated

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


def test_crash_is_isolated_and_the_rest_still_runs(tmp_path: Path, repo_root: Path) -> None:
    module = tmp_path / "test_crashy.py"
    module.write_text(SUITE)
    run = run_isolated(
        [str(module)],
        cwd=repo_root,
        env={"SPYRE_SILENCE_DOWNCAST_WARNING": "1", "PYTHONPATH": str(repo_root)},
        timeout=600,
    )
    by_name = {nodeid.rsplit("::", 1)[1]: o for nodeid, o in run.outcomes.items()}
    assert by_name["test_before"].outcome == "passed"
    assert by_name["test_crashes_the_device"].outcome == "crashed"
    assert "SIGABRT" in by_name["test_crashes_the_device"].message
    assert by_name["test_after_one"].outcome == "passed"
    assert by_name["test_fails_normally"].outcome == "failed"
    assert by_name["test_after_two"].outcome == "passed"
    assert run.processes == 2
    assert run.return_codes[0] < 0
    assert run.summary() == {"crashed": 1, "failed": 1, "passed": 3}
    assert by_name["test_before"].device_us is not None and by_name["test_before"].device_us > 0


def test_a_clean_run_takes_one_process(tmp_path: Path, repo_root: Path) -> None:
    module = tmp_path / "test_clean.py"
    module.write_text("def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    run = run_isolated([str(module)], cwd=repo_root, plugins=(), timeout=120)
    assert run.processes == 1
    assert run.summary() == {"passed": 2}
