"""Function, method, operator and in-place variants of an OpInfo agree on the device.

- test_variant_consistency: for every sample, each variant the OpInfo declares gives the result
  of the function variant (in-place variants are only checked where the CPU accepts the sample
  in place, for example no type promotion into the input).
"""

from __future__ import annotations

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, run_tests

from spyre_stack.conformance._support import (
    INVALID_ON_CPU,
    SampleRejected,
    call,
    not_comparable_reason,
    ops,
    paired_samples,
    reference_call,
)


def _variants(op):
    found = []
    for label in ("method_variant", "operator_variant"):
        fn = getattr(op, label, None)
        if fn is not None:
            found.append((label, fn, False))
    for label in ("inplace_variant", "inplace_operator_variant"):
        fn = getattr(op, label, None)
        if fn is not None:
            found.append((label, fn, True))
    return found


variant_ops = [op for op in op_db if _variants(op)]


def _clone_input(sample):
    value = sample.input
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(t.clone() if isinstance(t, torch.Tensor) else t for t in value)
    return value


class TestVariants(TestCase):
    @ops(variant_ops)
    def test_variant_consistency(self, device, dtype, op):
        reason = not_comparable_reason(op)
        if reason:
            self.skipTest(reason)
        checked = 0
        for on_device, reference in paired_samples(op, device, dtype):
            try:
                reference_call(op, reference)
            except SampleRejected:
                continue
            expected = call(op, on_device)
            for label, fn, inplace in _variants(op):
                try:  # the CPU decides whether the variant accepts this sample
                    if inplace:
                        fn(_clone_input(reference), *reference.args, **reference.kwargs)
                    else:
                        call(fn, reference)
                except INVALID_ON_CPU:
                    continue
                if inplace:
                    got = fn(_clone_input(on_device), *on_device.args, **on_device.kwargs)
                else:
                    got = call(fn, on_device)
                # in place keeps the input's dtype where the function would promote
                self.assertEqual(
                    got, expected, exact_dtype=not inplace, msg=f"{label} {on_device.name}"
                )
                checked += 1
        if checked == 0:
            self.skipTest(f"{op.name} has no sample a variant accepts for {dtype}")


instantiate_device_type_tests(TestVariants, globals())

if __name__ == "__main__":
    run_tests()
