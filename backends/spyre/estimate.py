"""The spyre backend's device-time hook before a test ran: seconds of simulated device time for a
variant from the simulator's cost model (:mod:`spyre_stack.sim.cost`) for the op table's kernel
class of the variant's op at the variant's dtype, on a representative sample shape, times the
kernels the test template runs.
"""

from __future__ import annotations

from functools import lru_cache

from backends.base import VariantLike

# kernels a template launches per sample input (forward, backward, out=, variants, ...)
TEMPLATE_KERNELS = {
    "test_compare_cpu": 1,
    "test_noncontiguous_matches_contiguous": 2,
    "test_dtype_coverage": 6,
    "test_out_argument": 2,
    "test_out_resizes_empty": 2,
    "test_variant_consistency": 3,
    "test_backward_compare_cpu": 3,
    "test_error_inputs_match_cpu": 1,
    "test_module_forward_compare_cpu": 5,
    "test_module_backward_compare_cpu": 15,
}
SAMPLES_PER_TEST = 4
SAMPLE_SHAPE = (10, 10)
HOST_DTYPES = {"float64", "complex64", "complex128", "complex32"}


class SimulatorEstimate:
    """Seconds of simulated device time for a variant without history.

    The estimate depends on the op only through the op table (status, kernel class, special
    function unit or not), so it is cached per (op) and per (kernel, dtype, template).
    """

    source = "simulator-estimate"

    def __init__(self) -> None:
        self._ops: dict[tuple[str, bool], tuple[str, str, bool]] = {}
        self._cache: dict[tuple[tuple[str, str, bool], str, str, bool], float] = {}

    def seconds(self, v: VariantLike) -> float:
        op = v.op or (v.module or "")
        module = v.module is not None and v.op is None
        kernel = self._ops.get((op, module))
        if kernel is None:
            kernel = _kernel(op, module=module)
            self._ops[(op, module)] = kernel
        key = (kernel, v.dtype or "float32", v.base, module)
        got = self._cache.get(key)
        if got is None:
            got = _estimate(kernel, v.dtype or "float32", v.base)
            self._cache[key] = got
        return got


def _kernel(op: str, *, module: bool) -> tuple[str, str, bool]:
    """(status, kernel class, special-function) of the op's base name in the op table."""
    from spyre_stack import optable
    from spyre_stack.sim import cost

    if module:
        return "native", "matmul", False
    table = optable.load()
    name = op.rsplit(".", 1)[-1] if op.startswith("nn.") else op.split(".", 1)[0]
    return table.status(name), table.kind(name), name in cost.SPECIAL


@lru_cache(maxsize=4096)
def _estimate(kernel: tuple[str, str, bool], dtype: str, base: str) -> float:
    import torch

    from spyre_stack.sim import cost

    status, kind, special = kernel
    tdtype = getattr(torch, dtype.split(",")[0], torch.float32)
    if not isinstance(tdtype, torch.dtype):
        tdtype = torch.float32
    meta = cost.TensorMeta(SAMPLE_SHAPE, tdtype)
    if status != "native" or dtype in HOST_DTYPES:
        estimate = cost.estimate_fallback([meta, meta], [meta])
    else:
        estimate = cost.estimate_native(kind, "exp" if special else "add", [meta, meta], [meta])
    copies = 3 * cost.estimate_copy("h2d", meta, meta).total_us
    kernels = TEMPLATE_KERNELS.get(base, 2)
    return round(SAMPLES_PER_TEST * (kernels * estimate.total_us + copies) * 1e-6, 9)
