"""The four stages and every impact signal on a small generated upstream git repository."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from backends.spyre.estimate import SimulatorEstimate
from planner import source_reader
from selector import price
from selector.model import Candidate, History, Universe, op_keys
from selector.signals import SIGNALS, ImpactSignal, SignalConfig
from selector.stages.applicability import applicability_stage
from selector.stages.budget import budget_stage
from selector.stages.changes import changes_stage
from selector.stages.impact import impact_stage
from upstream import GitCheckout
from upstream.changes import compute_change_facts

NO_PRIOR = SignalConfig(profiling_map=None)


@pytest.fixture
def repo(tmp_path: Path, small_upstream: Any) -> Any:
    return small_upstream.UpstreamRepo.create(tmp_path)


SPYRE_ESTIMATE = SimulatorEstimate()


@pytest.fixture
def plan_for(small_upstream: Any, select: Any) -> Any:
    """``plan_for(repo, config=NO_PRIOR, **kw)``: the four stages from base to HEAD of
    ``repo`` over the generated universe."""

    def plan(repo: Any, config: SignalConfig = NO_PRIOR, **kw: Any) -> Any:
        source = GitCheckout(repo.path)
        facts = compute_change_facts(source, source.resolve("base"), source.resolve("HEAD"))
        return select(
            facts,
            small_upstream.make_universe(),
            reader=source_reader(source, facts),
            config=config,
            **kw,
        )

    return plan


def ids_with(plan, text: str) -> set[str]:  # type: ignore[no-untyped-def]
    return {t.test_id for t in plan.tests if text in t.test_id}


def test_every_signal_implements_the_protocol() -> None:
    for name, factory in SIGNALS.items():
        signal = factory()
        assert isinstance(signal, ImpactSignal), name
        assert signal.name == name
        assert 0 <= signal.closeness <= 1


def test_edited_test_selects_itself_and_nothing_else(
    repo: Any, small_upstream: Any, plan_for: Any
) -> None:
    repo.commit(
        {
            "test/test_ops.py": small_upstream.TEST_OPS.replace(
                "self.assertTrue(_helper())", "self.assertEqual(_helper(), 1)"
            )
        }
    )
    plan = plan_for(repo)
    assert not plan.fallback
    assert {t.test_id.split("::")[-1].split("_spyre")[0].rsplit("_", 1)[0] for t in plan.tests}
    assert all("::test_out_" in t for t in plan.test_ids)
    assert len(plan.tests) == 4 * len(
        small_upstream.DTYPES
    )  # every op, every dtype of the edited template
    assert all(t.signals == ("edited-tests",) for t in plan.tests)
    assert "modified test TestCommon.test_out" in plan.tests[0].reasons[0]


def test_edited_helper_of_a_test_file_selects_the_whole_file(
    repo: Any, small_upstream: Any, plan_for: Any
) -> None:
    repo.commit({"test/test_ops.py": small_upstream.TEST_OPS.replace("return 1", "return 2")})
    plan = plan_for(repo)
    assert len(plan.tests) == 16
    assert all(t.startswith("test/test_ops.py") for t in plan.test_ids)


def test_changed_opinfo_selects_its_variants_across_dtypes(
    repo: Any, small_upstream: Any, plan_for: Any
) -> None:
    repo.commit(
        {
            "torch/testing/_internal/common_methods_invocations.py": small_upstream.OPINFO_DB.replace(
                "return [1, 2]", "return [1, 2, 3]"
            )
        }
    )
    plan = plan_for(repo)
    assert not plan.fallback
    assert set(plan.test_ids) == ids_with(plan, "_add_")
    assert len(plan.tests) == 2 * len(small_upstream.DTYPES)
    assert {t.test_id.rsplit("_", 1)[-1] for t in plan.tests} == set(small_upstream.DTYPES)
    assert "opinfo add modified: uses changed sample_inputs_add" in plan.tests[0].reasons[0]
    assert "opinfo:add" in plan.explained


def test_changed_info_class_selects_every_entry_built_with_it(
    repo: Any, small_upstream: Any, plan_for: Any, select: Any
) -> None:
    text = small_upstream.OPINFO_DB + "\n\nclass UnaryUfuncInfo(OpInfo):\n    pass\n"
    repo.commit({"torch/testing/_internal/common_methods_invocations.py": text})
    base_plan = plan_for(repo)
    repo.commit(
        {
            "torch/testing/_internal/common_methods_invocations.py": text.replace(
                "    pass\n", "    domain = (0, 1)\n"
            )
        }
    )
    source = GitCheckout(repo.path)
    facts = compute_change_facts(source, source.resolve("HEAD~1"), source.resolve("HEAD"))
    plan = select(
        facts, small_upstream.make_universe(), reader=source_reader(source, facts), config=NO_PRIOR
    )
    assert base_plan.tests  # adding the class is itself a change
    assert {t.split("::")[-1].split("_spyre")[0] for t in plan.test_ids} == {
        f"{tpl}_nn_functional_{op}"
        for tpl in ("test_compare_cpu", "test_out")
        for op in ("gelu", "silu")
    }
    assert all(t.signals == ("opinfo-class",) for t in plan.tests)
    assert "UnaryUfuncInfo class changed (UnaryUfuncInfo)" in plan.tests[0].reasons[0]


def test_an_entrys_own_change_ranks_above_entries_that_inherit_a_changed_class(
    repo: Any, small_upstream: Any, select: Any
) -> None:
    """A definition every entry shares says less about one entry than its own does."""
    text = small_upstream.OPINFO_DB + "\n\nclass UnaryUfuncInfo(OpInfo):\n    pass\n"
    repo.commit({"torch/testing/_internal/common_methods_invocations.py": text})
    changed = text.replace("    pass\n", "    domain = (0, 1)\n").replace(
        'UnaryUfuncInfo("nn.functional.silu")',
        'UnaryUfuncInfo("nn.functional.silu", supports_out=False)',
    )
    repo.commit({"torch/testing/_internal/common_methods_invocations.py": changed})
    source = GitCheckout(repo.path)
    facts = compute_change_facts(source, source.resolve("HEAD~1"), source.resolve("HEAD"))
    plan = select(
        facts, small_upstream.make_universe(), reader=source_reader(source, facts), config=NO_PRIOR
    )
    ops = [t.test_id.split("_nn_functional_")[1].split("_spyre")[0] for t in plan.tests]
    first_gelu = ops.index("gelu")
    assert set(ops) == {"gelu", "silu"} and set(ops[:first_gelu]) == {"silu"}
    silu = plan.tests[0]
    assert set(silu.signals) == {"opinfo-moduleinfo", "opinfo-class"}
    assert plan.tests[first_gelu].signals == ("opinfo-class",)
    assert silu.risk > plan.tests[first_gelu].risk


def test_changed_decomposition_helper_selects_the_ops_using_it(
    repo: Any, small_upstream: Any, plan_for: Any
) -> None:
    repo.commit(
        {
            "torch/_decomp/decompositions.py": small_upstream.DECOMPOSITIONS.replace(
                "return x * 0.5", "return x * 0.25"
            )
        }
    )
    plan = plan_for(repo)
    assert not plan.fallback
    assert set(plan.test_ids) == ids_with(plan, "nn_functional_gelu")
    assert len(plan.tests) == 4
    reason = plan.tests[0].reasons[0]
    assert "decomposition gelu modified (calls changed _erf_helper) -> gelu" in reason


def test_changed_decomposition_of_a_list_of_ops(
    repo: Any, small_upstream: Any, plan_for: Any
) -> None:
    repo.commit(
        {
            "torch/_decomp/decompositions.py": small_upstream.DECOMPOSITIONS.replace(
                "self.sigmoid()", "self.sigmoid() * 1"
            )
        }
    )
    plan = plan_for(repo)
    assert set(plan.test_ids) == ids_with(plan, "nn_functional_silu") and plan.tests


def test_schema_and_derivative_entries_select_their_ops(
    repo: Any, small_upstream: Any, plan_for: Any
) -> None:
    repo.commit(
        {
            "aten/src/ATen/native/native_functions.yaml": small_upstream.NATIVE_FUNCTIONS.replace(
                "CPU: gelu_kernel", "CPU: gelu_kernel_v2"
            ),
            "tools/autograd/derivatives.yaml": small_upstream.DERIVATIVES.replace(
                "grad * self", "self * grad"
            ),
        }
    )
    plan = plan_for(repo)
    assert not plan.fallback
    selected = {t.split("::")[-1].split("_spyre")[0].split("_", 3)[-1] for t in plan.test_ids}
    assert set(plan.test_ids) == ids_with(plan, "gelu") | ids_with(plan, "_mul_")
    assert selected
    assert plan.explained["native_functions:gelu"][0].startswith("operators: 4 variant(s)")


def test_kernel_source_selects_the_ops_it_implements(repo: Any, plan_for: Any) -> None:
    repo.commit(
        {
            "aten/src/ATen/native/BinaryOps.cpp": "void add_out_kernel(TensorIterator& iter) { /* faster */ }\n"
            "void mul_kernel() {}\n"
        }
    )
    plan = plan_for(repo)
    assert not plan.fallback
    # the file defines both kernels: add (structured add.out) and mul
    assert set(plan.test_ids) == ids_with(plan, "_add_") | ids_with(plan, "_mul_")


def test_unmapped_cpp_change_triggers_the_fallback_and_says_so(
    repo: Any, small_upstream: Any, plan_for: Any
) -> None:
    repo.commit({"aten/src/ATen/native/Mystery.cpp": "int mystery() { return 42; }\n"})
    plan = plan_for(repo)
    assert plan.fallback
    assert plan.unexplained == ["aten/src/ATen/native/Mystery.cpp"]
    [fb] = plan.fallbacks
    assert fb.scope == "all" and fb.tests == len(small_upstream.make_universe())
    assert "no signal maps aten/src/ATen/native/Mystery.cpp" in fb.reason
    assert len(plan.tests) == len(small_upstream.make_universe())
    assert all(t.signals == ("fallback",) for t in plan.tests)
    assert plan.signals["fallback"] == len(small_upstream.make_universe())
    assert "FALLBACK" in plan.summary()


def test_path_rules_core_cpp_selects_all_and_docs_nothing(
    repo: Any, small_upstream: Any, plan_for: Any, select: Any
) -> None:
    repo.commit({"docs/index.md": "# more docs\n"})
    docs = plan_for(repo)
    assert docs.tests == [] and not docs.fallback
    assert "documentation" in docs.explained["docs/index.md"][0]
    repo.commit({"c10/core/Device.cpp": "int device() { return 1; }\n"})
    source = GitCheckout(repo.path)
    facts = compute_change_facts(source, source.resolve("HEAD~1"), source.resolve("HEAD"))
    plan = select(facts, small_upstream.make_universe(), config=NO_PRIOR)
    assert not plan.fallback and len(plan.tests) == len(small_upstream.make_universe())
    assert plan.tests[0].signals == ("path-rules",)


def test_coverage_prior_maps_unexplained_python_files(
    repo: Any, tmp_path: Path, plan_for: Any
) -> None:
    prior = tmp_path / "profiling.json"
    prior.write_text(
        '{"torch/utils/thing.py": {"test_ops": 1.0}, "torch/other.py": {"dynamo/test_x": 1.0}}'
    )
    repo.commit(
        {
            "torch/utils/thing.py": "def f():\n    return 1\n",
            "torch/other.py": "def g():\n    return 1\n",
        }
    )
    plan = plan_for(repo, config=SignalConfig(profiling_map=prior))
    assert not plan.fallback
    assert len(plan.tests) == 16 and all(t.signals == ("coverage",) for t in plan.tests)
    assert "outside the universe" in plan.explained["torch/other.py::g"][0]


def test_specs_remove_skipped_variants_with_reasons_and_keep_xfail(
    tmp_path: Path, small_upstream: Any
) -> None:
    from inventory.build import spec_resolver

    spec = tmp_path / "ops.yaml"
    spec.write_text(
        "test_suite_config:\n"
        "  files:\n"
        "    - path: ${TORCH_ROOT}/test/test_ops.py\n"
        "      unlisted_test_mode: skip\n"
        "      tests:\n"
        "        - names: [TestCommon::test_compare_cpu]\n"
        "          mode: mandatory_success\n"
        "        - names: [TestCommon::test_out]\n"
        "          mode: xfail\n"
        "  global:\n"
        "    supported_dtypes:\n"
        "      - name: float16\n"
        "      - name: float32\n"
        "    supported_ops:\n"
        "      - name: add\n"
        "      - name: mul\n"
    )
    universe = small_upstream.make_universe()
    decide = spec_resolver([spec], backend="spyre", torch_root=tmp_path)
    assert decide is not None
    for v in universe.variants:
        v.decision, v.rule, v.tags = decide(v)
    candidates = {v.test_id: Candidate(v.test_id, ("r",), ("s",), 0.5) for v in universe.variants}
    result = applicability_stage(candidates, universe)
    kept = {k.test_id: k for k in result.kept}
    removed = {r.test_id: r.reason for r in result.removed}
    assert kept and removed
    assert not any("gelu" in t or "silu" in t for t in kept)  # ops the spec does not support
    assert all(r.startswith("spec: skip (") for r in removed.values())
    # a file the spec does not list at all runs as xfail (the spec format's default)
    modules = [k for k in kept.values() if "test_modules" in k.test_id]
    assert modules and all(k.mode == "xfail" and not k.gating for k in modules)
    outs = [k for k in kept.values() if "::test_out_" in k.test_id]
    assert outs and all(k.mode == "xfail" and not k.gating for k in outs)
    assert all(k.gating for k in kept.values() if "::test_compare_cpu_" in k.test_id)
    assert result.record.count_in == len(candidates)
    assert result.record.count_out == len(kept)


def test_budget_keeps_the_riskiest_first_and_lists_the_rest(repo: Any, small_upstream: Any) -> None:
    universe = small_upstream.make_universe()
    ids = [v.test_id for v in universe.variants]
    history = History.from_mapping(
        {
            ids[5]: {"seconds": 1.0, "runs": 10, "failures": 5},
            ids[9]: {"seconds": 1.0, "runs": 10, "failures": 0, "flaky": True},
            **{tid: {"seconds": 1.0, "runs": 10} for tid in ids if tid not in (ids[5], ids[9])},
        }
    )
    candidates = {tid: Candidate(tid, ("r",), ("s",), 0.5) for tid in ids}
    kept = applicability_stage(candidates, universe).kept
    costs = price(universe, history=history, runner=SPYRE_ESTIMATE, device=SPYRE_ESTIMATE)
    result = budget_stage(kept, universe, costs=costs, budget_seconds=3.0)
    assert [r.test_id for r in result.selected][:2] == [ids[5], ids[9]]
    assert len(result.selected) == 3 and result.selected_seconds == 3.0
    assert len(result.cut) == len(ids) - 3
    assert [c.rank for c in result.cut] == list(range(4, len(ids) + 1))
    assert all("over budget: rank" in c.reason for c in result.cut)
    assert [r.rank for r in result.selected] == [1, 2, 3]  # in rank order: the runner shards them
    assert result.record.count_out == 3


def test_new_tests_rank_first_and_unknown_durations_use_the_simulator(small_upstream: Any) -> None:
    from selector.model import NEW_AT_HEAD

    universe = small_upstream.make_universe()
    new = universe.variants[-3].test_id
    universe.flags[new] = NEW_AT_HEAD
    candidates = {v.test_id: Candidate(v.test_id, ("r",), ("s",), 0.5) for v in universe.variants}
    kept = applicability_stage(candidates, universe).kept
    costs = price(universe, history=History(), runner=SPYRE_ESTIMATE, device=SPYRE_ESTIMATE)
    result = budget_stage(kept, universe, costs=costs)
    assert result.selected[0].test_id == new and result.selected[0].flag == NEW_AT_HEAD
    assert all(r.seconds_source == "simulator-estimate" and r.seconds > 0 for r in result.selected)
    # float32 on a native op and float16 cost the same kernels; a module costs more than add
    by_id = {r.test_id: r.seconds for r in result.selected}
    module = next(t for t in by_id if "nn_Linear" in t)
    add = next(t for t in by_id if "compare_cpu_add_spyre_float16" in t)
    assert by_id[module] > by_id[add]


def test_each_stage_records_counts_in_and_out(
    repo: Any, small_upstream: Any, plan_for: Any
) -> None:
    repo.commit(
        {
            "torch/testing/_internal/common_methods_invocations.py": small_upstream.OPINFO_DB.replace(
                "return [3]", "return [4]"
            ),
            "docs/index.md": "# changed\n",
        }
    )
    source = GitCheckout(repo.path)
    facts = compute_change_facts(source, source.resolve("base"), source.resolve("HEAD"))
    changes = changes_stage(facts)
    assert changes.record.count_in == 2
    assert {u.key for u in changes.units} >= {"docs/index.md", "opinfo:mul"}
    impact = impact_stage(
        changes,
        small_upstream.make_universe(),
        config=NO_PRIOR,
        reader=source_reader(source, facts),
    )
    assert impact.record.count_in == len(changes.units)
    assert impact.record.count_out == len(impact.candidates) == 4
    assert not impact.unexplained
    plan = plan_for(repo)
    assert [s.stage for s in plan.funnel] == ["changes", "impact", "applicability", "budget"]
    assert plan.funnel[1].count_out == plan.funnel[2].count_in


def test_op_keys() -> None:
    assert op_keys("nn.functional.gelu") == ["nn.functional.gelu", "gelu"]
    assert op_keys("linalg.norm.subgradients_at_zero")[1] == "linalg_norm"
    assert op_keys("add") == ["add"]


def test_changes_only_for_other_devices_select_nothing(
    repo: Any, small_upstream: Any, plan_for: Any
) -> None:
    repo.commit(
        {
            "torch/_decomp/decompositions.py": small_upstream.DECOMPOSITIONS.replace(
                "    return self * _erf_helper(self)",
                "    if self.device.type == 'xpu':\n        return self\n"
                "    return self * _erf_helper(self)",
            ),
            "aten/src/ATen/native/native_functions.yaml": small_upstream.NATIVE_FUNCTIONS.replace(
                "    CPU: mul_kernel", "    CPU: mul_kernel\n    XPU: mul_kernel_xpu"
            ),
            "torch/testing/_internal/common_methods_invocations.py": small_upstream.OPINFO_DB.replace(
                'OpInfo("add", sample_inputs_func=sample_inputs_add)',
                'OpInfo("add", sample_inputs_func=sample_inputs_add, '
                'skips=(DecorateInfo(unittest.skip("x"), device_type="xpu"),))',
            ),
        }
    )
    plan = plan_for(repo)
    assert plan.tests == [] and not plan.fallback
    assert "code for xpu" in plan.explained["torch/_decomp/decompositions.py::gelu"][0]
    assert "only for XPU" in plan.explained["native_functions:mul.Tensor"][0]
    assert "other devices" in plan.explained["opinfo:add"][0]


def test_a_device_neutral_change_next_to_a_device_branch_still_selects(
    repo: Any, small_upstream: Any, plan_for: Any
) -> None:
    repo.commit(
        {
            "torch/_decomp/decompositions.py": small_upstream.DECOMPOSITIONS.replace(
                "    return self * _erf_helper(self)",
                "    if self.device.type == 'xpu':\n        return self\n"
                "    return self * _erf_helper(self) + 0",
            )
        }
    )
    plan = plan_for(repo)
    assert plan.tests and set(plan.test_ids) == ids_with(plan, "gelu")


def test_modules_our_runs_never_import_select_nothing(
    repo: Any, tmp_path: Path, plan_for: Any
) -> None:
    import json

    imports = tmp_path / "imports.json"
    imports.write_text(
        json.dumps(
            {
                "version": 2,
                "key": "k",
                "tests_run": 3,
                "modules": ["torch/__init__.py", "torch/used.py"],
            }
        )
    )
    repo.commit(
        {"torch/unused.py": "def f():\n    return 1\n", "torch/used.py": "def g():\n    return 1\n"}
    )
    plan = plan_for(repo, config=SignalConfig(profiling_map=None, import_map=imports))
    assert "never imported" in plan.explained["torch/unused.py::f"][0]
    assert plan.fallback and "torch/used.py::g" in plan.unexplained
    assert not any(u.startswith("torch/unused.py") for u in plan.unexplained)


def test_traced_coverage_maps_functions_to_the_ops_whose_tests_called_them(
    repo: Any, tmp_path: Path, small_upstream: Any, select: Any
) -> None:
    import json

    universe = small_upstream.make_universe()
    traced_ids = []
    for target in ("add", "mul", "nn.functional.gelu", "nn.functional.silu", "nn.Linear"):
        traced_ids.append(next(v.test_id for v in universe.variants if target in (v.op, v.module)))
    traced = tmp_path / "traced.json"
    traced.write_text(
        json.dumps(
            {
                "version": 2,
                "key": "k",
                "tests_run": 5,
                "modules": ["torch/utils/act.py"],
                "tests": traced_ids,
                # helper: every traced target (common code); Act.run: only gelu's test
                "calls": {
                    "torch/utils/act.py::helper": [0, 1, 2, 3, 4],
                    "torch/utils/act.py::Act.run": [2],
                },
            }
        )
    )
    text = (
        "LIMIT = {}\n\ndef helper():\n    return {}\n\ndef cold():\n    return {}\n\n"
        "class Act:\n    def run(self):\n        return LIMIT\n"
    )
    repo.commit({"torch/utils/act.py": text.format(1, 1, 2)})
    repo.git("tag", "traced-base")
    repo.commit({"torch/utils/act.py": text.format(2, 3, 4)})
    source = GitCheckout(repo.path)
    facts = compute_change_facts(source, source.resolve("traced-base"), source.resolve("HEAD"))
    config = SignalConfig(profiling_map=None, import_map=traced)
    plan = select(facts, universe, reader=source_reader(source, facts), config=config)
    assert not plan.fallback
    assert len(plan.tests) == len(universe)  # the common helper reaches every variant
    assert "not called by any" in plan.explained["torch/utils/act.py::cold"][0]
    assert "module-level names used by Act" in plan.explained["torch/utils/act.py::<module>"][0]
    gelu = {t.test_id for t in plan.tests if "traced-coverage" in t.signals}
    assert gelu == {v.test_id for v in universe.by_op["nn.functional.gelu"]}
    assert plan.tests[0].test_id in gelu  # closer signal ranks first
    focused = select(
        facts, universe, reader=source_reader(source, facts), config=config, min_closeness=0.5
    )
    assert set(focused.test_ids) == gelu
    assert len(focused.cut) == len(universe) - len(gelu)
    assert all(c.reason.startswith("focus: only broad signals") for c in focused.cut)


def test_changed_functional_binding_selects_the_nn_modules_calling_it(
    repo: Any, small_upstream: Any, select: Any
) -> None:
    functional = (
        "import torch\nfrom torch._C import _add_docstr\n\n"
        'linear = _add_docstr(torch._C._nn.linear, "{}")\n'
    )
    modules = (
        "from torch.nn import functional as F\n\n\nclass Linear:\n"
        "    def forward(self, x):\n        return F.linear(x, self.weight)\n"
    )
    repo.commit(
        {"torch/nn/functional.py": functional.format("doc"), "torch/nn/modules/linear.py": modules}
    )
    repo.git("tag", "binding-base")
    repo.commit({"torch/nn/functional.py": functional.format("new doc")})
    source = GitCheckout(repo.path)
    facts = compute_change_facts(source, source.resolve("binding-base"), source.resolve("HEAD"))
    plan = select(
        facts, small_upstream.make_universe(), reader=source_reader(source, facts), config=NO_PRIOR
    )
    assert not plan.fallback
    assert {t.test_id for t in plan.tests} == {
        v.test_id for v in small_upstream.make_universe().by_module["nn.Linear"]
    }
    assert "nn.Linear calls F.linear" in plan.tests[0].reasons[0]


def test_a_changed_function_reaches_the_module_level_binding_dispatching_to_it(
    repo: Any, small_upstream: Any, select: Any
) -> None:
    """``linear = boolean_dispatch(if_true=linear_with_indices, ...)`` (as nn.functional binds
    its max pools): a change to ``linear_with_indices`` reaches ``F.linear`` and its modules."""
    functional = (
        "import torch\n\n\ndef linear_with_indices(x, w):\n    return x{}\n\n\n"
        "def _linear(x, w):\n    return x\n\n\n"
        "linear = boolean_dispatch(\n    if_true=linear_with_indices, if_false=_linear\n)\n"
    )
    modules = (
        "from torch.nn import functional as F\n\n\nclass Linear:\n"
        "    def forward(self, x):\n        return F.linear(x, self.weight)\n"
    )
    repo.commit(
        {"torch/nn/functional.py": functional.format(""), "torch/nn/modules/linear.py": modules}
    )
    repo.git("tag", "dispatch-base")
    repo.commit({"torch/nn/functional.py": functional.format(" * 2")})
    source = GitCheckout(repo.path)
    facts = compute_change_facts(source, source.resolve("dispatch-base"), source.resolve("HEAD"))
    universe = small_upstream.make_universe()
    plan = select(facts, universe, reader=source_reader(source, facts), config=NO_PRIOR)
    assert not plan.fallback
    assert {v.test_id for v in universe.by_module["nn.Linear"]} <= set(plan.test_ids)
    assert any("nn.Linear calls F.linear" in r for t in plan.tests for r in t.reasons)


def test_functional_change_reaches_modules_through_bases_and_the_layers_they_build(
    repo: Any,
    small_upstream: Any,
    select: Any,
) -> None:
    functional = (
        "import torch\n\n\ndef pad(x, p):\n    return x{}\n\n\ndef relu(x):\n    return x\n"
    )
    modules = (
        "from torch.nn import functional as F\n\n\n"
        "class _PadNd:\n    def forward(self, x):\n        return F.pad(x, self.padding)\n\n\n"
        "class ZeroPad1d(_PadNd):\n    pass\n\n\n"
        "class Block:\n    def __init__(self):\n        self.pad = ZeroPad1d()\n\n\n"
        "class Stack:\n    def __init__(self, block):\n"
        "        assert isinstance(block, torch.nn.Block)\n\n\n"
        "class Relu:\n    def forward(self, x):\n        return F.relu(x)\n"
    )
    repo.commit(
        {"torch/nn/functional.py": functional.format(""), "torch/nn/modules/padding.py": modules}
    )
    repo.git("tag", "pad-base")
    repo.commit({"torch/nn/functional.py": functional.format(" * 1")})
    source = GitCheckout(repo.path)
    facts = compute_change_facts(source, source.resolve("pad-base"), source.resolve("HEAD"))
    names = ("nn.ZeroPad1d", "nn.Block", "nn.Stack", "nn.Relu")
    universe = Universe(
        variants=[
            small_upstream.variant(
                "test_module_forward", None, "float32", module=m, file="test/test_modules.py"
            )
            for m in names
        ],
        label="generated",
        kind="checkout",
    )
    plan = select(facts, universe, reader=source_reader(source, facts), config=NO_PRIOR)
    chosen = {universe.by_id[t].module for t in plan.test_ids}
    # the base class's forward, a layer built in __init__, a class named in an isinstance check
    assert chosen == {"nn.ZeroPad1d", "nn.Block", "nn.Stack"}
    reasons = {universe.by_id[t.test_id].module: t.reasons[0] for t in plan.tests}
    assert "nn.Block calls F.pad" in reasons["nn.Block"]


def test_an_op_selects_every_opinfo_variant_of_it(small_upstream: Any) -> None:
    from selector.signals.base import SignalResult
    from selector.signals.operators import _select

    universe = Universe(
        variants=[
            small_upstream.variant("test_x", op, "float32")
            for op in ("norm", "norm.fro", "linalg.norm")
        ],
        label="generated",
    )
    result = SignalResult()
    assert _select(result, uni=universe, key="norm", reason="Tensor method norm modified") == 2
    assert {universe.by_id[t].op for t in result.hits} == {"norm", "norm.fro"}


def test_comment_only_change_is_no_unit(repo: Any, small_upstream: Any, plan_for: Any) -> None:
    repo.commit(
        {"torch/_decomp/decompositions.py": small_upstream.DECOMPOSITIONS + "\n# a comment\n"}
    )
    plan = plan_for(repo)
    assert plan.funnel[0].count_in == 1 and plan.funnel[0].count_out == 0
    assert plan.tests == [] and not plan.fallback


def test_behaviour_change_selects_its_entry_at_the_changed_dtypes(
    repo: Any, small_upstream: Any, select: Any
) -> None:
    from upstream.changes import BehaviourChange

    source = GitCheckout(repo.path)
    facts = compute_change_facts(source, source.resolve("base"), source.resolve("HEAD"))
    assert not facts.files  # no source changed: only the observed behaviour did
    why = "float32: backward dispatches +index_put.default -masked_scatter.default"
    facts = facts.model_copy(
        update={
            "behaviour": [
                BehaviourChange(name="add", dtypes=["float32"], reasons=[why]),
                BehaviourChange(name="not_in_the_universe", reasons=["entry error: none -> X"]),
            ]
        }
    )
    plan = select(
        facts, small_upstream.make_universe(), reader=source_reader(source, facts), config=NO_PRIOR
    )
    assert not plan.fallback
    assert set(plan.test_ids) == {t for t in ids_with(plan, "_add_") if t.endswith("float32")}
    assert len(plan.test_ids) == len(small_upstream.TEMPLATES)
    assert (
        f"behaviour: opinfo add behaves differently on CPU at head: {why}" in plan.tests[0].reasons
    )
    assert plan.explained["behaviour:add"] == ["behaviour: 2 variant(s) at float32"]
    assert plan.explained["behaviour:not_in_the_universe"] == [
        "behaviour: entry has no variant in the universe at every dtype"
    ]


def test_a_new_variant_outranks_any_known_one_however_close_and_failing(
    small_upstream: Any,
) -> None:
    from selector.model import NEW_AT_HEAD, TestHistory

    universe = small_upstream.make_universe()
    new, old = universe.variants[0].test_id, universe.variants[1].test_id
    universe.flags[new] = NEW_AT_HEAD
    agreeing = ("a", "b", "c", "d", "e")  # every signal agrees on the old one
    candidates = {
        new: Candidate(new, ("broad",), ("coverage",), 0.0),
        old: Candidate(old, ("edited",), agreeing, 1.0),
    }
    history = History({old: TestHistory(seconds=0.1, runs=1, failures=1, flaky=True)})
    kept = applicability_stage(candidates, universe).kept
    costs = price(universe, history=history, runner=SPYRE_ESTIMATE, device=SPYRE_ESTIMATE)
    result = budget_stage(kept, universe, costs=costs)
    assert [r.test_id for r in result.selected] == [new, old]
