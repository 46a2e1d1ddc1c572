"""Release replay: the head universe from the installed inventory plus the change facts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inventory.head import head_universe
from planner import source_reader
from selector import NEW_AT_HEAD, REMOVED_AT_HEAD
from selector.signals import SignalConfig
from upstream import GitCheckout
from upstream.changes import compute_change_facts


def _opinfo_dbs(opinfo_db: str) -> tuple[str, str]:
    """The OpInfo database at base (add with explicit dtypes) and at head (add loses float32,
    mul is gone, sub is new)."""
    base = opinfo_db.replace(
        'OpInfo("add", sample_inputs_func=sample_inputs_add)',
        'OpInfo("add", sample_inputs_func=sample_inputs_add, dtypes=(torch.float16, torch.float32))',
    )
    head = base.replace("dtypes=(torch.float16, torch.float32)", "dtypes=(torch.float16,)").replace(
        '    OpInfo("mul", sample_inputs_func=sample_inputs_mul),\n',
        '    OpInfo("sub", dtypes=floating_types()),\n',
    )
    return base, head


def test_head_universe_adds_new_entries_and_flags_removed_ones(
    tmp_path: Path, small_upstream: Any, select: Any
) -> None:
    base_db, head_db = _opinfo_dbs(small_upstream.OPINFO_DB)
    repo = small_upstream.UpstreamRepo.create(tmp_path)
    path = "torch/testing/_internal/common_methods_invocations.py"
    repo.commit({path: "import torch\n" + base_db})
    repo.git("tag", "v1")
    repo.commit({path: "import torch\n" + head_db})
    source = GitCheckout(repo.path)
    facts = compute_change_facts(source, source.resolve("v1"), source.resolve("HEAD"))
    installed = small_upstream.make_universe()
    head = head_universe(installed, facts, source)
    flags = head.universe.flags
    new = sorted(t for t, f in flags.items() if f == NEW_AT_HEAD)
    # floating_types() is float32 and float64; the templates only know float16 and float32
    assert new == [
        "test/test_ops.py::TestCommonPRIVATEUSE1::test_compare_cpu_sub_spyre_float32",
        "test/test_ops.py::TestCommonPRIVATEUSE1::test_out_sub_spyre_float32",
    ]
    removed = {t for t, f in flags.items() if f == REMOVED_AT_HEAD}
    assert {t for t in removed if "_mul_" in t} == {v.test_id for v in installed.by_op["mul"]}
    assert {t for t in removed if "_add_" in t} == {
        v.test_id for v in installed.by_op["add"] if v.dtype == "float32"
    }
    assert head.added == 2 and head.removed == len(removed)

    plan = select(
        facts,
        head.universe,
        reader=source_reader(source, facts),
        config=SignalConfig(profiling_map=None),
    )
    assert plan.universe.new_at_head == 2
    assert plan.tests[0].flag == NEW_AT_HEAD  # new tests rank first
    dropped = {r.test_id: r.reason for r in plan.removed}
    assert all(dropped[t] == "removed at head (per the change facts)" for t in removed)
    second = select(
        facts,
        head_universe(installed, facts, source).universe,
        reader=source_reader(source, facts),
        config=SignalConfig(profiling_map=None),
    )
    assert second.fingerprint() == plan.fingerprint()


def test_new_entries_get_the_broad_templates_and_gradients_only_with_autograd(
    tmp_path: Path, small_upstream: Any
) -> None:
    """Backward runs for 3 of the 4 ops (0.75 of the widest template): an added entry gets it,
    unless the entry says supports_autograd=False; a template for 2 of 4 ops is not predicted."""
    from dataclasses import replace

    from selector import Universe

    installed = small_upstream.make_universe()
    extra = []
    for v in installed.variants:
        if v.op is None or v.base != "test_compare_cpu":
            continue
        for base, ops in (
            ("test_backward_compare_cpu", ("add", "mul", "nn.functional.gelu")),
            ("test_variant_consistency", ("add", "mul")),
        ):
            if v.op in ops:
                name = v.name.replace("test_compare_cpu", base)
                extra.append(replace(v, base=base, name=name, test_id=f"{v.file}::{v.cls}::{name}"))
    universe = Universe(variants=[*installed.variants, *extra], label="u", kind="checkout")
    repo = small_upstream.UpstreamRepo.create(tmp_path)
    path = "torch/testing/_internal/common_methods_invocations.py"
    repo.git("tag", "v1")
    head_db = small_upstream.OPINFO_DB.replace(
        '    OpInfo("mul", sample_inputs_func=sample_inputs_mul),\n',
        '    OpInfo("mul", sample_inputs_func=sample_inputs_mul),\n'
        '    OpInfo("sub", dtypes=(torch.float16,)),\n'
        '    OpInfo("div", dtypes=(torch.float16,), supports_autograd=False),\n',
    )
    repo.commit({path: head_db})
    source = GitCheckout(repo.path)
    facts = compute_change_facts(source, source.resolve("v1"), source.resolve("HEAD"))
    head = head_universe(universe, facts, source)
    new = sorted(t.rsplit("::", 1)[1] for t, f in head.universe.flags.items() if f == NEW_AT_HEAD)
    assert new == [
        "test_backward_compare_cpu_sub_spyre_float16",
        "test_compare_cpu_div_spyre_float16",
        "test_compare_cpu_sub_spyre_float16",
        "test_out_div_spyre_float16",
        "test_out_sub_spyre_float16",
    ]


SPEC = """\
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_ops.py
      unlisted_test_mode: mandatory_success
  global:
    supported_dtypes:
      - name: float16
      - name: float32
    supported_ops:
      - name: add
      - name: mul
      - name: sub
"""


def test_variants_new_at_head_are_decided_by_the_installed_specs(
    tmp_path: Path, small_upstream: Any, select: Any
) -> None:
    """Two entries are new at head: ``sub`` is in the spec's supported ops, ``div`` is not. The
    spec plugin would never generate ``div``'s variants on the runner, so the estimate decides
    them ``skip`` with the spec's reason and the plan removes them with it; ``sub``'s run."""
    from inventory.build import spec_resolver

    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    (tmp_path / "up").mkdir()
    repo = small_upstream.UpstreamRepo.create(tmp_path / "up")
    repo.git("tag", "v1")
    path = "torch/testing/_internal/common_methods_invocations.py"
    repo.commit({path: small_upstream.OPINFO_DB.replace(
        '    OpInfo("mul", sample_inputs_func=sample_inputs_mul),\n',
        '    OpInfo("mul", sample_inputs_func=sample_inputs_mul),\n'
        '    OpInfo("sub", dtypes=(torch.float16,)),\n'
        '    OpInfo("div", dtypes=(torch.float16,)),\n',
    )})  # fmt: skip
    source = GitCheckout(repo.path)
    facts = compute_change_facts(source, source.resolve("v1"), source.resolve("HEAD"))
    installed = small_upstream.make_universe()
    resolve = spec_resolver([spec], backend="spyre", torch_root=tmp_path)
    assert resolve is not None
    for v in installed.variants:
        v.decision, v.rule, v.tags = resolve(v)

    head = head_universe(installed, facts, source, resolve=resolve)
    flags = head.universe.flags
    new = {v.name: v for v in head.universe.variants if flags.get(v.test_id) == NEW_AT_HEAD}
    assert sorted(new) == [
        "test_compare_cpu_div_spyre_float16", "test_compare_cpu_sub_spyre_float16",
        "test_out_div_spyre_float16", "test_out_sub_spyre_float16",
    ]  # fmt: skip
    assert {n: (v.decision, v.rule) for n, v in new.items() if "_div_" in n} == {
        n: ("skip", "op div is not in global.supported_ops") for n in new if "_div_" in n
    }
    assert {v.decision for n, v in new.items() if "_sub_" in n} == {"mandatory_success"}
    assert all(NEW_AT_HEAD in v.tags for v in new.values())
    assert head.notes == [
        "2 of 4 variants new at head are not generated by the specs: "
        "op div is not in global.supported_ops (2)"
    ]
    plan = select(facts, head.universe, reader=source_reader(source, facts),
                  config=SignalConfig(profiling_map=None))  # fmt: skip
    chosen = {t.test_id: t for t in plan.tests}
    assert {new[n].test_id for n in new if "_sub_" in n} <= set(chosen)
    assert all(chosen[new[n].test_id].flag == NEW_AT_HEAD for n in new if "_sub_" in n)
    dropped = {r.test_id: r.reason for r in plan.removed}
    assert {dropped[new[n].test_id] for n in new if "_div_" in n} == {
        "spec: skip (op div is not in global.supported_ops)"
    }
    # without specs (the installed universe decided by none) nothing is decided
    bare = head_universe(small_upstream.make_universe(), facts, source)
    assert {v.decision for v in bare.universe.variants} == {None}
