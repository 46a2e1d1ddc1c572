"""torch.save / torch.load with spyre tensors and map_location."""

from __future__ import annotations

import io

import torch


def test_save_and_load_on_device(spyre: None) -> None:
    x = torch.randn(3, 4, dtype=torch.float16).to("spyre:1")
    buf = io.BytesIO()
    torch.save({"x": x, "n": 3}, buf)
    buf.seek(0)
    loaded = torch.load(buf)
    assert loaded["x"].device == torch.device("spyre", 1)
    assert torch.equal(loaded["x"].cpu(), x.cpu())


def test_map_location_to_cpu_and_back(spyre: None) -> None:
    x = torch.arange(6, dtype=torch.float16).to("spyre")
    buf = io.BytesIO()
    torch.save(x, buf)
    buf.seek(0)
    on_cpu = torch.load(buf, map_location="cpu")
    assert on_cpu.device.type == "cpu" and torch.equal(on_cpu, x.cpu())
    buf2 = io.BytesIO()
    torch.save(on_cpu, buf2)
    buf2.seek(0)
    back = torch.load(buf2, map_location="spyre:1")
    assert back.device == torch.device("spyre", 1) and torch.equal(back.cpu(), on_cpu)


def test_module_state_dict_round_trip(simulator: None) -> None:
    # load_state_dict copies into the parameters on the device: an in-device copy, refused by
    # the card model
    model = torch.nn.Linear(4, 2).to("spyre")
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, map_location="spyre")
    fresh = torch.nn.Linear(4, 2).to("spyre")
    fresh.load_state_dict(state)
    assert all(p.device.type == "spyre" for p in fresh.parameters())
    assert torch.equal(fresh.weight.cpu(), model.weight.cpu())


def test_views_keep_sharing_after_load(spyre: None) -> None:
    base = torch.arange(8, dtype=torch.float16).to("spyre")
    buf = io.BytesIO()
    torch.save([base, base[2:5]], buf)
    buf.seek(0)
    a, b = torch.load(buf)
    assert b.untyped_storage().data_ptr() == a.untyped_storage().data_ptr()
    assert b.storage_offset() == 2
