"""The upstream-style device-generic module (generic/device_generic_ops.py) runs on spyre.

It is collected and run with the spyre backend's pytest recipe (its plugin registers the backend
before ``common_device_type`` is imported and points ``TORCH_TEST_DEVICES`` at
``spyre_stack/testing/device_base.py``) in one pytest process, reported by the workers' harness plugin. The summary is
attached to this test's report (``record_property``) and printed.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from collections.abc import Callable
from typing import Any

from backends import get_backend
from backends.base import fresh_pytest

MODULE = "tests/spyre_stack/generic/device_generic_ops.py"


def test_generic_module_runs_privateuse1_variants_on_spyre(
    record_property: Callable[[str, object], None], repo_root: Any, tmp_path: Any
) -> None:
    spyre = get_backend("spyre")
    runner = spyre.runner_config(rootdir=repo_root)
    events = tmp_path / "events.jsonl"
    args = spyre.pytest_args(
        plugins=["workers.harness.report_plugin"],
        options=["--relay-events", str(events), "--relay-device-time", "spyre_device_us"],
        rootdir=repo_root,
        targets=[MODULE],
    )
    proc = subprocess.run(
        fresh_pytest(args),
        cwd=repo_root,
        # the simulator's kernels: under the card (the default model) `where`'s sample inputs
        # compare a sum with a scalar on the device (`mask.sum() == 0`), `aten::eq.Scalar`,
        # which the card has no kernel for (spyre_stack/device_model.yaml)
        env={**os.environ, **runner.env, "SPYRE_DEVICE_MODEL": "simulator"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    results = (
        [r for r in map(json.loads, events.read_text().splitlines()) if r["kind"] == "result"]
        if events.exists()
        else []
    )
    ids = [r["nodeid"] for r in results]
    assert ids, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert all("TestSpyreGenericOpsPRIVATEUSE1::" in i for i in ids)
    assert all("_spyre_" in i for i in ids)
    summary = dict(Counter(r["outcome"] for r in results))
    record_property("spyre_generic_summary", summary)
    device_us = sum(r["device_us"] or 0.0 for r in results)
    record_property("spyre_generic_device_us", round(device_us, 1))
    print(f"device-generic on spyre: {summary}, {device_us / 1e3:.1f} ms simulated device time")
    failures = {
        r["nodeid"]: (r["message"] or "")[-300:] for r in results if r["outcome"] != "passed"
    }
    assert not failures, failures
    assert summary["passed"] >= 60
    assert device_us > 0
