"""The ground truth of a release step: the whole bundled universe under both torches, compared.

Its runs are stored in the repository (:mod:`evaluation.storedruns`: run 1 and run 2 of each
torch), so ``relay eval --kind release`` reprints its tables on a fresh clone without running
anything. :func:`stored_step` says which stored runs a step has and which it lacks;
:func:`make_runs` makes the missing ones (``--run``: a run this host has cached is stored as it
is, any other is run in that torch's own environment); :func:`step_truth` compares them: the two
events of :func:`evaluation.groundtruth.release_events` and the events per OpInfo / ModuleInfo
entry of :func:`evaluation.events.step_events`, flaky variants left out of both.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backends import get_backend
from backends.base import PROJECT_ROOT
from evaluation.events import StepEvents, step_events
from evaluation.groundtruth import (
    durations_path,
    eval_dir,
    messages_path,
    release_events,
    run_outcomes,
    run_path,
)
from evaluation.scores import GroundTruth
from evaluation.stepinputs import (
    StoredStepInput,
    StoredUniverse,
    read_step_input,
    read_universe,
    step_file,
    universe_file,
)
from evaluation.storedruns import (
    STORED_DIR,
    StoredRun,
    flaky,
    load_run,
    make_header,
    run_file,
    write_run,
)
from inventory.sources import BundledSuites
from selector import Universe

#: runs per torch ``--run`` makes: two, so a flaky variant can show itself
RUNS_PER_TORCH = 2


@dataclass
class StepRuns:
    """The stored runs of one step's two torches (``base`` and ``head``: version -> runs in
    run-number order, run 1 first) and the files it lacks."""

    base_version: str
    head_version: str
    runs: dict[str, list[StoredRun]] = field(default_factory=dict)
    missing: list[Path] = field(default_factory=list)
    used: list[Path] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Both torches have run 1: the step can be scored."""
        return all(self.runs.get(v) for v in (self.base_version, self.head_version))

    def describe(self) -> str:
        used = ", ".join(p.name for p in self.used) or "none"
        text = f"stored runs used: {used}"
        if self.missing:
            text += f"; missing: {', '.join(p.name for p in self.missing)}"
        return text


def stored_step(
    base_version: str, head_version: str, *, runs: int = RUNS_PER_TORCH, folder: Path | None = None
) -> StepRuns:
    """The stored runs 1..``runs`` of both torches (a run 2 without a run 1 is not used)."""
    step = StepRuns(base_version=base_version, head_version=head_version)
    for version in (base_version, head_version):
        got: list[StoredRun] = []
        for n in range(1, runs + 1):
            stored = load_run(version, n, folder) if len(got) == n - 1 else None
            (step.used if stored else step.missing).append(run_file(version, n, folder))
            if stored is not None:
                got.append(stored)
        step.runs[version] = got
    return step


def missing_error(
    step: StepRuns, command: str, inputs: StepInputs | None = None, folder: Path | None = None
) -> str | None:
    """One line naming what a step cannot be scored without (run 1 of each torch, and the
    step's stored inputs when ``inputs`` is given) and the command that makes it."""
    lacking = [
        run_file(v, 1, folder).name
        for v in (step.base_version, step.head_version)
        if not step.runs.get(v)
    ]
    lacking += [p.name for p in (inputs.missing if inputs is not None else [])]
    if not lacking:
        return None
    return (
        f"no stored ground truth for {' and '.join(lacking)} ({_where(folder)}): "
        f"make it with `{command}` (a full run of the bundled suites under each torch, "
        "its universe and the step's change facts)"
    )


def _where(folder: Path | None) -> str:
    path = (folder or STORED_DIR).resolve()
    try:
        return str(path.relative_to(PROJECT_ROOT))
    except ValueError:
        return str(path)


@dataclass
class StepInputs:
    """The stored inputs of one step's plans: each torch's universe and the step's facts and
    files (None: not stored; ``missing`` names their files)."""

    base: StoredUniverse | None
    head: StoredUniverse | None
    step: StoredStepInput | None
    missing: list[Path] = field(default_factory=list)

    def describe(self) -> str:
        made = [s.header for s in (self.base, self.head, self.step) if s is not None]
        text = "stored inputs used: " + (
            ", ".join(f"{h.name} ({h.torch_build}, {h.date})" for h in made) or "none"
        )
        if self.missing:
            text += f"; missing: {', '.join(p.name for p in self.missing)}"
        return text


def stored_inputs(base_version: str, head_version: str, folder: Path | None = None) -> StepInputs:
    """The stored universes of both torches and the stored step input (refused with its name
    when it is of another format version)."""
    got = StepInputs(base=None, head=None, step=None)
    base_path = universe_file(base_version, folder)
    head_path = universe_file(head_version, folder)
    step_path = step_file(base_version, head_version, folder)
    for path in (base_path, head_path, step_path):
        if not path.is_file():
            got.missing.append(path)
    got.base = read_stored_universe(base_path) if base_path.is_file() else None
    got.head = read_stored_universe(head_path) if head_path.is_file() else None
    got.step = read_step_input(step_path) if step_path.is_file() else None
    return got


def read_stored_universe(path: Path) -> StoredUniverse:
    """A stored universe, read once per process while the file is unchanged (every step of
    ``--all`` shares its torches)."""
    stat = path.stat()
    return _read_universe(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=16)
def _read_universe(path: Path, mtime_ns: int, size: int) -> StoredUniverse:
    return read_universe(path)


@dataclass(frozen=True)
class Side:
    """One torch of a step, ready to run: its universe, interpreter and environment."""

    version: str
    torch_build: str
    universe: Universe
    python: str | None = None  # None: this interpreter (the installed torch)
    env: Mapping[str, str] | None = None


def make_runs(
    step: StepRuns,
    sides: Sequence[Side],
    *,
    runs: int = RUNS_PER_TORCH,
    folder: Path | None = None,
    cache_dir: Path | None = None,
    backend: str = "spyre",
    log: Callable[[str], None] = lambda _: None,
    progress: Callable[[str, int, int], None] | None = None,
) -> StepRuns:
    """Store every missing run 1..``runs`` of each side, then read the step again. Run 1 is
    the host's cached full run when there is one (the selector's base history reads it too);
    run ``n`` > 1 is cached in its own folder (``eval/run<n>``) and is always a run of its own."""
    suites = BundledSuites().revision()
    version = get_backend(backend).version()
    for side in sides:
        for n in range(1, runs + 1):
            if run_file(side.version, n, folder).is_file():
                continue
            cache = eval_dir(cache_dir) if n == 1 else eval_dir(cache_dir) / f"run{n}"
            outcomes = run_outcomes(
                side.universe,
                mutant=None,
                python=side.python,
                extra_env=side.env,
                cache_dir=cache,
                log=log,
                progress=progress,
                label=f"{side.version} run {n}",
            )
            path = run_path(side.universe, None, None, cache)
            header = make_header(
                torch_version=side.version,
                torch_build=side.torch_build,
                backend_version=version,
                suites=suites,
                run=n,
            )
            stored = StoredRun(
                header=header,
                outcomes=outcomes,
                seconds=_read(durations_path(path)),
                messages=_read(messages_path(path)),
            )
            log(f"stored {write_run(stored, folder)}")
    return stored_step(step.base_version, step.head_version, runs=runs, folder=folder)


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def seed_cache(universe: Universe, stored: StoredRun, cache_dir: Path | None = None) -> bool:
    """Put a stored run where this host's cache keeps the universe's full run, when the cache
    has none (what a fresh clone needs for the selector's base history,
    :func:`planner.durations.base_run_history`); True when it did."""
    path = run_path(universe, None, None, cache_dir)
    if path.is_file():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    durations_path(path).write_text(json.dumps(stored.seconds, sort_keys=True), encoding="utf-8")
    path.write_text(json.dumps(stored.outcomes, sort_keys=True), encoding="utf-8")
    return True


def notes(step: StepRuns, builds: Mapping[str, str]) -> list[str]:
    """What the reader of a table must know about its stored runs: a torch build or suites
    revision other than the ones here now (``builds``: version -> this host's build)."""
    out = []
    suites = BundledSuites().revision()
    for version, got in step.runs.items():
        for stored in got:
            h = stored.header
            if version in builds and h.torch_build != builds[version]:
                out.append(
                    f"{version} run {h.run}: torch build {h.torch_build}, "
                    f"this host's is {builds[version]}"
                )
            if h.suites != suites:
                out.append(
                    f"{version} run {h.run} ran the suites at {h.suites} (commit "
                    f"{h.suites_commit or 'unknown'}), they are at {suites} now"
                )
    return out


def step_truth(
    step: StepRuns,
    *,
    name: str,
    changed_files: Sequence[str],
    base: Universe,
    head: Universe,
) -> tuple[GroundTruth, StepEvents]:
    """The step's ground truth from its stored runs: the two variant-level events and the
    events per entry, both without the variants a torch's two runs disagree on."""
    before = {step.base_version: [r.outcomes for r in step.runs[step.base_version]]}
    after = {step.head_version: [r.outcomes for r in step.runs[step.head_version]]}
    events = step_events(name, before, after, base=base, head=head)
    unstable: set[str] = set()
    for got in (*before.values(), *after.values()):
        for other in got[1:]:
            unstable |= flaky(got[0], other)
    truth = release_events(
        name,
        before[step.base_version][0],
        after[step.head_version][0],
        changed_files=changed_files,
        base_label=base.label,
        head_label=head.label,
        variants=len(head),
        flaky=frozenset(unstable),
    )
    return truth, events
