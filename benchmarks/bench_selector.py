"""Selector decision latency: a single-file change and the whole 2.13 -> 2.14 release step on
the bundled universe, and a synthetic universe of 500,000 variants.

Baseline (same run, same universe): the run-all plan, i.e. pricing the universe (once; the
decisions after it reuse the pricing) and the applicability and budget stages (ranking,
estimates) over every variant, which any plan pays for. The ratio says what the change analysis
and the impact signals add on top of it.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import replace

from backends import get_backend
from backends.base import FlatEstimate
from benchmarks.report import Report
from planner import source_reader
from planner.filefacts import FileFactsStore
from planner.revisions import default_profiling_map
from selector import (
    Costs,
    History,
    SelectionPlan,
    SelectionRequest,
    SignalConfig,
    Universe,
    Variant,
    price,
    select,
)
from upstream import FileChange, FileStatus, ResolvedRevision
from upstream.changes import ChangeFacts, DbEntryChange, YamlEntryChange

N_SYNTHETIC = 500_000
REPEAT = 6  # single-file decisions: the first warms the universe's indexes, the rest are p50


def _timed(fn):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def _cpu_timed(fn):  # type: ignore[no-untyped-def]
    """Wall and CPU seconds of this process: on a shared machine the wall time says how busy
    the others were, the CPU time what the decision cost."""
    cpu = time.process_time()
    value, wall = _timed(fn)
    return value, wall, time.process_time() - cpu


def _run_all(universe: Universe, facts: ChangeFacts) -> tuple[SelectionPlan, Costs]:
    """The baseline: the universe priced (a flat runner prior, the backend's device-time hook)
    and every variant through the stages; the decisions after it reuse the pricing."""
    costs = price(
        universe,
        history=History(),
        runner=FlatEstimate(per_test=0.2, source="flat-runner-prior"),
        device=get_backend("spyre").duration_estimate(),
    )
    request = SelectionRequest(
        facts=facts, universe=universe, costs=costs, force_all="benchmark baseline: all"
    )
    return select(request), costs


def _rev(name: str) -> ResolvedRevision:
    return ResolvedRevision(kind="git", requested=name, resolved=name)


def _empty(source_kind: str = "git") -> ChangeFacts:
    return ChangeFacts(
        source_kind=source_kind,
        base=_rev("a"),
        head=_rev("b"),
        files=[],
        python=[],
        native_functions=[],
        derivatives=[],
        db_entries=[],
    )


def _synthetic_universe(n: int) -> Universe:
    templates = [("test/test_ops.py", "TestCommonPRIVATEUSE1", f"test_t{i}") for i in range(8)]
    dtypes = ["float16", "bfloat16", "float32", "int32", "int64", "bool"]
    n_ops = n // (len(templates) * len(dtypes)) + 1
    variants = []
    for o in range(n_ops):
        op = f"op{o}"
        for file, cls, base in templates:
            for d in dtypes:
                name = f"{base}_{op}_spyre_{d}"
                variants.append(
                    Variant(
                        test_id=f"{file}::{cls}::{name}",
                        file=file,
                        cls=cls,
                        name=name,
                        base=base,
                        suite="ops",
                        op=op,
                        dtype=d,
                    )
                )
                if len(variants) == n:
                    return Universe(variants=variants, label="synthetic", kind="synthetic")
    return Universe(variants=variants, label="synthetic", kind="synthetic")


def _synthetic_facts() -> ChangeFacts:
    facts = _empty()
    return facts.model_copy(
        update={
            "files": [
                FileChange(
                    path="aten/src/ATen/native/native_functions.yaml", status=FileStatus.modified
                )
            ],
            "native_functions": [
                YamlEntryChange(
                    name=f"op{i}.Tensor", op=f"op{i}", status="modified", fields=["func"]
                )
                for i in range(0, 2000, 10)
            ],
            "db_entries": [
                DbEntryChange(
                    name=f"op{i}",
                    kind="opinfo",
                    info_class="OpInfo",
                    file="torch/testing/_internal/common_methods_invocations.py",
                    status="modified",
                    reasons=["definition changed"],
                )
                for i in range(5, 2000, 40)
            ],
        }
    )


def _bundled(report: Report) -> None:
    from evaluation.groundtruth import event_facts, installed_reader, mutation_event
    from inventory.build import universe_from_inventory
    from inventory.importmap import import_map_for

    table = report.table(
        "Selector decision latency on the bundled universe",
        ["case", "variants", "selected", "decision", "run-all plan (baseline)", "ratio"],
    )
    universe, load_s = _timed(lambda: universe_from_inventory())
    (_, costs), base_s = _timed(lambda: _run_all(universe, _empty()))
    # a map learned before, if any: learning one is a sample run of minutes, not a decision
    config = SignalConfig(
        profiling_map=default_profiling_map(), import_map=import_map_for(universe, learn=False)
    )
    request = SelectionRequest(facts=_empty(), universe=universe, costs=costs, config=config)
    facts = event_facts(mutation_event("F.softmax"))
    runs = [
        _timed(lambda: select(replace(request, facts=facts, reader=installed_reader)))
        for _ in range(REPEAT)
    ]
    plan = runs[0][0]
    cold_s = runs[0][1]
    single_s = statistics.median(s for _, s in runs[1:])
    table.rows.append(
        [
            "single-file change (torch/nn/functional.py::softmax), first run",
            len(universe),
            len(plan.tests),
            f"{cold_s:.3f} s",
            f"{base_s:.3f} s",
            f"{cold_s / base_s:.2f}x",
        ]
    )
    table.rows.append(
        [
            f"single-file change, warm (p50 of the next {REPEAT - 1})",
            len(universe),
            len(plan.tests),
            f"{single_s:.3f} s",
            f"{base_s:.3f} s",
            f"{single_s / base_s:.2f}x",
        ]
    )
    release = _cached_release_facts()
    if release is None:
        table.note = (
            f"universe loaded from the inventory cache in {load_s:.1f} s; the release "
            "row needs cached 2.13 -> 2.14 change facts (run `relay replay` once)"
        )
        return
    facts, source = release
    with tempfile.TemporaryDirectory(prefix="bench-filefacts-") as tmp:
        store = FileFactsStore(tmp)  # empty: the first decision parses, the second reads it

        def release_step() -> SelectionPlan:
            return select(
                replace(request, facts=facts, reader=source_reader(source, facts), memo=store)
            )

        first, first_s, first_cpu = _cpu_timed(release_step)
        kept = len(store)
        plan, release_s, release_cpu = _cpu_timed(release_step)
    if plan.fingerprint() != first.fingerprint():
        raise AssertionError("the warm release step chose another plan than the first")
    for label, seconds, cpu in (
        (f"first run, {kept} per-file facts computed", first_s, first_cpu),
        ("warm (the per-file facts on disk)", release_s, release_cpu),
    ):
        table.rows.append(
            [
                f"release step 2.13 -> 2.14 ({len(facts.files)} files, cached change facts), "
                + label,
                len(universe),
                len(plan.tests),
                f"{seconds:.3f} s ({cpu:.1f} s CPU)",
                f"{base_s:.3f} s",
                f"{seconds / base_s:.2f}x",
            ]
        )
    table.note = (
        f"universe loaded from the inventory cache in {load_s:.1f} s (not included); "
        f"import map: {config.import_map or 'none'}"
    )


def _cached_release_facts():  # type: ignore[no-untyped-def]
    from upstream import ReleasedWheels, UpstreamError

    source = ReleasedWheels(offline=True)
    try:
        base, head = source.resolve("2.13"), source.resolve("2.14")
    except UpstreamError:
        return None
    for path in sorted((source.cache_dir / "facts").glob("*.json"), reverse=True):
        try:
            facts = ChangeFacts.model_validate_json(path.read_bytes())
        except ValueError:
            continue
        if (facts.base.resolved, facts.head.resolved) == (base.resolved, head.resolved):
            return facts.model_copy(update={"base": base, "head": head}), source
    return None


def _synthetic(report: Report) -> None:
    universe, build_s = _timed(lambda: _synthetic_universe(N_SYNTHETIC))
    (_, costs), base_s = _timed(lambda: _run_all(universe, _empty()))
    facts = _synthetic_facts()
    plan, ours_s, ours_cpu = _cpu_timed(
        lambda: select(SelectionRequest(facts=facts, universe=universe, costs=costs))
    )
    table = report.table(
        "Selector on a synthetic universe of 500,000 variants",
        ["case", "variants", "selected", "decision", "run-all plan (baseline)", "ratio"],
        note=f"universe generated in {build_s:.1f} s (not included)",
    )
    table.rows.append(
        [
            f"{len(facts.native_functions)} schema + {len(facts.db_entries)} OpInfo changes",
            len(universe),
            len(plan.tests),
            f"{ours_s:.3f} s ({ours_cpu:.2f} s CPU)",
            f"{base_s:.3f} s",
            f"{ours_s / base_s:.2f}x",
        ]
    )


def run(report: Report) -> None:
    _bundled(report)
    _synthetic(report)
