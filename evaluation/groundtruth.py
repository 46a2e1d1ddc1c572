"""Ground-truth runs: the FULL universe under pytest, with and without an injected fault.

Every run is cached as JSON under ``RELAY_VAR_DIR/eval`` keyed by the universe (torch build, backend
version, suites), the backend's device settings and the mutant, so a long evaluation can be
re-scored for free; while a run runs, its finished parts are kept (:mod:`evaluation.runparts`), so
a killed run started again runs only what it had not finished.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from backends import get_backend
from backends.base import package_dir
from evaluation.mutations import MUTANTS, module_path
from evaluation.runparts import PART_SIZE, PartRun, Results, parts_dir, run_parts
from evaluation.scores import GroundTruth, GroundTruthEvent
from inventory.build import Progress, specs_hash
from inventory.runs import run_key
from selector.model import Universe
from store import caches
from testspecs.outcomes import FAILURES
from upstream import FileChange, FileStatus, ResolvedRevision
from upstream.changes import ChangeFacts, PythonFileChange, SymbolChange


def eval_dir(cache_dir: Path | None = None) -> Path:
    """``cache_dir``, else the host's eval cache (``RELAY_VAR_DIR/eval``, store.caches)."""
    return cache_dir if cache_dir is not None else caches.cache_dir("eval")


def _key(universe: Universe, settings: str | None = None, backend: str = "spyre") -> str:
    """The run key: the universe's, and the backend's device settings (``settings``, unset:
    the ones this process's environment sets)."""
    if settings is None:
        settings = device_settings(backend)
    return run_key(universe, settings)


def device_settings(backend: str = "spyre", extra_env: Mapping[str, str] | None = None) -> str:
    """The backend's outcome-changing settings a run here sets (``SPYRE_DEVICE_MODEL=card``):
    runs under other settings are cached apart."""
    be = get_backend(backend)
    return be.settings({**os.environ, **be.env, **(extra_env or {})})


def run_outcomes(
    universe: Universe,
    *,
    mutant: str | None,
    tests: Sequence[str] | None = None,
    trace: bool = False,
    processes: int = 2,
    python: str | None = None,
    extra_env: Mapping[str, str] | None = None,
    backend: str = "spyre",
    cache_dir: Path | None = None,
    timeout: float = 4 * 3600,
    log: Callable[[str], None] = lambda _: None,
    progress: Progress | None = None,
    label: str | None = None,
    specs: Sequence[Path] = (),
    part_size: int = PART_SIZE,
) -> dict[str, str]:
    """{test id: outcome} for every variant of the universe, or of ``tests`` (cached).

    The ids are run in parts kept as they finish (:mod:`evaluation.runparts`: a run killed
    half-way and started again runs only the parts it had not finished), spread over
    ``processes`` pytest runs side by side (each a fresh interpreter, ``python`` or this one,
    with ``extra_env``). With ``trace``, the run also writes the mutant trace (which tests
    call each catalogued function on the device) beside the cached outcomes. While it runs,
    ``progress(label or mutant or "baseline", tests finished, tests)`` is called about once a
    second. With ``specs`` the runs apply them as the shard runner does (its environment and the
    spec plugin: their modes and their edits); the cache keys them, and the backend's device
    settings of the run's environment (:func:`device_settings`).
    """
    ids = _ids(universe, tests)
    settings = device_settings(backend, extra_env)
    path = run_path(universe, mutant, tests, cache_dir, specs, settings=settings)
    trace_path = trace_file(universe, cache_dir, settings=settings)
    if path.is_file() and (not trace or trace_path.is_file()):
        return json.loads(path.read_text(encoding="utf-8"))
    if not ids:
        return {}
    be = get_backend(backend)
    env = {**os.environ, **be.env, **(extra_env or {})}
    if specs:
        env.update(be.runner_config(specs).env)
    env.pop("RELAY_MUTANT", None)
    if mutant:
        env["RELAY_MUTANT"] = mutant

    def pytest_args(options: list[str], files: list[str]) -> list[str]:
        plugins = ["evaluation.mutations"]
        return be.pytest_args(plugins=plugins, options=options, targets=files, specs=specs)

    how = PartRun(
        pytest_args=pytest_args,
        file_of=lambda t: universe.by_id[t].file,
        env=env,
        python=python,
        processes=processes,
        trace=trace,
        timeout=timeout,
        part_size=part_size,
    )
    start = time.perf_counter()
    got = run_parts(
        how, ids, parts_dir(path), label=label or mutant or "baseline", progress=progress
    )
    log(
        f"{mutant or 'baseline'}: {len(got.outcomes)} outcomes in {time.perf_counter() - start:.0f} s"
    )
    _write_run(path, got, trace_path if trace else None)
    return got.outcomes


def _write_run(path: Path, got: Results, trace_path: Path | None) -> None:
    """The run's files (each written whole, then renamed), then its parts removed."""
    files: dict[Path, Mapping[str, object]] = {
        path: got.outcomes,
        messages_path(path): got.messages,
    }
    if got.durations:
        files[durations_path(path)] = got.durations
    if trace_path is not None:
        traced: dict[str, list[str]] = {name: [] for name in MUTANTS}
        for test, names in sorted(got.traced.items()):
            for name in names:
                traced.setdefault(name, []).append(test)
        files[trace_path] = dict(sorted(traced.items()))
    path.parent.mkdir(parents=True, exist_ok=True)
    for target in sorted(files, key=lambda f: f == path):  # the outcomes last: the run is done
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(files[target], sort_keys=True), encoding="utf-8")
        os.replace(tmp, target)
    shutil.rmtree(parts_dir(path), ignore_errors=True)


def _ids(universe: Universe, tests: Sequence[str] | None) -> list[str]:
    return sorted(universe.by_id if tests is None else set(tests) & set(universe.by_id))


def run_path(
    universe: Universe,
    mutant: str | None,
    tests: Sequence[str] | None,
    cache_dir: Path | None = None,
    specs: Sequence[Path] = (),
    *,
    settings: str | None = None,
) -> Path:
    """Where the outcomes of one run are cached: keyed by universe, device ``settings`` (unset:
    this environment's, :func:`device_settings`), mutant, test subset and the specs it ran
    under (their content; none: the raw outcomes)."""
    suffix = mutant or "baseline"
    if tests is not None:
        digest = hashlib.sha256("\n".join(_ids(universe, tests)).encode()).hexdigest()[:8]
        suffix += f"-{digest}"
    if specs:
        suffix += f"-specs-{specs_hash(specs)}"
    return eval_dir(cache_dir) / "runs" / f"{_key(universe, settings)}-{suffix}.json"


def durations_path(run: Path) -> Path:
    """The runner-seconds of each test of a cached run (setup + call + teardown), beside it."""
    return run.with_name(run.stem + ".durations.json")


def messages_path(run: Path) -> Path:
    """The first line of each failing test's failure in a cached run, beside it."""
    return run.with_name(run.stem + ".messages.json")


def trace_file(
    universe: Universe, cache_dir: Path | None = None, *, settings: str | None = None
) -> Path:
    return eval_dir(cache_dir) / "runs" / f"{_key(universe, settings)}-trace.json"


def mutation_event(name: str) -> GroundTruthEvent:
    module, qual = MUTANTS[name]
    path = module_path(module)
    return GroundTruthEvent(
        name=name,
        kind="mutation",
        changed_files=[path],
        changed_symbols={path: [qual]},
        detail=f"{module}.{qual}: shifted/raising on the device",
    )


def mutation_ground_truth(
    universe: Universe,
    mutants: Sequence[str],
    *,
    run: bool,
    traced: bool = True,
    cache_dir: Path | None = None,
    log: Callable[[str], None] = lambda _: None,
    progress: Progress | None = None,
) -> GroundTruth:
    """Events for the mutants whose runs exist (or are run now with ``run``); ``progress``
    hears how far the runs are (the baseline, then every mutant still to run, together).

    The baseline is one run of the whole universe. With ``traced`` (the default) that run also
    records which tests call each catalogued function on the device, and each mutant then runs
    only those tests: every other test keeps its baseline outcome, since the fault fires only
    inside such a call. Without it every mutant runs the whole universe (hours on the bundled
    one); :func:`check_trace` compares the two where both exist.
    """
    empty = GroundTruth(kind="mutation", universe=universe.label, variants=len(universe), events=[])
    baseline_path = run_path(universe, None, None, cache_dir)
    if not run and not (
        baseline_path.is_file() and (not traced or trace_file(universe, cache_dir).is_file())
    ):
        return empty
    baseline = run_outcomes(
        universe, mutant=None, trace=traced, cache_dir=cache_dir, log=log, progress=progress
    )
    trace = load_trace(universe, cache_dir) if traced else {}
    todo = []
    for name in mutants:
        tests = trace.get(name, []) if traced else None
        if run or tests == [] or run_path(universe, name, tests, cache_dir).is_file():
            todo.append((name, tests))
            count = len(_ids(universe, tests))
            if progress and count and not run_path(universe, name, tests, cache_dir).is_file():
                progress(name, 0, count)  # the whole bar's total up front

    def outcomes_of(item: tuple[str, list[str] | None]) -> dict[str, str]:
        name, tests = item
        # a restricted run is small: one process each, two mutants side by side
        processes = 1 if tests is not None and len(tests) < 4000 else 2
        return run_outcomes(
            universe,
            mutant=name,
            tests=tests,
            processes=processes,
            cache_dir=cache_dir,
            log=log,
            progress=progress,
        )

    with ThreadPoolExecutor(max_workers=2 if traced else 1) as pool:
        results = list(pool.map(outcomes_of, todo))
    events = []
    for (name, tests), outcomes in zip(todo, results, strict=True):
        event = mutation_event(name)
        event.failing = sorted(
            t for t, o in outcomes.items() if t in universe.by_id and o != baseline.get(t)
        )
        ran = len(universe) if tests is None else len(tests)
        event.detail += f"; ran {ran} of {len(universe)} variants"
        if traced:
            event.detail += " (the ones calling it on the device in the traced baseline)"
        events.append(event)
    return GroundTruth(
        kind="mutation",
        universe=universe.label,
        variants=len(universe),
        events=events,
        method="traced" if traced else "full",
    )


def load_trace(universe: Universe, cache_dir: Path | None = None) -> dict[str, list[str]]:
    return json.loads(trace_file(universe, cache_dir).read_text(encoding="utf-8"))


def check_trace(
    universe: Universe, mutants: Sequence[str], cache_dir: Path | None = None
) -> list[tuple[str, int, int]]:
    """For each mutant with a cached unrestricted full run: (name, tests it changed, of those
    outside its trace). A zero in the last column for all is what makes the traced runs exact."""
    if not trace_file(universe, cache_dir).is_file():
        return []
    trace = load_trace(universe, cache_dir)
    baseline = run_path(universe, None, None, cache_dir)
    if not baseline.is_file():
        return []
    base = json.loads(baseline.read_text(encoding="utf-8"))
    rows = []
    for name in mutants:
        full = run_path(universe, name, None, cache_dir)
        if not full.is_file():
            continue
        outcomes = json.loads(full.read_text(encoding="utf-8"))
        changed = {t for t, o in outcomes.items() if o != base.get(t)}
        rows.append((name, len(changed), len(changed - set(trace.get(name, [])))))
    return rows


def release_ground_truth(
    base: Universe,
    head: Universe,
    *,
    name: str,
    changed_files: Sequence[str],
    head_python: str,
    head_env: Mapping[str, str],
    run: bool,
    base_python: str | None = None,
    base_env: Mapping[str, str] | None = None,
    tests: Sequence[str] | None = None,
    cache_dir: Path | None = None,
    log: Callable[[str], None] = lambda _: None,
    progress: Progress | None = None,
    specs: Sequence[Path] = (),
) -> GroundTruth:
    """The release step as ground truth: the full universe once under the base torch
    (``base_python`` with ``base_env``: its own environment, or this interpreter when the base
    is the installed torch) and once under the head torch (``head_python``), compared variant
    by variant.

    Two events: the variants of both universes whose outcome changed, and the variants that
    exist only at head and do not pass there (a new test a release adds that fails on the
    device is something to catch too). Variants only at base are counted in the detail.
    ``tests`` (test ids) restricts both runs to those variants: the same events over them.
    ``specs``: both runs apply them as the shard runner does, so the outcomes are the ones a job
    under those specs observes (their modes, and their edits such as a tolerance, which no
    mapping of a raw outcome can replay); none: pytest's raw outcomes.
    """
    empty = GroundTruth(kind="release", universe=head.label, variants=len(head), events=[])
    paths = [run_path(u, None, tests, cache_dir, specs) for u in (base, head)]
    if not run and not all(p.is_file() for p in paths):
        return empty
    if progress is not None:  # the whole bar's total up front
        for part, universe, path in (("base", base, paths[0]), ("head", head, paths[1])):
            if not path.is_file():
                progress(part, 0, len(_ids(universe, tests)))
    before = run_outcomes(
        base,
        mutant=None,
        tests=tests,
        python=base_python,
        extra_env=base_env,
        cache_dir=cache_dir,
        log=log,
        progress=progress,
        label="base",
        specs=specs,
    )
    after = run_outcomes(
        head,
        mutant=None,
        tests=tests,
        python=head_python,
        extra_env=head_env,
        cache_dir=cache_dir,
        log=log,
        progress=progress,
        label="head",
        specs=specs,
    )
    return release_events(
        name,
        before,
        after,
        changed_files=changed_files,
        base_label=base.label,
        head_label=head.label,
        variants=len(head),
    )


def release_events(
    name: str,
    before: Mapping[str, str],
    after: Mapping[str, str],
    *,
    changed_files: Sequence[str],
    base_label: str,
    head_label: str,
    variants: int,
    flaky: frozenset[str] = frozenset(),
) -> GroundTruth:
    """The two events of a release step from the base's and the head's outcomes: the
    variants of both whose outcome changed, and the variants only at head that fail there.
    ``flaky`` variants (two runs of one torch disagree) are in neither, and counted."""
    common = (set(before) & set(after)) - flaky
    changed = sorted(t for t in common if before[t] != after[t])
    new = sorted(set(after) - set(before) - flaky)
    new_failing = [t for t in new if after[t] in FAILURES]
    gone = len(set(before) - set(after))
    detail = (
        f"{len(common)} variants in both runs, {len(new)} only at head, {gone} only at base; "
        f"base {base_label}, head {head_label}"
    )
    if flaky:
        detail += f"; {len(flaky)} flaky variants left out"
    files = list(changed_files)
    events = [
        GroundTruthEvent(
            name=name, kind="release", changed_files=files, failing=changed, detail=detail
        ),
        GroundTruthEvent(
            name=f"{name} (new at head)",
            kind="release",
            changed_files=files,
            failing=new_failing,
            detail=f"{len(new_failing)} of the {len(new)} variants only at head fail there",
        ),
    ]
    return GroundTruth(
        kind="release",
        universe=head_label,
        variants=variants,
        events=events,
        method="outcomes",
    )


def event_facts(event: GroundTruthEvent) -> ChangeFacts:
    """Change facts for a single-function event, as a change to the installed torch."""
    rev = ResolvedRevision(
        kind="wheels", requested="installed", resolved="installed", detail="installed torch"
    )
    python = [
        PythonFileChange(
            path=p,
            status="modified",
            symbols=[SymbolChange(qualname=q, kind="function", status="modified") for q in quals],
        )
        for p, quals in event.changed_symbols.items()
    ]
    return ChangeFacts(
        source_kind="mutation",
        base=rev,
        head=rev,
        files=[FileChange(path=p, status=FileStatus.modified) for p in event.changed_files],
        python=python,
        native_functions=[],
        derivatives=[],
        db_entries=[],
    )


def installed_reader(path: str, at_base: bool) -> bytes | None:
    """Reads a file of the installed torch (both sides: the mutant is not in the source)."""
    root = package_dir("torch")
    if root is None:
        return None
    file = root.parent / path
    return file.read_bytes() if file.is_file() else None
