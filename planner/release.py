"""A release step (2.13 -> 2.14): its plan over its head universe.

:func:`release_plan` is what ``relay replay`` prints: the change facts between the two releases
through the four stages, over the head universe. That universe is, by default, the installed
inventory adjusted by the change facts (:func:`inventory.head.head_universe`, each adjusted
variant flagged); with a head environment it is the real one, collected under the head torch
(:func:`collected_universe`). Its ground truth is :mod:`evaluation.release`.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from backends import get_backend
from backends.base import torch_build
from config.settings import get_settings
from inventory.build import spec_resolver, universe_from_inventory
from inventory.head import head_universe
from inventory.importmap import ImportMapBusy, import_map_for, map_key
from planner.durations import base_run_history, costs_for, merged
from planner.filefacts import store_for
from planner.revisions import default_profiling_map, source_reader
from selector import (
    NEW_AT_HEAD,
    History,
    SelectionPlan,
    SelectionRequest,
    SignalConfig,
    Universe,
    select,
)
from store import caches
from upstream import ResolvedRevision, UpstreamSource, open_source
from upstream.changes import ChangeFacts, compute_change_facts
from upstream.changes.behaviour import FingerprintError, Side, diff_fingerprints, fingerprints
from upstream.headenv import HeadEnv, HeadEnvError, ensure_env

Progress = Callable[[str], None]
#: queues the learning of a missing import map for later jobs (the workers' task)
LearnLater = Callable[[], None]


class NotQueued(Exception):
    """Raised by a :data:`LearnLater` that queues nothing on purpose; its text says why."""


def not_queued(why: str) -> LearnLater:
    """A :data:`LearnLater` that learns nothing: the plan goes on without the map and says
    ``why`` (``RELAY_IMPORT_MAP_LEARNING=false``; a planner called outside the workers)."""

    def skip() -> None:
        raise NotQueued(why)

    return skip


log = logging.getLogger(__name__)

#: a learning in the background runs this much below the jobs' priority, and may take long on a
#: busy host (23 minutes on a loaded 2-core machine, docs/benchmarks.md): it blocks no job
BACKGROUND_NICE = 10
BACKGROUND_TIMEOUT_SECONDS = 4 * 3600

#: the default budget of a release step: this share of the applicable universe's runner-seconds
#: as the plan estimates them (the broad signals and the fallback reach nearly everything; the
#: rank decides what runs). Chosen by leave-one-step-out over the five stored release steps
#: (``relay eval --kind release --all``: the cheapest share of evaluation.loso.SHARES that
#: catches every regression and new-and-failing event of every step; docs/selection.md)
DEFAULT_RELEASE_SHARE = 0.30


@dataclass
class ReleasePlan:
    plan: SelectionPlan
    universe: Universe
    notes: list[str] = field(default_factory=list)


def head_version(facts: ChangeFacts) -> str:
    """The released version the facts' head resolved to (``2.14`` -> ``2.14.1``)."""
    return facts.head.resolved.split("+", 1)[0]


def collected_universe(
    env: HeadEnv, *, specs: Sequence[Path] = (), backend: str = "spyre"
) -> Universe:
    """The bundled suites collected for real under the head environment's torch (cached)."""
    return universe_from_inventory(backend=backend, specs=specs, python=env.python, env=env.env)


def release_plan(
    source: UpstreamSource,
    facts: ChangeFacts,
    *,
    installed: Universe,
    head: Universe | None = None,
    budget_seconds: float | None = None,
    history: History | None = None,
    profiling_map: Path | None = None,
    import_map: bool = True,
    min_closeness: float = 0.0,
    backend: str = "spyre",
    runs: Path | None = None,
    budget_share: float | None = None,
    specs: Sequence[Path] = (),
    learn_later: LearnLater | None = None,
) -> ReleasePlan:
    """The release step's plan over ``head`` (a collected head universe) or, without it, the
    installed universe adjusted by the change facts, whose new variants ``specs`` decide (the
    spec files ``installed`` was decided by: none, no decisions, as for ``installed``). Costs are runner-seconds
    (:mod:`planner.durations`: ``history``, the ground-truth runs in ``runs``, the prior);
    failures come from ``history`` and the cached full run of the base universe (``installed``:
    the release we are on), never from a run of the head. ``budget_share`` without
    ``budget_seconds`` cuts to that share of the applicable universe's runner-seconds.
    ``learn_later``: an import map not learned yet is not waited for (:func:`learned_import_map`)."""
    start = time.perf_counter()
    if head is None:
        resolve = spec_resolver(specs, backend=backend, torch_root=None)
        adjusted = head_universe(installed, facts, source, resolve=resolve)
        universe, notes = adjusted.universe, adjusted.notes
    else:
        universe = with_new_at_head(head, installed)
        new = sum(1 for f in universe.flags.values() if f == NEW_AT_HEAD)
        notes = [
            f"universe collected under the head torch: {head.label}, {len(head)} variants "
            f"({new} new at head)"
        ]
    learned = merged(base_run_history(installed, runs), history)
    if learned.tests:
        failing = sum(1 for h in learned.tests.values() if h.failures)
        notes.append(f"history: {len(learned.tests)} variants, {failing} failing at base")
    before = len(notes)
    imports = learned_import_map(installed, notes, learn_later=learn_later) if import_map else None
    plan = select(
        SelectionRequest(
            facts=facts,
            universe=universe,
            costs=costs_for(universe, backend=backend, history=learned, runs=runs),
            backend=backend,
            reader=source_reader(source, facts),
            config=SignalConfig(
                profiling_map=profiling_map,
                import_map=imports,
                unavailable=tuple(notes[before:]) if import_map and imports is None else (),
            ),
            budget_seconds=budget_seconds,
            budget_share=budget_share,
            min_closeness=min_closeness,
            memo=store_for(source),
        )
    )
    plan.decision_seconds = round(time.perf_counter() - start, 4)
    return ReleasePlan(plan=plan, universe=universe, notes=notes)


def with_new_at_head(head: Universe, installed: Universe) -> Universe:
    """A collected head universe whose variants the base universe lacks flagged
    ``new-at-head`` (they rank first: no history, an unknown outcome)."""
    known = installed.by_id
    flags = dict(head.flags)
    for v in head.variants:
        if v.test_id not in known:
            flags.setdefault(v.test_id, NEW_AT_HEAD)
    return Universe(
        variants=head.variants, label=head.label, kind=head.kind, flags=flags, key=head.key
    )


def learned_import_map(
    installed: Universe, notes: list[str], *, learn_later: LearnLater | None = None
) -> Path | None:
    """The import map of our runs (learned once per torch build); when it cannot be learned
    (its sample run failed or ran past its timeout) the plan goes on without it, and says so.
    With ``learn_later`` (every job the workers plan) a map not learned yet is not waited for:
    the plan goes on without it, says so, and ``learn_later`` queues its learning so that the
    next job has it (:func:`learn_in_background`)."""
    try:
        found = import_map_for(installed, learn=learn_later is None)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        notes.append(f"import map not learned ({first}); the import-map signal rules nothing out")
        log.warning("import map not learned: %s", first)
        return None
    if found is not None or learn_later is None or map_key(installed) is None:
        return found
    build, _, version = (installed.key or "").partition("-spyre")  # as map_key, not made safe
    queued, later = "learning in the background", "; a later job uses them"
    try:
        learn_later()
    except NotQueued as exc:
        queued, later = str(exc), ""
    except Exception as exc:  # the broker is down: the next job queues it again
        log.warning("could not queue the import map's learning: %s", exc)
        queued = f"its learning could not be queued ({type(exc).__name__})"
    notes.append(
        f"import map not learned for torch {build} / backend spyre{version}; {queued} (this plan "
        f"is made without the import-map and traced-coverage signals{later})"
    )
    return None


def learn_in_background(backend: str = "spyre", specs: Sequence[Path | str] = ()) -> Path | None:
    """What a job that lacked the import map queued (the workers run it in a planner process):
    the map of the installed universe under ``specs`` (the backend's own when none), learned
    below the jobs' priority. None when another process is learning it (it holds the map's OS
    lock) or the universe has no map."""
    installed = universe_from_inventory(backend=backend, specs=backend_specs(backend, specs))
    try:
        return import_map_for(
            installed,
            backend=backend,
            wait=False,
            nice=BACKGROUND_NICE,
            timeout=BACKGROUND_TIMEOUT_SECONDS,
        )
    except ImportMapBusy as exc:
        log.info("import map not learned here: %s", exc)
        return None


def backend_specs(backend: str, specs: Sequence[Path | str] = ()) -> list[Path]:
    """The specs a plan applies: the given ones, else the backend's own (as the runner does)."""
    given = [Path(p).resolve() for p in specs]
    return given or list(get_backend(backend).default_specs)


def open_release(
    base: str,
    head: str,
    *,
    upstream: str | Path | None = None,
    cache_dir: str | Path | None = None,
    offline: bool = False,
    progress: Progress = lambda _: None,
) -> tuple[UpstreamSource, ChangeFacts]:
    """The upstream source and the change facts base..head (raises UpstreamError). Released
    wheels are fetched from the package index unless ``offline``; facts are cached beside them."""
    source = open_source(upstream, cache_dir=cache_dir, offline=offline, progress=progress)
    b, h = resolve_step(source, base, head, progress)
    facts_cache = facts_cache_dir(source, cache_dir)
    facts = compute_change_facts(source, b, h, cache_dir=facts_cache, progress=progress)
    return source, facts


def resolve_step(
    source: UpstreamSource, base: str, head: str, progress: Progress
) -> tuple[ResolvedRevision, ResolvedRevision]:
    """``base`` and ``head`` resolved in ``source`` (raises UpstreamError)."""
    progress(f"resolving {base} and {head}")
    b, h = source.resolve(base), source.resolve(head)
    progress(f"{base} -> {b.resolved}, {head} -> {h.resolved}")
    return b, h


def plan_release(
    base: str,
    head: str,
    *,
    backend: str = "spyre",
    specs: Sequence[Path | str] = (),
    upstream: str | Path | None = None,
    cache_dir: str | Path | None = None,
    offline: bool = False,
    head_env: bool | None = None,
    budget_seconds: float | None = None,
    history: History | None = None,
    profiling_map: Path | None = None,
    import_map: bool = True,
    min_closeness: float = 0.0,
    budget_share: float | None = DEFAULT_RELEASE_SHARE,
    progress: Progress = lambda _: None,
    learn_later: LearnLater | None = None,
) -> ReleasePlan:
    """A release step planned the one way ``relay replay`` and the workers' replay job both
    use: the backend's own specs unless others are given, the behaviour fingerprints of both
    torches (:func:`with_behaviour`), the head universe collected in the head environment (or,
    with ``head_env=False``, the installed universe adjusted by the change facts), the learned
    import map. ``head_env=None`` collects the head universe when the environments are made
    anyway for the fingerprints (``RELAY_RELEASE_FINGERPRINTS``) and estimates it otherwise, or
    when that environment cannot be made (the notes say why). ``profiling_map`` None: the
    default one (:func:`planner.revisions.default_profiling_map`). ``learn_later``: an import map
    not learned yet is queued, not waited for (:func:`learned_import_map`)."""
    start = time.perf_counter()
    spec_paths = backend_specs(backend, specs)
    progress(f"universe of {backend} under {len(spec_paths)} spec file(s) (cached after the first)")
    source = open_source(upstream, cache_dir=cache_dir, offline=offline, progress=progress)
    # offline there is nothing to fetch: a wheel the cache lacks is said now, not after the
    # collection below (which the error would wait for)
    revisions = resolve_step(source, base, head, progress) if offline else None
    # the installed universe needs neither the facts nor the head environment: it is collected
    # (minutes when not cached) while the wheels are fetched and that environment is made
    with ThreadPoolExecutor(1, thread_name_prefix="installed-universe") as pool:
        pending = pool.submit(universe_from_inventory, backend=backend, specs=spec_paths)
        b, h = revisions or resolve_step(source, base, head, progress)
        facts = compute_change_facts(
            source, b, h, cache_dir=facts_cache_dir(source, cache_dir), progress=progress
        )
        behaviour_notes: list[str] = []
        facts = with_behaviour(
            facts,
            cache_dir=facts_cache_dir(source, cache_dir),
            offline=offline,
            notes=behaviour_notes,
            progress=progress,
        )
        collected = _head_universe(
            facts, head_env, spec_paths, backend, offline, behaviour_notes, progress
        )
        installed = pending.result()
    progress(f"universe: {len(installed)} variants ({installed.label})")
    if import_map:
        progress(
            "import map and traced coverage of our runs ("
            + ("learned once per torch build)" if learn_later is None else "when learned)")
        )
    release = release_plan(
        source,
        facts,
        installed=installed,
        head=collected,
        budget_seconds=budget_seconds,
        history=history,
        profiling_map=profiling_map if profiling_map is not None else default_profiling_map(),
        import_map=import_map,
        min_closeness=min_closeness,
        backend=backend,
        budget_share=budget_share,
        specs=spec_paths,
        learn_later=learn_later,
    )
    release.notes[:0] = behaviour_notes
    release.plan.decision_seconds = round(time.perf_counter() - start, 4)
    return release


def _head_universe(
    facts: ChangeFacts,
    head_env: bool | None,
    specs: list[Path],
    backend: str,
    offline: bool,
    notes: list[str],
    progress: Progress,
) -> Universe | None:
    """The head universe collected in the head environment (see :func:`plan_release`), or None:
    estimated from the facts (``notes`` says why when the environment could not be made)."""
    auto = head_env is None
    if not (head_env or (auto and get_settings().release_fingerprints)):
        return None
    try:
        env = head_env_for(facts, offline=offline)
    except HeadEnvError as exc:
        if not auto:
            raise
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        notes.append(f"head universe estimated from the facts ({first})")
        return None
    progress(f"head environment: {env.directory} (torch {env.torch_build})")
    return collected_universe(env, specs=specs, backend=backend)


def facts_cache_dir(source: UpstreamSource, cache_dir: str | Path | None = None) -> Path:
    """Where the change facts (and the behaviour fingerprints) of ``source`` are kept."""
    return Path(cache_dir or getattr(source, "cache_dir", None) or caches.cache_dir("upstream"))


def with_behaviour(
    facts: ChangeFacts,
    *,
    cache_dir: Path,
    offline: bool = False,
    notes: list[str],
    progress: Progress = lambda _: None,
    base_env: HeadEnv | None = None,
    head_env: HeadEnv | None = None,
    enabled: bool | None = None,
) -> ChangeFacts:
    """``facts`` with the OpInfo entries whose behaviour on CPU changed between the two torches
    (:mod:`upstream.changes.behaviour`): each release runs in its own environment (made once;
    the installed torch in this interpreter), fingerprints are cached per build. Off with
    ``RELAY_RELEASE_FINGERPRINTS=false``; when an environment or a fingerprint run fails the
    facts stay as they were and ``notes`` says why (compiled code's changes then rest on the
    broad signals, as without fingerprints)."""
    if enabled is None:
        enabled = get_settings().release_fingerprints
    if not enabled:
        notes.append("behaviour fingerprints off (RELAY_RELEASE_FINGERPRINTS=false)")
        return facts
    try:
        sides = [
            _side(facts.base.resolved, base_env, offline=offline, progress=progress),
            _side(facts.head.resolved, head_env, offline=offline, progress=progress),
        ]
        before, after = fingerprints(sides, cache_dir, progress=progress)
    except (HeadEnvError, FingerprintError, OSError, ValueError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        notes.append(
            f"behaviour fingerprints not computed ({first}); compiled code's changes "
            "rest on the broad signals"
        )
        log.warning("behaviour fingerprints not computed: %s", first)
        return facts
    changes = diff_fingerprints(before, after)
    common = len(set(before.get("entries", {})) & set(after.get("entries", {})))
    notes.append(
        f"behaviour: {len(changes)} of {common} OpInfo entries behave differently on CPU at head "
        f"(torch {sides[0].build} -> {sides[1].build})"
    )
    return facts.model_copy(update={"behaviour": changes})


def _side(resolved: str, env: HeadEnv | None, *, offline: bool, progress: Progress) -> Side:
    """The interpreter that runs release ``resolved``: ``env``'s, this one when it has that
    torch, else the release's own environment (made once)."""
    if env is None and is_installed(resolved):
        return Side(python=sys.executable, build=torch_build())
    if env is None:
        version = resolved.split("+", 1)[0]
        progress(f"environment of torch {version} (made once)")
        env = ensure_env(version, offline=offline)
    return Side(python=str(env.python), build=env.torch_build, env=env.env)


def is_installed(version: str) -> bool:
    """Whether ``version`` (``2.13.0+cpu``) is the torch this interpreter has."""
    from importlib import metadata

    return metadata.version("torch").split("+")[0] == version.split("+")[0]


def head_env_for(facts: ChangeFacts, *, offline: bool = True) -> HeadEnv:
    """The head environment (made once: minutes, the torch wheel from the local index)."""
    return ensure_env(head_version(facts), offline=offline)
