"""The pytest plugin on a device-generic module: each mode behaves as the reference table says.

The runs are pytest subprocesses (the plugin renames privateuse1 and sets TORCH_TEST_DEVICES, which
must not leak into this process). The device base is a stand-in registered by
fixtures/plugin/fake_device_base.py: the demo tests compute on CPU, so no kernels are needed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from testspecs.wrapper import restricted_classes, write_wrapper

PLUGIN = Path(__file__).parent / "fixtures" / "plugin"
ROOT = Path(__file__).resolve().parents[2]


def run_pytest(
    tmp_path: Path,
    *extra: str,
    module: Path = PLUGIN / "test" / "test_modes_demo.py",
    devices: int = 1,
) -> tuple[int, str]:
    ini = tmp_path / "pytest.ini"
    ini.write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-c",
        str(ini),
        "--rootdir",
        str(PLUGIN),
        "-p",
        "testspecs.pytest_plugin",
        "--spec",
        str(PLUGIN / "modes_demo.yaml"),
        "--spec-device-base",
        str(PLUGIN / "fake_device_base.py"),
        "-W",
        "error",
        "-rA",
        str(module),
        *extra,
    ]
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "HOME": str(tmp_path),
        "FAKE_SPYRE_DEVICES": str(devices),
    }
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, dict, ET.Element]:
    tmp = tmp_path_factory.mktemp("plugin")
    wrapper = write_wrapper(PLUGIN / "test" / "test_restricted.py", tmp)
    assert wrapper is not None
    code, out = run_pytest(
        tmp, "--spec-report", str(tmp / "r.json"), "--junitxml", str(tmp / "j.xml"), str(wrapper)
    )
    report = {
        t["nodeid"].rpartition("::")[2]: t
        for t in json.loads((tmp / "r.json").read_text())["tests"]
    }
    return code, out, report, ET.parse(tmp / "j.xml").getroot()


def test_modes_map_to_outcomes(full_run) -> None:  # type: ignore[no-untyped-def]
    code, out, report, _ = full_run
    outcomes = {name: rec["outcome"] for name, rec in report.items()}
    assert code == 1, out  # a mandatory failure and a strict pass fail the run
    assert outcomes["test_mand_pass_spyre"] == "passed"
    assert outcomes["test_mand_fail_spyre"] == "failed"
    assert outcomes["test_xf_fail_spyre"] == "xfailed"
    assert outcomes["test_xf_pass_spyre"] == "xpassed"
    # a test that never ran is not an expected failure: upstream's skip and reason stand
    assert outcomes["test_xf_skip_spyre"] == "skipped"
    assert report["test_xf_skip_spyre"]["message"] == "no sample inputs on this device"
    assert outcomes["test_strict_skip_spyre"] == "skipped"
    assert report["test_strict_skip_spyre"]["message"] == "Only runs on cuda"
    assert outcomes["test_strict_fail_spyre"] == "xfailed"
    assert outcomes["test_strict_pass_spyre"] == "failed"
    assert "[XPASS(strict)]" in report["test_strict_pass_spyre"]["message"]
    assert "FAILED" in out and "test_strict_pass_spyre" in out
    # skip: never generated, so never collected (it would raise if it ran)
    assert not any("test_never" in name for name in report)
    assert "test_never" not in out


def test_spec_filters_and_extends_variants(full_run) -> None:  # type: ignore[no-untyped-def]
    _, _, report, _ = full_run
    dtypes = sorted(n for n in report if n.startswith("test_dtypes_"))
    # int64 excluded; bfloat16 included beyond global.supported_dtypes
    assert dtypes == [
        "test_dtypes_spyre_bfloat16",
        "test_dtypes_spyre_float16",
        "test_dtypes_spyre_float32",
    ]
    opinfo = sorted(n for n in report if n.startswith("test_opinfo_"))
    assert "test_opinfo_add_spyre_float32" in opinfo
    assert "test_opinfo_add_spyre_float16" in opinfo  # dtype include extends @ops allowed_dtypes
    assert not any("_sub_" in n for n in opinfo)  # edits.ops.exclude
    assert any(n.startswith("test_opinfo_div_") for n in opinfo)  # edits.ops.include adds an OpInfo
    assert report["test_opinfo_add_spyre_float16"]["op"] == "add"
    assert report["test_opinfo_add_spyre_float16"]["dtype"] == "float16"
    # the fp16 precision override reached the test (it asserts self.precision == 0.25)
    assert report["test_dtypes_spyre_float16"]["outcome"] == "passed"
    assert report["test_cpu_move_spyre"]["outcome"] == "passed"
    assert report["test_no_cpu_move_spyre"]["outcome"] == "passed"


def test_reports_carry_mode_tags_and_entry(full_run) -> None:  # type: ignore[no-untyped-def]
    _, _, report, junit = full_run
    rec = report["test_xf_fail_spyre"]
    assert rec["mode"] == "xfail" and rec["tags"] == ["smoke", "numerics"]
    assert rec["reason"] == "https://example.invalid/issues/7"
    assert rec["entry"].endswith(
        "modes_demo.yaml:10:11: tests[2] ['TestModes::test_xf_fail', 'TestModes::test_xf_pass']"
    )
    assert rec["base"] == "TestModes::test_xf_fail"
    case = next(c for c in junit.iter("testcase") if c.get("name") == "test_xf_fail_spyre")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["spec_mode"] == "xfail"
    assert props["spec_tags"] == "smoke,numerics"
    assert props["spec_entry"] == rec["entry"]
    assert props["spec_reason"] == "https://example.invalid/issues/7"


def test_tags_and_modes_are_selectable_marks(tmp_path: Path) -> None:
    code, out = run_pytest(tmp_path, "-m", "smoke")
    assert "1 passed, 20 deselected, 1 xfailed, 1 xpassed" in out, out
    assert code == 0
    code, out = run_pytest(
        tmp_path, "-m", "not xfail and not xfail_strict and not mandatory_success"
    )
    assert code == 5 and "23 deselected" in out, out  # every spyre variant carries its mode mark


def test_wrapper_runs_classes_upstream_restricted(full_run) -> None:  # type: ignore[no-untyped-def]
    assert restricted_classes(PLUGIN / "test" / "test_restricted.py") == [
        "TestNeverInstantiated",
        "TestOnlyCpu",
    ]
    _, _, report, _ = full_run
    assert report["test_restricted_pass_spyre"]["outcome"] == "passed"
    assert report["test_restricted_pass_spyre"]["rule"] == "rule 1: unlisted -> unlisted_test_mode"
    assert report["test_restricted_xfail_spyre"]["outcome"] == "xfailed"
    assert report["test_orphan_spyre"]["outcome"] == "passed"
    assert report["test_orphan_spyre"]["mode"] == "mandatory_success"


def test_junit_report_reads_back_like_the_json(full_run, tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    from testspecs.report import read_junit

    _, _, report, junit = full_run
    path = tmp_path_factory.mktemp("junit") / "j.xml"
    ET.ElementTree(junit).write(path)
    records = {r.nodeid.rpartition("::")[2]: r for r in read_junit(path)}
    assert set(records) == set(report)
    for name, rec in records.items():
        assert (rec.outcome, rec.mode, rec.base) == (
            report[name]["outcome"],
            report[name]["mode"],
            report[name]["base"],
        ), name


def test_report_names_the_upstream_file_of_wrapped_tests(full_run) -> None:  # type: ignore[no-untyped-def]
    _, _, report, _ = full_run
    assert report["test_orphan_spyre"]["test_file"] == str(
        (PLUGIN / "test" / "test_restricted.py").resolve()
    )
    assert report["test_mand_pass_spyre"]["test_file"] == str(
        (PLUGIN / "test" / "test_modes_demo.py").resolve()
    )


@pytest.mark.parametrize("devices", [1, 2])
def test_multi_device_tests_collect_under_a_spec(tmp_path: Path, devices: int) -> None:
    # @deviceCountAtLeast asks the device base for all devices while instantiating, before any
    # setUpClass ran: the spec's base must answer without upstream's device_mod
    report_path = tmp_path / "r.json"
    code, out = run_pytest(
        tmp_path,
        "--spec-report",
        str(report_path),
        module=PLUGIN / "test" / "test_device_count.py",
        devices=devices,
    )
    report = {
        t["nodeid"].rpartition("::")[2]: t for t in json.loads(report_path.read_text())["tests"]
    }
    outcomes = {name: rec["outcome"] for name, rec in report.items()}
    assert code == 0, out
    assert outcomes["test_devices_spyre"] == "passed", out  # asserts the list of devices
    assert outcomes["test_single_spyre"] == "passed"
    if devices == 1:
        assert outcomes["test_two_devices_spyre"] == "skipped"
        assert report["test_two_devices_spyre"]["message"] == "fewer than 2 devices detected"
    else:
        assert outcomes["test_two_devices_spyre"] == "xpassed"
