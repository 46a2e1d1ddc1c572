"""Release replay: the head universe from the installed inventory plus the change facts."""

from __future__ import annotations

from pathlib import Path

from inventory.head import head_universe
from planner import source_reader
from selector import NEW_AT_HEAD, REMOVED_AT_HEAD, select
from selector.signals import SignalConfig
from tests.selector.stages_repo import OPINFO_DB, UpstreamRepo, make_universe
from upstream import GitCheckout
from upstream.changes import compute_change_facts

BASE_DB = OPINFO_DB.replace(
    'OpInfo("add", sample_inputs_func=sample_inputs_add)',
    'OpInfo("add", sample_inputs_func=sample_inputs_add, dtypes=(torch.float16, torch.float32))',
)
HEAD_DB = BASE_DB.replace(
    "dtypes=(torch.float16, torch.float32)", "dtypes=(torch.float16,)"
).replace(
    '    OpInfo("mul", sample_inputs_func=sample_inputs_mul),\n',
    '    OpInfo("sub", dtypes=floating_types()),\n',
)


def test_head_universe_adds_new_entries_and_flags_removed_ones(tmp_path: Path) -> None:
    repo = UpstreamRepo.create(tmp_path)
    path = "torch/testing/_internal/common_methods_invocations.py"
    repo.commit({path: "import torch\n" + BASE_DB})
    repo.git("tag", "v1")
    repo.commit({path: "import torch\n" + HEAD_DB})
    source = GitCheckout(repo.path)
    facts = compute_change_facts(source, source.resolve("v1"), source.resolve("HEAD"))
    installed = make_universe()
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
