"""Backward of every differentiable OpInfo on the device against the CPU.

- test_backward_compare_cpu: the gradients of the inputs of each sample, for one fixed upstream
  gradient, match the CPU's (for the reduced-precision and single-precision dtypes the op claims
  backward support for).
"""

from __future__ import annotations

import torch
from torch.testing._internal.common_device_type import OpDTypes, instantiate_device_type_tests
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, run_tests

from spyre_stack.conformance._support import (
    SEED,
    call,
    not_comparable_reason,
    ops,
    paired_samples,
    tensors_in,
)

autograd_ops = [op for op in op_db if op.supports_autograd]


def _leaves(sample):
    return [
        t for t in tensors_in([sample.input, list(sample.args), sample.kwargs]) if t.requires_grad
    ]


def _grads(sample, op, seeds):
    result = call(op, sample)
    if sample.output_process_fn_grad is not None:
        result = sample.output_process_fn_grad(result)
    outputs = [t for t in tensors_in(result) if t.requires_grad]
    leaves = _leaves(sample)
    if not outputs or not leaves:
        return None
    grad_outputs = [seed.to(t.device) for seed, t in zip(seeds(outputs), outputs, strict=True)]
    return torch.autograd.grad(outputs, leaves, grad_outputs, allow_unused=True)


class TestGradients(TestCase):
    @ops(
        autograd_ops,
        dtypes=OpDTypes.supported_backward,
        allowed_dtypes=(torch.float16, torch.bfloat16, torch.float32),
    )
    def test_backward_compare_cpu(self, device, dtype, op):
        reason = not_comparable_reason(op)
        if reason:
            self.skipTest(reason)

        def seeds(outputs):
            generator = torch.Generator().manual_seed(SEED)
            return [torch.randn(t.shape, dtype=t.dtype, generator=generator) for t in outputs]

        compared = 0
        for on_device, reference in paired_samples(op, device, dtype, requires_grad=True):
            expected = _grads(reference, op, seeds)
            if expected is None:
                continue
            actual = _grads(on_device, op, seeds)
            self.assertEqual(actual, expected, exact_device=False, msg=f"sample {on_device.name}")
            compared += 1
        if compared == 0:
            self.skipTest(f"{op.name} has no differentiable sample for {dtype}")


instantiate_device_type_tests(TestGradients, globals())

if __name__ == "__main__":
    run_tests()
