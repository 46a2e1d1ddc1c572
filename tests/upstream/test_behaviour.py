"""Behavioural change facts: the OpInfo database fingerprinted under a real torch, and two
fingerprints compared (what changed, at which dtypes, and what is noise)."""

from __future__ import annotations

import copy
import json
import lzma
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from backends.base import torch_build
from upstream import default_cache_dir
from upstream.changes.behaviour import (
    SEED_DIR,
    SEED_SUFFIX,
    VERSION,
    FingerprintError,
    Side,
    diff_fingerprints,
    fingerprint_path,
    fingerprints,
    script_digest,
    seed_cache,
    seed_path,
    write_seed,
)

ROW = [[2, 3], "float32", 1.5, 4.0, 0, 0]  # shape, dtype, sum, abs sum, NaNs, infinities


def entry(**by_dtype: Any) -> dict[str, Any]:
    return {
        "dtypes": sorted(by_dtype),
        "backward_dtypes": sorted(by_dtype),
        "by_dtype": {
            d: {
                "fwd": ["aten.add.Tensor"],
                "bwd": ["aten.mul.Tensor"],
                "errors": [],
                "n": 1,
                "vals": [[list(ROW), [list(ROW)]]],
            }
            | fields
            for d, fields in by_dtype.items()
        },
    }


def db(**entries: Any) -> dict[str, Any]:
    return {"torch": "x", "entries": entries}


def test_identical_fingerprints_change_nothing() -> None:
    base = db(add=entry(float32={}, float16={}))
    assert diff_fingerprints(base, copy.deepcopy(base)) == []


def test_a_changed_dispatch_is_a_change_at_that_dtype_with_the_operators_named() -> None:
    base = db(combinations=entry(float32={}, float16={}))
    head = copy.deepcopy(base)
    head["entries"]["combinations"]["by_dtype"]["float32"]["bwd"] = ["aten.index_put.default"]
    [change] = diff_fingerprints(base, head)
    assert change.name == "combinations" and change.dtypes == ["float32"]
    assert change.reasons == ["float32: backward dispatches +index_put.default -mul.Tensor"]


def test_values_within_tolerance_are_noise_and_beyond_it_a_change() -> None:
    base = db(add=entry(float32={}))
    near, far = copy.deepcopy(base), copy.deepcopy(base)
    near["entries"]["add"]["by_dtype"]["float32"]["vals"][0][0][2] = 1.5 + 1e-6
    far["entries"]["add"]["by_dtype"]["float32"]["vals"][0][1][0][2] = 2.5  # a gradient moved
    assert diff_fingerprints(base, near) == []
    [change] = diff_fingerprints(base, far)
    assert change.reasons == ["float32: outputs or gradients differ (sample 0)"]


def test_seeded_random_samples_compare_nothing() -> None:
    base = db(dropout=entry(float32={"vals": [["random"]]}))
    head = db(dropout=entry(float32={"vals": [[[[2, 3], "float32", 9.0, 9.0, 0, 0]]]}))
    assert diff_fingerprints(base, head) == []


def test_dtypes_errors_samples_and_broken_entries_are_changes() -> None:
    base = db(
        polar=entry(float32={}),
        clamp=entry(float32={}),
        ldexp=entry(float32={}),
        gone=entry(float32={}),
        bad=entry(float32={}),
    )
    head = db(
        polar=entry(float32={}, float16={}),
        clamp=entry(float32={"errors": ["0:RuntimeError"]}),
        ldexp=entry(float32={"n": 2}),
        new=entry(float32={}),
        bad={"error": "TypeError: boom"},
    )
    changes = {c.name: c for c in diff_fingerprints(base, head)}
    assert set(changes) == {"polar", "clamp", "ldexp", "bad"}  # added/removed: the source facts'
    assert changes["polar"].dtypes == ["float16"]
    assert changes["polar"].reasons == ["supported dtypes: +float16", "backward dtypes: +float16"]
    assert changes["clamp"].reasons == ["float32: errors none -> ['0:RuntimeError']"]
    assert changes["ldexp"].reasons == ["float32: samples 1 -> 2"]
    assert changes["bad"].dtypes == [] and changes["bad"].reasons == [
        "entry error: none -> TypeError: boom"
    ]


def test_the_script_fingerprints_real_entries_under_the_installed_torch(tmp_path: Path) -> None:
    side = Side(python=sys.executable, build=torch_build())
    only = ("combinations", "clamp", "nn.functional.dropout")
    [result] = fingerprints([side], tmp_path, only=only)
    assert fingerprint_path(tmp_path, side.build, only).is_file()  # cached
    entries = result["entries"]
    assert set(entries) == set(only)
    combinations = entries["combinations"]
    assert "float32" in combinations["dtypes"] and "float32" in combinations["backward_dtypes"]
    f32 = combinations["by_dtype"]["float32"]
    assert f32["n"] > 0 and f32["errors"] == []
    assert (
        f32["fwd"] and f32["bwd"] and all(op.startswith("aten.") for op in f32["fwd"] + f32["bwd"])
    )
    # integers have no gradient: their backward dispatches nothing
    assert combinations["by_dtype"]["int64"]["bwd"] == []
    # upstream's random ops seed themselves (wrapper_set_seed): their values are comparable
    dropout = entries["nn.functional.dropout"]["by_dtype"]["float32"]["vals"]
    assert dropout and ["random"] not in dropout
    # the same torch twice is no change
    [again] = fingerprints([side], tmp_path, only=only)
    assert diff_fingerprints(result, again) == []


def test_a_failing_interpreter_is_a_clear_error(tmp_path: Path) -> None:
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'no torch here' >&2\nexit 3\n")
    broken.chmod(0o755)
    with pytest.raises(FingerprintError, match=r"failed \(exit 3\): no torch here"):
        fingerprints([Side(python=str(broken), build="9.9.9")], tmp_path)


def test_the_shipped_seeds_are_what_the_current_script_makes() -> None:
    """A changed fingerprint script (or format version) makes the shipped seeds stale: they are
    then never used, and this says how to make them again."""
    seeds = sorted(SEED_DIR.glob(f"*{SEED_SUFFIX}"))
    assert seeds, f"no fingerprint seed in {SEED_DIR}"
    current = f"v{VERSION}-{script_digest()}-"
    stale = [s.name for s in seeds if not s.name.startswith(current)]
    assert not stale, (
        f"{stale} were made by another fingerprint script than {current}...: refresh them with "
        "`make seed-fingerprints` (relay upstream fingerprints --torch 2.13.0 --torch 2.14.1 "
        "--write-seeds) and commit upstream/changes/fingerprint_seeds"
    )
    for seed in seeds:
        assert seed.stat().st_size < 1_000_000, f"{seed.name} is over 1 MB"
        build = seed.name.removeprefix(current).removesuffix(".json" + SEED_SUFFIX)
        assert seed_path(build) == seed


def test_each_seed_holds_the_whole_database_of_the_build_it_names() -> None:
    for seed in sorted(SEED_DIR.glob(f"*{SEED_SUFFIX}")):
        text = lzma.decompress(seed.read_bytes()).decode()
        build = seed.name.split("-", 2)[2].removesuffix(".json" + SEED_SUFFIX)
        # the script writes {"entries": {...}, "seconds": s, "torch": version} (sorted keys)
        torch = re.search(r'"torch": "([^"]+)"}$', text.rstrip())
        assert torch and build.startswith(f"{torch.group(1)}+git"), (seed.name, text[-80:])
        assert text.count('"backward_dtypes"') > 500, seed.name  # not a part of it


def _fake_interpreter(tmp_path: Path) -> Path:
    """An interpreter that fails loudly: a fingerprint run that should not happen says so."""
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho 'computed instead of seeded' >&2\nexit 3\n")
    python.chmod(0o755)
    return python


def test_a_cold_cache_takes_the_seed_of_exactly_that_build(tmp_path: Path) -> None:
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    build = "2.14.1+cu130+git5c4886908584"
    made = db(add=entry(float32={}))
    made["torch"] = "2.14.1+cu130"
    cache = tmp_path / "cache"
    fingerprint_path(cache, build).parent.mkdir(parents=True)
    fingerprint_path(cache, build).write_text(json.dumps(made))
    seed = write_seed(cache, build, seeds)
    assert seed == seed_path(build, seeds) and seed.is_file()

    cold = tmp_path / "cold"
    assert seed_cache(fingerprint_path(cold, build), build, seeds)
    assert json.loads(fingerprint_path(cold, build).read_text()) == made
    # another build (same version, another git revision) has no seed: computed, not seeded
    other = "2.14.1+cu130+git000000000000"
    assert not seed_cache(fingerprint_path(cold, other), other, seeds)
    assert not fingerprint_path(cold, other).exists()


def test_a_seed_from_another_build_is_refused_when_written(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    build = "2.14.1+cu130+git5c4886908584"
    fingerprint_path(cache, build).parent.mkdir(parents=True)
    fingerprint_path(cache, build).write_text(json.dumps({"torch": "2.13.0+cpu", "entries": {}}))
    with pytest.raises(FingerprintError, match=r"holds torch '2\.13\.0\+cpu'"):
        write_seed(cache, build, tmp_path / "seeds")


def test_fingerprints_on_a_cold_home_load_the_shipped_seed_and_compute_other_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The product path on a fresh machine: HOME and RELAY_VAR_DIR empty, the demo's head torch
    named by its build. Its shipped seed answers without running anything; another build of
    the same version runs the (here failing) interpreter."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RELAY_VAR_DIR", str(tmp_path / "var"))
    shipped = sorted(SEED_DIR.glob(f"v{VERSION}-{script_digest()}-2.14.1+*{SEED_SUFFIX}"))
    assert shipped, "the demo's head torch has a seed"
    build = shipped[0].name.split("-", 2)[2].removesuffix(".json" + SEED_SUFFIX)
    cache = default_cache_dir()
    assert str(cache).startswith(str(tmp_path)) and not cache.exists()
    python = _fake_interpreter(tmp_path)
    said: list[str] = []
    [result] = fingerprints([Side(python=str(python), build=build)], cache, progress=said.append)
    assert result["torch"] == build.rsplit("+git", 1)[0] and len(result["entries"]) > 500
    assert fingerprint_path(cache, build).is_file()  # now cached
    assert said == [f"behaviour fingerprints under torch {build}: the project's seed"]
    other = build.rsplit("+git", 1)[0] + "+git000000000000"
    with pytest.raises(FingerprintError, match="computed instead of seeded"):
        fingerprints([Side(python=str(python), build=other)], cache)
    # a part of the database (``only``) is never a seed's
    with pytest.raises(FingerprintError, match="computed instead of seeded"):
        fingerprints([Side(python=str(python), build=build)], cache, only=("add",))


def test_relay_upstream_fingerprints_answers_the_installed_torch_from_its_seed(
    tmp_path: Path,
) -> None:
    """The refresh command's read side (``make seed-fingerprints`` adds ``--write-seeds``): the
    installed torch runs in this interpreter, and its shipped seed fills the cold cache."""
    from typer.testing import CliRunner

    from cli import build_app

    build = torch_build()
    assert seed_path(build).is_file(), f"the installed torch (the project's pin) {build} has one"
    version = build.split("+", 1)[0]
    result = CliRunner().invoke(
        build_app(), ["upstream", "fingerprints", "--torch", version, "--cache-dir", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    assert f"torch {build}: the project's seed" in result.output
    entries = len(json.loads(fingerprint_path(tmp_path, build).read_text())["entries"])
    assert f"torch {build}: {entries} OpInfo entries" in result.output
