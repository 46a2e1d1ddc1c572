"""Lazy conjugate and negative views are resolved correctly (they used to recurse and crash)."""

from __future__ import annotations

import torch


def test_conj_view_to_cpu(simulator: None) -> None:
    host = torch.randn(6, dtype=torch.complex64)
    x = host.to("spyre")
    c = x.conj()
    assert c.is_conj()
    assert torch.equal(c.cpu(), host.conj())
    assert torch.equal(c.resolve_conj().cpu(), host.conj())


def test_conj_host_tensor_to_device(simulator: None) -> None:
    host = torch.randn(5, dtype=torch.complex64).conj()
    assert host.is_conj()
    x = host.to("spyre")
    assert torch.equal(x.cpu(), host.resolve_conj())


def test_conj_imag_is_a_negative_view(simulator: None) -> None:
    host = torch.randn(4, dtype=torch.complex128)
    im = host.to("spyre").conj().imag
    assert im.is_neg()
    assert torch.equal(im.cpu(), -host.imag)
    assert torch.equal(torch._neg_view(host.to("spyre")).cpu(), -host)


def test_ops_on_conj_views(simulator: None) -> None:
    a = torch.randn(3, 3, dtype=torch.complex64)
    b = torch.randn(3, 3, dtype=torch.complex64)
    got = (a.to("spyre").conj() * b.to("spyre")).cpu()
    torch.testing.assert_close(got, a.conj() * b)
    got_mm = (a.to("spyre").mH @ b.to("spyre")).cpu()
    torch.testing.assert_close(got_mm, a.mH @ b)


def test_copy_into_a_conj_view(simulator: None) -> None:
    dst = torch.zeros(3, dtype=torch.complex64, device="spyre")
    src = torch.tensor([1 + 2j, 3 - 1j, -1j], dtype=torch.complex64)
    dst.conj().copy_(src.to("spyre"))
    assert torch.equal(dst.cpu(), src.conj())
