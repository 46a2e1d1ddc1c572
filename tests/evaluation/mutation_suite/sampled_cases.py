"""A four-test module for the sampled-mutant evaluation (run by tests/cli/test_eval_mutation.py,
never collected by ``make test`` itself: the name does not match ``test_*.py``). Its mutants are
source edits of ``torch/nn/functional.py`` laid over the installed torch."""

import torch
import torch.nn.functional as F

import spyre_stack

spyre_stack.register()


def test_relu_on_cpu():
    assert F.relu(torch.tensor([-1.0, 2.0])).tolist() == [0.0, 2.0]


def test_relu_on_device():
    x = torch.tensor([-1.0, 2.0], device="spyre")
    assert F.relu(x).cpu().tolist() == [0.0, 2.0]


def test_softsign_on_device():
    x = torch.tensor([1.0, -3.0], device="spyre")
    assert F.softsign(x).cpu().tolist() == [0.5, -0.75]


def test_nothing_mutated():
    assert torch.ones(2, device="spyre").sum().item() == 2
