"""Invalid inputs fail on the device the way the OpInfo says they fail.

- test_error_inputs_match_cpu: each ErrorInput the OpInfo declares raises the declared exception
  type with a message matching the declared pattern on the device, as it does on the CPU.
"""

from __future__ import annotations

import re

from torch.testing._internal.common_device_type import OpDTypes, instantiate_device_type_tests
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, run_tests

from spyre_stack.conformance._support import SEED, detach_to, ops

error_ops = [op for op in op_db if op.error_inputs_func is not None]


class TestErrorInputs(TestCase):
    @ops(error_ops, dtypes=OpDTypes.none)
    def test_error_inputs_match_cpu(self, device, op):
        import torch

        torch.manual_seed(SEED)
        checked = 0
        for error in op.error_inputs("cpu"):
            # The declaration is checked on a CPU copy made the way the device copy is made:
            # errors that depend on memory relationships the copy does not keep (an out=
            # tensor aliasing an input, a partial view) do not count.
            sample = error.sample_input
            copy = sample.transform(detach_to("cpu"))
            try:
                op(copy.input, *copy.args, **copy.kwargs)
            except error.error_type as exc:
                if not re.search(error.error_regex, str(exc)):
                    continue
            except Exception:
                continue
            else:
                continue
            moved = sample.transform(detach_to(device))
            with self.assertRaisesRegex(error.error_type, error.error_regex):
                op(moved.input, *moved.args, **moved.kwargs)
            checked += 1
        if checked == 0:
            self.skipTest(f"{op.name}: no declared error reproduces on the CPU")


instantiate_device_type_tests(TestErrorInputs, globals())

if __name__ == "__main__":
    run_tests()
