"""torch-spyre's config families load as torch-spyre's own loader reads them: its newer keys
(device layouts, module-test arguments, labels, no_grad) and its sharded inductor configs (class
patterns with alternations). The fixtures are small files written in the same format."""

from __future__ import annotations

from pathlib import Path

from testspecs.compiled import compile_spec
from testspecs.loader import load_file
from testspecs.merge import merge
from testspecs.resolve import resolve

VALID = Path(__file__).parent / "fixtures" / "valid"


def test_newer_grammar_keys_are_typed() -> None:
    doc = load_file(VALID / "newer_grammar.yaml").document
    ops_file, modules_file = doc.files
    assert ops_file.labels == ["nightly"]
    entry = ops_file.tests[0]
    assert (entry.labels, entry.no_grad) == (["model_ops"], True)
    floats, cumsum, index_select = entry.edits.ops.include
    tensor = floats.inputs().args[0].tensor
    assert tensor is not None and tensor.device_layout is not None
    layout = tensor.device_layout
    assert (layout.device_size, layout.stride_map, layout.device_dtype) == (
        [2, 1, 32],
        [32, -1, 1],
        "torch.int32",
    )
    offsets = cumsum.inputs().args[0].tensor
    assert offsets is not None and (offsets.init, offsets.init_args.total) == ("cumsum_offsets", 64)
    index = index_select.inputs().kwarg_spec("index")
    assert index is not None and index.tensor is not None and index.tensor.shape == [3]
    assert index_select.inputs().kwarg_spec("dim") is None

    module = modules_file.tests[0].edits.modules.include[0]
    assert module.apply_device_layout is True
    assert module.constructor_inputs is not None
    inner = module.constructor_inputs.args[0]
    assert (inner.module_path, inner.config_path, inner.module_kwargs) == (
        "toy_models.attention.ToyInnerAttention",
        "toy_models.config.ToyConfig",
        {"layer_idx": 0},
    )
    assert isinstance(module.forward_inputs, list)
    forward = module.forward_inputs[0]
    config = forward.kwarg_spec("config")
    assert config is not None and config.model_id == "toy-org/toy-model"
    cache = forward.kwarg_spec("past_key_values")
    assert cache is not None and cache.cache is not None
    assert (cache.cache.layer_idx, cache.cache.max_cache_len, cache.cache.key.shape) == (
        0,
        16,
        [1, 4, 3, 16],
    )


def test_sharded_inductor_config_resolves_like_torch_spyre() -> None:
    """Class patterns (``ToyPlanning.*``) and alternations in both parts of a name; a known
    failure listed before the mandatory pattern wins over it; a dot in a name is a regex dot."""
    path = VALID / "lx_shards.yaml"
    cs = compile_spec(merge([load_file(path)]))
    test_file = "tests/inductor/test_toy_planning.py"

    def mode(cls: str, method: str) -> tuple[bool, str]:
        d = resolve(cs, f"{test_file}::{cls}::{method}", base=f"{cls}::{method}")
        return d.run, d.mode

    reduction, pointwise = "ToyPlanningTwoOpReductionTest", "ToyPlanningTwoOpPointwiseTest"
    assert mode(reduction, "test_mm_64x64_planning_reduction") == (True, "mandatory_success")
    assert mode(pointwise, "test_bmm_2x8_planning_pointwise") == (True, "mandatory_success")
    assert mode(pointwise, "test_mm_55x2_2x99_planning_pointwise") == (True, "xfail")
    assert mode(reduction, "test_scaled_mm_128x128_1.0_0.0_planning_reduction") == (True, "xfail")
    assert mode(reduction, "test_mm_64x64_planning_other") == (False, "skip")  # unlisted
    assert mode("OtherTest", "test_mm_64x64_planning_reduction") == (False, "skip")
