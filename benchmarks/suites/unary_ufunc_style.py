"""A unary ufunc test written the way upstream's test_unary_ufuncs.py writes its reference
numerics tests (our own code): for each unary ufunc OpInfo with a NumPy reference, tensors of
a few shapes in the op's domain, made on the CPU, the op on the device under test, compared with
the reference. Device-generic: instantiated for the device the run selects (CPU or spyre).
"""

from __future__ import annotations

import numpy as np
import torch
from torch.testing import make_tensor
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import unary_ufuncs
from torch.testing._internal.common_utils import TestCase

NAMES = ("abs", "neg", "exp", "log", "sin", "cos", "tanh", "sqrt", "sigmoid", "reciprocal")
SHAPES = ((), (1024,), (64, 64))
OPS = [op for op in unary_ufuncs if op.name in NAMES and op.ref is not None]


class TestUnaryUfuncStyle(TestCase):
    @ops(OPS, allowed_dtypes=(torch.float32, torch.float16))
    def test_reference_numerics_normal(self, device, dtype, op):
        low, high = op.domain
        low = 0.1 if low is not None and low >= 0 else -4.0
        high = 4.0 if high is None else min(high, 4.0)
        for shape in SHAPES:
            cpu = make_tensor(shape, device="cpu", dtype=dtype, low=low, high=high)
            actual = op(cpu.to(device)).cpu()
            expected = op.ref(cpu.float().numpy()).astype(np.float32)
            self.assertEqual(
                actual.float(), torch.from_numpy(np.asarray(expected)), atol=2e-3, rtol=2e-3
            )


instantiate_device_type_tests(TestUnaryUfuncStyle, globals())
