"""Device numerics: fp16 compute, fp32 down-cast with a one-time warning, bf16, host dtypes.

Tolerances: fp16 results are compared with an fp32 CPU reference of the same fp16 inputs (and the
fp16-rounded intermediate of a chain) at atol=1e-3, rtol=1e-3 (fp16 has an 11-bit significand: a
relative step of 2**-11 ~ 4.9e-4 per rounding); fp32 inputs
on a native op equal the CPU result of the fp16-rounded inputs, rounded to fp16, exactly.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

from spyre_stack.sim import numerics


@pytest.fixture
def warn_on(spyre: None):  # type: ignore[no-untyped-def]
    from spyre_stack.runtime import state

    state.apply_numerics(warn=True)
    yield
    state.apply_numerics(warn=False)


def test_policy_table_entries() -> None:
    assert numerics.policy_for(torch.float16).mode == "native"
    assert numerics.policy_for(torch.bfloat16).mode == "native"
    assert numerics.policy_for(torch.float32) == numerics.DtypePolicy("downcast", torch.float16)
    assert numerics.policy_for(torch.float64).mode == "host"
    assert numerics.policy_for(torch.complex64).mode == "host"
    assert numerics.rounding_map() == {torch.float32: torch.float16}
    assert torch.float64 in numerics.host_only()


def test_fp16_against_fp32_reference(spyre: None) -> None:
    torch.manual_seed(0)
    a = torch.randn(64, 64)
    b = torch.randn(64, 64)
    got = (a.half().to("spyre") @ b.half().to("spyre")).softmax(-1).cpu().float()
    ref = (a.half().float() @ b.half().float()).half().float().softmax(-1)
    torch.testing.assert_close(got, ref, atol=1e-3, rtol=1e-3)
    got_exp = a.half().to("spyre").exp().cpu().float()
    torch.testing.assert_close(got_exp, a.half().float().exp(), atol=1e-3, rtol=1e-3)


def test_fp32_is_computed_in_fp16(spyre: None) -> None:
    a = torch.tensor([1.0001, 3.14159265, 1e-4, 70000.0])
    b = torch.tensor([2.0e-4, 1.0, 1.0, 1.0])
    got = (a.to("spyre") * b.to("spyre")).cpu()
    assert got.dtype == torch.float32
    expected = (a.half().float() * b.half().float()).half().float()
    assert torch.equal(got, expected)
    assert not torch.equal(got, a * b)  # the device result really lost precision
    assert got[3].isinf()  # 70000 overflows fp16


def test_fp32_storage_is_not_rounded_by_copies(spyre: None) -> None:
    a = torch.tensor([1.0001, 3.14159265])
    assert torch.equal(a.to("spyre").cpu(), a)


def test_fallback_ops_keep_host_precision(spyre: None) -> None:
    a = torch.tensor([1.0001, 1e-4, 3.14159265])
    assert torch.equal(a.to("spyre").cumsum(0).cpu(), a.cumsum(0))


def test_fp64_runs_on_the_host_at_full_precision(simulator: None) -> None:
    import spyre_stack

    a = torch.tensor([1.0000001, 2.0], dtype=torch.float64)
    with spyre_stack.trace() as t:
        got = (a.to("spyre") * 3).cpu()
    assert torch.equal(got, a * 3)
    mul = [r for r in t.records if r.op == "aten::mul"]
    assert mul and mul[0].execution == "fallback"


def test_bf16_is_native(spyre: None) -> None:
    import spyre_stack

    a = torch.randn(128, dtype=torch.bfloat16)
    with spyre_stack.trace() as t:
        got = (a.to("spyre") + 1).cpu()
    assert torch.equal(got, a + 1)
    assert [r.execution for r in t.records if r.op == "aten::add"] == ["native"]


def test_downcast_warning_is_emitted_once(warn_on: None) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = torch.ones(4, device="spyre")
        x + x
        x * x
    messages = [str(w.message) for w in caught if "computed in Half" in str(w.message)]
    assert len(messages) == 1
    assert "SPYRE_SILENCE_DOWNCAST_WARNING" in messages[0]


def test_environment_variable_silences_the_warning(run_python: Any) -> None:
    code = (
        "import warnings, torch, spyre_stack\nspyre_stack.register()\n"
        "warnings.simplefilter('error')\nx = torch.ones(3, device='spyre')\nprint((x + x).sum().item())"
    )
    loud = run_python(code)
    assert loud.returncode != 0 and "computed in Half" in loud.stderr
    quiet = run_python(code, env={"SPYRE_SILENCE_DOWNCAST_WARNING": "1"})
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout.strip() == "6.0"


def test_fp32_selections_return_the_input_element(spyre: None) -> None:
    """amax, amin, max, min, argmax, argmin compute nothing: fp32 results are exact, as on CPU
    (ops.yaml marks them exact; sum still rounds through fp16)."""
    x = torch.tensor([[1.0001, 3.14159, -2.71828], [0.1, 2.5, 3.1416]])
    d = x.to("spyre")
    for name in ("amax", "amin", "argmax", "argmin"):
        assert torch.equal(getattr(d, name)(dim=1).cpu(), getattr(x, name)(dim=1)), name
    assert d.max().item() == x.max().item() and d.min().item() == x.min().item()
    assert torch.equal(d.max(dim=1).values.cpu(), x.max(dim=1).values)
    assert d.sum().item() == x.half().float().sum().half().item()  # accumulation: fp16


def test_stride_zero_fill_is_allowed_as_on_cpu(spyre: None) -> None:
    for dtype in (torch.float32, torch.float16):
        base = torch.zeros(1, dtype=dtype, device="spyre")
        base.expand(3).fill_(0.1)
        assert base.item() == torch.tensor(0.1, dtype=dtype).half().to(dtype).item()
        base.expand(3).zero_()
        assert base.item() == 0
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        torch.ones(1, device="spyre").expand(3).add_(1)  # a computed write still refuses


def test_partial_overlap_of_output_and_input_raises_as_on_cpu(spyre: None) -> None:
    message = "some elements of the input tensor and the written-to tensor refer to a single"
    for device in ("cpu", "spyre"):
        a = torch.arange(3.0, device=device)
        with pytest.raises(RuntimeError, match=message):
            torch.pow(a[:2], 2, out=a[1:])
        with pytest.raises(RuntimeError, match=message):
            torch.add(a[:2], 1, out=a[1:])
        b = torch.arange(3.0, device=device)
        torch.pow(b, 2, out=b)  # full overlap (in place) is allowed
        assert b.cpu().tolist() == [0.0, 1.0, 4.0]
