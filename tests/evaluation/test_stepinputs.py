"""A release step scored on a fresh clone: its runs and the inputs of its plans stored (small
synthetic universes, facts, read files' digests and file facts, and runs written here), ``relay eval --kind release``
run in a process whose var folder and cache home are empty prints the event table and the
leave-one-step-out table over every stored step, and attempts nothing heavy."""

from __future__ import annotations

import itertools
import json
import lzma
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from backends.base import PROJECT_ROOT
from evaluation.stepinputs import (
    InputHeader,
    RecordingSource,
    StepInputError,
    StoredSource,
    input_notes,
    read_step_input,
    read_universe,
    resolve_stored,
    stored_steps,
    universe_file,
    write_universe,
)
from upstream.base import UpstreamFileNotFoundError

VERSIONS = ["1.0.0", "1.1.0", "1.2.0", "1.3.0"]


def _fresh_host(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``relay eval --kind release ARGS`` in a process whose var folder and home are empty."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env.update(
        RELAY_VAR_DIR=str(tmp_path / "var"),
        HOME=str(tmp_path / "home"),
        XDG_CACHE_HOME=str(tmp_path / "home" / ".cache"),
        PIP_NO_INDEX="1",
    )
    return subprocess.run(
        [sys.executable, "-m", "cli", "eval", "--kind", "release", *args],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> Any:
    """The same command in this process (``fresh_host``: an empty var folder), home empty."""
    from typer.testing import CliRunner

    from cli import build_app

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return CliRunner().invoke(build_app(), ["eval", "--kind", "release", *args])


def _nothing_heavy(tmp_path: Path) -> None:
    var, home = tmp_path / "var", tmp_path / "home"
    assert not (var / "envs").exists()  # no environment made
    assert not (var / "inventory").exists()  # nothing collected
    assert not (var / "selector").exists()  # no import map learned
    assert not (home / ".cache" / "crcr-relay").exists()  # no wheel, facts or fingerprints


@pytest.fixture
def stored(tmp_path: Path, synthetic_steps: ModuleType) -> Path:
    folder = tmp_path / "stored"
    synthetic_steps.write_synthetic_steps(folder, VERSIONS)
    return folder


def test_a_fresh_host_prints_the_event_table_and_loso_over_every_stored_step(
    tmp_path: Path, stored: Path
) -> None:
    got = _fresh_host(tmp_path, "--from", "1.1", "--to", "1.2", "--stored-dir", str(stored))
    assert got.returncode == 0, got.stderr[-3000:]
    out = got.stdout
    assert "stored runs used: 1.1.0-run1.json.xz, 1.2.0-run1.json.xz" in out
    assert "stored inputs used: 1.1.0 (1.1.0+gitsynthetic, 2026-12-07)" in out
    assert "events of 1.1.0 -> 1.2.0 per OpInfo/ModuleInfo entry: 1 regression" in out
    loso = out[out.index("leave-one-step-out") :]
    for step in ("1.0.0 -> 1.1.0", "1.1.0 -> 1.2.0", "1.2.0 -> 1.3.0"):
        assert f"| {step} | " in loso
    assert "no other step scored" not in loso
    assert "default chosen on all 3 step(s)" in loso
    assert "note: stored input 1.1.0 collected the suites at bundled:0123456789abcdef" in out
    # made by another backend version: used, with its note
    assert "note: stored input 1.1.0 was made with backend spyre-synthetic, this checkout's" in out
    # the file facts were learned by this selector code, and hold all the plans ask
    assert "learned by another selector revision" not in out
    assert "the stored file facts lack" not in out
    _nothing_heavy(tmp_path)


def test_all_prints_every_stored_step_then_loso_once(
    tmp_path: Path, stored: Path, fresh_host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got = _in_process(tmp_path, monkeypatch, "--all", "--stored-dir", str(stored))
    assert got.exit_code == 0, got.output[-3000:]
    out = got.output
    for base, head in itertools.pairwise(VERSIONS):
        assert f"## {base} -> {head}" in out
        assert f"events of {base} -> {head} per OpInfo/ModuleInfo entry" in out
    assert out.count("leave-one-step-out (each step") == 1
    _nothing_heavy(tmp_path)


def test_missing_inputs_are_named_with_the_run_command_before_anything_heavy(
    tmp_path: Path, stored: Path, fresh_host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (stored / "1.2.0_to_1.3.0-step.json.xz").unlink()
    got = _in_process(
        tmp_path, monkeypatch, "--from", "1.2", "--to", "1.3", "--stored-dir", str(stored)
    )
    assert got.exit_code == 1
    line = got.output.strip().splitlines()[-1]
    assert "1.2.0_to_1.3.0-step.json.xz" in line
    assert "`relay eval --kind release --from 1.2 --to 1.3 --run`" in line
    _nothing_heavy(tmp_path)


def test_a_stored_input_of_another_format_version_is_refused_with_its_name(
    tmp_path: Path, stored: Path, fresh_host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = universe_file("1.1.0", stored)
    body = json.loads(lzma.decompress(path.read_bytes()))
    path.write_bytes(lzma.compress(json.dumps({**body, "version": 99}).encode()))
    with pytest.raises(
        StepInputError, match=r"1\.1\.0-universe\.json\.xz: stored universe input version 99"
    ):
        read_universe(path)
    got = _in_process(
        tmp_path, monkeypatch, "--from", "1.1", "--to", "1.2", "--stored-dir", str(stored)
    )
    assert got.exit_code == 1
    assert "1.1.0-universe.json.xz: stored universe input version 99" in got.output
    _nothing_heavy(tmp_path)
    with pytest.raises(StepInputError, match="not a stored step input"):
        read_step_input(path.with_name("1.0.0-universe.json.xz"))


def test_another_backend_version_or_suites_revision_gets_a_note() -> None:
    header = InputHeader("2.13.0", "2.13.0+cpu", "spyre-old", "bundled:aa", "abc", "2026-12-07")
    got = input_notes([header], backend_version="spyre-new", suites="bundled:aa")
    assert got == [
        "stored input 2.13.0 was made with backend spyre-old, this checkout's is spyre-new"
    ]
    assert input_notes([header], backend_version="spyre-old", suites="bundled:aa") == []
    assert (
        "collected the suites at bundled:aa (commit abc)"
        in input_notes([header], backend_version="spyre-old", suites="bundled:bb")[0]
    )


def test_a_universe_round_trips_in_the_inventory_shapes(
    tmp_path: Path, synthetic_steps: ModuleType
) -> None:
    universe = synthetic_steps.synthetic_universe("2.0.0", 5)
    universe.variants[0].decision, universe.variants[0].tags = "xfail", ["fp16 precision"]
    header = InputHeader("2.0.0", "2.0.0+gitx", "spyre-1", "bundled:aa", "", "2026-12-07")
    from evaluation.stepinputs import StoredUniverse

    back = read_universe(write_universe(StoredUniverse(header, universe), tmp_path))
    assert back.header == header
    assert back.universe.label == universe.label and back.universe.key == universe.key
    assert [v.__dict__ for v in back.universe.variants] == [v.__dict__ for v in universe.variants]


def test_the_digests_of_the_files_a_plan_reads_are_stored_never_their_contents(
    tmp_path: Path, stored: Path, synthetic_steps: ModuleType
) -> None:
    from selector.signals import content_digest

    changed = synthetic_steps.CHANGED

    path = stored / "1.0.0_to_1.1.0-step.json.xz"
    step = read_step_input(path)
    head_file = b"def op_001(x):\n    return x + 0\n"
    assert b"return x + 0" not in lzma.decompress(path.read_bytes())  # no upstream content
    source = StoredSource(step)
    head = source.resolve("1.1.0")
    assert source.content_digest(head, changed) == content_digest(head_file)
    assert source.read_files(head, [changed]) == {}  # a content it does not have: unread
    assert source.unread == {("head", changed)}
    # the head estimate's OpInfo dtypes are stored too (synthetic: its entry's file is absent)
    assert source.entry_dtype_facts() == step.entry_dtypes
    assert step.entry_dtypes == {
        "head": {"dtypes": {}, "no_autograd": [], "notes": []},
        "base": {"dtypes": {}, "no_autograd": [], "notes": []},
    }
    wheels = synthetic_steps.FilesSource(step.facts, {"base": {}, "head": {changed: head_file}})
    recording = RecordingSource(wheels, step.facts)
    recording.read_files(head, [changed, "torch/absent.py"])
    with pytest.raises(UpstreamFileNotFoundError):
        recording.read_file(source.resolve("1.0.0"), changed)
    assert recording.digests == {
        "base": {changed: "-"},  # missing: the signals' digest of a file they cannot read
        "head": {changed: content_digest(head_file), "torch/absent.py": "-"},
    }
    assert recording.cache_dir is None
    assert resolve_stored("1.2", stored) == "1.2.0"
    assert resolve_stored("9", stored) is None
    assert stored_steps(stored)[0] == ("1.0.0", "1.1.0")


def test_stored_file_facts_are_used_only_by_the_selector_code_that_learned_them(
    tmp_path: Path, stored: Path
) -> None:
    from cli.evaluate_release import recorded_file_facts, seed_file_facts
    from planner.filefacts import FileFactsStore

    step = read_step_input(stored / "1.0.0_to_1.1.0-step.json.xz")
    current = FileFactsStore(tmp_path / "learned" / "filefacts")
    current["operators:file/x"] = {"op_001": ["aten::add"]}
    selector, entries = recorded_file_facts(tmp_path / "learned")
    assert selector == current.root.name and entries == {
        "operators:file/x": {"op_001": ["aten::add"]}
    }
    step.selector, step.file_facts = "v0-otherselector", entries
    with pytest.raises(StepInputError, match="format v0-otherselector, this code reads v") as exc:
        seed_file_facts(tmp_path / "cache", step, "1.0.0", "1.1.0")
    assert REFRESH.format("1.0.0", "1.1.0") in str(exc.value)
    assert not list((tmp_path / "cache").rglob("*.json"))
    memo_version = selector.split("-", 1)[0]
    step.selector = f"{memo_version}-otherselector"  # same facts format, another signals' code
    note = seed_file_facts(tmp_path / "cache", step, "1.0.0", "1.1.0")
    assert "learned by another selector revision" in note
    assert REFRESH.format("1.0.0", "1.1.0") in note
    assert dict(FileFactsStore(tmp_path / "cache" / "filefacts")) == entries  # still used
    step.selector = selector
    assert seed_file_facts(tmp_path / "cache2", step, "1.0.0", "1.1.0") == ""
    assert dict(FileFactsStore(tmp_path / "cache2" / "filefacts")) == entries


REFRESH = "`relay eval --kind release --from {} --to {} --run --torch-runs 0`"


def _restamped(path: Path, selector: str) -> None:
    body = json.loads(lzma.decompress(path.read_bytes()))
    body["file_facts"]["selector"] = selector
    path.write_bytes(lzma.compress(json.dumps(body).encode()))


def test_file_facts_of_another_selector_revision_are_used_with_a_note(
    tmp_path: Path, stored: Path, fresh_host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = stored / "1.1.0_to_1.2.0-step.json.xz"
    memo_version = read_step_input(path).selector.split("-", 1)[0]
    _restamped(path, f"{memo_version}-0123456789abcdef")
    got = _in_process(
        tmp_path, monkeypatch, "--from", "1.1", "--to", "1.2", "--stored-dir", str(stored)
    )
    assert got.exit_code == 0, got.output[-3000:]
    note = next(x for x in got.output.splitlines() if "another selector revision" in x)
    assert note.startswith("note: the stored 1.1.0 -> 1.2.0 file facts were learned by")
    assert REFRESH.format("1.1.0", "1.2.0") in note
    assert "events of 1.1.0 -> 1.2.0 per OpInfo/ModuleInfo entry: 1 regression" in got.output
    _nothing_heavy(tmp_path)


def test_file_facts_of_another_format_version_are_one_line_naming_the_refresh(
    tmp_path: Path, stored: Path, fresh_host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _restamped(stored / "1.1.0_to_1.2.0-step.json.xz", "v999-0123456789abcdef")
    got = _in_process(
        tmp_path, monkeypatch, "--from", "1.1", "--to", "1.2", "--stored-dir", str(stored)
    )
    assert got.exit_code == 1
    line = got.output.strip().splitlines()[-1]
    assert line.startswith("error: the stored 1.1.0 -> 1.2.0 file facts are of format v999-")
    assert REFRESH.format("1.1.0", "1.2.0") in line
    _nothing_heavy(tmp_path)


def test_a_stored_step_learned_by_another_selector_revision_is_written_again(
    tmp_path: Path, stored: Path, synthetic_steps: ModuleType, fresh_host: Path
) -> None:
    """``--run --torch-runs 0`` stores the step again when another selector revision learned its
    file facts (the refresh the note names), and leaves one this revision learned alone."""
    import tempfile

    from cli.evaluate_release import recorded_file_facts, step_plans, store_inputs
    from evaluation.release import Side
    from planner.release import not_queued

    path = stored / "1.1.0_to_1.2.0-step.json.xz"
    memo_version = read_step_input(path).selector.split("-", 1)[0]
    _restamped(path, f"{memo_version}-0123456789abcdef")
    facts, files = synthetic_steps.step_change(2, "1.1.0", "1.2.0")
    sides = [
        Side(v, f"{v}+gitsynthetic", synthetic_steps.synthetic_universe(v, n))
        for v, n in (("1.1.0", 21), ("1.2.0", 22))
    ]
    options = {"budget_seconds": None, "import_map": False, "budget_share": None}

    def store() -> list[Path]:
        with tempfile.TemporaryDirectory(prefix="recorded-") as memo:
            source = synthetic_steps.FilesSource(facts, files)
            recording = RecordingSource(source, facts, cache_dir=Path(memo))
            universes = (s.universe for s in sides)
            step_plans(recording, facts, *universes, options, learn_later=not_queued("test"))
            learned = recorded_file_facts(Path(memo))
            return store_inputs(facts, *sides, recording, learned, folder=stored)

    assert store() == [path]
    assert read_step_input(path).selector.split("-", 1)[1] != "0123456789abcdef"
    assert store() == []  # learned by this revision: kept
