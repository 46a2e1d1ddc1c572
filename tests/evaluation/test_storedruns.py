"""Stored ground-truth runs: the compact per-variant file a fresh clone reprints tables from."""

from __future__ import annotations

import json
import lzma
import random
from pathlib import Path

import pytest

from evaluation.storedruns import (
    RunHeader,
    StoredRun,
    StoredRunError,
    flaky,
    load_run,
    read_run,
    run_file,
    write_run,
)

HEADER = RunHeader(
    torch_version="2.13.0",
    torch_build="2.13.0+git1c0a2bd1cf12",
    backend_version="spyre-0.4",
    suites="bundled:0123456789abcdef",
    suites_commit="b377c7b",
    date="2026-12-06",
    run=1,
)


def _synthetic(count: int, seed: int = 0) -> StoredRun:
    """``count`` variants named like the bundled suites' (files, classes, templates, ops,
    dtypes), outcomes, runner-seconds and a few distinct failure messages."""
    rng = random.Random(seed)
    files = [
        f"spyre_stack/conformance/test_{n}.py"
        for n in ("ops", "common", "binary_ufuncs", "unary_ufuncs", "reductions", "modules", "nn")
    ]
    templates = [
        f"test_{w}"
        for w in (
            "compare_cpu",
            "noncontiguous_samples",
            "out",
            "variant_consistency_eager",
            "backward_compare_cpu",
            "dtype_coverage",
            "errors",
        )
    ]
    ops = [f"op_{i:03d}" for i in range(700)]
    dtypes = ["float32", "float16", "bfloat16", "float64", "int64", "int32", "bool", "complex64"]
    messages = [
        "AssertionError: Tensor-likes are not close!",
        "NotImplementedError: aten::_foreach_add is not supported on spyre",
        "RuntimeError: device-side shape mismatch",
        "TypeError: unsupported dtype torch.bool",
    ]
    stored = StoredRun(header=HEADER, outcomes={})
    while len(stored.outcomes) < count:
        file, template = rng.choice(files), rng.choice(templates)
        cls = (
            "Test" + Path(file).stem.removeprefix("test_").title().replace("_", "") + "PRIVATEUSE1"
        )
        tid = f"{file}::{cls}::{template}_{rng.choice(ops)}_spyre_{rng.choice(dtypes)}"
        if tid in stored.outcomes:
            continue
        roll = rng.random()
        outcome = "passed" if roll < 0.85 else "failed" if roll < 0.95 else "skipped"
        stored.outcomes[tid] = outcome
        stored.seconds[tid] = round(rng.lognormvariate(-3.0, 1.0), 6)
        if outcome == "failed":
            stored.messages[tid] = rng.choice(messages) + f" (index {rng.randrange(50)})"
    return stored


def test_a_run_round_trips_with_its_header_seconds_and_messages(tmp_path: Path) -> None:
    stored = _synthetic(500)
    path = write_run(stored, tmp_path)
    assert path == tmp_path / "2.13.0-run1.json.xz"
    back = read_run(path)
    assert back.header == HEADER
    assert back.outcomes == stored.outcomes
    # seconds kept to the millisecond, messages to their first line (at most 120 characters)
    assert back.seconds == pytest.approx(stored.seconds, abs=0.00051)
    assert back.messages == stored.messages
    assert load_run("2.13.0", 2, tmp_path) is None
    assert load_run("2.13.0", 1, tmp_path) is not None


def test_31k_variants_take_a_few_hundred_kb_at_most(tmp_path: Path) -> None:
    path = write_run(_synthetic(31_000), tmp_path)
    size = path.stat().st_size
    assert size < 400_000, size
    assert len(read_run(path).outcomes) == 31_000


def test_bad_files_and_values_are_refused_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(StoredRunError, match="is not an outcome"):
        write_run(StoredRun(header=HEADER, outcomes={"a.py::t": "cached"}), tmp_path)
    with pytest.raises(StoredRunError, match="not a torch version"):
        run_file("2.13.0/x", 1)
    bad = tmp_path / "2.14.1-run1.json.xz"
    bad.write_bytes(b"not xz")
    with pytest.raises(StoredRunError, match=r"2\.14\.1-run1\.json\.xz: not xz-compressed JSON"):
        read_run(bad)
    path = write_run(StoredRun(header=HEADER, outcomes={"a.py::t": "passed"}), tmp_path)
    body = json.loads(lzma.decompress(path.read_bytes()))
    path.write_bytes(lzma.compress(json.dumps({**body, "version": 99}).encode()))
    with pytest.raises(StoredRunError, match="stored run version 99"):
        read_run(path)
    body["files"]["a.py"]["outcomes"] = "pp"
    path.write_bytes(lzma.compress(json.dumps(body).encode()))
    with pytest.raises(StoredRunError, match="columns of different lengths"):
        read_run(path)


def test_flaky_variants_are_the_ones_two_runs_disagree_on() -> None:
    first = {"a": "passed", "b": "failed", "c": "passed"}
    second = {"a": "passed", "b": "passed", "d": "failed"}
    assert flaky(first, second) == {"b"}
