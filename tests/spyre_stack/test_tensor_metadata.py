"""Tensor metadata stays correct under views, in-place resizes, set_ and out= ops."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")


def dev(t: torch.Tensor) -> torch.Tensor:
    return t.to("spyre")


def test_views_share_storage_and_track_metadata(simulator: None) -> None:
    base = dev(torch.arange(24, dtype=torch.float16))
    v = base.view(4, 6)
    t = v.t()
    s = v[1:3, ::2]
    assert t.shape == (6, 4) and t.stride() == (1, 6)
    assert s.shape == (2, 3) and s.stride() == (6, 2) and s.storage_offset() == 6
    assert v.data_ptr() == base.data_ptr()
    assert s.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    s.fill_(-1)  # writes through the view
    expected = torch.arange(24, dtype=torch.float16).view(4, 6)
    expected[1:3, ::2] = -1
    assert torch.equal(base.view(4, 6).cpu(), expected)
    assert torch.equal(t.contiguous().cpu(), expected.t())


def test_other_view_kinds(spyre: None) -> None:
    x = dev(torch.arange(12.0, dtype=torch.float16))
    assert x.unfold(0, 4, 2).shape == (5, 4)
    assert torch.equal(
        x.unfold(0, 4, 2).cpu(), torch.arange(12.0, dtype=torch.float16).unfold(0, 4, 2)
    )
    assert x.as_strided((3, 2), (4, 1), 1).cpu().tolist() == [[1, 2], [5, 6], [9, 10]]
    assert x.reshape(3, 4).permute(1, 0).shape == (4, 3)
    c = dev(torch.randn(3, 2)).to(torch.float32)
    assert torch.view_as_complex(c).shape == (3,)
    assert torch.view_as_real(torch.view_as_complex(c)).data_ptr() == c.data_ptr()


def test_in_place_resize_updates_shape_and_keeps_data(simulator: None) -> None:
    x = dev(torch.arange(6, dtype=torch.float16))
    x.resize_(2, 3)
    assert x.shape == (2, 3) and x.is_contiguous()
    x.resize_(4, 4)
    assert x.shape == (4, 4)
    assert x.flatten()[:6].cpu().tolist() == [0, 1, 2, 3, 4, 5]
    x.resize_(0)
    assert x.numel() == 0


def test_out_argument_resizes_the_output(spyre: None) -> None:
    a = dev(torch.ones(3, 5, dtype=torch.float16))
    out = torch.empty(0, dtype=torch.float16, device="spyre")
    result = torch.add(a, a, out=out)
    assert result is out
    assert out.shape == (3, 5)
    assert torch.equal(out.cpu(), torch.full((3, 5), 2.0, dtype=torch.float16))
    wrong = torch.empty(2, dtype=torch.float16, device="spyre")
    torch.mul(a, 3, out=wrong)
    assert wrong.shape == (3, 5)
    assert torch.equal(wrong.cpu(), torch.full((3, 5), 3.0, dtype=torch.float16))


def test_out_with_fallback_op(spyre: None) -> None:
    x = dev(torch.tensor([3.0, 1.0, 2.0], dtype=torch.float16))
    values = torch.empty(0, dtype=torch.float16, device="spyre")
    indices = torch.empty(0, dtype=torch.long, device="spyre")
    torch.sort(x, out=(values, indices))
    assert values.shape == (3,) and indices.shape == (3,)
    assert values.cpu().tolist() == [1.0, 2.0, 3.0]
    assert indices.cpu().tolist() == [1, 2, 0]


def test_in_place_op_on_a_view_updates_the_base(spyre: None) -> None:
    x = dev(torch.zeros(4, 4, dtype=torch.float16))
    x[:, 1].add_(5)
    x.diagonal().mul_(0).add_(1)
    expected = torch.zeros(4, 4, dtype=torch.float16)
    expected[:, 1] += 5
    expected.diagonal().mul_(0).add_(1)
    assert torch.equal(x.cpu(), expected)


def test_set_and_storage_sharing(spyre: None) -> None:
    a = dev(torch.arange(8, dtype=torch.float16))
    b = torch.empty(0, dtype=torch.float16, device="spyre")
    b.set_(a.untyped_storage(), 2, (2, 3), (3, 1))
    assert b.shape == (2, 3) and b.storage_offset() == 2
    assert b.cpu().tolist() == [[2, 3, 4], [5, 6, 7]]
    c = torch.empty(0, dtype=torch.float16, device="spyre").set_(a)
    assert c.data_ptr() == a.data_ptr()
    c.set_()
    assert c.numel() == 0 and c.device.type == "spyre"
    a.record_stream(torch.spyre.Stream())  # type: ignore[attr-defined]


def test_non_contiguous_copy_round_trip(simulator: None) -> None:
    host = torch.randn(5, 7).to(torch.float16)
    x = dev(host.t())  # non-contiguous source
    assert torch.equal(x.cpu(), host.t())
    y = torch.empty(7, 5, dtype=torch.float16, device="spyre").t()
    y.copy_(dev(host))
    assert torch.equal(y.cpu(), host)


def test_pin_memory(spyre: None) -> None:
    host = torch.randn(16)
    assert not host.is_pinned()
    pinned = host.pin_memory()
    assert pinned.is_pinned()
    assert torch.equal(pinned.to("spyre", non_blocking=True).cpu(), host)
    with pytest.raises(RuntimeError, match="only host tensors can be pinned"):
        torch.empty(4, device="spyre", pin_memory=True)


def test_data_ptr_is_real_and_cross_device_copy(simulator: None) -> None:
    # a copy from card 0 to card 1 is a device-to-device copy, refused by the card model
    a = dev(torch.arange(4, dtype=torch.float16))
    b = a.to("spyre:1")
    assert a.data_ptr() != 0 and b.data_ptr() != a.data_ptr()
    assert b.device.index == 1 and torch.equal(b.cpu(), a.cpu())
