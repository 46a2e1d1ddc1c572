"""The driver seam: a backend is one folder and one entry point (pyproject.toml), and every
pytest run of ours is started through it.

The toy ``cpu`` backend (backends/cpu) goes through the same inventory, selector, RunPlan and
harness as ``spyre``: collected, planned, stored and read back, run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import plugins
from backends import Backend, BackendError, get_backend
from backends.base import PROJECT_ROOT, PYTEST_MAIN, FlatEstimate, fresh_pytest
from config.settings import Settings
from inventory.build import universe_from_inventory
from planner import RunPlan, StoredPlan
from store.outcomes import Outcome
from workers.harness.pools import default_runner, launcher_for, runner_backend
from workers.harness.runner import run_shard


def test_every_registered_backend_is_one_folder() -> None:
    ours = [
        ep
        for ep in plugins.installed(plugins.BACKENDS)
        if ep.dist is not None and ep.dist.name == "crcr-relay"
    ]
    assert [ep.name for ep in ours] == ["cpu", "spyre"]
    for ep in ours:
        assert ep.module == f"backends.{ep.name}"
        assert (PROJECT_ROOT / "backends" / ep.name / "__init__.py").is_file()
        backend = get_backend(ep.name)
        assert isinstance(backend, Backend) and backend.name == ep.name
    with pytest.raises(BackendError, match="backend 'tpu': no installed backend has that name"):
        get_backend("tpu")


def test_pytest_args_are_written_once_for_every_run() -> None:
    spyre = get_backend("spyre")
    specs = list(spyre.default_specs)
    args = spyre.pytest_args(
        plugins=["inventory.collect_plugin"],
        options=["--collect-only"],
        specs=specs,
        rootdir=PROJECT_ROOT,
        targets=["a.py"],
    )
    assert args[:5] == ["-q", "-p", "no:cacheprovider", "-p", "no:warnings"]
    # the backend's plugin first (it registers the device before upstream's machinery loads),
    # then the spec plugin told the device and its base, then ours, their options, the targets
    order = [
        args.index(x)
        for x in (
            "spyre_stack.testing.pytest_plugin",
            "testspecs.pytest_plugin",
            "inventory.collect_plugin",
            "--collect-only",
            "a.py",
        )
    ]
    assert order == sorted(order)
    assert args[args.index("--spec-device") + 1] == "spyre"
    assert args[args.index("--spec") + 1] == str(specs[0].resolve())
    assert fresh_pytest(["-q"], python="/x/python") == ["/x/python", "-P", str(PYTEST_MAIN), "-q"]
    runner = spyre.runner_config(specs)
    assert runner.pytest_args == spyre.pytest_args(specs=specs, rootdir=PROJECT_ROOT)
    assert runner.env["TORCH_TEST_DEVICES"].endswith("testspecs/device_base.py")
    assert "spyre_stack:register" in runner.preload
    assert runner.device_time_property == "spyre_device_us"


def test_a_fresh_pytest_has_a_module_for_every_frame_of_its_stack(tmp_path: Path) -> None:
    """Upstream's device-generic tests walk the stack several times a test; ``inspect`` scans
    every loaded module for a frame whose file no module has (``runpy``'s, under ``python -m
    pytest``), each time. A pytest started by fresh_pytest has none."""
    (tmp_path / "test_frames.py").write_text(
        "import inspect\n\n\ndef test_frames():\n"
        "    lost = [f.filename for f in inspect.stack(0) if inspect.getmodule(f.frame) is None]\n"
        "    assert lost == []\n",
        encoding="utf-8",
    )
    args = ["-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), "test_frames.py"]
    done = subprocess.run(fresh_pytest(args), cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:]
    runpy = [sys.executable, "-P", "-m", "pytest", *args]
    done = subprocess.run(runpy, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 1 and "<frozen runpy>" in done.stdout  # what it avoids


def test_the_runner_backend_and_its_specs_are_resolved_in_one_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RELAY_RUNNER_BACKEND under RELAY_RUNNER_SPECS (resolved from the working folder), else under
    the backend's own specs: what the planner plans with and what the warm pool at boot runs."""
    monkeypatch.chdir(tmp_path)
    backend, specs = runner_backend(Settings(runner_backend="cpu"))
    assert backend.name == "cpu" and specs == list(backend.default_specs)
    settings = Settings(runner_backend="spyre", runner_specs='["mine.yaml"]')
    backend, specs = runner_backend(settings)
    assert backend.name == "spyre" and specs == [tmp_path / "mine.yaml"]
    assert default_runner(settings) == backend.runner_config([tmp_path / "mine.yaml"])


def test_the_cpu_backend_plans_and_runs_a_few_variants_through_the_same_harness(
    tmp_path: Path,
    plan_everything: Any,
) -> None:
    cpu = get_backend("cpu")
    assert isinstance(cpu.duration_estimate(), FlatEstimate)  # no cost model: a flat prior
    universe = universe_from_inventory(backend="cpu", suites=("errors",), cache_dir=tmp_path)
    assert len(universe) > 50
    assert all(v.cls and v.cls.endswith("CPU") and "_cpu" in v.name for v in universe.variants)
    plan = plan_everything(
        universe, reason="toy backend", base="x", head="x", backend="cpu", budget_seconds=0.8
    )
    assert len(plan.tests) == 4  # 0.8 runner-seconds of budget at the flat 0.2 s a variant
    assert {t.seconds_source for t in plan.tests} == {"flat-runner-prior"}
    run_plan = RunPlan.for_selection(
        plan, {v.test_id: v.node_id for v in universe.variants}, runner=cpu.runner_config()
    )
    # stored with the job (portable) and resolved by the shard runner: the same recipe
    stored = StoredPlan.model_validate(run_plan.stored()["plan"]).runner
    runner = stored.resolved(spec_dir=tmp_path / "specs")
    assert runner == run_plan.runner and stored.rootdir != runner.rootdir
    assert "spyre" not in " ".join(runner.pytest_args) and runner.device_time_property is None
    ids = [t for shard in run_plan.shards for t in shard]
    run = run_shard(
        ids,
        launcher=launcher_for(runner, warm=False),
        pytest_args=runner.pytest_args,
        per_test_timeout=120,
        device_time_property=runner.device_time_property,
        workdir=tmp_path / "run",
    )
    assert [r.test_id for r in run.results] == ids
    assert {r.outcome for r in run.results} <= {Outcome.PASSED, Outcome.SKIPPED}
    assert Outcome.PASSED in {r.outcome for r in run.results}
    assert all(r.device_time_us is None for r in run.results)
