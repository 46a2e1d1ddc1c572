"""Registration: `spyre` is a real PyTorch device after register(), and not before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch


def test_import_has_no_side_effects(run_python: Any) -> None:
    proc = run_python(
        "import torch, spyre_stack, spyre_stack.testing, spyre_stack.optable\n"
        "print(torch._C._get_privateuse1_backend_name(), hasattr(torch, 'spyre'),"
        " spyre_stack.is_registered())"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["privateuseone", "False", "False"]


def test_register_is_idempotent(spyre: None) -> None:
    import spyre_stack

    spyre_stack.register()
    spyre_stack.register()
    assert torch._C._get_privateuse1_backend_name() == "spyre"
    assert torch.spyre.is_available()  # type: ignore[attr-defined]
    assert torch.get_device_module("spyre") is torch.spyre  # type: ignore[attr-defined]


def test_factories_and_round_trip(spyre: None) -> None:
    host = torch.arange(12, dtype=torch.float16).reshape(3, 4)
    dev = host.to("spyre")
    assert dev.device == torch.device("spyre", 0)
    assert dev.is_spyre  # generated method
    assert torch.equal(dev.cpu(), host)
    assert torch.equal(host.spyre().cpu(), host)
    assert torch.empty(2, 3, device="spyre").shape == (2, 3)
    assert torch.equal(torch.zeros(5, device="spyre").cpu(), torch.zeros(5))
    r = torch.rand(1000, device="spyre", dtype=torch.float16)
    assert r.device.type == "spyre"
    assert float(r.min()) >= 0 and float(r.max()) < 1


def test_ops_run_through_the_fallback_and_stay_on_device(simulator: None) -> None:
    a = torch.randn(4, 5, dtype=torch.float64)
    d = a.to("spyre")
    out = torch.linalg.vector_norm(d.cumsum(0), dim=1)
    assert out.device.type == "spyre"
    torch.testing.assert_close(out.cpu(), torch.linalg.vector_norm(a.cumsum(0), dim=1))


def test_second_card_is_a_separate_device(spyre: None) -> None:
    assert torch.spyre.device_count() >= 2  # type: ignore[attr-defined]
    x = torch.ones(3, device="spyre:1")
    assert x.device.index == 1
    assert (x + x).device.index == 1
    with torch.spyre.device(1):  # type: ignore[attr-defined]
        assert torch.empty(1, device="spyre").device.index == 1
    assert torch.spyre.current_device() == 0  # type: ignore[attr-defined]
    assert x.data_ptr() != 0


def test_printing(simulator: None) -> None:
    # torch's formatter converts the values to float64 on the device, which the card model
    # refuses: under `card` a device tensor prints only through .cpu() (docs/device.md)
    text = repr(torch.tensor([1.5, 2.0], dtype=torch.float16, device="spyre"))
    assert "device='spyre:0'" in text and "1.5000" in text


def test_device_info_cli(spyre: None) -> None:
    from typer.testing import CliRunner

    from cli.device import app

    result = CliRunner().invoke(app, ["info", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["backend"] == "spyre"
    assert len(data["cards"]) == torch.spyre.device_count()  # type: ignore[attr-defined]
    assert data["op_table"]["native"] > 50
    # the build of this torch: its version and git revision, and this Python's ABI
    name = Path(data["build_cache"]).name
    assert name.startswith(f"spyre_stack_core-{torch.__version__}-git{torch.version.git_version[:12]}-")
    assert Path(data["build_cache"], "built.json").is_file()


def test_python_m_spyre_stack_prints_info(run_python: Any) -> None:
    proc = run_python("import runpy; runpy.run_module('spyre_stack', run_name='__main__')")
    assert proc.returncode == 0, proc.stderr
    assert "spyre:0" in proc.stdout and "op table:" in proc.stdout and "op policy:" in proc.stdout


def test_bad_policy_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from spyre_stack.config import SpyreConfig

    monkeypatch.setenv("SPYRE_OP_POLICY", "lenient")
    with pytest.raises(ValueError, match="SPYRE_OP_POLICY"):
        SpyreConfig.from_env()


def test_backends_entry_point_is_off_by_default_and_opt_in(run_python: Any) -> None:
    code = (
        "import torch, spyre_stack\nspyre_stack.register()\nprint(hasattr(torch.backends, 'spyre'))"
    )
    off = run_python(code)
    assert off.returncode == 0, off.stderr
    assert off.stdout.strip() == "False"
    on = run_python(code, env={"SPYRE_BACKENDS_ENTRY_POINT": "1"})
    assert on.returncode == 0, on.stderr
    assert on.stdout.strip() == "True"
