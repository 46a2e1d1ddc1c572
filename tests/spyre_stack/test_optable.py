"""The op support table and the strict / permissive policies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from spyre_stack import optable


def test_table_loads_and_classifies_overloads() -> None:
    table = optable.load()
    assert table.status("aten::add.Tensor") == "native"
    assert table.status("aten::add_.Scalar") == "native"
    assert table.status("add.out") == "native"
    assert table.status("aten::sort.values") == "fallback"
    assert table.status("aten::_fft_c2c") == "unsupported"
    assert table.status("aten::not_in_table") == "fallback"
    assert table.status("aten::not_in_table", policy="strict") == "unsupported"
    assert table.kind("mm") == "matmul"
    summary = table.summary()
    assert summary["native"] == len(table.by_status("native"))
    assert sum(summary.values()) == len(table.entries)


def test_base_name_keeps_dunder_names() -> None:
    assert optable.base_name("aten::__and__.Tensor") == "__and__"
    assert optable.base_name("aten::mul_") == "mul"


def test_entries_carry_dtypes() -> None:
    mm = optable.load().entry("mm")
    assert mm is not None
    assert mm.dtypes == ("float16", "bfloat16", "float32")
    assert mm.exact_dtypes() == ("float16", "bfloat16")
    assert optable.load().entry("_fft_c2c").dtypes == ()  # type: ignore[union-attr]


def test_malformed_table_reports_every_problem(tmp_path: Path) -> None:
    bad = tmp_path / "ops.yaml"
    bad.write_text(
        "default_status: maybe\nops:\n  add: {status: nativ, kind: pointwise}\n"
        "  mul_: {status: native, kind: blob}\n"
    )
    with pytest.raises(optable.OpTableError) as err:
        optable.load(bad)
    message = str(err.value)
    assert "default_status 'maybe'" in message
    assert "op 'add': status 'nativ'" in message
    assert "op 'mul_': kind 'blob'" in message
    assert "use the base name 'mul'" in message


def test_unsupported_op_raises_naming_op_and_table(simulator: None) -> None:
    x = torch.randn(8, dtype=torch.complex64).to("spyre")
    with pytest.raises(NotImplementedError, match=r"aten::_fft_c2c.*unsupported.*ops\.yaml"):
        torch.fft.fft(x)


def test_fallback_is_counted(spyre: None) -> None:
    from spyre_stack.runtime import state

    core = state.core()
    core.reset_op_counts()
    x = torch.randn(10, dtype=torch.float16).to("spyre")
    torch.sort(x)
    x + x
    counts = core.op_counts()
    assert counts["fallback"]["sort"] == 1
    assert counts["native"]["add"] == 1


def test_strict_policy_refuses_unlisted_ops(policy) -> None:  # type: ignore[no-untyped-def]
    x = torch.randn(6, dtype=torch.float16).to("spyre")
    policy("strict")
    with pytest.raises(NotImplementedError, match=r"aten::flip.*policy strict"):
        torch.flip(x, [0])
    assert torch.equal((x + x).cpu(), x.cpu() * 2)  # listed native op still runs
    policy("permissive")
    assert torch.equal(torch.flip(x, [0]).cpu(), torch.flip(x.cpu(), [0]))


def test_policy_selected_by_environment(run_python: Any) -> None:

    proc = run_python(
        "import torch, spyre_stack\nspyre_stack.register()\n"
        "x = torch.ones(3, dtype=torch.float16, device='spyre')\n"
        "try:\n    torch.flip(x, [0])\nexcept NotImplementedError as e:\n    print('refused')\n",
        env={"SPYRE_OP_POLICY": "strict"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "refused"
