"""Small synthetic release steps as ``relay eval --kind release --run`` stores them (universes,
run 1 of each torch, step inputs), written by the tests into a temporary folder: the fixture
``synthetic_steps`` (tests/conftest.py) hands this module to the tests that read them."""

from __future__ import annotations

import itertools
import random
import tempfile
from pathlib import Path
from typing import Any

from evaluation.storedruns import RunHeader, StoredRun, write_run

HEADER = RunHeader(
    torch_version="1.0.0",
    torch_build="1.0.0+gitsynthetic",
    backend_version="spyre-0.4",
    suites="bundled:0123456789abcdef",
    suites_commit="b377c7b",
    date="2026-12-06",
    run=1,
)

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
    from upstream.base import WHEEL_LAYOUT

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
        facts, files = step_change(n, base, head)
        header = InputHeader(
            name=f"{base} -> {head}",
            torch_build=f"{base}+gitsynthetic -> {head}+gitsynthetic",
            backend_version=backend,
            suites=HEADER.suites,
            suites_commit="",
            date="2026-12-07",
        )
        digests, selector, entries, dtypes = _recorded(facts, files, *universes[n - 1 : n + 1])
        stored = StoredStepInput(header, facts, WHEEL_LAYOUT, digests, selector, entries, dtypes)
        write_step_input(stored, folder)


def step_change(n: int, base: str, head: str) -> tuple[Any, dict[str, dict[str, bytes]]]:
    """The change facts of the ``n``-th synthetic step and the upstream files it reads."""
    from upstream.base import FileChange, ResolvedRevision
    from upstream.changes import ChangeFacts
    from upstream.changes.facts import DbEntryChange

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
    files = {
        "base": {CHANGED: f"def op_{n:03d}(x):\n    return x\n".encode()},
        "head": {CHANGED: f"def op_{n:03d}(x):\n    return x + 0\n".encode()},
    }
    return facts, files


class FilesSource:
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
        recording = RecordingSource(FilesSource(facts, files), facts, cache_dir=Path(memo))
        step_plans(recording, facts, base, head, options, learn_later=not_queued("synthetic"))
        selector, entries = recorded_file_facts(Path(memo))
    return recording.digests, selector, entries, entry_dtype_facts(recording, facts)
