"""The upstream-style device-generic module (generic/device_generic_ops.py) runs on spyre.

It runs in its own pytest process with ``-p spyre_stack.testing.pytest_plugin`` (the plugin
registers the backend before ``common_device_type`` is imported and points
``TORCH_TEST_DEVICES`` at ``spyre_stack/testing/device_base.py``), crash-isolated. The summary is
attached to this test's report (``record_property``) and printed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from spyre_stack.testing.isolate import run_isolated

MODULE = "tests/spyre_stack/generic/device_generic_ops.py"


def test_generic_module_runs_privateuse1_variants_on_spyre(
    record_property: Callable[[str, object], None], repo_root: Any,
) -> None:
    run = run_isolated([MODULE], cwd=repo_root, env={"SPYRE_SILENCE_DOWNCAST_WARNING": "1"}, timeout=900)
    ids = list(run.outcomes)
    assert ids, f"no tests ran: {run.gave_up}\n{run.output_tail}"
    assert all("TestSpyreGenericOpsPRIVATEUSE1::" in i for i in ids)
    assert all("_spyre_" in i for i in ids)
    summary = run.summary()
    record_property("spyre_generic_summary", summary)
    record_property("spyre_generic_processes", run.processes)
    device_us = sum(o.device_us or 0.0 for o in run.outcomes.values())
    record_property("spyre_generic_device_us", round(device_us, 1))
    print(f"device-generic on spyre: {summary}, {run.processes} process(es), "
          f"{device_us / 1e3:.1f} ms simulated device time")  # fmt: skip
    failures = {i: o.message[-300:] for i, o in run.outcomes.items() if o.outcome != "passed"}
    assert not failures, failures
    assert summary["passed"] >= 60
    assert device_us > 0
