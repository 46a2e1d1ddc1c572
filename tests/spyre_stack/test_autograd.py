"""Autograd works through AutogradPrivateUse1: gradients land on the device."""

from __future__ import annotations

import torch


def test_backward_of_a_small_mlp_matches_cpu(simulator: None) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)
    ).to(torch.float64)
    x = torch.randn(5, 8, dtype=torch.float64)
    ref = model(x).softmax(-1).sum(0)[0]
    ref.backward()
    ref_grads = [p.grad.clone() for p in model.parameters()]  # type: ignore[union-attr]
    model.zero_grad()
    model_dev = model.to("spyre")
    out = model_dev(x.to("spyre")).softmax(-1).sum(0)[0]
    out.backward()
    for p, g in zip(model_dev.parameters(), ref_grads, strict=True):
        assert p.grad is not None and p.grad.device.type == "spyre"
        torch.testing.assert_close(p.grad.cpu(), g)


def test_fp16_gradient_within_tolerance(spyre: None) -> None:
    w = torch.randn(32, 32, dtype=torch.float16)
    xd = w.to("spyre").requires_grad_()
    (xd.tanh() * xd).sum().backward()
    xc = w.float().requires_grad_()
    (xc.tanh() * xc).sum().backward()
    torch.testing.assert_close(xd.grad.cpu().float(), xc.grad, atol=2e-2, rtol=1e-2)  # type: ignore[union-attr]


def test_grad_of_in_place_and_view_ops(simulator: None) -> None:
    a = torch.randn(4, 4, dtype=torch.float64, device="spyre", requires_grad=True)
    b = a.clone()
    b[:, 0].mul_(3)
    b.t().sum().backward()
    expected = torch.ones(4, 4, dtype=torch.float64)
    expected[:, 0] = 3
    assert torch.equal(a.grad.cpu(), expected)  # type: ignore[union-attr]


def test_convolution_forward_and_backward(simulator: None) -> None:
    torch.manual_seed(2)
    conv = torch.nn.Conv2d(3, 4, 3, padding=1).to(torch.float64)
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    conv(x).sum().backward()
    ref = [p.grad.clone() for p in conv.parameters()]  # type: ignore[union-attr]
    conv.zero_grad()
    dconv = conv.to("spyre")
    xd = x.to("spyre").requires_grad_()
    out = dconv(xd)
    assert out.device.type == "spyre" and out.shape == (2, 4, 8, 8)
    out.sum().backward()
    for p, g in zip(dconv.parameters(), ref, strict=True):
        torch.testing.assert_close(p.grad.cpu(), g)  # type: ignore[union-attr]
    assert xd.grad is not None and xd.grad.shape == x.shape
    tconv = torch.nn.ConvTranspose2d(4, 2, 3, stride=2).to(torch.float64)
    torch.testing.assert_close(
        tconv.to("spyre")(out.detach()).cpu(), tconv.cpu()(out.detach().cpu())
    )
