"""`relay specs` commands: validate, lint, new, explain, schema."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import jsonschema
import yaml
from typer.testing import CliRunner

from cli import build_app
from testspecs.lint import lint
from testspecs.loader import load_text

FIXTURES = Path(__file__).parent / "fixtures"
LINT = FIXTURES / "lint"
runner = CliRunner()


def relay(*args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(build_app(), ["specs", *args])


def test_validate_accepts_folder_of_torch_spyre_files() -> None:
    result = relay("validate", str(FIXTURES / "valid"))
    assert result.exit_code == 0, result.output
    assert result.output.strip().endswith("8 spec file(s) valid")


def test_validate_reports_every_error_and_fails(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "invalid" / "three_errors.yaml", tmp_path / "a.yaml")
    shutil.copy(FIXTURES / "invalid" / "bad_mode.yaml", tmp_path / "b.yaml")
    result = relay("validate", str(tmp_path))
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert lines[-1] == "5 error(s) in 2 file(s)"
    assert lines[0].startswith(
        f"{tmp_path / 'a.yaml'}:6:17: test_suite_config.files[0].tests[0].mode:"
    )


def test_lint_finds_planted_problems() -> None:
    findings = lint([LINT / "specs"], tests_root=LINT / "torch", today=dt.date(2026, 6, 1))
    got = sorted((f.kind, Path(f.loc.file).name, f.loc.line) for f in findings)
    assert got == [
        ("dead-pattern", "alpha.yaml", 9),
        ("dead-pattern", "alpha.yaml", 11),
        ("duplicate", "alpha_more.yaml", 5),
        ("expired", "alpha.yaml", 6),
        ("missing-file", "gamma.yaml", 7),
        ("overlap", "alpha_more.yaml", 7),
        ("uncovered", "test_alpha.py", 7),
        ("uncovered-file", "test_beta.py", 6),  # no spec names it: a warning
        ("variant-name", "alpha.yaml", 11),
    ]
    messages = {f.kind: f.message for f in findings}
    assert messages["duplicate"].startswith(
        "'TestAlpha::test_add' for ${TORCH_ROOT}/test/test_alpha.py is already listed at "
    )
    assert messages["expired"] == "xfail for ['TestAlpha::test_pow_.*'] expired on 2020-01-01"
    # a literal entry for a test a pattern of an earlier entry already matched never applies
    assert messages["overlap"].startswith("1 test(s) also matched by the entry at ")
    assert messages["overlap"].endswith(
        "alpha.yaml:6:11, which applies first (rule 4): TestAlpha::test_pow_scalar"
    )


def test_lint_cli_exit_codes() -> None:
    bad = relay("lint", str(LINT / "specs"), "--tests-root", str(LINT / "torch"))
    assert bad.exit_code == 1 and "9 finding(s)" in bad.output
    good = relay("lint", str(LINT / "specs" / "gamma.yaml"))
    assert good.exit_code == 0 and good.output.strip() == "0 finding(s)"


def test_lint_reports_load_errors() -> None:
    findings = lint([FIXTURES / "invalid" / "bad_regex.yaml"])
    assert [f.kind for f in findings] == ["error", "error"]


def test_new_lists_device_generic_tests_and_validates(tmp_path: Path) -> None:
    result = relay(
        "new", str(LINT / "torch" / "test" / "test_alpha.py"), "--tests-root", str(LINT / "torch")
    )
    assert result.exit_code == 0, result.output
    spec = load_text(result.output, "new.yaml")
    entries = spec.document.files[0].tests
    assert spec.document.files[0].path == "${TORCH_ROOT}/test/test_alpha.py"
    assert [e.names[0] for e in entries] == [
        "TestAlpha::test_add",
        "TestAlpha::test_pow_tensor",
        "TestAlpha::test_pow_scalar",
        "TestAlpha::test_inherited",
    ]
    assert all(e.mode == "xfail" for e in entries) and result.output.count("TODO: decide") == 4


def test_explain_cli() -> None:
    result = relay(
        "explain",
        "test/test_alpha.py::TestAlphaPRIVATEUSE1::test_pow_tensor_spyre",
        "--spec",
        str(LINT / "specs" / "alpha.yaml"),
        "--tests-root",
        str(LINT / "torch"),
    )
    assert result.exit_code == 0, result.output
    assert "run as xfail" in result.output
    assert (
        "alpha.yaml:6:11: tests[1] ['TestAlpha::test_pow_.*'] (rule: rule 1: listed with a mode)"
        in result.output
    )


def test_schema_cli_validates_fixtures(tmp_path: Path) -> None:
    out = tmp_path / "schema.json"
    assert relay("schema", "--output", str(out)).exit_code == 0
    schema = json.loads(out.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for path in sorted((FIXTURES / "valid").glob("*.yaml")):
        as_json = json.loads(json.dumps(yaml.safe_load(path.read_text()), default=str))
        errors = [e.message for e in validator.iter_errors(as_json)]
        assert errors == [], path
    bad = yaml.safe_load((FIXTURES / "invalid" / "unknown_key.yaml").read_text())
    assert any("unlisted_test_mod" in e.message for e in validator.iter_errors(bad))


def test_committed_schema_is_fresh() -> None:
    from testspecs.schema import SCHEMA_FILE, schema_text

    assert SCHEMA_FILE.read_text() == schema_text(), "run: relay specs schema --output " + str(
        SCHEMA_FILE
    )


COLLECT = FIXTURES / "lint_collect"


def test_lint_collects_so_generated_tests_count() -> None:
    """Names a module generates at import time (setattr from a module-level function, as
    upstream's test_binary_ufuncs.py does) are collected by pytest: no dead pattern for them.
    Names that exist but never run on the device are warnings, not errors."""
    spec = COLLECT / "specs" / "generated.yaml"
    result = relay("lint", str(spec), "--tests-root", str(COLLECT / "torch"))
    lines = result.output.strip().splitlines()
    found = sorted((line.split(": ")[1], line.split(":")[1]) for line in lines[:-1])
    assert found == [
        ("dead-pattern", "13"),  # TestGenerated::test_gone: nothing has that name
        ("warning", "10"),  # test_only_double exists only for float64, which the spec removes
        ("warning", "12"),  # TestCpuOnly is instantiated only_for="cpu"
        ("warning", "8"),  # the xfail pattern also matches the test listed literally before it
    ], result.output
    assert (
        "overlap-pattern: 1 test(s) also matched by the entry at "
        f"{spec}:7:11, which applies first (rule 4): TestGenerated::test___add___not_implemented"
    ) in result.output
    assert "dtype-filtered: 'TestGenerated::test_only_double'" in result.output
    assert "(float64)" in result.output
    assert "restricted: 'TestCpuOnly::test_host_thing'" in result.output
    assert lines[-1] == "4 finding(s) (3 warning(s))"
    assert result.exit_code == 1  # the dead pattern is an error; the warnings alone are not


def test_lint_warnings_alone_exit_zero(tmp_path: Path) -> None:
    text = (COLLECT / "specs" / "generated.yaml").read_text()
    spec = tmp_path / "ok.yaml"
    spec.write_text(text.replace("        - names: [TestGenerated::test_gone]\n", ""))
    result = relay("lint", str(spec), "--tests-root", str(COLLECT / "torch"))
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1] == "3 finding(s) (3 warning(s))"


def test_static_lint_cannot_see_generated_tests() -> None:
    """Reading the source (--static, the old behaviour) reports the generated names as dead."""
    spec = COLLECT / "specs" / "generated.yaml"
    result = relay("lint", str(spec), "--tests-root", str(COLLECT / "torch"), "--static")
    assert "'TestGenerated::test___add___not_implemented' matches no test" in result.output
    assert result.exit_code == 1
