"""Behavioural change facts: the OpInfo database fingerprinted under a real torch, and two
fingerprints compared (what changed, at which dtypes, and what is noise)."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest

from backends.base import torch_build
from upstream.changes.behaviour import (
    FingerprintError,
    Side,
    diff_fingerprints,
    fingerprint_path,
    fingerprints,
)

ROW = [[2, 3], "float32", 1.5, 4.0, 0, 0]  # shape, dtype, sum, abs sum, NaNs, infinities


def entry(**by_dtype: Any) -> dict[str, Any]:
    return {
        "dtypes": sorted(by_dtype),
        "backward_dtypes": sorted(by_dtype),
        "by_dtype": {
            d: {"fwd": ["aten.add.Tensor"], "bwd": ["aten.mul.Tensor"], "errors": [], "n": 1,
                "vals": [[list(ROW), [list(ROW)]]]} | fields
            for d, fields in by_dtype.items()
        },
    }  # fmt: skip


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
