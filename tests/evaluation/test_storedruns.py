"""Stored ground-truth runs: the compact per-variant file a fresh clone reprints tables from."""

from __future__ import annotations

import itertools
import json
import lzma
import random
import tempfile
from pathlib import Path
from typing import Any

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


# -- a whole stored step: universes, change facts, read files and runs (a fresh clone's input) --

SUITE_FILE = "spyre_stack/conformance/test_ops.py"
CHANGED = "torch/_refs/__init__.py"


def synthetic_universe(version: str, ops: int, *, backend: str = "spyre-synthetic") -> Any:
    """A small universe of ``ops`` ops (op_000...) at three dtypes, collected under torch
    ``version``: one new op per release (the op numbered after the version's minor)."""
    from selector import Universe, Variant

    cls = "TestOpsPRIVATEUSE1"
    variants = [
        Variant(
            test_id=f"{SUITE_FILE}::{cls}::test_compare_cpu_op_{i:03d}_spyre_{dtype}",
            file=SUITE_FILE,
            cls=cls,
            name=f"test_compare_cpu_op_{i:03d}_spyre_{dtype}",
            base="test_compare_cpu",
            suite="ops",
            op=f"op_{i:03d}",
            dtype=dtype,
        )
        for i in range(ops)
        for dtype in ("float32", "float16", "int64")
    ]
    return Universe(
        variants=variants,
        label=f"bundled:synthetic ({version}+gitsynthetic)",
        key=f"{version}+gitsynthetic-{backend}",
    )


def synthetic_runs(universe: Any, version: str, *, broken: set[str], seed: int) -> StoredRun:
    """Run 1 of ``version`` over ``universe``: the variants of the ``broken`` ops fail, a few
    others fail at random, seconds are lognormal."""
    rng = random.Random(seed)
    header = RunHeader(**{**HEADER.__dict__, "torch_version": version, "run": 1})
    header = RunHeader(**{**header.__dict__, "torch_build": f"{version}+gitsynthetic"})
    stored = StoredRun(header=header, outcomes={})
    for v in universe.variants:
        failing = v.op in broken or rng.random() < 0.03
        stored.outcomes[v.test_id] = "failed" if failing else "passed"
        stored.seconds[v.test_id] = round(rng.lognormvariate(-2.0, 0.7), 3)
        if failing:
            stored.messages[v.test_id] = "AssertionError: Tensor-likes are not close!"
    return stored


def write_synthetic_steps(folder: Path, versions: list[str], *, backend: str = "") -> None:
    """Stored universes, runs and step inputs of the steps between consecutive ``versions``:
    at each head one changed op regresses (its OpInfo entry and the Python file defining it
    changed) and one new op fails."""
    from evaluation.stepinputs import (
        InputHeader,
        StoredStepInput,
        StoredUniverse,
        write_step_input,
        write_universe,
    )
    from upstream.base import WHEEL_LAYOUT, FileChange, ResolvedRevision
    from upstream.changes import ChangeFacts
    from upstream.changes.facts import DbEntryChange

    backend = backend or "spyre-synthetic"
    universes: list[Any] = []
    for n, version in enumerate(versions):
        universe = synthetic_universe(version, 20 + n, backend=backend)
        universes.append(universe)
        header = InputHeader(
            name=version,
            torch_build=f"{version}+gitsynthetic",
            backend_version=backend,
            suites=HEADER.suites,
            suites_commit="",
            date="2026-12-07",
        )
        write_universe(StoredUniverse(header, universe), folder)
        broken = {f"op_{19 + n:03d}", f"op_{n:03d}"} if n else set()
        write_run(synthetic_runs(universe, version, broken=broken, seed=n), folder)
    for n, (base, head) in enumerate(itertools.pairwise(versions), start=1):

        def rev(v: str) -> ResolvedRevision:
            return ResolvedRevision(kind="wheels", requested=v.rsplit(".", 1)[0], resolved=v)

        facts = ChangeFacts(
            source_kind="wheels",
            base=rev(base),
            head=rev(head),
            files=[FileChange(path=CHANGED, status="modified")],
            python=[],
            native_functions=[],
            derivatives=[],
            db_entries=[
                DbEntryChange(
                    name=f"op_{n:03d}",
                    kind="opinfo",
                    info_class="OpInfo",
                    file="torch/testing/_internal/common_methods_invocations.py",
                    status="modified",
                )
            ],
        )
        header = InputHeader(
            name=f"{base} -> {head}",
            torch_build=f"{base}+gitsynthetic -> {head}+gitsynthetic",
            backend_version=backend,
            suites=HEADER.suites,
            suites_commit="",
            date="2026-12-07",
        )
        files = {
            "base": {CHANGED: f"def op_{n:03d}(x):\n    return x\n".encode()},
            "head": {CHANGED: f"def op_{n:03d}(x):\n    return x + 0\n".encode()},
        }
        digests, selector, entries, dtypes = _recorded(facts, files, *universes[n - 1 : n + 1])
        stored = StoredStepInput(header, facts, WHEEL_LAYOUT, digests, selector, entries, dtypes)
        write_step_input(stored, folder)


class _FilesSource:
    """The wheels' stand-in for a synthetic step: its two revisions and the files given."""

    kind = "wheels"
    cache_dir = None

    def __init__(self, facts: Any, files: dict[str, dict[str, bytes]]) -> None:
        from upstream.base import WHEEL_LAYOUT

        self.layout = WHEEL_LAYOUT
        self.facts = facts
        self._files = {facts.base.resolved: files["base"], facts.head.resolved: files["head"]}

    def resolve(self, revision: str) -> Any:
        return next(r for r in (self.facts.base, self.facts.head) if revision == r.resolved)

    def read_file(self, revision: Any, path: str) -> bytes:
        from upstream.base import UpstreamFileNotFoundError

        try:
            return self._files[revision.resolved][path]
        except KeyError:
            raise UpstreamFileNotFoundError(path) from None

    def read_files(self, revision: Any, paths: Any) -> dict[str, bytes]:
        files = self._files[revision.resolved]
        return {p: files[p] for p in paths if p in files}

    def list_files(self, revision: Any, prefix: str = "") -> list[str]:
        return sorted(p for p in self._files[revision.resolved] if p.startswith(prefix))

    def changed_files(self, base: Any, head: Any) -> list[Any]:
        return list(self.facts.files)


def _recorded(
    facts: Any, files: dict[str, dict[str, bytes]], base: Any, head: Any
) -> tuple[dict[str, dict[str, str]], str, dict[str, Any], dict[str, Any]]:
    """What ``relay eval --kind release --run`` stores of a step's upstream files: the read
    files' digests, the signals' file facts, recorded while the product's plans are made, and
    the OpInfo entries' dtypes the head estimate reads."""
    from cli.evaluate_release import recorded_file_facts, step_plans
    from evaluation.stepinputs import RecordingSource
    from inventory.head import entry_dtype_facts
    from planner.release import not_queued

    options = {"budget_seconds": None, "import_map": False, "budget_share": None}
    with tempfile.TemporaryDirectory(prefix="recorded-") as memo:
        recording = RecordingSource(_FilesSource(facts, files), facts, cache_dir=Path(memo))
        step_plans(recording, facts, base, head, options, learn_later=not_queued("synthetic"))
        selector, entries = recorded_file_facts(Path(memo))
    return recording.digests, selector, entries, entry_dtype_facts(recording, facts)
