"""The simulated Spyre device: eager dispatch overhead and compiled-vs-eager device time.

1. Eager dispatch overhead: wall time per op call on `spyre` against the same op on the CPU
   (baseline, same run), float16 and float32 tensors of 1 K and 1 M elements. The spyre path is
   the real PrivateUse1 dispatch, the op-table check, the host computation on the device memory
   (zero-copy) and, for float32, the fp16 numerics emulation; tracing is off.
2. Compiled vs eager: the simulator's *estimated* device time and sticks moved for a small MLP
   (fp16, batch 64, 256 -> 512 -> 512 -> 256 with GELU), `torch.compile(backend="spyre")` against
   the same model run eagerly on spyre (baseline). These are cost-model estimates, not
   measurements.
3. What a test costs: the bundled conformance suites and an upstream-style unary ufunc test,
   per test on spyre against the same test on the CPU (:mod:`benchmarks.spyre_per_test`).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

from benchmarks import spyre_per_test
from benchmarks.report import Report

SIZES = {"1K": (32, 32), "1M": (1024, 1024)}


def _time(fn: Callable[[], object], budget_s: float = 1.0, max_reps: int = 200) -> float:
    fn()  # warm up
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < max_reps and (time.perf_counter() - start < budget_s or len(samples) < 5):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def run(report: Report) -> None:
    os.environ.setdefault("SPYRE_SILENCE_DOWNCAST_WARNING", "1")
    import torch

    import spyre_stack
    from spyre_stack.runtime import state

    spyre_stack.register()
    state.apply_numerics(warn=False)
    torch.set_num_threads(1)

    table = report.table(
        "spyre eager dispatch overhead (one thread)",
        ["op", "size", "dtype", "cpu us/call", "spyre us/call", "spyre / cpu"],
        note="Wall time per call, median; baseline is the same op on the CPU in the same run. "
        "float16 shows the dispatch cost (the op runs zero-copy on the host memory behind the "
        "device); float32 adds the device numerics emulation (operands and results rounded "
        "through fp16).",
    )
    ops: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
        "add": torch.add,
        "mul": torch.mul,
        "matmul": torch.matmul,
        "softmax": lambda a, _b: torch.softmax(a, dim=-1),
    }
    for dtype in (torch.float16, torch.float32):
        for size_name, shape in SIZES.items():
            a_cpu = torch.randn(shape).to(dtype)
            b_cpu = torch.randn(shape).to(dtype)
            a_dev, b_dev = a_cpu.to("spyre"), b_cpu.to("spyre")
            budget = 0.4 if size_name == "1K" else 1.0
            for name, op in ops.items():
                cpu = _time(lambda op=op, a=a_cpu, b=b_cpu: op(a, b), budget)
                dev = _time(lambda op=op, a=a_dev, b=b_dev: op(a, b), budget)
                table.rows.append(
                    [
                        name,
                        size_name,
                        str(dtype).removeprefix("torch."),
                        f"{cpu * 1e6:.1f}",
                        f"{dev * 1e6:.1f}",
                        f"{dev / cpu:.2f}x",
                    ]
                )

    torch.manual_seed(0)
    model = (
        torch.nn.Sequential(
            torch.nn.Linear(256, 512),
            torch.nn.GELU(),
            torch.nn.Linear(512, 512),
            torch.nn.GELU(),
            torch.nn.Linear(512, 256),
        )
        .half()
        .to("spyre")
    )
    x = torch.randn(64, 256, dtype=torch.float16).to("spyre")
    compiled = torch.compile(model, backend="spyre")
    with torch.no_grad():
        compiled(x)
        with spyre_stack.trace() as eager_trace:
            model(x)
        with spyre_stack.trace() as compiled_trace:
            compiled(x)
    mlp = report.table(
        "spyre compiled vs eager, small MLP (estimated device time, cost model)",
        ["run", "kernels", "sticks moved", "est. device us", "vs eager"],
        note="MLP 256-512-512-256 with GELU, fp16, batch 64. Device times are cost-model "
        "estimates (spyre_stack/sim/cost.py), not measurements; baseline is eager on spyre.",
    )
    e_us, c_us = eager_trace.device_us, compiled_trace.device_us
    e_k, c_k = eager_trace.kernels(), compiled_trace.kernels()
    mlp.rows.append(["eager", len(e_k), eager_trace.sticks_moved, f"{e_us:.2f}", "1.00x"])
    mlp.rows.append(
        ["compiled", len(c_k), compiled_trace.sticks_moved, f"{c_us:.2f}", f"{c_us / e_us:.2f}x"]
    )

    spyre_per_test.run(report)
