"""Ground-truth runs: the FULL universe under pytest, with and without an injected fault.

Every run is cached as JSON under ``var/eval`` keyed by the universe (torch build, backend
version, suites) and the mutant, so a long evaluation can be resumed and re-scored for free.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from selector.changes import ChangeFacts, PythonFileChange, SymbolChange
from selector.evaluate import GroundTruth, GroundTruthEvent
from selector.inventory_sources import PROJECT_ROOT, get_backend, package_dir
from selector.mutations import MUTANTS, module_path
from selector.stages.model import Universe
from selector.upstream import FileChange, FileStatus, ResolvedRevision

DEFAULT_EVAL_DIR = Path("var/eval")


def _key(universe: Universe) -> str:
    files = ",".join(sorted(universe.by_file))
    return hashlib.sha256(f"{universe.key}|{files}|{len(universe)}".encode()).hexdigest()[:16]


def run_outcomes(
    universe: Universe,
    *,
    mutant: str | None,
    backend: str = "spyre",
    cache_dir: Path = DEFAULT_EVAL_DIR,
    timeout: float = 7200,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, str]:
    """{test id: outcome} for every variant of the universe (cached)."""
    path = cache_dir / "runs" / f"{_key(universe)}-{mutant or 'baseline'}.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    be = get_backend(backend)
    files = list(dict.fromkeys(v.file for v in universe.variants))
    with tempfile.TemporaryDirectory(prefix="relay-groundtruth-") as tmp:
        out = Path(tmp) / "outcomes.json"
        cmd = be.pytest_command(["-p", "selector.mutations", "--outcomes-out", str(out)], files)
        env = {**os.environ, **be.env}
        env.pop("RELAY_MUTANT", None)
        if mutant:
            env["RELAY_MUTANT"] = mutant
        start = time.perf_counter()
        proc = subprocess.run(
            cmd,
            cwd=PROJECT_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if not out.is_file():
            raise RuntimeError(f"ground-truth run failed:\n{(proc.stdout + proc.stderr)[-2000:]}")
        outcomes = json.loads(out.read_text(encoding="utf-8"))
        log(
            f"{mutant or 'baseline'}: {len(outcomes)} outcomes in "
            f"{time.perf_counter() - start:.0f} s"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(outcomes, sort_keys=True), encoding="utf-8")
    return outcomes


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
    cache_dir: Path = DEFAULT_EVAL_DIR,
    log: Callable[[str], None] = lambda _: None,
) -> GroundTruth:
    """Events for the mutants whose runs exist (or are run now with ``run``)."""
    key = _key(universe)
    events = []
    baseline_path = cache_dir / "runs" / f"{key}-baseline.json"
    if not run and not baseline_path.is_file():
        return GroundTruth(
            kind="mutation", universe=universe.label, variants=len(universe), events=[]
        )
    baseline = run_outcomes(universe, mutant=None, cache_dir=cache_dir, log=log)
    for name in mutants:
        path = cache_dir / "runs" / f"{key}-{name}.json"
        if not run and not path.is_file():
            continue
        outcomes = run_outcomes(universe, mutant=name, cache_dir=cache_dir, log=log)
        event = mutation_event(name)
        event.failing = sorted(
            t for t, o in outcomes.items() if t in universe.by_id and o != baseline.get(t)
        )
        events.append(event)
    return GroundTruth(
        kind="mutation", universe=universe.label, variants=len(universe), events=events
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
