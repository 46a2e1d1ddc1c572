"""Every ModuleInfo in module_db: the module on the device against the same module on the CPU.

- test_module_forward_compare_cpu: same parameters, same inputs, same outputs.
- test_module_backward_compare_cpu: same gradients for parameters and inputs.
Both in train and eval mode where the module behaves differently.
"""

from __future__ import annotations

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_modules import module_db, modules
from torch.testing._internal.common_utils import TestCase, run_tests

from spyre_stack.conformance._support import (
    SEED,
    build_module_pair,
    module_inputs_cpu,
    move_args,
    tensors_in,
    to_cpu,
)

# Modules whose output is random even in eval mode cannot be compared across devices.
RANDOM_MODULES = frozenset({"nn.RReLU"})


class TestModules(TestCase):
    def _pairs(self, module_info, device, dtype, training, requires_grad=False):
        if module_info.name in RANDOM_MODULES and training:
            self.skipTest(f"{module_info.name} draws random numbers in train mode")
        if training and "Dropout" in module_info.name:
            self.skipTest(f"{module_info.name} draws random numbers in train mode")
        inputs = module_inputs_cpu(module_info, dtype, training=training, requires_grad=False)
        if not inputs:
            self.skipTest(f"{module_info.name} has no forward inputs for {dtype}")
        for module_input in inputs:
            reference, on_device = build_module_pair(
                module_info, module_input, device, dtype, training=training
            )
            fwd = module_input.forward_input
            cpu_args = move_args(fwd.args, "cpu", requires_grad=requires_grad)
            cpu_kwargs = move_args(fwd.kwargs, "cpu", requires_grad=requires_grad)
            dev_args = move_args(fwd.args, device, requires_grad=requires_grad)
            dev_kwargs = move_args(fwd.kwargs, device, requires_grad=requires_grad)
            yield (reference, cpu_args, cpu_kwargs), (on_device, dev_args, dev_kwargs)

    @modules(module_db)
    def test_module_forward_compare_cpu(self, device, dtype, module_info, training):
        for (ref, ref_args, ref_kwargs), (mod, args, kwargs) in self._pairs(
            module_info, device, dtype, training
        ):
            with torch.no_grad():
                expected = ref(*ref_args, **ref_kwargs)
                actual = mod(*args, **kwargs)
            self.assertEqual(to_cpu(actual), expected)

    @modules(module_db)
    def test_module_backward_compare_cpu(self, device, dtype, module_info, training):
        compared = 0
        for (ref, ref_args, ref_kwargs), (mod, args, kwargs) in self._pairs(
            module_info, device, dtype, training, requires_grad=True
        ):
            grads = []
            for module, margs, mkwargs in ((ref, ref_args, ref_kwargs), (mod, args, kwargs)):
                outputs = [t for t in tensors_in(module(*margs, **mkwargs)) if t.requires_grad]
                leaves = [t for t in tensors_in([list(margs), mkwargs]) if t.requires_grad]
                leaves += [p for p in module.parameters() if p.requires_grad]
                if not outputs or not leaves:
                    break
                generator = torch.Generator().manual_seed(SEED)
                seeds = [
                    torch.randn(t.shape, dtype=t.dtype, generator=generator).to(t.device)
                    for t in outputs
                ]
                grads.append(torch.autograd.grad(outputs, leaves, seeds, allow_unused=True))
            if len(grads) == 2:
                self.assertEqual(grads[1], grads[0], exact_device=False)
                compared += 1
        if compared == 0:
            self.skipTest(f"{module_info.name} has no differentiable output for {dtype}")


instantiate_device_type_tests(TestModules, globals())

if __name__ == "__main__":
    run_tests()
