"""`relay device agreement` on a small upstream-style test file and a config of our own in
torch-spyre's format: fetched (from a local folder laid out like GitHub's raw files, since there
is no network here) into RELAY_VAR_DIR, collected and run by the spyre backend's pytest command
under the config, once with the card's device model and once with the simulator's own.

The card's model turns the float64 test the config records as failing into an agreement and the
device copy it records as passing into an unexpected failure; the simulator's own mode does the
reverse. The config's dead name and a test two entries match are reported as lint finds them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import build_app

TEST_FILE = """\
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests, onlyCPU
from torch.testing._internal.common_utils import TestCase, run_tests


class TestTiny(TestCase):
    def test_add(self, device):
        x = torch.ones(3, dtype=torch.float16, device=device)
        self.assertEqual((x + x).cpu(), torch.full((3,), 2.0, dtype=torch.float16))

    def test_double(self, device):
        torch.zeros(2, dtype=torch.float64, device=device)

    def test_copy(self, device):
        torch.ones(2, 3, dtype=torch.float16, device=device).t().contiguous()

    @onlyCPU
    def test_cpu_only(self, device):
        pass

    def test_dup_a(self, device):
        pass


instantiate_device_type_tests(TestTiny, globals())

if __name__ == "__main__":
    run_tests()
"""

CONFIG = """\
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_tiny_ops.py
      unlisted_test_mode: skip
      tests:
        - names:
            - TestTiny::test_add
            - TestTiny::test_copy
            - TestTiny::test_cpu_only
          mode: mandatory_success
        - names:
            - TestTiny::test_double   # RuntimeError: Spyre backend does not support dtype Double
            - TestTiny::test_gone
          mode: xfail
        - names:
            - "TestTiny::test_dup_.*"
          mode: mandatory_success
        - names:
            - TestTiny::test_dup_a
          mode: xfail
"""

TORCH_SHA, SPYRE_SHA = "0123456789abcdef0123456789abcdef01234567", "fedcba9"


@pytest.fixture
def raw_files(tmp_path: Path) -> str:
    """A folder laid out like raw.githubusercontent.com, as a file:// URL."""
    raw = tmp_path / "raw"
    test = raw / "pytorch" / "pytorch" / TORCH_SHA / "test" / "test_tiny_ops.py"
    # torch-spyre keeps some configs as tests/configs/<name>.yaml (--config-path says so)
    config = raw / "torch-spyre" / "torch-spyre" / SPYRE_SHA / "tests" / "configs"
    config = config / "test_tiny_ops.yaml"
    for path, text in ((test, TEST_FILE), (config, CONFIG)):
        path.parent.mkdir(parents=True)
        path.write_text(text)
    return raw.as_uri()


def _statuses(output: str) -> tuple[dict[str, str], dict[str, object]]:
    (result,) = json.loads(output)
    return {n["name"].split("::")[1]: n["status"] for n in result["names"]}, result


@pytest.mark.long
def test_fetched_files_under_the_cards_model(fresh_host: Path, raw_files: str) -> None:
    args = ["device", "agreement", "--fetch", "--torch-commit", TORCH_SHA, "--spyre-commit",
            SPYRE_SHA, "--file", "test_tiny_ops", "--from", raw_files, "--device-model", "card",
            "--config-path", "tests/configs/{name}.yaml", "--json"]  # fmt: skip
    out = CliRunner().invoke(build_app(), args)
    assert out.exit_code == 0, out.output
    cache = fresh_host / "upstream-tests"
    assert (cache / f"pytorch-{TORCH_SHA}" / "test" / "test_tiny_ops.py").read_text() == TEST_FILE
    assert (cache / f"torch-spyre-{SPYRE_SHA}" / "test_tiny_ops.yaml").read_text() == CONFIG
    status, result = _statuses(out.stdout)
    assert status == {
        "test_add": "agree",
        "test_copy": "unexpected-failure",
        "test_cpu_only": "not-run",
        "test_double": "agree",  # the card refuses float64, as the config records
        "test_gone": "no-test",
        "test_dup_.*": "agree",
        "test_dup_a": "shadowed",
    }
    (message,) = result["failures_by_message"]
    assert message.startswith("RuntimeError: Error: In-device copy not implemented")
    findings = "\n".join(result["findings"])  # type: ignore[arg-type]
    assert "dead-pattern: 'TestTiny::test_gone' matches no test" in findings
    assert "overlap: 1 test(s) also matched by the entry at" in findings


@pytest.mark.long  # a second collection and run of the file (about 30-60 s on a shared machine)
def test_local_folders_under_the_simulators_own_mode(tmp_path: Path, raw_files: str) -> None:
    configs, tests = tmp_path / "configs", tmp_path / "pytorch" / "test"
    configs.mkdir()
    tests.mkdir(parents=True)
    (configs / "test_tiny_ops.yaml").write_text(CONFIG)
    (tests / "test_tiny_ops.py").write_text(TEST_FILE)
    args = ["device", "agreement", "--configs", str(configs), "--tests", str(tests.parent),
            "--device-model", "simulator"]  # fmt: skip
    out = CliRunner().invoke(build_app(), args)
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert "  7 entry names: 3 agree, 1 xpass, 1 not-run, 1 shadowed, 1 no-test" in lines
    xpass = lines.index(
        "  XPASS: the record says it fails, the simulator passes (by the config's reason):"
    )
    assert lines[xpass + 1 : xpass + 3] == [
        "    [1] RuntimeError: Spyre backend does not support dtype Double",
        "        test_double",
    ]
    table = next(line for line in lines if line.startswith("test/test_tiny_ops.py"))
    assert table.split()[1:5] == ["3", "4", "75.0", "7"]


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    runner, app = CliRunner(), build_app()
    out = runner.invoke(app, ["device", "agreement", "--configs", str(tmp_path), "--tests", "."])
    assert (out.exit_code, out.output) == (2, f"error: {tmp_path}: no .yaml configs\n")
    out = runner.invoke(app, ["device", "agreement", "--fetch", "--torch-commit", "main",
                              "--spyre-commit", SPYRE_SHA])  # fmt: skip
    assert out.output == "error: torch commit 'main' is not a commit hash (7-40 hex)\n"
    out = runner.invoke(app, ["device", "agreement", "--fetch", "--torch-commit", SPYRE_SHA,
                              "--spyre-commit", SPYRE_SHA, "--config-path", "/x.yaml"])  # fmt: skip
    assert out.output == "error: --config-path '/x.yaml': a relative path with {name}\n"
    out = runner.invoke(app, ["device", "agreement", "--configs", ".", "--device-model", "gpu"])
    assert out.output == "error: --device-model must be simulator or card, not 'gpu'\n"
