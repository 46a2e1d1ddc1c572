"""The ``test-imports`` signal: a name the change removes from an upstream module selects every
variant of the test files that import it by name (none of them can be collected at head), and
nothing else; a change that removes no imported name selects nothing through it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner import source_reader
from selector.signals import SignalConfig
from selector.signals.testimports import imported_names, module_of, top_level_names
from upstream import GitCheckout
from upstream.changes import compute_change_facts

DB = "torch/testing/_internal/common_methods_invocations.py"


def _plan(small_upstream: Any, tmp_path: Path, files: dict[str, str], select: Any) -> Any:
    repo = small_upstream.UpstreamRepo.create(tmp_path)
    repo.commit(files)
    source = GitCheckout(repo.path)
    facts = compute_change_facts(source, source.resolve("base"), source.resolve("HEAD"))
    universe = small_upstream.make_universe()
    plan = select(
        facts,
        universe,
        reader=source_reader(source, facts),
        config=SignalConfig(profiling_map=None),
    )
    return plan, universe


def test_a_removed_name_selects_the_files_that_import_it(
    small_upstream: Any, tmp_path: Path, select: Any
) -> None:
    renamed = small_upstream.OPINFO_DB.replace("op_db = [", "op_database = [")
    plan, universe = _plan(small_upstream, tmp_path, {DB: renamed}, select=select)
    picked = {t.test_id for t in plan.tests if "test-imports" in t.signals}
    assert picked == {v.test_id for v in universe.by_file["test/test_ops.py"]}
    reason = next(t for t in plan.tests if t.test_id in picked).reasons
    assert any(
        "test/test_ops.py imports op_db from torch.testing._internal.common_methods_invocations, "
        "which the change removes" in r
        for r in reason
    ), reason


def test_a_change_that_keeps_every_name_selects_nothing_through_it(
    small_upstream: Any, tmp_path: Path, select: Any
) -> None:
    changed = small_upstream.OPINFO_DB.replace("return [1, 2]", "return [1, 2, 5]")
    plan, _ = _plan(small_upstream, tmp_path, {DB: changed}, select=select)
    assert plan.tests and not any("test-imports" in t.signals for t in plan.tests)


def test_names_bound_and_imported() -> None:
    import ast

    tree = ast.parse(
        "import os.path\nfrom a import b as c\nX: int = 1\nY = Z = 2\n"
        "if True:\n    def f(): pass\nelse:\n    class K: pass\n"
        "def g():\n    from torch.nested import inner\n"
    )
    assert top_level_names(tree) == {"os", "c", "X", "Y", "Z", "f", "K", "g"}
    assert imported_names(tree) == [["a", "b"], ["torch.nested", "inner"]]
    assert module_of("torch/_refs/__init__.py") == "torch._refs"
    assert (
        module_of("torch/testing/_internal/common_modules.py")
        == "torch.testing._internal.common_modules"
    )
