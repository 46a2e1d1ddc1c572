"""`relay specs new` and `relay specs explain` as a spec author meets them: a new spec for one of
the bundled suites lints clean on the same file, a missing file or an unknown test id is one line
and a non-zero exit, and `explain` decides with what pytest collects for the device (the op,
dtype and module the spec plugin sees), not with what the id's name suggests.

Each case collects one bundled suite file with pytest (as `specs lint` does), so the files are
the two smallest: test_errors.py (226 variants) and test_modules.py (532).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from cli import build_app

ERRORS = "spyre_stack/conformance/test_errors.py"
MODULES = "spyre_stack/conformance/test_modules.py"


@pytest.fixture(autouse=True)
def in_project(repo_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The commands run from the project root, as the README's examples do."""
    monkeypatch.chdir(repo_root)


def specs(*args: str) -> Result:
    return CliRunner().invoke(build_app(), ["specs", *args])


def test_a_new_spec_for_a_bundled_suite_lints_clean_on_the_same_file(tmp_path: Path) -> None:
    new = specs("new", ERRORS)
    assert new.exit_code == 0, new.output
    assert f"    - path: ${{TORCH_DEVICE_ROOT}}/{ERRORS}\n" in new.output
    # the template's name ends in _cpu (test_error_inputs_match_cpu): a base name, not a variant
    assert "        - names: [TestErrorInputs::test_error_inputs_match_cpu]\n" in new.output
    assert f"relay specs lint SPEC --device-root {Path.cwd()}" in new.output.splitlines()[1]
    spec = tmp_path / "errors.yaml"
    spec.write_text(new.output)

    lint = specs("lint", str(spec), "--device-root", ".")
    errors = [line for line in lint.output.splitlines()[:-1] if ": warning: " not in line]
    assert (lint.exit_code, errors) == (0, []), lint.output
    # the suite's other files have no entry: reported, as warnings (nothing runs from them)
    out = next(line for line in lint.output.splitlines() if "conformance/test_out.py:" in line)
    assert "warning: uncovered-file: " in out, lint.output


def test_a_new_spec_for_an_upstream_file_is_relative_to_its_checkout(tmp_path: Path) -> None:
    test_dir = tmp_path / "pytorch" / "test" / "nn"
    test_dir.mkdir(parents=True)
    (test_dir / "test_pad.py").write_text(
        "from torch.testing._internal.common_device_type import instantiate_device_type_tests\n"
        "from torch.testing._internal.common_utils import TestCase\n\n"
        "class TestPad(TestCase):\n    def test_pad(self, device):\n        pass\n\n"
        "instantiate_device_type_tests(TestPad, globals())\n"
    )
    new = specs("new", str(test_dir / "test_pad.py"))
    assert new.exit_code == 0, new.output
    assert "    - path: ${TORCH_ROOT}/test/nn/test_pad.py\n" in new.output
    assert f"--tests-root {tmp_path / 'pytorch'}" in new.output


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("spyre_stack/conformance/test_nothing.py", "no such file"),
        ("spyre_stack/conformance", "not a file"),
        ("README.md", "not a Python test file"),
    ],
)
def test_new_on_a_file_it_cannot_read_is_one_line(path: str, message: str) -> None:
    result = specs("new", path)
    assert result.exit_code == 2
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: {message}"), result.output


def test_explain_reports_what_the_plugin_sees() -> None:
    test_id = f"{MODULES}::TestModulesPRIVATEUSE1::test_module_forward_compare_cpu_nn_Linear_spyre_float32"
    result = specs("explain", test_id)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1] == (
        "  base name: TestModules::test_module_forward_compare_cpu; op: None; dtype: float32; "
        "module: nn.Linear"
    ), result.output
    op_id = f"{ERRORS}::TestErrorInputsPRIVATEUSE1::test_error_inputs_match_cpu_T_spyre"
    result = specs("explain", op_id)
    assert result.exit_code == 0, result.output
    assert "  base name: TestErrorInputs::test_error_inputs_match_cpu; op: T; dtype: None;" in (
        result.output
    ), result.output


@pytest.mark.parametrize(
    ("test_id", "code", "message"),
    [
        ("test_foo", 2, "error: 'test_foo' is not a test id (FILE::CLASS::TEST)"),
        (
            "test/test_foo.py::TestFoo::test_foo",
            2,
            "error: test/test_foo.py: no such test file (ids are relative to",
        ),
        (
            f"{ERRORS}::TestErrorInputsPRIVATEUSE1::test_error_inputs_match_cpu_nosuchop_spyre",
            1,
            f"error: pytest collects no test "
            f"'TestErrorInputsPRIVATEUSE1::test_error_inputs_match_cpu_nosuchop_spyre' from "
            f"{ERRORS} for spyre (226 tests there)",
        ),
    ],
)
def test_explain_of_an_unknown_test_is_one_line(test_id: str, code: int, message: str) -> None:
    result = specs("explain", test_id)
    assert result.exit_code == code, result.output
    assert len(result.output.splitlines()) == 1 and result.output.startswith(message), result.output
