"""Every OpInfo in op_db, every dtype it claims: the device against the CPU.

Templates:
- test_compare_cpu: same inputs on the device and on the CPU give the same result.
- test_compare_cpu_reference_inputs: the same on the OpInfo's further inputs (reference inputs:
  larger, edge-case and extremal values) beyond the ones test_compare_cpu uses.
- test_noncontiguous_matches_contiguous: noncontiguous inputs on the device give the same result
  as contiguous ones.
- test_dtype_coverage: every dtype the OpInfo claims for this device runs at all.
"""

from __future__ import annotations

import torch
from torch.testing._internal.common_device_type import OpDTypes, instantiate_device_type_tests
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, noncontiguous_like, run_tests

from spyre_stack.conformance._support import (
    LAYOUT_DEPENDENT_OPS,
    SampleRejected,
    call,
    cpu_samples,
    detach_to,
    not_comparable_reason,
    ops,
    paired_samples,
    reference_call,
    to_cpu,
)


def _compare_with_cpu(test, op, pairs) -> int:
    """Run each (device sample, CPU sample) pair and compare with the CPU's result; returns how
    many were compared (samples the CPU rejects are skipped)."""
    compared = 0
    for on_device, reference in pairs:
        try:
            expected = reference_call(op, reference)
        except SampleRejected:
            continue
        actual = call(op, on_device)
        test.assertEqual(to_cpu(actual), expected, msg=f"sample {on_device.name!r}")
        compared += 1
    return compared


class TestCommon(TestCase):
    exact_dtype = True

    @ops(op_db)
    def test_compare_cpu(self, device, dtype, op):
        pairs = paired_samples(op, device, dtype)
        if _compare_with_cpu(self, op, pairs) == 0:
            self.skipTest(f"{op.name} has no sample inputs for {dtype}")

    @ops(op_db)
    def test_compare_cpu_reference_inputs(self, device, dtype, op):
        reason = not_comparable_reason(op)
        if reason:
            self.skipTest(reason)
        pairs = paired_samples(op, device, dtype, reference_inputs=True)
        if _compare_with_cpu(self, op, pairs) == 0:
            self.skipTest(f"{op.name} has no inputs beyond its first samples for {dtype}")

    @ops(op_db)
    def test_noncontiguous_matches_contiguous(self, device, dtype, op):
        reason = not_comparable_reason(op)
        if reason:
            self.skipTest(reason)
        if op.name in LAYOUT_DEPENDENT_OPS:
            self.skipTest(f"{op.name}: the result depends on the input's strides by design")
        compared = 0
        for on_device, reference in paired_samples(op, device, dtype):
            try:
                reference_call(op, reference)
            except SampleRejected:
                continue
            contiguous = call(op, on_device)
            strided = on_device.transform(
                lambda t: noncontiguous_like(t) if isinstance(t, torch.Tensor) else t
            )
            self.assertEqual(call(op, strided), contiguous, msg=f"sample {on_device.name!r}")
            compared += 1
        if compared == 0:
            self.skipTest(f"{op.name} has no sample inputs for {dtype}")

    @ops(op_db, dtypes=OpDTypes.none)
    def test_dtype_coverage(self, device, op):
        failures: dict[str, str] = {}
        claimed = sorted(op.supported_dtypes(torch.device(device).type), key=str)
        for dtype in claimed:
            samples = cpu_samples(op, dtype)
            if not samples:
                continue
            try:
                call(op, samples[0].transform(detach_to(device)))
            except Exception as exc:  # every failure is reported below, per dtype
                failures[str(dtype)] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        self.assertEqual(failures, {}, msg=f"{op.name} fails on claimed dtypes")


instantiate_device_type_tests(TestCommon, globals())

if __name__ == "__main__":
    run_tests()
