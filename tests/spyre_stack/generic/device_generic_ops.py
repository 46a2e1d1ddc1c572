"""Device-generic tests in upstream style, run on spyre by test_device_generic.py.

Not collected by the main pytest run (the file name does not start with ``test_``): it needs the
spyre pytest plugin loaded before ``common_device_type`` is imported, so it always runs in its own
pytest process (``-p spyre_stack.testing.pytest_plugin``).
"""

import torch
from torch.testing._internal.common_device_type import (
    instantiate_device_type_tests,
    ops,
)
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, run_tests

# A slice of upstream's OpInfo database that covers the kinds of kernel the simulator models:
# pointwise (vector and special-function unit), reductions, matmul, and a fallback op.
OP_NAMES = {
    "add",
    "mul",
    "abs",
    "neg",
    "exp",
    "sigmoid",
    "tanh",
    "sum",
    "mean",
    "amax",
    "mm",
    "bmm",
    "softmax",
    "cumsum",
    "where",
    "clamp",
}
SELECTED = [op for op in op_db if op.name in OP_NAMES and op.variant_test_name == ""]
DTYPES = (torch.float16, torch.bfloat16)


class TestSpyreGenericOps(TestCase):
    @ops(SELECTED, allowed_dtypes=DTYPES)
    def test_matches_cpu(self, device, dtype, op):
        samples = list(op.sample_inputs(device, dtype, requires_grad=False))[:4]
        for sample in samples:
            actual = op(sample.input, *sample.args, **sample.kwargs)
            cpu = sample.transform(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t)
            expected = op(cpu.input, *cpu.args, **cpu.kwargs)
            self.assertEqual(actual, expected, exact_device=False)

    @ops(SELECTED, allowed_dtypes=(torch.float32,))
    def test_float32_within_fp16_tolerance(self, device, dtype, op):
        # float32 is down-cast to fp16 on the device: inputs carry 2**-11 relative error that
        # accumulates over reductions and matmul K terms, so compare at atol=5e-2, rtol=1e-2
        for sample in list(op.sample_inputs(device, dtype, requires_grad=False))[:4]:
            actual = op(sample.input, *sample.args, **sample.kwargs)
            cpu = sample.transform(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t)
            expected = op(cpu.input, *cpu.args, **cpu.kwargs)
            self.assertEqual(actual, expected, exact_device=False, atol=5e-2, rtol=1e-2)

    @ops(SELECTED, allowed_dtypes=(torch.float16,))
    def test_out_of_place_keeps_device(self, device, dtype, op):
        for sample in list(op.sample_inputs(device, dtype))[:2]:
            result = op(sample.input, *sample.args, **sample.kwargs)
            for t in result if isinstance(result, (tuple, list)) else (result,):
                if isinstance(t, torch.Tensor):
                    self.assertEqual(t.device.type, "spyre")


instantiate_device_type_tests(TestSpyreGenericOps, globals())

if __name__ == "__main__":
    run_tests()
