"""Is a mutant observable at all? A probe independent of the selector tells a missed mutant from
one no bundled test can see.

The probe of a mutated function is every variant of the ops and modules whose test called that
function in the traced run of the base (:func:`inventory.importmap.import_map_for`: one variant
of every op and module, each call of a torch function recorded), plus those traced tests
themselves, all dtypes and templates, without the spec's ``skip`` variants; at most ``cap`` of
them (an even, sorted stride). The probe runs in the mutant's overlay, then the variants that
failed there (``failed``/``error``) run again in its clean twin's (the same base binaries, so
only the fault differs; a variant that does not fail under the mutant cannot be one the fault
breaks), under the backend's specs as the shard runner applies them; the variants that fail
under the mutant and not under the twin are what the fault breaks. A mutant is observable when that set is not empty (a
variant the spec marks ``xfail`` reports ``xfailed`` and breaks nothing that gates).

What the probe cannot see, said with its verdict: a function no traced test called (only called
at import or collection, or through variants the trace's sample did not run), and variants
beyond the cap.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evaluation.groundtruth import run_outcomes
from selector.model import Universe
from testspecs.outcomes import FAILURES
from upstream.undertest import RunEnvironment

PROBE_CAP = 300


@dataclass
class Probe:
    symbol: str
    traced_callers: int  # tests of the traced run that called the function
    candidates: int  # variants of their ops and modules (before the cap)
    ran: list[str] = field(default_factory=list)
    broken: dict[str, tuple[str, str]] = field(default_factory=dict)  # id -> (twin, mutant)

    @property
    def observable(self) -> bool:
        return bool(self.broken)

    def describe(self) -> str:
        if not self.traced_callers:
            return "no traced test calls the function"
        if self.broken:
            return f"{len(self.broken)} of {len(self.ran)} probed variants break"
        capped = f" (capped from {self.candidates})" if self.candidates > len(self.ran) else ""
        return f"none of the {len(self.ran)} variants that reach it{capped} changes outcome"


def callers(import_map: Path, symbol: str) -> list[str]:
    """Node ids of the traced tests that called ``symbol`` (``torch/x.py::Qual``)."""
    data = json.loads(import_map.read_text(encoding="utf-8"))
    tests = data.get("tests", [])
    return [tests[i] for i in data.get("calls", {}).get(symbol, [])]


def probe_ids(
    universe: Universe, traced: list[str], *, cap: int = PROBE_CAP
) -> tuple[list[str], int]:
    """The variants to probe for functions ``traced`` tests call, and how many there were."""
    by_node = {v.node_id: v for v in universe.variants} | universe.by_id
    hit = [by_node[t] for t in traced if t in by_node]
    ops = {v.op for v in hit if v.op}
    modules = {v.module for v in hit if v.module}
    chosen = {v.test_id for v in hit} | {
        v.test_id for v in universe.variants if (v.op in ops) or (v.module in modules)
    }
    runnable = sorted(
        t
        for t in chosen
        if universe.by_id[t].decision != "skip" and not universe.by_id[t].static_skip
    )
    if len(runnable) <= cap:
        return runnable, len(runnable)
    step = len(runnable) / cap
    return [runnable[int(i * step)] for i in range(cap)], len(runnable)


def probe(
    universe: Universe,
    symbol: str,
    *,
    import_map: Path,
    mutant_env: RunEnvironment,
    twin_env: RunEnvironment,
    cache_dir: Path,
    labels: Mapping[str, str],
    specs: Sequence[Path] = (),
    cap: int = PROBE_CAP,
    log: Callable[[str], None] = lambda _: None,
) -> Probe:
    """Run the probe of ``symbol`` under the mutant, its failures under the twin; the variants
    the mutant breaks.
    ``labels``: {"mutant": ..., "twin": ...} name the two runs (their caches under
    ``cache_dir``)."""
    traced = callers(import_map, symbol)
    ids, candidates = probe_ids(universe, traced, cap=cap)
    found = Probe(symbol, len(traced), candidates, ran=ids)
    if not ids:
        return found

    def outcomes(which: str, env: RunEnvironment, tests: list[str]) -> dict[str, str]:
        return run_outcomes(
            universe,
            mutant=None,
            tests=tests,
            processes=1,
            python=env.python,
            extra_env=env.env,
            cache_dir=cache_dir / labels[which],
            log=log,
            specs=specs,
            label=f"probe {labels[which]}",
        )

    after = outcomes("mutant", mutant_env, ids)
    suspects = [t for t in ids if after.get(t, "?") in FAILURES]
    before = outcomes("twin", twin_env, suspects) if suspects else {}
    for test_id in suspects:
        if before.get(test_id, "?") not in FAILURES:
            found.broken[test_id] = (before.get(test_id, "?"), after[test_id])
    return found
