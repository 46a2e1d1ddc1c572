"""The ``out=`` contract of every OpInfo that supports it, for every dtype it claims.

- test_out_argument: writing into preallocated outputs of the right shape and dtype gives the same
  values as the functional call, returns the very tensors passed in, and keeps their storage.
- test_out_resizes_empty: zero-element outputs are resized to the result's shape.
"""

from __future__ import annotations

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, run_tests

from spyre_stack.conformance._support import (
    INVALID_ON_CPU,
    SampleRejected,
    not_comparable_reason,
    ops,
    paired_samples,
    reference_call,
)

out_ops = [op for op in op_db if op.supports_out]


def _outs_like(result, make):
    if isinstance(result, torch.Tensor):
        return make(result)
    if isinstance(result, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in result):
        return tuple(make(t) for t in result)
    return None


def _as_tuple(value):
    return value if isinstance(value, (tuple, list)) else (value,)


class TestOut(TestCase):
    def _check(self, device, dtype, op, make):
        reason = not_comparable_reason(op)
        if reason:
            self.skipTest(reason)
        checked = 0
        for sample, reference in paired_samples(op, device, dtype):
            try:
                expected = reference_call(op, reference)
            except SampleRejected:
                continue
            cpu_out = _outs_like(expected, make)
            if cpu_out is None:
                continue
            try:  # the CPU decides whether this sample takes out= at all
                cpu_returned = op(reference.input, *reference.args, out=cpu_out, **reference.kwargs)
            except INVALID_ON_CPU:
                continue
            out = _outs_like(expected, lambda t: make(t).to(device))
            pointers = [t.data_ptr() for t in _as_tuple(out)]
            returned = op(sample.input, *sample.args, out=out, **sample.kwargs)
            if cpu_returned is None:  # e.g. the *_copy ops that fill a list and return nothing
                self.assertIsNone(returned)
            else:
                for given, got in zip(_as_tuple(out), _as_tuple(returned), strict=True):
                    self.assertIs(got, given, msg="out= must return the tensors passed in")
            self.assertEqual(out, cpu_out, exact_device=False, msg=f"sample {sample.name!r}")
            if make is torch.empty_like:
                self.assertEqual([t.data_ptr() for t in _as_tuple(out)], pointers)
            checked += 1
        if checked == 0:
            self.skipTest(f"{op.name} has no sample that takes out= for {dtype}")

    @ops(out_ops)
    def test_out_argument(self, device, dtype, op):
        self._check(device, dtype, op, torch.empty_like)

    @ops(out_ops)
    def test_out_resizes_empty(self, device, dtype, op):
        self._check(device, dtype, op, lambda t: torch.empty(0, dtype=t.dtype, device=t.device))


instantiate_device_type_tests(TestOut, globals())

if __name__ == "__main__":
    run_tests()
