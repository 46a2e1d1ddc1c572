"""Ground truth of sampled source mutants (``relay eval --kind mutation``).

The mutants are the seeded sampler's (:mod:`evaluation.mutants`, the catch evaluation's): one
edited function of a fixed list of upstream files each. A mutant takes effect as a pull request's
change does: its file is committed on a branch of the local upstream repository and laid over
the base torch in an overlay environment (:mod:`upstream.overlay`); nothing is planted inside
the test process.

The ground truth of a mutant is **restricted** to the variants whose traced run reached the
mutated function: the observability probe's set (:func:`evaluation.observability.probe_ids`:
the traced tests that called it, widened to every variant of their ops and modules, without the
spec's skips, at most ``cap`` of them by an even stride). That set runs under the backend's
specs in the mutant's overlay, and what fails or does not run there runs again in the clean base
(:func:`broken_in`); a variant that fails (``failed``/``error``) under the mutant and not under
the base, or that the base runs and the mutant keeps from running, is *broken*. A mutant is
observable when it breaks one.

The restriction is checked (:func:`check_restriction`): a few mutants drawn at random (seeded)
run again over the whole runnable universe, or over their restricted set plus a seeded sample of
the other runnable variants when the whole universe does not fit (the report says which), and
every broken variant outside the restricted set is reported.

Every mutant's result is stored as soon as it is known (:class:`Records`: one JSON file per
mutant under ``RELAY_VAR_DIR/eval/mutation/``, keyed by the universe's torch build and backend
version, the specs' content, the cap and the mutant's content), so a killed run resumes where it
stopped; the runs themselves are cached as every ground-truth run is
(:func:`evaluation.groundtruth.run_outcomes`).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from evaluation.groundtruth import run_outcomes
from evaluation.mutants import Mutant
from evaluation.observability import PROBE_CAP, callers, probe_ids
from evaluation.scores import GroundTruth, GroundTruthEvent, applicable_ids
from inventory.build import specs_hash
from inventory.runs import run_key
from selector.model import Universe
from testspecs.outcomes import FAILURES
from upstream.undertest import RunEnvironment

#: bump when a record's meaning changes: records of another version are not read
RECORD_VERSION = 1
#: seconds a test may take in these runs (``PYTEST_TIMEOUT``): a mutant that loops forever fails
#: its tests instead of holding the evaluation
PER_TEST_TIMEOUT = 60


@dataclass
class MutantTruth:
    """One mutant's restricted ground truth."""

    mutant_id: str
    symbol: str  # ``torch/x.py::Qual``
    operator: str
    description: str
    line: int
    head_sha: str  # its commit on the local upstream repository
    traced_callers: int  # traced tests that called the function
    candidates: int  # variants that reach it (before the cap)
    ran: list[str] = field(default_factory=list)  # the restricted set
    broken: dict[str, list[str]] = field(default_factory=dict)  # id -> [base, mutant] outcome

    @property
    def observable(self) -> bool:
        return bool(self.broken)

    def event(self) -> GroundTruthEvent:
        """The mutant as a ground-truth event: its file and function changed, its broken
        variants failing."""
        path, _, function = self.symbol.partition("::")
        capped = f" (capped from {self.candidates})" if self.candidates > len(self.ran) else ""
        return GroundTruthEvent(
            name=self.mutant_id,
            kind="mutation",
            changed_files=[path],
            changed_symbols={path: [function]},
            failing=sorted(self.broken),
            detail=(
                f"{self.symbol}: {self.operator} ({self.description}, line {self.line}); "
                f"{self.traced_callers} traced caller(s), {len(self.ran)} variants run{capped}"
            ),
        )


@dataclass
class RestrictionCheck:
    """One mutant run over a wider set than its restricted one."""

    mutant_id: str
    scope: str  # what was run, in words
    checked: int  # variants run
    broken: list[str] = field(default_factory=list)  # broken over the wider set
    outside: list[str] = field(default_factory=list)  # of those, not in the restricted set
    differing: list[str] = field(default_factory=list)  # in the set, broken in one run only


def mutant_digest(mutant: Mutant) -> str:
    """What a mutant is: its file, function and mutated text (ids repeat across seeds)."""
    text = f"{mutant.path}\0{mutant.function}\0{mutant.source}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


class Records:
    """The stored result of every mutant of one evaluation setting, one file each."""

    def __init__(self, root: Path, universe: Universe, specs: Sequence[Path], cap: int) -> None:
        name = f"{run_key(universe)}-specs-{specs_hash(specs)}-cap{cap}-v{RECORD_VERSION}"
        self.root = root
        self.folder = root / "mutation" / name
        self.runs = root / "mutation" / "runs"  # the cached runs (mutants' and the base's)

    def _path(self, mutant: Mutant, kind: str) -> Path:
        return self.folder / f"{mutant.id}-{mutant_digest(mutant)}.{kind}.json"

    def truth(self, mutant: Mutant) -> MutantTruth | None:
        path = self._path(mutant, "truth")
        if not path.is_file():
            return None
        return MutantTruth(**json.loads(path.read_text(encoding="utf-8")))

    def check(self, mutant: Mutant, scope_key: str) -> RestrictionCheck | None:
        path = self._path(mutant, f"check-{scope_key}")
        if not path.is_file():
            return None
        return RestrictionCheck(**json.loads(path.read_text(encoding="utf-8")))

    def save(self, mutant: Mutant, record: MutantTruth | RestrictionCheck, kind: str) -> None:
        """Write one record atomically (a killed run never leaves half a file)."""
        path = self._path(mutant, kind)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(record), sort_keys=True), encoding="utf-8")
        tmp.replace(path)


def breaks(
    ids: Sequence[str], before: Mapping[str, str], after: Mapping[str, str]
) -> dict[str, list[str]]:
    """The variants of ``ids`` that fail (``failed``/``error``) in ``after`` and did not in
    ``before``, or that ``before`` ran and ``after`` could not (a test module the mutant keeps
    from being collected): id -> [before, after]."""
    out: dict[str, list[str]] = {}
    for t in ids:
        was, now = before.get(t, "?"), after.get(t)
        if was in FAILURES:
            continue
        if now is None and was != "?":
            out[t] = [was, "not run"]
        elif now in FAILURES:
            out[t] = [was, now]
    return out


def broken_in(
    universe: Universe,
    ids: Sequence[str],
    *,
    mutant_env: RunEnvironment,
    base_env: RunEnvironment,
    runs: Path,
    label: str,
    specs: Sequence[Path] = (),
    processes: int = 1,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, list[str]]:
    """The variants of ``ids`` the mutant breaks (:func:`breaks`): all of them run in the
    mutant's overlay, then those that failed or did not run there run again in the clean base
    (a variant that passes under the mutant cannot be broken by it). Each run is cached under
    ``runs/<label>`` and ``runs/base``; every test has :data:`PER_TEST_TIMEOUT` seconds."""

    def outcomes(env: RunEnvironment, tests: Sequence[str], name: str) -> dict[str, str]:
        return run_outcomes(
            universe,
            mutant=None,
            tests=tests,
            processes=processes if len(tests) > 1 else 1,
            python=env.python,
            extra_env={**env.env, "PYTEST_TIMEOUT": str(PER_TEST_TIMEOUT)},
            cache_dir=runs / name,
            log=log,
            specs=specs,
            label=f"{label} {name}",
        )

    after = outcomes(mutant_env, ids, label) if ids else {}
    suspects = [t for t in ids if after.get(t) is None or after[t] in FAILURES]
    before = outcomes(base_env, suspects, "base") if suspects else {}
    return breaks(suspects, before, after)


def mutant_truth(
    universe: Universe,
    mutant: Mutant,
    *,
    head_sha: str,
    import_map: Path,
    mutant_env: RunEnvironment,
    base_env: RunEnvironment,
    records: Records,
    specs: Sequence[Path] = (),
    cap: int = PROBE_CAP,
    log: Callable[[str], None] = lambda _: None,
) -> MutantTruth:
    """The restricted ground truth of ``mutant`` (stored; read back when it was stored)."""
    found = records.truth(mutant)
    if found is not None:
        return found
    traced = callers(import_map, mutant.symbol)
    ids, candidates = probe_ids(universe, traced, cap=cap)
    broken = broken_in(
        universe,
        ids,
        mutant_env=mutant_env,
        base_env=base_env,
        runs=records.runs,
        label=head_sha[:12],
        specs=specs,
        log=log,
    )
    truth = MutantTruth(
        mutant_id=mutant.id,
        symbol=mutant.symbol,
        operator=mutant.operator,
        description=mutant.description,
        line=mutant.line,
        head_sha=head_sha,
        traced_callers=len(traced),
        candidates=candidates,
        ran=ids,
        broken=broken,
    )
    records.save(mutant, truth, "truth")
    return truth


def drawn_for_check(mutant_ids: Sequence[str], count: int, *, seed: int) -> list[str]:
    """``count`` of the sampled mutants, drawn at random (the same for the same seed and
    sample, whatever has run so far), in sample order."""
    chosen = set(
        random.Random(f"{seed}:restriction-check").sample(
            sorted(mutant_ids), min(count, len(mutant_ids))
        )
    )
    return [m for m in mutant_ids if m in chosen]


def check_ids(
    universe: Universe, truth: MutantTruth, *, cap: int, seed: int
) -> tuple[list[str], str, str]:
    """The variants a restriction check runs, the words saying which, and a key naming them:
    the whole runnable universe, or (``cap`` > 0 and smaller than it) the restricted set and a
    seeded sample of ``cap`` other runnable variants."""
    runnable = applicable_ids(universe)
    if not cap or cap >= len(runnable):
        return runnable, f"the whole runnable universe ({len(runnable):,} variants)", "all"
    ran = set(truth.ran)
    rest = [t for t in runnable if t not in ran]
    sample = random.Random(f"{seed}:{truth.mutant_id}").sample(rest, min(cap, len(rest)))
    ids = sorted(ran | set(sample))
    words = (
        f"its {len(ran)} restricted variants and a seeded sample of {len(sample):,} of the "
        f"{len(rest):,} other runnable variants"
    )
    return ids, words, f"sample{cap}-s{seed}"


def check_restriction(
    universe: Universe,
    mutant: Mutant,
    truth: MutantTruth,
    *,
    mutant_env: RunEnvironment,
    base_env: RunEnvironment,
    records: Records,
    specs: Sequence[Path] = (),
    cap: int = 0,
    seed: int = 0,
    processes: int = 2,
    log: Callable[[str], None] = lambda _: None,
) -> RestrictionCheck:
    """``mutant`` over the wider set of :func:`check_ids` in its overlay and in the clean base:
    the variants it breaks there, and which of them its restricted truth lacks (stored)."""
    ids, scope, key = check_ids(universe, truth, cap=cap, seed=seed)
    found = records.check(mutant, key)
    if found is not None:
        return found
    broken = sorted(
        broken_in(
            universe,
            ids,
            mutant_env=mutant_env,
            base_env=base_env,
            runs=records.runs,
            label=truth.head_sha[:12],
            specs=specs,
            processes=processes,
            log=log,
        )
    )
    ran = set(truth.ran)
    result = RestrictionCheck(
        mutant_id=mutant.id,
        scope=scope,
        checked=len(ids),
        broken=broken,
        outside=[t for t in broken if t not in ran],
        differing=sorted({t for t in broken if t in ran} ^ set(truth.broken)),
    )
    records.save(mutant, result, f"check-{key}")
    return result


def ground_truth(truths: Sequence[MutantTruth], universe: Universe) -> GroundTruth:
    """The mutants whose truth is known, as ground truth to score (in sample order)."""
    return GroundTruth(
        kind="mutation",
        universe=universe.label,
        variants=len(universe),
        events=[t.event() for t in truths],
        method="traced",
    )


def summary_lines(
    sampled: int, truths: Sequence[MutantTruth], checks: Sequence[RestrictionCheck], drawn: int
) -> list[str]:
    """The sampled set and the restriction check, in words."""
    observable = sum(t.observable for t in truths)
    uncalled = sum(not t.traced_callers for t in truths)
    capped = sum(t.candidates > len(t.ran) for t in truths)
    lines = [
        f"sampled mutants: {sampled}; ground truth known for {len(truths)}"
        + ("" if len(truths) == sampled else f" (partial: {sampled - len(truths)} not run)")
        + f"; observable {observable}; unobservable {len(truths) - observable} "
        f"({uncalled} with no traced caller); restricted sets capped: {capped}",
        f"restriction check: {drawn} mutant(s) drawn, {len(checks)} run",
    ]
    for c in checks:
        differ = f", {len(c.differing)} differ from the restricted run" if c.differing else ""
        lines.append(
            f"  {c.mutant_id}: {c.checked:,} variants ({c.scope}): {len(c.broken)} broken, "
            f"{len(c.outside)} outside the restricted set{differ}"
        )
        lines += [f"    outside: {t}" for t in c.outside[:10]]
        if len(c.outside) > 10:
            lines.append(f"    ... and {len(c.outside) - 10} more")
    return lines


def mutant_rows(truths: Sequence[MutantTruth], selected: dict[str, set[str]]) -> list[str]:
    """A Markdown row per mutant: what it changed, its restricted set, what it broke and what
    the plan (``selected``: mutant id -> selected ids) caught of it."""
    lines = [
        "| mutant | function | operator | traced callers | restricted set | broken "
        "| selected | broken selected |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for t in truths:
        chosen = selected.get(t.mutant_id, set())
        capped = f" of {t.candidates}" if t.candidates > len(t.ran) else ""
        lines.append(
            f"| {t.mutant_id} | `{t.symbol}` | {t.operator}: {t.description} (line {t.line}) "
            f"| {t.traced_callers} | {len(t.ran)}{capped} | {len(t.broken)} | {len(chosen)} "
            f"| {len(set(t.broken) & chosen)} |"
        )
    return lines
