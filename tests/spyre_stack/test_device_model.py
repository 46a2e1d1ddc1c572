"""The device model: the card's support table, its sources, and the errors SPYRE_DEVICE_MODEL=card
makes the simulator raise (the real stack's, as torch-spyre's public record shows them)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from spyre_stack import device_model


@pytest.fixture
def card(spyre: None) -> Iterator[None]:
    """Enforce the card's refusals for one test (the default model; explicit, so a test that set
    ``simulator`` before cannot leak into these), then restore the model that was in force."""
    from spyre_stack.runtime import state

    before = state.device_model_mode()
    state.apply_device_model("card")
    yield
    state.apply_device_model(before)


def half(*shape: int) -> torch.Tensor:
    return torch.ones(*shape, dtype=torch.float16, device="spyre")


def test_every_row_names_its_source_and_refusals_their_error() -> None:
    model = device_model.load()
    assert model.row("float16").card == "native"  # type: ignore[union-attr]
    assert model.row("float32").card == "downcast"  # type: ignore[union-attr]
    for name in ("float64", "complex64", "complex128"):
        row = model.row(name)
        assert row is not None and row.card == "refused" and "does not support dtype" in row.error
    for row in model.rows:
        assert row.source
        if row.card == "unknown":
            assert row.source.startswith("unknown")
    r = model.refusals()
    assert set(r.dtypes) == {"float64", "complex32", "complex64", "complex128"}
    assert r.device_copy and r.resize
    assert r.ops["clone"].startswith("in-device-copy|")
    assert r.ops["eq.Scalar"].startswith("no-kernel|")
    assert "random.from" not in r.ops  # the card draws int64 (mandatory int64 variants)


def test_malformed_model_reports_every_problem(tmp_path: Path) -> None:
    bad = tmp_path / "model.yaml"
    bad.write_text(
        "rows:\n"
        "  - {kind: dtype, subject: float64, card: refused, source: somewhere}\n"
        "  - {kind: op, subject: index, card: maybe, source: x}\n"
        "  - {kind: dtype, subject: int8, card: unknown, source: 'the docs'}\n"
        "  - {kind: copy, subject: copies, card: refused, error: E, source: s}\n"
    )
    with pytest.raises(device_model.DeviceModelError) as e:
        device_model.load(bad)
    lines = str(e.value).splitlines()
    assert len(lines) == 4, lines
    assert "rows[0] ('float64'): a refused row must give the error" in lines[0]
    assert "rows[1] ('index'): card 'maybe'" in lines[1]
    assert "rows[2] ('int8'): an unknown row's source must start with 'unknown'" in lines[2]
    assert "rows[3] ('copies'): a refused copy or resize row must name the op" in lines[3]


CARD_ERRORS: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    (
        "float64",
        lambda: torch.zeros(2, dtype=torch.float64, device="spyre"),
        RuntimeError,
        "Spyre backend does not support dtype Double",
    ),
    (
        "complex64",
        lambda: torch.zeros(2, dtype=torch.complex64, device="spyre"),
        RuntimeError,
        "Spyre backend does not support dtype ComplexFloat",
    ),
    (
        "float64 to the device",
        lambda: torch.ones(2, dtype=torch.float64).to("spyre"),
        RuntimeError,
        "Spyre backend does not support dtype Double",
    ),
    (
        "float64 result",
        lambda: half(2).double(),
        RuntimeError,
        "Spyre backend does not support dtype Double",
    ),
    ("copy", lambda: half(2).copy_(half(2)), RuntimeError, "In-device copy not implemented"),
    ("clone", lambda: half(2, 3).t().contiguous(), RuntimeError, "In-device copy not implemented"),
    ("resize", lambda: half(2).resize_(4), NotImplementedError, "'aten::resize_'"),
    (
        "index",
        lambda: half(3)[torch.tensor([0, 2], device="spyre")],
        NotImplementedError,
        "'aten::index.Tensor_out'",
    ),
    (
        "index_put",
        lambda: half(3).index_put_((torch.tensor([0], device="spyre"),), half(1)),
        NotImplementedError,
        "'aten::_index_put_impl_'",
    ),
    ("eq.Scalar", lambda: half(3).eq(1), NotImplementedError, "'aten::eq.Scalar"),
]


@pytest.mark.parametrize(("what", "call", "error", "message"), CARD_ERRORS, ids=lambda v: v)
def test_card_mode_raises_the_cards_errors(
    card: None, what: str, call: Callable[[], Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message.replace("(", r"\(").replace(".", r"\.")):
        call()


def test_card_mode_keeps_what_the_card_does(card: None) -> None:
    x = half(4)
    assert torch.equal((x + x).cpu(), torch.full((4,), 2.0, dtype=torch.float16))
    assert x.float().dtype == torch.float32  # a cast on the device: unknown, kept
    assert x.eq(half(4)).all().item()  # eq.Tensor is not refused, eq.Scalar is
    assert torch.equal(x.t().cpu(), x.cpu())  # views are not copies
    y = torch.zeros(4, dtype=torch.float16).to("spyre")  # host -> device copies stay
    assert torch.equal(y.cpu(), torch.zeros(4, dtype=torch.float16))
    # an empty float64 allocation passes (torch-spyre runs float64 out= allocations as
    # mandatory_success); writing data into it is refused
    out = torch.empty_like(x, dtype=torch.float64)
    assert out.dtype == torch.float64 and out.device.type == "spyre"
    drawn = torch.randint(0, 5, (3,), device="spyre")  # aten::random_.from: the card draws
    assert drawn.dtype == torch.int64 and bool(((drawn >= 0) & (drawn < 5)).all().item())
    assert torch.equal(y.cpu(), torch.zeros(4, dtype=torch.float16))


def test_card_mode_reports_pytorchs_argument_errors_before_a_missing_kernel(card: None) -> None:
    """An index_put_ the card cannot run still fails PyTorch's shape check first, as torch-spyre's
    test_indexing config records (NumpyTests::test_boolean_assignment_value_mismatch passes)."""
    a = torch.arange(0, 4, device="spyre")
    with pytest.raises(RuntimeError, match="shape mismatch"):
        a[a > -1] = torch.tensor([1, 2, 3]).to("spyre")
    assert torch.equal(a.cpu(), torch.arange(0, 4))  # the check ran on host copies
    with pytest.raises(NotImplementedError, match="'aten::_index_put_impl_'"):
        a[a > 1] = torch.tensor(7).to("spyre")


@pytest.mark.parametrize(("what", "call", "error", "message"), CARD_ERRORS, ids=lambda v: v)
def test_simulator_mode_keeps_its_own_behaviour(
    simulator: None, what: str, call: Callable[[], Any], error: type[Exception], message: str
) -> None:
    call()  # SPYRE_DEVICE_MODEL=simulator: float64 computed on the host, copies on the device


def test_device_model_selected_by_environment(run_python: Any) -> None:
    proc = run_python(
        "import torch, spyre_stack\nspyre_stack.register()\n"
        "try:\n    torch.zeros(1, dtype=torch.float64, device='spyre')\n"
        "except RuntimeError as e:\n    print(str(e).split(' (')[0])\n",
        env={"SPYRE_DEVICE_MODEL": "card"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "Spyre backend does not support dtype Double"


def test_the_card_is_the_default_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bundled spec is promoted under the card: a run that sets nothing enforces it too."""
    from spyre_stack.config import SpyreConfig

    monkeypatch.delenv("SPYRE_DEVICE_MODEL", raising=False)
    assert SpyreConfig.from_env().device_model == "card"
    monkeypatch.setenv("SPYRE_DEVICE_MODEL", " Simulator ")
    assert SpyreConfig.from_env().device_model == "simulator"


def test_bad_device_model_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from spyre_stack.config import SpyreConfig

    monkeypatch.setenv("SPYRE_DEVICE_MODEL", "real")
    with pytest.raises(ValueError, match="SPYRE_DEVICE_MODEL must be one of"):
        SpyreConfig.from_env()


def test_relay_device_info_prints_the_table(spyre: None) -> None:
    from typer.testing import CliRunner

    from cli.device import app

    text = CliRunner().invoke(app, ["info"])
    assert text.exit_code == 0, text.output
    assert "device model: " in text.output and "SPYRE_DEVICE_MODEL=card" in text.output  # the default
    assert "dtype    refused  float64" in text.output
    assert "raises: RuntimeError: Spyre backend does not support dtype Double" in text.output
    data = json.loads(CliRunner().invoke(app, ["info", "--json"]).output)["device_model"]
    rows = {r["subject"]: r for r in data["rows"]}
    assert rows["float32"]["card"] == "downcast" and "key_concepts.md" in rows["float32"]["source"]
    assert len(data["rows"]) == len(device_model.load().rows)
