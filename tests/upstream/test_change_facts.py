"""Change facts between the generated 2.13 and 2.14 trees of a git checkout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.upstream import app
from upstream import GitCheckout
from upstream.changes import ChangeFacts, compute_change_facts, facts_to_json
from upstream.changes.python import file_symbol_changes


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory, release_trees: Any) -> Path:
    return release_trees.make_checkout(tmp_path_factory.mktemp("facts") / "pytorch")


@pytest.fixture(scope="module")
def facts(checkout: Path) -> ChangeFacts:
    source = GitCheckout(checkout)
    return compute_change_facts(source, source.resolve("v2.13.0"), source.resolve("release/2.14"))


def test_files(facts: ChangeFacts, release_trees: Any) -> None:
    assert {f.path: f.status.value for f in facts.files} == release_trees.EXPECTED_FILES
    assert facts.base.requested == "v2.13.0"
    assert facts.head.requested == "release/2.14"
    assert facts.source_kind == "git"


def test_symbols_ignore_formatting_comments_and_docstrings(facts: ChangeFacts) -> None:
    symbols = facts.changed_symbols()
    assert "torch/__init__.py" not in symbols  # reformatted and commented only
    assert symbols["torch/nn/functional.py"] == {"relu", "silu", "old_fn", "Thing.method"}
    by_name = {s.qualname: s for f in facts.python for s in f.symbols
               if f.path == "torch/nn/functional.py"}
    assert by_name["silu"].status == "added"
    assert by_name["old_fn"].status == "removed"
    assert by_name["Thing.method"].kind == "function"
    assert by_name["relu"].status == "modified"


def test_added_removed_and_unparsable_files(facts: ChangeFacts) -> None:
    python = {f.path: f for f in facts.python}
    assert [(s.qualname, s.status) for s in python["torch/new_module.py"].symbols] == [
        ("<module>", "added"), ("fresh", "added")]
    assert {s.status for s in python["torch/old.py"].symbols} == {"removed"}
    broken = python["torch/broken.py"]
    assert broken.parse_error is not None and "SyntaxError" in broken.parse_error
    assert facts.changed_symbols()["torch/broken.py"] == {"*"}
    assert "c10/core/Device.h" not in python


def test_changed_tests(facts: ChangeFacts) -> None:
    assert facts.changed_tests() == {"test/test_ops.py": {"TestCommon.test_b", "TestCommon.test_c"}}


def test_native_functions_entries_by_operator(facts: ChangeFacts) -> None:
    entries = {e.name: e for e in facts.native_functions}
    assert set(entries) == {"mul.Tensor", "gelu", "silu"}  # add.Tensor only reformatted
    assert entries["mul.Tensor"].status == "modified"
    assert entries["mul.Tensor"].fields == ["dispatch"]
    assert entries["mul.Tensor"].dispatch_keys == ["PrivateUse1"]
    assert entries["gelu"].status == "removed"
    assert entries["silu"].status == "added"


def test_derivatives_entries(facts: ChangeFacts) -> None:
    assert [(e.name, e.status, e.fields) for e in facts.derivatives] == [
        ("relu", "modified", ["self"])]
    assert facts.changed_ops() == {"mul", "gelu", "silu", "relu"}
    assert facts.changed_overloads() == {"mul.Tensor", "gelu", "silu", "relu"}


def test_opinfo_entries(facts: ChangeFacts, release_trees: Any) -> None:
    entries = {e.name: e for e in facts.db_entries if e.kind == "opinfo"}
    assert set(entries) == {"add", "relu", "gelu", "silu", "linalg.norm"}
    assert entries["add"].reasons == [
        "definition changed", "uses sample_inputs_add, which calls changed _shapes"]
    assert entries["add"].info_class == "BinaryUfuncInfo"
    assert entries["relu"].reasons == ["uses sample_inputs_relu, which calls changed _shapes"]
    assert entries["gelu"].status == "removed"
    assert entries["silu"].status == "added"
    assert entries["silu"].file == release_trees.CMI
    assert entries["linalg.norm"].reasons == ["uses changed sample_inputs_norm"]
    assert entries["linalg.norm"].file == release_trees.LINALG
    assert facts.changed_opinfos() == set(entries)
    assert "mul" not in entries and "mul.scalar" not in entries  # reformatted only


def test_moduleinfo_entries(facts: ChangeFacts, release_trees: Any) -> None:
    modules = [(e.name, e.status, e.file) for e in facts.db_entries if e.kind == "moduleinfo"]
    assert modules == [("torch.nn.ReLU", "removed", release_trees.MODULES)]
    assert facts.changed_moduleinfos() == {"torch.nn.ReLU"}


def test_facts_round_trip_through_json(facts: ChangeFacts, release_trees: Any) -> None:
    again = ChangeFacts.model_validate_json(facts.model_dump_json())
    assert again == facts
    payload = json.loads(facts_to_json(facts))
    assert payload["counts"]["files"] == len(release_trees.EXPECTED_FILES)
    assert payload["changed_ops"] == ["gelu", "mul", "relu", "silu"]
    assert payload["changed_moduleinfos"] == ["torch.nn.ReLU"]


def test_facts_cache_is_keyed_by_resolved_revisions(checkout: Path, tmp_path: Path,
                                                    facts: ChangeFacts) -> None:
    source = GitCheckout(checkout)
    base, head = source.resolve("viable/strict"), source.resolve("v2.14.0")
    first = compute_change_facts(source, base, head, cache_dir=tmp_path)
    stored = list((tmp_path / "facts").glob("*.json"))
    assert len(stored) == 1
    second = compute_change_facts(source, base, head, cache_dir=tmp_path)
    assert second.model_dump(exclude={"seconds"}) == first.model_dump(exclude={"seconds"})
    assert second.base.requested == "viable/strict"
    assert first.files == facts.files
    # a corrupt cache entry is recomputed, not trusted
    stored[0].write_text("{not json")
    third = compute_change_facts(source, base, head, cache_dir=tmp_path)
    assert third.files == facts.files


def test_parallel_workers_give_the_same_symbols(checkout: Path, facts: ChangeFacts,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import upstream.changes.facts as facts_mod

    monkeypatch.setattr(facts_mod, "PARALLEL_MIN_FILES", 1)
    source = GitCheckout(checkout)
    parallel = compute_change_facts(source, source.resolve("v2.13.0"),
                                    source.resolve("release/2.14"), workers=2)
    assert parallel.python == facts.python


def test_paths_filter(checkout: Path) -> None:
    source = GitCheckout(checkout)
    only_torch = compute_change_facts(source, source.resolve("v2.13.0"), source.resolve("v2.14.0"),
                                      paths=lambda p: p.startswith("torch/nn/"))
    assert [f.path for f in only_torch.files] == ["torch/nn/functional.py"]
    assert only_torch.native_functions == [] and only_torch.db_entries == []


def test_symbol_diff_of_nested_and_conditional_definitions() -> None:
    old = b"if X:\n    def f():\n        return 1\nclass C:\n    class D:\n        def g(self):\n            pass\n"
    new = b"if X:\n    def f():\n        return 2\nclass C:\n    class D:\n        def g(self):\n            return None\n"
    changes, error = file_symbol_changes("m.py", old, new)
    assert error is None
    assert changes == [("C.D.g", "function", "modified"), ("f", "function", "modified")]
    assert file_symbol_changes("m.py", old, old) == ([], None)


def test_cli_diff_on_a_checkout(checkout: Path, tmp_path: Path, release_trees: Any) -> None:
    runner = CliRunner()
    args = ["diff", "--from", "v2.13.0", "--to", "release/2.14", "--upstream", str(checkout),
            "--cache-dir", str(tmp_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    out = result.output
    assert f"files: {len(release_trees.EXPECTED_FILES)} changed  (+2 -1 ~9)" in out
    assert "native_functions.yaml entries: 3  (+1 -1 ~1)" in out
    assert "derivatives.yaml entries: 1  (+0 -0 ~1)" in out
    assert "dispatch-only changes: 1 entries; keys: PrivateUse1 1" in out
    assert "OpInfo entries: 5  (+1 -1 ~3); ModuleInfo entries: 1  (+0 -1 ~0)" in out
    as_json = runner.invoke(app, [*args, "--json"])
    assert as_json.exit_code == 0
    assert json.loads(as_json.output)["changed_opinfos"] == [
        "add", "gelu", "linalg.norm", "relu", "silu"]


def test_cli_errors_exit_2_with_the_reason(checkout: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    bad_rev = runner.invoke(app, ["diff", "--from", "v0.1", "--to", "main",
                                  "--upstream", str(checkout)])
    assert bad_rev.exit_code == 2
    assert "unknown revision 'v0.1'" in bad_rev.output
    not_checkout = runner.invoke(app, ["resolve", "main", "--upstream", str(tmp_path)])
    assert not_checkout.exit_code == 2
    assert "not a git work tree" in not_checkout.output
    ok = runner.invoke(app, ["resolve", "v2.14.0", "--upstream", str(checkout)])
    assert ok.exit_code == 0 and ok.output.startswith("v2.14.0 -> ")
