"""The real torch 2.13 and 2.14 release wheels from the package index.

2.13 resolves to the wheel of the installed torch (it lies in pip's find-links); 2.14 is
downloaded once (about 550 MB) into the user cache, which every later run reuses. The change
facts are recomputed here (not read from the facts cache) and checked against the wheels and
against the installed torch's own OpInfo / ModuleInfo databases.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import zipfile
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cli.upstream import app
from upstream import (
    WHEEL_LAYOUT,
    ReleasedWheels,
    ResolvedRevision,
    VersionNotFoundError,
    default_cache_dir,
)
from upstream.changes import ChangeFacts, compute_change_facts

pytestmark = [
    pytest.mark.wheels,
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]


@pytest.fixture(scope="module")
def wheels() -> ReleasedWheels:
    return ReleasedWheels(default_cache_dir())


@pytest.fixture(scope="module")
def pair(wheels: ReleasedWheels) -> tuple[ResolvedRevision, ResolvedRevision]:
    return wheels.resolve("2.13"), wheels.resolve("2.14")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory, wheels: ReleasedWheels) -> Path:
    """A cache for this run: fresh facts, the user cache's wheels (not downloaded again)."""
    folder = tmp_path_factory.mktemp("upstream-cache")
    (folder / "wheels").symlink_to(wheels.wheel_dir, target_is_directory=True)
    return folder


@pytest.fixture(scope="module")
def facts(wheels: ReleasedWheels, pair: tuple[ResolvedRevision, ResolvedRevision],
          cache: Path) -> ChangeFacts:
    return compute_change_facts(wheels, *pair, cache_dir=cache)  # computed for real, then stored


def test_2_13_is_the_installed_release(pair: tuple[ResolvedRevision, ResolvedRevision]) -> None:
    base, _ = pair
    assert base.resolved == importlib.metadata.version("torch")
    assert "newest 2.13.x" in base.detail


def test_2_14_is_the_newest_2_14_release_and_is_reused(
    wheels: ReleasedWheels, pair: tuple[ResolvedRevision, ResolvedRevision]
) -> None:
    _, head = pair
    assert re.fullmatch(r"2\.14\.\d+", head.resolved)
    exact = wheels.resolve(head.resolved)
    assert exact.location == head.location
    assert "from the cache" in exact.detail
    assert zipfile.is_zipfile(head.location)


def test_a_release_the_index_does_not_have(wheels: ReleasedWheels) -> None:
    with pytest.raises(VersionNotFoundError, match=re.escape("offers no torch release matching '1.99'")):
        wheels.resolve("1.99")


def test_changed_files_really_differ(wheels: ReleasedWheels, facts: ChangeFacts) -> None:
    base, head = facts.base, facts.head
    torch_files = facts.changed_paths("torch/")
    assert len(torch_files) > 500  # two releases months apart
    modified = sorted(f.path for f in facts.files if f.status == "modified")
    for path in modified[:: max(1, len(modified) // 25)]:
        assert wheels.read_file(base, path) != wheels.read_file(head, path), path
    unchanged = sorted(set(wheels.list_files(base)) & set(wheels.list_files(head))
                       - facts.changed_paths())
    for path in [p for p in unchanged if p.endswith(".py")][::400]:
        assert wheels.read_file(base, path) == wheels.read_file(head, path), path
    base_files, head_files = set(wheels.list_files(base)), set(wheels.list_files(head))
    for f in facts.files:
        in_base, in_head = f.path in base_files, f.path in head_files
        assert (in_base, in_head) == {"added": (False, True), "removed": (True, False),
                                      "modified": (True, True)}[f.status.value]


def test_symbols_exist_where_the_facts_say(wheels: ReleasedWheels, facts: ChangeFacts) -> None:
    checked = 0
    for change in facts.python[::40]:
        for symbol in change.symbols[:5]:
            if symbol.kind == "module":
                continue
            revision = facts.base if symbol.status == "removed" else facts.head
            text = wheels.read_file(revision, change.path).decode()
            name = symbol.qualname.rsplit(".", 1)[-1]
            assert re.search(rf"\b(def|class)\s+{re.escape(name)}\b", text), symbol
            checked += 1
    assert checked > 20


def test_native_functions_entries_match_the_yaml(wheels: ReleasedWheels, facts: ChangeFacts) -> None:
    def entries(revision: ResolvedRevision) -> dict[str, dict[str, object]]:
        data = yaml.load(wheels.read_file(revision, WHEEL_LAYOUT.native_functions),
                         Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        return {e["func"].split("(")[0]: e for e in data if "func" in e}

    old, new = entries(facts.base), entries(facts.head)
    expected = {n for n in old.keys() | new.keys() if old.get(n) != new.get(n)}
    assert {e.name for e in facts.native_functions} == expected
    assert expected, "2.13 -> 2.14 changed native functions"


def test_opinfo_entries_exist_in_the_installed_databases(facts: ChangeFacts) -> None:
    import torch.testing._internal.common_methods_invocations as cmi
    from torch.testing._internal.common_modules import module_db

    databases = [getattr(cmi, n) for n in dir(cmi) if n.endswith("_db") and n != "module_db"]
    names = {o.name + (f".{o.variant_test_name}" if o.variant_test_name else "")
             for db in databases if isinstance(db, list) for o in db}
    modules = {m.name for m in module_db}
    gone = [e for e in facts.db_entries if e.status != "added"]
    assert gone, "2.13 -> 2.14 changed OpInfo entries"
    for entry in gone:
        key = entry.name.split("#", 1)[0]
        if key.endswith(".*"):  # variants computed in a comprehension
            assert any(n.startswith(key[:-1]) for n in names), entry
            continue
        if not re.fullmatch(r"[\w.]+", key):
            continue  # names computed in a comprehension are expressions
        if entry.kind == "opinfo":
            assert key in names, entry
        else:
            assert key.removeprefix("torch.") in modules, entry


def test_cli_diff_prints_counts_and_its_json_matches(facts: ChangeFacts, cache: Path) -> None:
    runner = CliRunner()
    args = ["diff", "--from", "2.13", "--to", "2.14", "--cache-dir", str(cache)]
    text = runner.invoke(app, args)
    assert text.exit_code == 0, text.output
    c = facts.counts()
    assert f"files: {c['files']} changed" in text.output
    assert f"OpInfo entries: {c['opinfos']} " in text.output
    assert f"native_functions.yaml entries: {c['native_functions']} " in text.output
    as_json = runner.invoke(app, [*args, "--json"])
    assert as_json.exit_code == 0
    payload = json.loads(as_json.output)
    assert payload["counts"] == c  # read back from the facts the fixture stored
    assert payload["head"]["resolved"] == facts.head.resolved
    assert payload["changed_opinfos"] == sorted(facts.changed_opinfos())
