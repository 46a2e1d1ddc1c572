"""Sticks, scratchpad tiling, ring traffic and the cost model against hand-computed values."""

from __future__ import annotations

import pytest
import torch

from spyre_stack.sim import cost, layout, tiling
from spyre_stack.sim.hardware import CARD


def test_elements_per_stick() -> None:
    assert layout.elems_per_stick(2) == 64  # fp16
    assert layout.elems_per_stick(4) == 32  # fp32
    assert layout.elems_per_stick(1) == 128  # int8


def test_device_shape_matches_the_published_example() -> None:
    assert layout.device_shape((1024, 256), 2) == (4, 1024, 64)


def test_inner_dimension_is_padded_to_whole_sticks() -> None:
    assert layout.sticks((1024, 256), 2) == 4096
    assert layout.sticks((3, 100), 2) == 6  # 100 fp16 -> 2 sticks per row
    assert layout.padded_bytes((3, 100), 2) == 768
    assert layout.sticks((1024, 100), 2) == 2048  # vs 1600 unpadded
    assert layout.sticks((), 2) == 1
    assert layout.sticks((0, 5), 2) == 0


def test_streaming_plan_small() -> None:
    # add of two (1024, 256) fp16 tensors: 4096 output sticks, 2 operands + 1 result per unit
    plan = tiling.plan_streaming(4096, [4096, 4096])
    assert plan.cores == 32
    assert plan.units_per_core == 128
    assert plan.passes == 1
    assert plan.scratchpad_bytes == 2 * 128 * 384 == 98304
    assert plan.ring_bytes == 0


def test_streaming_plan_needs_several_passes_and_fits() -> None:
    out = layout.sticks((16384, 4096), 2)
    assert out == 1_048_576
    plan = tiling.plan_streaming(out, [out, out])
    assert plan.units_per_core == 32768
    assert plan.units_per_pass == (1024 * 1024) // 384 == 2730
    assert plan.passes == 13
    assert plan.scratchpad_bytes == 2 * 2730 * 384 == 2_096_640
    assert plan.fits


def test_broadcast_operand_travels_the_ring() -> None:
    plan = tiling.plan_streaming(4096, [4096, 4], broadcast_bytes=4 * 128)
    assert plan.ring_bytes == 512 * 31


def test_matmul_plan() -> None:
    plan = tiling.plan_matmul(1, 1024, 256, 1024, 2)
    assert plan.cores == 32 and plan.units_per_core == 32
    assert plan.passes == 1
    assert plan.scratchpad_bytes == 2 * (32 * 256 + 256 * 1024 + 32 * 1024) * 2 == 1_212_416
    assert plan.ring_bytes == 256 * 1024 * 2 * 31
    big = tiling.plan_matmul(1, 4096, 4096, 4096, 2)
    assert big.fits and big.passes > 1


def test_cost_of_an_add_is_memory_bound() -> None:
    t = cost.TensorMeta((1024, 256), torch.float16)
    est = cost.estimate_native("pointwise", "add", [t, t], [t])
    assert est.sticks_moved == 3 * 4096
    assert est.memory_us == pytest.approx(12288 * 128 / 200e9 * 1e6)  # 7.864 us
    assert est.compute_us == pytest.approx(262144 / (64 * 32 * 1e9) * 1e6)
    assert est.total_us == pytest.approx(CARD.launch_us + est.memory_us)


def test_cost_of_a_matmul_is_compute_bound() -> None:
    a = cost.TensorMeta((1024, 256), torch.float16)
    b = cost.TensorMeta((256, 1024), torch.float16)
    c = cost.TensorMeta((1024, 1024), torch.float16)
    est = cost.estimate_native("matmul", "mm", [a, b], [c])
    flops = 2 * 1024 * 256 * 1024
    assert est.compute_us == pytest.approx(flops / CARD.peak_flops * 1e6)
    assert est.compute_us > est.memory_us
    # padding: a 1x1 matmul still occupies an 8 x 64 x 64 block
    tiny = cost.estimate_native(
        "matmul",
        "mm",
        [cost.TensorMeta((1, 1), torch.float16)] * 2,
        [cost.TensorMeta((1, 1), torch.float16)],
    )
    assert tiny.compute_us == pytest.approx(2 * 8 * 64 * 64 / 256 / 1e9 * 1e6)


def test_trace_records_match_the_model(spyre: None) -> None:
    import spyre_stack

    x = torch.randn(1024, 256).half().to("spyre")
    with spyre_stack.trace() as t:
        x + x
    (rec,) = t.records
    assert rec.op == "aten::add" and rec.execution == "native" and rec.kind == "pointwise"
    assert rec.input_shapes == ((1024, 256), (1024, 256))
    assert rec.output_dtypes == (torch.float16,)
    assert rec.sticks_moved == 12288
    assert rec.scratchpad_bytes == 98304
    assert rec.cores == 32
    assert rec.estimated_us == pytest.approx(3.0 + 12288 * 128 / 200e9 * 1e6)


def test_trace_records_copies_and_fallbacks(spyre: None) -> None:
    import spyre_stack

    host = torch.randn(100, 100).half()
    with spyre_stack.trace() as t:
        d = host.to("spyre")
        torch.sort(d)
        d.cpu()
    assert [(r.op, r.overload) for r in t.records if r.op == "aten::_copy_from"] == [
        ("aten::_copy_from", "h2d"),
        ("aten::_copy_from", "d2h"),
    ]
    sort = [r for r in t.records if r.op == "aten::sort"]
    assert sort and sort[0].execution == "fallback" and sort[0].estimated_us > CARD.launch_us
    assert t.device_us == pytest.approx(sum(r.estimated_us for r in t.records))


def test_nested_traces(spyre: None) -> None:
    import spyre_stack

    x = torch.ones(8, dtype=torch.float16, device="spyre")
    with spyre_stack.trace() as outer:
        x + x
        with spyre_stack.trace() as inner:
            x * x
    assert outer.ops() == ["aten::add", "aten::mul"]
    assert inner.ops() == ["aten::mul"]
