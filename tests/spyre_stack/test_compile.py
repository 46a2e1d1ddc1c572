"""torch.compile(backend="spyre"): fusion, patterns, eager fallback with reasons, numerics."""

from __future__ import annotations

import pytest
import torch

import spyre_stack

# dynamo may warn about the environment (e.g. missing compilers for inductor); it is not ours
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:torch._dynamo.*")

FP16_TOL = {"atol": 1e-2, "rtol": 1e-2}


@pytest.fixture(autouse=True)
def _fresh_dynamo(spyre: None):  # type: ignore[no-untyped-def]
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def run_traced(fn, *args):  # type: ignore[no-untyped-def]
    with torch.no_grad(), spyre_stack.trace() as t:
        out = fn(*args)
    return out, t


def compiled(fn):  # type: ignore[no-untyped-def]
    c = torch.compile(fn, backend="spyre")
    return c


def test_pointwise_chain_fuses_into_one_kernel() -> None:
    def f(x, y):  # type: ignore[no-untyped-def]
        return ((x * 2 + y).relu() - 0.5).sigmoid()

    x = torch.randn(256, 256, dtype=torch.float16).to("spyre")
    y = torch.randn(256, 256, dtype=torch.float16).to("spyre")
    eager, te = run_traced(f, x, y)
    cf = compiled(f)
    cf(x, y)  # compile outside the trace
    got, tc = run_traced(cf, x, y)
    torch.testing.assert_close(got.cpu(), eager.cpu(), **FP16_TOL)
    assert len(te.kernels()) == 5
    assert [r.op for r in tc.kernels()] == ["spyre::fused_pointwise"]
    rec = tc.kernels()[0]
    assert rec.overload == "mul+add+relu+sub+sigmoid"
    # fused: read x and y, write the result once (3 x 1024 sticks) instead of 5 round trips
    assert rec.sticks_moved == 3 * 1024
    assert tc.sticks_moved < te.sticks_moved
    assert tc.device_us < te.device_us


def test_mlp_matmul_epilogue_fusion_matches_eager() -> None:
    torch.manual_seed(0)
    model = (
        torch.nn.Sequential(
            torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256), torch.nn.ReLU()
        )
        .half()
        .to("spyre")
    )
    x = torch.randn(64, 256, dtype=torch.float16).to("spyre")
    eager, te = run_traced(model, x)
    cm = compiled(model)
    with torch.no_grad():
        cm(x)
    got, tc = run_traced(cm, x)
    torch.testing.assert_close(got.cpu(), eager.cpu(), **FP16_TOL)
    kernels = [(r.op, r.overload) for r in tc.kernels()]
    assert kernels == [("spyre::matmul", "addmm+gelu"), ("spyre::matmul", "addmm+relu")]
    assert tc.sticks_moved < te.sticks_moved
    assert tc.device_us < te.device_us


def test_softmax_patterns() -> None:
    def library(x):  # type: ignore[no-untyped-def]
        return torch.softmax(x, dim=-1) * 3

    def manual(x):  # type: ignore[no-untyped-def]
        e = torch.exp(x - x.amax(dim=-1, keepdim=True))
        return e / e.sum(dim=-1, keepdim=True)

    x = torch.randn(128, 512, dtype=torch.float16).to("spyre")
    for fn in (library, manual):
        torch._dynamo.reset()
        eager, te = run_traced(fn, x)
        cf = compiled(fn)
        cf(x)
        got, tc = run_traced(cf, x)
        torch.testing.assert_close(got.cpu(), eager.cpu(), **FP16_TOL)
        assert [r.op for r in tc.kernels()] == ["spyre::softmax"], fn.__name__
        assert tc.sticks_moved <= te.sticks_moved


def test_layer_norm_patterns() -> None:
    norm = torch.nn.LayerNorm(384).half().to("spyre")

    def manual(x):  # type: ignore[no-untyped-def]
        var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
        return (x - mean) * torch.rsqrt(var + 1e-5)

    x = torch.randn(64, 384, dtype=torch.float16).to("spyre")
    for fn in (norm, manual):
        torch._dynamo.reset()
        eager, te = run_traced(fn, x)
        cf = compiled(fn)
        with torch.no_grad():
            cf(x)
        got, tc = run_traced(cf, x)
        torch.testing.assert_close(got.cpu(), eager.cpu(), **FP16_TOL)
        assert [r.op for r in tc.kernels()] == ["spyre::layer_norm"]
        assert tc.sticks_moved <= te.sticks_moved


def test_unsupported_nodes_fall_back_to_eager_with_a_reason() -> None:
    def f(x):  # type: ignore[no-untyped-def]
        return torch.cumsum(x * 2, dim=0) + 1

    x = torch.randn(64, 64, dtype=torch.float16).to("spyre")
    eager, _ = run_traced(f, x)
    cf = compiled(f)
    cf(x)
    got, tc = run_traced(cf, x)
    torch.testing.assert_close(got.cpu(), eager.cpu(), **FP16_TOL)
    report = spyre_stack.compile.reports()[-1]
    reasons = [r for _, r in report.fallbacks]
    assert any("aten::cumsum is fallback in the op table: runs eagerly" in r for r in reasons)
    ops = [r.op for r in tc.kernels()]
    assert "aten::cumsum" in ops  # traced as the eager fallback it is
    assert ops.count("spyre::fused_pointwise") == 2


def test_fp32_inputs_within_fp16_tolerance() -> None:
    def f(x):  # type: ignore[no-untyped-def]
        return torch.tanh(x) * x + 1

    host = torch.randn(32, 32)
    cf = compiled(f)
    got = cf(host.to("spyre")).cpu()
    torch.testing.assert_close(got, f(host), atol=1e-2, rtol=1e-2)


def test_training_step_compiles_forward_and_backward() -> None:
    torch.manual_seed(1)
    ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    model.load_state_dict(ref.state_dict())
    ref = ref.half().to("spyre")
    model = model.half().to("spyre")
    x = torch.randn(8, 16, dtype=torch.float16).to("spyre")
    ref(x).square().mean().backward()
    cm = compiled(model)
    cm(x).square().mean().backward()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), **FP16_TOL)  # type: ignore[union-attr]
    assert len(spyre_stack.compile.reports()) >= 2  # forward and backward graphs lowered
