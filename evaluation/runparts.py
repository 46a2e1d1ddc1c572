"""A ground-truth run in parts that are kept as they finish, so a killed run loses little.

A run's test ids (sorted, so a part touches one or two test files) are cut into parts of at most
:data:`PART_SIZE` ids. Each part is kept in its own file in the run's parts folder (``<run>.parts``
beside the run's cached file, so keyed as the run is: the universe's torch build, backend version
and suites, the device settings, the mutant, the tests, the specs, and the cache folder of the
run's number) as soon as every one of its ids finished, named by its index and a digest of its
ids, written to a temporary name and renamed: a part file is whole or absent. A run started
again with the same key reads the parts it finds and runs only the ids of the others.

The ids to run go to ``processes`` pytest runs side by side (each a fresh interpreter that
imports torch and collects its files once), the parts dealt to them in turn. Each run
appends one JSON line per finished test to its results file (``--results-out`` of
:mod:`evaluation.mutations`), which this process reads about once a second.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from backends.base import PROJECT_ROOT, fresh_pytest
from backends.procs import EventTail, die_with_parent

#: ids per kept part: a few seconds of tests, so a killed run loses about that much per process
PART_SIZE = 250
#: how often a run's results files are read while its processes run
POLL_SECONDS = 1.0
#: bump when a part file's shape changes: parts of another version are run again
PARTS_VERSION = 1


@dataclass
class Results:
    """What tests of a run said: outcome, runner-seconds, first failure line, traced mutants."""

    outcomes: dict[str, str] = field(default_factory=dict)
    durations: dict[str, float] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    traced: dict[str, list[str]] = field(default_factory=dict)  # id -> mutants it called

    def add(self, line: Mapping[str, Any]) -> None:
        test = str(line["id"])
        self.outcomes[test] = str(line["outcome"])
        self.durations[test] = float(line.get("seconds") or 0.0)
        if line.get("message") is not None:
            self.messages[test] = str(line["message"])
        if line.get("traced"):
            self.traced[test] = [str(n) for n in line["traced"]]

    def update(self, other: Results) -> None:
        self.outcomes.update(other.outcomes)
        self.durations.update(other.durations)
        self.messages.update(other.messages)
        self.traced.update(other.traced)

    def only(self, ids: Iterable[str]) -> Results:
        keep = set(ids)
        return Results(
            outcomes={t: o for t, o in self.outcomes.items() if t in keep},
            durations={t: s for t, s in self.durations.items() if t in keep},
            messages={t: m for t, m in self.messages.items() if t in keep},
            traced={t: n for t, n in self.traced.items() if t in keep},
        )


def split_parts(ids: Sequence[str], size: int = PART_SIZE) -> list[list[str]]:
    """Contiguous parts of at most ``size`` ids."""
    size = max(size, 1)
    return [list(ids[i : i + size]) for i in range(0, len(ids), size)]


def parts_dir(run: Path) -> Path:
    """Where the parts of the run cached at ``run`` are kept while it is not complete."""
    return run.with_name(run.stem + ".parts")


def part_file(folder: Path, index: int, ids: Sequence[str]) -> Path:
    digest = hashlib.sha256("\n".join(ids).encode()).hexdigest()[:12]
    return folder / f"part-{index:05d}-{digest}.json"


def read_part(path: Path) -> Results | None:
    """A kept part, or None when it is absent or not one this code wrote."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("version") != PARTS_VERSION:
        return None
    return Results(
        outcomes=data["outcomes"],
        durations=data["durations"],
        messages=data["messages"],
        traced=data["traced"],
    )


def write_part(path: Path, results: Results) -> None:
    """``results`` kept at ``path``: written beside it, then renamed over it."""
    body = {"version": PARTS_VERSION, **results.__dict__}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(body, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


@dataclass
class _Proc:
    """One pytest run of a slice of whole parts: its process, log and results file."""

    parts: list[int]
    proc: subprocess.Popen[bytes]
    log_file: IO[str]
    log: Path
    tail: EventTail
    finished: bool = False  # its session ended (the results' last line said so)


@dataclass
class PartRun:
    """How to run the parts of one ground-truth run with pytest (see :func:`run_parts`)."""

    pytest_args: Callable[[list[str], list[str]], list[str]]  # (options, files) -> args
    file_of: Callable[[str], str]  # test id -> the file pytest is given for it
    env: Mapping[str, str]
    python: str | None = None
    processes: int = 2
    trace: bool = False
    timeout: float = 4 * 3600
    part_size: int = PART_SIZE


def run_parts(
    how: PartRun,
    ids: Sequence[str],
    folder: Path,
    *,
    label: str,
    progress: Callable[[str, int, int], None] | None = None,
) -> Results:
    """The results of every id of ``ids``: the parts kept in ``folder`` read, the others run
    (each kept as it finishes). Raises RuntimeError naming a run's log when one died or the
    time ran out; the parts finished by then stay kept."""
    parts = split_parts(ids, how.part_size)
    files = [part_file(folder, i, p) for i, p in enumerate(parts)]
    results = Results()
    todo = []
    for i, path in enumerate(files):
        kept = read_part(path)
        if kept is None:
            todo.append(i)
        else:
            results.update(kept)
    done = sum(len(parts[i]) for i in range(len(parts)) if i not in set(todo))
    if progress is not None:
        progress(label, done, len(ids))
    if not todo:
        return results
    folder.mkdir(parents=True, exist_ok=True)
    scratch = folder / f"run-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    try:
        procs = _start(how, parts, todo, scratch)
        ran = _follow(how, procs, parts, files, label, len(ids), done, progress)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results.update(ran)
    return results


def _slices(todo: list[int], processes: int) -> list[list[int]]:
    """``todo`` (part indexes) dealt to at most ``processes`` runs in turn: each run gets parts
    of every file, so the runs take about as long as each other whatever a file's tests cost
    (each run collects each file once)."""
    count = min(max(processes, 1), len(todo))
    return [todo[k::count] for k in range(count)]


def _start(how: PartRun, parts: list[list[str]], todo: list[int], scratch: Path) -> list[_Proc]:
    procs = []
    for n, indexes in enumerate(_slices(todo, how.processes)):
        ids = [t for i in indexes for t in parts[i]]
        listed = scratch / f"ids-{n}.txt"
        listed.write_text("\n".join(ids) + "\n", encoding="utf-8")
        results = scratch / f"results-{n}.jsonl"
        # the results file is the run's record: pytest's end-of-session summary would print
        # every failure's traceback again (about 40 MB and many minutes for a full run's ~8,000
        # failures per process), for a log nobody reads
        options = ["--results-out", str(results), "--only-ids", str(listed), "--no-summary"]
        if how.trace:
            options.append("--mutant-trace")
        targets = list(dict.fromkeys(how.file_of(t) for t in ids))
        cmd = fresh_pytest(how.pytest_args(options, targets), python=how.python)
        log = scratch / f"log-{n}.txt"
        log_file = open(log, "w", encoding="utf-8")  # noqa: SIM115
        proc = subprocess.Popen(
            cmd,
            cwd=PROJECT_ROOT,
            env=dict(how.env),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,  # a killed run leaves no test process running
        )
        procs.append(_Proc(indexes, proc, log_file, log, EventTail(results)))
    return procs


def _wait_for_one(procs: list[_Proc], seconds: float) -> None:
    """Up to ``seconds``, less when a run still going ends first (its last lines are then read
    at once, not a poll later: a short run is not kept waiting a whole poll)."""
    alive = [p for p in procs if p.proc.poll() is None]
    if not alive:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        alive[0].proc.wait(timeout=seconds)


def _follow(
    how: PartRun,
    procs: list[_Proc],
    parts: list[list[str]],
    files: list[Path],
    label: str,
    total: int,
    done: int,
    progress: Callable[[str, int, int], None] | None,
) -> Results:
    """Read the runs' results until they all ended, keeping each part as it completes: when all
    its ids reported, or when the run holding it ended its session (an id it never reported is
    one pytest did not find, as in a run without parts)."""
    got = Results()
    open_parts = {i for p in procs for i in p.parts}
    start = time.perf_counter()
    try:
        while True:
            # which ended first: their last lines are in their files before they are read
            ended = [p for p in procs if p.proc.poll() is not None]
            for p in procs:
                for line in p.tail.read():
                    if line.get("finished"):
                        p.finished = True
                    else:
                        got.add(line)
            for i in sorted(open_parts):
                owner = next(p for p in procs if i in p.parts)
                if (owner.finished and owner in ended) or all(t in got.outcomes for t in parts[i]):
                    write_part(files[i], got.only(parts[i]))
                    open_parts.discard(i)
            if progress is not None:
                progress(label, done + len(got.outcomes), total)
            if len(ended) == len(procs):
                break
            if time.perf_counter() - start > how.timeout:
                raise RuntimeError(f"ground-truth run exceeded {how.timeout:.0f} s")
            _wait_for_one(procs, POLL_SECONDS)
    finally:
        for p in procs:
            if p.proc.poll() is None:
                p.proc.kill()
                p.proc.wait()
            p.log_file.close()
    dead = [p for p in procs if not p.finished]
    if dead:
        text = dead[0].log.read_text(encoding="utf-8", errors="replace")
        kept = len(parts) - len(open_parts)
        raise RuntimeError(
            f"ground-truth run failed ({kept} of {len(parts)} parts kept, run it again to "
            f"run the rest):\n{text[-2000:]}"
        )
    return got
