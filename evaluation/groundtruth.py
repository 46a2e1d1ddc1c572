"""Ground-truth runs: the FULL universe under pytest, with and without an injected fault.

Every run is cached as JSON under ``RELAY_VAR_DIR/eval`` keyed by the universe (torch build, backend
version, suites) and the mutant, so a long evaluation can be resumed and re-scored for free.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

from backends import get_backend
from backends.base import PROJECT_ROOT, fresh_pytest, package_dir
from evaluation.mutations import MUTANTS, module_path
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


def _key(universe: Universe) -> str:
    return run_key(universe)


def _split(ids: Sequence[str], parts: int) -> list[list[str]]:
    """Contiguous, nearly equal slices (a slice touches few files, so collects few)."""
    size = math.ceil(len(ids) / max(parts, 1)) or 1
    return [list(ids[i : i + size]) for i in range(0, len(ids), size)]


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
) -> dict[str, str]:
    """{test id: outcome} for every variant of the universe, or of ``tests`` (cached).

    The ids are split over ``processes`` pytest runs side by side (each a fresh interpreter,
    ``python`` or this one, with ``extra_env``). With ``trace``, the run also writes the mutant trace (which tests
    call each catalogued function on the device) beside the cached outcomes. While it runs,
    ``progress(label or mutant or "baseline", tests finished, tests)`` is called about once a
    second. With ``specs`` the runs apply them as the shard runner does (its environment and the
    spec plugin: their modes and their edits); the cache keys them.
    """
    ids = _ids(universe, tests)
    path = run_path(universe, mutant, tests, cache_dir, specs)
    trace_path = trace_file(universe, cache_dir)
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
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="relay-groundtruth-") as tmp:
        procs = _start_parts(be, universe, ids, Path(tmp), env, processes, trace, specs, python)
        label = label or mutant or "baseline"
        _follow([p for _, _, p in procs], Path(tmp), label, len(ids), start, timeout, progress)
        _wait_parts(procs, start, timeout)
        outcomes, durations, messages, traced = _read_parts(Path(tmp), len(procs), trace)
    log(f"{mutant or 'baseline'}: {len(outcomes)} outcomes in {time.perf_counter() - start:.0f} s")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(outcomes, sort_keys=True), encoding="utf-8")
    if durations:
        durations_path(path).write_text(json.dumps(durations, sort_keys=True), encoding="utf-8")
    messages_path(path).write_text(json.dumps(messages, sort_keys=True), encoding="utf-8")
    if trace:
        body = {name: sorted(node_ids) for name, node_ids in sorted(traced.items())}
        trace_path.write_text(json.dumps(body, sort_keys=True), encoding="utf-8")
    return outcomes


_Part = tuple[int, IO[str], "subprocess.Popen[bytes]"]


def _start_parts(
    be: Any,
    universe: Universe,
    ids: list[str],
    tmp: Path,
    env: dict[str, str],
    processes: int,
    trace: bool,
    specs: Sequence[Path],
    python: str | None,
) -> list[_Part]:
    """One fresh pytest per part of ``ids``, side by side, each writing its outcomes, durations,
    progress, failure messages (and trace) under ``tmp`` and its output to ``tmp/log-N.txt``."""
    procs: list[_Part] = []
    for i, part in enumerate(_split(ids, processes)):
        args = tmp / f"ids-{i}.txt"
        args.write_text("\n".join(part) + "\n", encoding="utf-8")
        options = ["--outcomes-out", f"{tmp}/outcomes-{i}.json", "--only-ids", str(args)]
        options += ["--durations-out", f"{tmp}/durations-{i}.json"]
        options += ["--progress-out", f"{tmp}/progress-{i}.txt"]
        options += ["--failure-messages-out", f"{tmp}/messages-{i}.json"]
        if trace:
            options += ["--mutant-trace", f"{tmp}/trace-{i}.json"]
        files = list(dict.fromkeys(universe.by_id[t].file for t in part))
        plugins = ["evaluation.mutations"]
        args_ = be.pytest_args(plugins=plugins, options=options, targets=files, specs=specs)
        cmd = fresh_pytest(args_, python=python)
        log_file = open(tmp / f"log-{i}.txt", "w", encoding="utf-8")  # noqa: SIM115
        proc = subprocess.Popen(
            cmd, cwd=PROJECT_ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT
        )
        procs.append((i, log_file, proc))
    return procs


def _wait_parts(procs: list[_Part], start: float, timeout: float) -> None:
    """Wait for every part within ``timeout`` of ``start`` (all killed past it)."""
    for _, log_file, proc in procs:
        try:
            proc.wait(timeout=max(timeout - (time.perf_counter() - start), 1))
        except subprocess.TimeoutExpired:
            for _, _, other in procs:
                other.kill()
            raise RuntimeError(f"ground-truth run exceeded {timeout:.0f} s") from None
        finally:
            log_file.close()


def _read_parts(
    tmp: Path, parts: int, trace: bool
) -> tuple[dict[str, str], dict[str, float], dict[str, str], dict[str, set[str]]]:
    """The parts' outcomes, durations, failure messages and trace, joined."""
    outcomes: dict[str, str] = {}
    durations: dict[str, float] = {}
    messages: dict[str, str] = {}
    traced: dict[str, set[str]] = {}
    for i in range(parts):
        out = tmp / f"outcomes-{i}.json"
        if not out.is_file():
            text = (tmp / f"log-{i}.txt").read_text(encoding="utf-8", errors="replace")
            raise RuntimeError(f"ground-truth run failed:\n{text[-2000:]}")
        outcomes.update(json.loads(out.read_text(encoding="utf-8")))
        timed = tmp / f"durations-{i}.json"
        if timed.is_file():
            durations.update(json.loads(timed.read_text(encoding="utf-8")))
        said = tmp / f"messages-{i}.json"
        if said.is_file():
            messages.update(json.loads(said.read_text(encoding="utf-8")))
        if trace:
            part_trace = json.loads((tmp / f"trace-{i}.json").read_text("utf-8"))
            for name, node_ids in part_trace.items():
                traced.setdefault(name, set()).update(node_ids)
    return outcomes, durations, messages, traced


def _follow(
    procs: Sequence[subprocess.Popen[bytes]],
    tmp: Path,
    part: str,
    total: int,
    start: float,
    timeout: float,
    progress: Progress | None,
) -> None:
    """Tell ``progress`` how many tests the runs finished (their --progress-out lines), about
    once a second, until they exit or the time is up (the caller deals with either)."""
    if progress is None:
        return
    progress(part, 0, total)
    while time.perf_counter() - start < timeout:
        running = any(p.poll() is None for p in procs)
        done = sum(f.read_bytes().count(b"\n") for f in tmp.glob("progress-*.txt"))
        progress(part, min(done, total), total)
        if not running:
            return
        time.sleep(1.0)


def _ids(universe: Universe, tests: Sequence[str] | None) -> list[str]:
    return sorted(universe.by_id if tests is None else set(tests) & set(universe.by_id))


def run_path(
    universe: Universe,
    mutant: str | None,
    tests: Sequence[str] | None,
    cache_dir: Path | None = None,
    specs: Sequence[Path] = (),
) -> Path:
    """Where the outcomes of one run are cached: keyed by universe, mutant, test subset and
    the specs it ran under (their content; none: the raw outcomes)."""
    suffix = mutant or "baseline"
    if tests is not None:
        digest = hashlib.sha256("\n".join(_ids(universe, tests)).encode()).hexdigest()[:8]
        suffix += f"-{digest}"
    if specs:
        suffix += f"-specs-{specs_hash(specs)}"
    return eval_dir(cache_dir) / "runs" / f"{_key(universe)}-{suffix}.json"


def durations_path(run: Path) -> Path:
    """The runner-seconds of each test of a cached run (setup + call + teardown), beside it."""
    return run.with_name(run.stem + ".durations.json")


def messages_path(run: Path) -> Path:
    """The first line of each failing test's failure in a cached run, beside it."""
    return run.with_name(run.stem + ".messages.json")


def trace_file(universe: Universe, cache_dir: Path | None = None) -> Path:
    return eval_dir(cache_dir) / "runs" / f"{_key(universe)}-trace.json"


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
    key = _key(universe)
    empty = GroundTruth(kind="mutation", universe=universe.label, variants=len(universe), events=[])
    baseline_path = eval_dir(cache_dir) / "runs" / f"{key}-baseline.json"
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
