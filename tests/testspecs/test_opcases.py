"""torch-spyre's model op-test format: op-level YAML entries run as real pytest tests on the
device against the CPU, with the spec's tolerances and modes (a pytest subprocess on the spyre
backend, as the harness runs tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from testspecs.loader import load_file
from testspecs.opcases import op_tests

FIXTURES = Path(__file__).parent / "fixtures"
TINY = FIXTURES / "opcases" / "tiny_model_spyre.yaml"
ROOT = Path(__file__).resolve().parents[2]


def run(tmp_path: Path, *extra: str, spec: Path = TINY) -> dict[str, str]:
    junit = tmp_path / "j.xml"
    cmd = [
        sys.executable,
        "-P",
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-p",
        "spyre_stack.testing.pytest_plugin",
        "-p",
        "testspecs.opcases",
        "--rootdir",
        str(spec.parent),
        "--junitxml",
        str(junit),
        str(spec),
        *extra,
    ]
    # the plugin's inputs against the simulator's kernels: under the card model (the default)
    # getitem.2's x[rows, cols] is refused on the device (`aten::index`, device_model.yaml)
    env = {**os.environ, "SPYRE_DEVICE_MODEL": "simulator"}
    subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)
    outcomes = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("name") or ""
        kinds = [c.tag for c in case if c.tag in ("failure", "error", "skipped")]
        skipped = next((c for c in case if c.tag == "skipped"), None)
        if skipped is not None and (skipped.get("type") or "") == "pytest.xfail":
            outcomes[name] = "xfailed"
        else:
            outcomes[name] = kinds[0] if kinds else "passed"
    return outcomes


def test_model_op_file_loads_with_item_kwargs_and_top_level_cases() -> None:
    spec = load_file(FIXTURES / "valid" / "model_ops_v2.yaml")
    include = spec.document.files[0].tests[0].edits.ops.include
    assert include[1].name == "torch.arange"
    assert include[1].inputs().kwargs == {"device": "cuda:0"}  # written beside sample_inputs_func
    assert spec.document.cases and spec.document.cases[0]["op"] == "torch.add"


def test_each_include_item_is_one_test_named_by_its_tag() -> None:
    tests = op_tests(load_file(TINY).document)
    assert [(t.name, t.mode) for t in tests] == [
        ("test_model_ops_db[torch.add.1_spyre]", "mandatory_success"),
        ("test_model_ops_db[torch.Tensor.expand.1_spyre]", "mandatory_success"),
        ("test_model_ops_db[torch.getitem.1_spyre]", "mandatory_success"),
        ("test_model_ops_db[torch.arange.1_spyre]", "mandatory_success"),
        ("test_model_ops_db[torch.nn.functional.embedding.1_spyre]", "mandatory_success"),
        ("test_model_ops_db[torch.to.1_spyre]", "mandatory_success"),
        ("test_model_ops_db[torch.new_ones.1_spyre]", "mandatory_success"),
        ("test_model_ops_db[torch.getitem.2_spyre]", "mandatory_success"),
        ("test_model_ops_db[torch.nn.functional.gelu.1_spyre]", "mandatory_success"),
        ("test_model_ops_db[torch.linalg.qr.1_spyre]", "xfail_strict"),
    ]  # the skip entry's gelu is never generated


@pytest.fixture(scope="module")
def on_spyre(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return run(tmp_path_factory.mktemp("opcases"))


def test_op_tests_run_on_the_device_against_the_cpu(on_spyre: dict[str, str]) -> None:
    assert on_spyre == {
        "test_model_ops_db[torch.add.1_spyre]": "passed",  # strided fp16 inputs within 5e-3
        "test_model_ops_db[torch.Tensor.expand.1_spyre]": "passed",
        "test_model_ops_db[torch.getitem.1_spyre]": "passed",  # py: slices and None
        "test_model_ops_db[torch.arange.1_spyre]": "passed",  # device=cuda:0 -> the device
        "test_model_ops_db[torch.nn.functional.embedding.1_spyre]": "passed",
        "test_model_ops_db[torch.to.1_spyre]": "passed",
        "test_model_ops_db[torch.new_ones.1_spyre]": "passed",
        # a recorded list of index tensors is the model's x[rows, cols]
        "test_model_ops_db[torch.getitem.2_spyre]": "passed",
        # float32 computed in half on the device: it warns (warnings are errors in this
        # project's pytest settings) and still passes within the spec's float32 tolerance
        "test_model_ops_db[torch.nn.functional.gelu.1_spyre]": "passed",
        # unsupported in the spyre op table: it fails on the device, as the spec expects
        "test_model_ops_db[torch.linalg.qr.1_spyre]": "xfailed",
    }


def test_the_device_run_is_not_the_cpu_run(tmp_path: Path) -> None:
    """On the CPU the unsupported op passes, so the strict xfail turns into a failure: the
    spyre run above really ran on the device."""
    on_cpu = run(tmp_path, "--opcases-device", "cpu")
    assert on_cpu["test_model_ops_db[torch.linalg.qr.1_spyre]"] == "failure"
    assert on_cpu["test_model_ops_db[torch.add.1_spyre]"] == "passed"


def test_the_spec_tolerance_is_the_one_compared_with(tmp_path: Path) -> None:
    """float32 runs in half on the device: within the spec's 5e-3 it passes (above); with a zero
    float32 tolerance the same op fails, and an exact op (fp16 add) still passes."""
    text = TINY.read_text()
    tolerant = "- name: float32\n        precision: {atol: 0.005, rtol: 0.005}"
    assert tolerant in text
    spec = tmp_path / "exact.yaml"
    spec.write_text(
        text.replace(tolerant, "- name: float32\n        precision: {atol: 0.0, rtol: 0.0}")
    )
    outcomes = run(tmp_path, spec=spec)
    assert outcomes["test_model_ops_db[torch.nn.functional.gelu.1_spyre]"] == "failure"
    assert outcomes["test_model_ops_db[torch.add.1_spyre]"] == "passed"


def test_relay_tests_list_shows_the_op_tests() -> None:
    from typer.testing import CliRunner

    from cli import build_app

    result = CliRunner().invoke(build_app(), ["tests", "list", "--opcases", str(TINY), "--json"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [r["test_id"] for r in rows] == [
        f"{TINY}::{t.name}" for t in op_tests(load_file(TINY).document)
    ]
    assert rows[0] | {"tags": []} == {
        "test_id": f"{TINY}::test_model_ops_db[torch.add.1_spyre]",
        "op": "torch.add",
        "dtype": "float16",
        "decision": "mandatory_success",
        "tags": [],
    }
    assert rows[-1]["decision"] == "xfail_strict"
    bad = CliRunner().invoke(
        build_app(), ["tests", "list", "--opcases", str(FIXTURES / "nope.yaml")]
    )
    assert bad.exit_code == 2 and "cannot read spec" in bad.output


NEWER = FIXTURES / "opcases" / "newer_grammar_spyre.yaml"


def test_newer_grammar_op_tests_run_on_the_device(tmp_path: Path) -> None:
    """torch-spyre's newer keys reach the run: a recorded device layout (the simulated card keeps
    its own stick layout, a layout too small for its tensor fails the test), cumsum offsets, a
    keyword argument written as a tensor spec, an entry's labels and no_grad."""
    assert run(tmp_path, spec=NEWER) == {
        "test_model_ops_db[torch.Tensor.float.1]": "passed",
        "test_model_ops_db[torch.add.1]": "passed",
        "test_model_ops_db[torch.index_select.1]": "passed",
        "test_model_ops_db[torch.Tensor.float.2]": "xfailed",
    }


def test_inputs_of_the_newer_grammar_are_built_as_recorded() -> None:
    import torch

    from testspecs.inputs import InputError, build_call, build_tensor

    entries = load_file(NEWER).document.files[0].tests
    ops = entries[0].edits.ops.include + entries[1].edits.ops.include
    offsets = build_call(ops[1].inputs(), seed=7).args[0]
    assert offsets.shape == (8,) and int(offsets[-1]) == 64
    assert bool((offsets[1:] >= offsets[:-1]).all())  # a non-decreasing partition of 64 rows
    call = build_call(ops[2].inputs(), seed=7)
    index = call.kwargs["index"]
    assert isinstance(index, torch.Tensor) and index.dtype == torch.int64 and index.shape == (3,)
    assert call.kwargs["dim"] == 0 and int(index.max()) < 6
    layout = ops[3].inputs().args[0].tensor
    assert layout is not None
    with pytest.raises(InputError, match=r"device_layout \[1, 64\] holds 64 elements, fewer than"):
        build_tensor(layout, torch.Generator().manual_seed(0))


def test_an_op_test_refuses_module_test_arguments() -> None:
    from testspecs.input_specs import Inputs
    from testspecs.inputs import InputError, build_call

    inputs = Inputs.model_validate({"args": [{"config_path": "toy.Config", "config_kwargs": {}}]})
    with pytest.raises(InputError, match="describes a module test's inputs"):
        build_call(inputs, seed=0)


EXPANDED = FIXTURES / "opcases" / "expanded_views_spyre.yaml"


def test_expanded_view_inputs_run_on_the_device(tmp_path: Path) -> None:
    """A recorded input with a zero stride (an expanded view: several elements share one
    location) reaches the device; copying it element by element failed before the op ran."""
    assert run(tmp_path, spec=EXPANDED) == {
        "test_model_ops_db[torch.to.1]": "passed",
        "test_model_ops_db[torch.mul.1]": "passed",
    }


def test_an_expanded_view_moves_with_its_strides_and_offset() -> None:
    from testspecs.inputs import build_call, to_device

    ops = load_file(EXPANDED).document.files[0].tests[0].edits.ops.include
    expanded = build_call(ops[1].inputs(), seed=3).args[1]
    moved = to_device(build_call(ops[1].inputs(), seed=3), "meta").args[1]
    assert (moved.device.type, moved.shape) == ("meta", expanded.shape)
    assert (moved.stride(), moved.storage_offset()) == ((0, 8, 1), 2)


def test_a_python_constant_written_as_text_is_that_constant() -> None:
    """Recorders write a keyword argument's repr: ``attn_mask: None`` is YAML text, not null."""
    from testspecs.input_specs import Inputs
    from testspecs.inputs import build_call

    inputs = Inputs.model_validate(
        {
            "args": [{"tensor": {"shape": [2, 3], "dtype": "torch.float16"}}],
            "kwargs": {"attn_mask": "None", "is_causal": "False", "device": "cuda:0"},
        }
    )
    kwargs = build_call(inputs, seed=0).kwargs
    assert kwargs == {"attn_mask": None, "is_causal": False, "device": "cuda:0"}


INPLACE = FIXTURES / "opcases" / "inplace_spyre.yaml"


def test_an_in_place_op_gets_inputs_of_its_own_on_each_side(tmp_path: Path) -> None:
    """``x.add_(y)`` run on the CPU first changes ``x``: the device must not be given the
    changed ``x`` (it would compute x + 2y and fail against x + y)."""
    outcomes = run(tmp_path, spec=INPLACE)
    assert outcomes["test_model_ops_db[torch.Tensor.add_.1]"] == "passed"
    assert outcomes["test_model_ops_db[torch.Tensor.mul_.1]"] == "passed"
    assert outcomes["test_model_ops_db[torch.add.1]"] == "passed"


def test_a_custom_op_whose_library_is_not_loaded_is_skipped_with_the_reason(
    tmp_path: Path,
) -> None:
    from testspecs.inputs import OpNotRegistered, resolve_op

    outcomes = run(tmp_path, spec=INPLACE)
    assert outcomes["test_model_ops_db[torch.ops.demo_models.fused_router.1]"] == "skipped"
    with pytest.raises(OpNotRegistered, match="'demo_models' namespace"):
        resolve_op("torch.ops.demo_models.fused_router")
    assert callable(resolve_op("torch.ops.aten.add"))
