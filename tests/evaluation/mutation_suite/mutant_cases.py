"""A four-test module for the ground-truth machinery (run by tests/evaluation/test_groundtruth.py,
never collected by ``make test`` itself: the name does not match ``test_*.py``)."""

import torch
import torch.nn.functional as F

import spyre_stack

spyre_stack.register()


def test_relu_on_device():
    x = torch.tensor([-1.0, 2.0], device="spyre")
    assert F.relu(x).cpu().tolist() == [0.0, 2.0]


def test_relu_on_cpu_only():
    assert F.relu(torch.tensor([-1.0, 2.0])).tolist() == [0.0, 2.0]


def test_gelu_shape_on_device():
    # a fault that shifts values does not change the shape: called, but not observable here
    x = torch.zeros(3, device="spyre")
    assert F.gelu(x).shape == (3,)


def test_nothing_mutated():
    assert torch.ones(2, device="spyre").sum().item() == 2
