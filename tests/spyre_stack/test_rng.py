"""Generator and RNG: per-device generators whose device is spyre, seeds and states."""

from __future__ import annotations

import torch


def sp():  # type: ignore[no-untyped-def]
    return torch.spyre  # type: ignore[attr-defined]


def test_default_generators_are_spyre_devices(spyre: None) -> None:
    gens = sp().default_generators
    assert len(gens) == sp().device_count()
    assert [g.device for g in gens] == [torch.device("spyre", i) for i in range(len(gens))]
    assert torch.Generator(device="spyre").device == torch.device("spyre", 0)


def test_manual_seed_reproduces_device_draws(spyre: None) -> None:
    sp().manual_seed(1234)
    a = torch.randn(64, device="spyre").cpu()
    sp().manual_seed(1234)
    b = torch.randn(64, device="spyre").cpu()
    assert torch.equal(a, b)
    c = torch.randn(64, device="spyre").cpu()
    assert not torch.equal(b, c)
    assert sp().initial_seed() == 1234


def test_torch_manual_seed_seeds_the_device_without_recursion(spyre: None) -> None:
    torch.manual_seed(7)
    a = torch.rand(16, device="spyre").cpu()
    torch.manual_seed(7)
    b = torch.rand(16, device="spyre").cpu()
    assert torch.equal(a, b)


def test_rng_state_round_trip(spyre: None) -> None:
    state = sp().get_rng_state()
    a = torch.rand(32, device="spyre").cpu()
    sp().set_rng_state(state)
    b = torch.rand(32, device="spyre").cpu()
    assert torch.equal(a, b)
    states = sp().get_rng_state_all()
    assert len(states) == sp().device_count()
    sp().set_rng_state_all(states)


def test_explicit_generator(spyre: None) -> None:
    g = torch.Generator(device="spyre").manual_seed(99)
    a = torch.rand(8, device="spyre", generator=g).cpu()
    g.manual_seed(99)
    b = torch.rand(8, device="spyre", generator=g).cpu()
    assert torch.equal(a, b)
    # the device stream matches the CPU algorithm for the same seed
    cpu = torch.rand(8, generator=torch.Generator().manual_seed(99))
    assert torch.equal(a, cpu)


def test_devices_have_independent_generators(spyre: None) -> None:
    sp().manual_seed_all(5)
    a0 = torch.rand(8, device="spyre:0").cpu()
    a1 = torch.rand(8, device="spyre:1").cpu()
    assert torch.equal(a0, a1)  # same seed, separate state
    b0 = torch.rand(8, device="spyre:0").cpu()
    sp().manual_seed_all(5)
    torch.rand(8, device="spyre:0")
    assert torch.equal(torch.rand(8, device="spyre:0").cpu(), b0)


def test_fork_rng_restores_device_state(spyre: None) -> None:
    sp().manual_seed(3)
    with torch.random.fork_rng(devices=[0], device_type="spyre"):
        torch.rand(100, device="spyre")
    after = torch.rand(4, device="spyre").cpu()
    sp().manual_seed(3)
    assert torch.equal(torch.rand(4, device="spyre").cpu(), after)


def test_dropout_and_bernoulli_use_the_device_generator(spyre: None) -> None:
    sp().manual_seed(11)
    a = torch.nn.functional.dropout(torch.ones(100, device="spyre"), 0.5).cpu()
    sp().manual_seed(11)
    b = torch.nn.functional.dropout(torch.ones(100, device="spyre"), 0.5).cpu()
    assert torch.equal(a, b)
