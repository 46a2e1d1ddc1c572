"""The bundled simulated IBM Spyre device (``spyre_stack``), as a backend driver.

Its tests are PyTorch's device-generic ones instantiated for ``privateuse1``: the
``spyre_stack.testing.pytest_plugin`` registers the device before upstream's machinery is
imported, its spec (``specs/device.yaml``, generated from the op table by :mod:`.specgen`)
decides modes, and its device-time hook is the simulator's cost model (:mod:`.estimate`) before
a test ran, the traced simulated time (``spyre_device_us``) after.
"""

from __future__ import annotations

from pathlib import Path

from backends.base import TORCH_TEST_PRELOAD, Backend, DurationEstimate, package_dir

SPECS_DIR = Path(__file__).resolve().parent / "specs"
# the spec promoted from full runs (`relay specs promote`) and the run summary it is made from
PROMOTED_SPEC = SPECS_DIR / "promoted.yaml"
BASELINE_SUMMARY = Path(__file__).resolve().parent / "baseline-summary.json"


class SpyreBackend(Backend):
    def duration_estimate(self) -> DurationEstimate:
        from backends.spyre.estimate import SimulatorEstimate

        return SimulatorEstimate()


def backend() -> Backend:
    env = {"PYTORCH_TESTING_DEVICE_ONLY_FOR": "privateuse1"}
    root = package_dir("spyre_stack")
    device_base = root / "testing" / "device_base.py" if root else None
    if device_base is not None and device_base.is_file():
        env["TORCH_TEST_DEVICES"] = str(device_base)
    else:
        device_base = None
    return SpyreBackend(
        name="spyre",
        env=env,
        plugins=("spyre_stack.testing.pytest_plugin",),
        package="spyre_stack",
        # the bundled suites are the inventory's revision, not the backend's version
        exclude_from_version=("conformance",),
        default_specs=(SPECS_DIR,) if SPECS_DIR.is_dir() else (),
        preload=(TORCH_TEST_PRELOAD[0], "spyre_stack:register", *TORCH_TEST_PRELOAD[1:]),
        device_time_property="spyre_device_us",
        device_base=device_base,
        run_env={"SPYRE_SILENCE_DOWNCAST_WARNING": "1"},
        outcome_env=(
            "SPYRE_DEVICE_MODEL",
            "SPYRE_OP_POLICY",
            "SPYRE_DEVICE_COUNT",
            "SPYRE_MEMORY_BYTES",
        ),
    )
