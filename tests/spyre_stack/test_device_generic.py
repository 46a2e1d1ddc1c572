"""The upstream-style device-generic module (generic/device_generic_ops.py) runs on spyre.

It is collected and run with the spyre backend's pytest recipe (its plugin registers the backend
before ``common_device_type`` is imported and points ``TORCH_TEST_DEVICES`` at
``spyre_stack/testing/device_base.py``) by the workers' harness, crash-isolated. The summary is
attached to this test's report (``record_property``) and printed.
"""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from collections.abc import Callable
from typing import Any

from backends import get_backend
from backends.base import fresh_pytest
from store.outcomes import Outcome
from workers.harness.pools import launcher_for
from workers.harness.runner import run_shard

MODULE = "tests/spyre_stack/generic/device_generic_ops.py"


def test_generic_module_runs_privateuse1_variants_on_spyre(
    record_property: Callable[[str, object], None],
    repo_root: Any,
) -> None:
    spyre = get_backend("spyre")
    runner = spyre.runner_config(rootdir=repo_root)
    collect = subprocess.run(
        fresh_pytest(
            spyre.pytest_args(options=["--collect-only"], rootdir=repo_root, targets=[MODULE])
        ),
        cwd=repo_root,
        env={**os.environ, **runner.env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    ids = [line for line in collect.stdout.splitlines() if line.startswith(f"{MODULE}::")]
    assert ids, collect.stdout[-3000:] + collect.stderr[-3000:]
    assert all("TestSpyreGenericOpsPRIVATEUSE1::" in i for i in ids)
    assert all("_spyre_" in i for i in ids)
    run = run_shard(
        ids,
        launcher=launcher_for(runner, warm=False),
        pytest_args=runner.pytest_args,
        per_test_timeout=600,
        device_time_property=runner.device_time_property,
    )
    summary = dict(Counter(r.outcome.value for r in run.results))
    record_property("spyre_generic_summary", summary)
    record_property("spyre_generic_processes", run.children)
    device_us = sum(r.device_time_us or 0.0 for r in run.results)
    record_property("spyre_generic_device_us", round(device_us, 1))
    print(f"device-generic on spyre: {summary}, {run.children} process(es), "
          f"{device_us / 1e3:.1f} ms simulated device time")  # fmt: skip
    failures = {r.test_id: (r.message or "")[-300:] for r in run.results
                if r.outcome != Outcome.PASSED}  # fmt: skip
    assert not failures, failures
    assert summary["passed"] >= 60
    assert device_us > 0
