"""From an upstream event to a :class:`~planner.model.RunPlan` for a backend.

Revisions come from the event: a pull request's base..head SHAs, a push's before..after, a
replay's versions. Without a checkout (``upstream``) commit SHAs cannot be read, and the selector
says so and selects the whole universe (cut to the budget). A nightly run selects the whole
universe on purpose.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from backends import Backend
from backends.base import torch_build
from inventory.build import universe_from_inventory
from planner.durations import costs_for
from planner.environment import (
    decide_environment,
    head_wheel_for,
    overlay_base_for,
    same_release,
)
from planner.model import RunPlan
from planner.release import LearnLater, learned_import_map, not_queued, plan_release
from planner.revisions import default_profiling_map, plan_revisions
from selector import (
    History,
    SelectionPlan,
    SelectionRequest,
    SignalConfig,
    Universe,
    select,
    unanalysed,
)
from upstream import GitCheckout, UpstreamError
from upstream.undertest import UpstreamUnderTest
from wire.github.events import UpstreamEvent

log = logging.getLogger(__name__)


def revisions(event: UpstreamEvent) -> tuple[str, str] | None:
    """(base, head) to compare, or None for a whole-universe run."""
    if event.event in ("nightly",):
        return None
    if event.event == "periodic" and event.base_ref and event.head_ref:
        return event.base_ref, event.head_ref  # a release replay: versions such as 2.13 -> 2.14
    if event.event == "push" and event.before_sha and event.after_sha:
        return event.before_sha, event.after_sha
    if event.base_sha and event.head_sha:
        return event.base_sha, event.head_sha
    if event.head_sha:
        return f"{event.head_sha}^", event.head_sha  # a re-run request: the head commit's change
    return None


def plan_event(
    event: UpstreamEvent,
    *,
    backend: Backend,
    specs: Sequence[Path],
    upstream: Path | None = None,
    upstream_cache: Path | None = None,
    budget_seconds: float | None = None,
    history: History | None = None,
    unanalysed_budget_seconds: float | None = None,
    head_wheel: str | None = None,
    overlay_base: str | None = None,
    smoke_untested: bool = False,
    learn_later: LearnLater | None = None,
) -> RunPlan:
    """The selector's four stages over the bundled universe on ``backend`` under ``specs``.

    A release replay (a "periodic" event between two versions) is planned exactly as
    ``relay replay --from A --to B`` plans it (:func:`planner.release.plan_release`): the same
    specs, head universe and signals, so both report the same selection. Budgets are in
    runner-seconds; a change that cannot be read is cut to ``unanalysed_budget_seconds`` unless
    ``budget_seconds`` is given (a nightly run is the whole universe on purpose).

    The plan names the upstream under test (:func:`planner.environment.decide_environment`):
    ``head_wheel`` is the head wheel template (``{sha}``, ``{pr}``), ``overlay_base`` the release
    an overlay lays the head's Python files over (None: the newest release tag the merge base
    descends from in the checkout, else the installed torch), ``smoke_untested`` runs a change
    nothing can test on the installed torch anyway (else nothing runs). Tests are in rank order
    (:func:`planner.sharding.cut_shards` shards them). ``learn_later`` queues the learning of an
    import map not learned yet (:func:`planner.release.learned_import_map`): a release step and a
    pull request or push (:func:`_import_map`) both use the learned map of the torch build the
    job runs and are planned without it, saying so, until it is learned."""
    revs = revisions(event)
    under_test = _under_test(
        event,
        revs,
        upstream=upstream,
        head_wheel=head_wheel,
        overlay_base=overlay_base,
        smoke_untested=smoke_untested,
    )
    if not under_test.runs:
        return _nothing_to_run(backend, specs, under_test, revs)
    if event.event == "periodic" and revs is not None:
        step = _release_step(
            event,
            revs,
            backend=backend,
            specs=specs,
            upstream=upstream,
            upstream_cache=upstream_cache,
            budget_seconds=budget_seconds,
            history=history,
            learn_later=learn_later,
        )
        if step is not None:
            return step
    universe = universe_from_inventory(backend=backend.name, specs=specs)
    if revs is None:
        plan = _whole_universe(event, universe, backend.name, history, budget_seconds)
    else:
        notes: list[str] = []
        imports = _import_map(universe, under_test, notes, learn_later)
        plan = plan_revisions(
            base=revs[0],
            head=revs[1],
            upstream=upstream,
            backend=backend.name,
            universe=universe,
            specs=specs,
            budget_seconds=budget_seconds,
            history=history,
            facts_cache=upstream_cache,
            offline=False,
            unanalysed_budget_seconds=unanalysed_budget_seconds,
            config=revisions_config(imports, notes),
        )
    return _run_plan(plan, universe, backend, specs, under_test)


def revisions_config(import_map: Path | None, notes: Sequence[str] = ()) -> SignalConfig:
    """The signals' inputs of a pull request's or push's plan: PyTorch's profiling map and the
    learned import map of the torch build its job runs (None: planned without the import-map and
    traced-coverage signals, ``notes`` say why). ``relay eval --kind mutation`` plans each
    mutant with it, as the planner plans the pull request."""
    return SignalConfig(
        profiling_map=default_profiling_map(), import_map=import_map, unavailable=tuple(notes)
    )


def _import_map(
    universe: Universe,
    under_test: UpstreamUnderTest,
    notes: list[str],
    learn_later: LearnLater | None,
) -> Path | None:
    """The traced import map of the torch build a pull request's or push's job runs, as a
    release step uses it (:func:`planner.release.learned_import_map`): maps are learned from our
    runs on the installed torch, so an overlay on the installed release (or the installed torch
    itself) uses that map when it is learned; when it is not, the plan goes on without it, says
    so in ``notes``, and ``learn_later`` queues its learning (None: nothing is queued, a planner
    never learns it in the foreground). A job on another torch build (a head wheel, an overlay
    on another release) uses no map, and says so."""
    installed = torch_build()
    version = under_test.torch_version or installed
    if under_test.kind not in ("installed", "overlay") or not same_release(version, installed):
        runs = under_test.torch_build or under_test.torch_version or under_test.head_wheel
        notes.append(
            f"import map not used: the job runs torch {runs}, the maps are learned from runs "
            f"of the installed torch {installed} (this plan is made without the import-map and "
            "traced-coverage signals)"
        )
        return None
    return learned_import_map(
        universe,
        notes,
        learn_later=learn_later or not_queued("its learning is not queued by this planner"),
    )


def _nothing_to_run(
    backend: Backend,
    specs: Sequence[Path],
    under_test: UpstreamUnderTest,
    revs: tuple[str, str] | None,
) -> RunPlan:
    """The plan of an event nothing can test: no shard, the reason in its upstream under test."""
    log.info("nothing to run: %s", under_test.reason)
    return RunPlan(
        shards=[],
        runner=backend.runner_config(specs),
        upstream=under_test,
        base_rev=revs[0] if revs else None,
        head_rev=revs[1] if revs else None,
    )


def _under_test(
    event: UpstreamEvent,
    revs: tuple[str, str] | None,
    *,
    upstream: Path | None,
    head_wheel: str | None,
    overlay_base: str | None,
    smoke_untested: bool,
) -> UpstreamUnderTest:
    """The PyTorch the event's tests run in (:func:`planner.environment.decide_environment`):
    its head wheel, an overlay on a base release, or none (then nothing runs)."""
    head = event.head_sha or event.after_sha
    note = _checkout_note(upstream, head) if event.event != "periodic" else ""
    base_release, base_note = overlay_base, ""
    if event.event != "periodic" and not note:
        base_release, base_note = overlay_base_for(overlay_base, upstream, revs)
    return decide_environment(
        event,
        installed_version=torch_build(),
        checkout=upstream is not None and not note,
        checkout_note=note,
        head_wheel=head_wheel_for(head_wheel, event),
        overlay_base=base_release,
        overlay_base_note=base_note,
        changed_paths=_changed_paths(upstream, revs) if event.event != "periodic" else (),
        smoke_untested=smoke_untested,
    )


def _whole_universe(
    event: UpstreamEvent,
    universe: Universe,
    backend: str,
    history: History | None,
    budget_seconds: float | None,
) -> SelectionPlan:
    """A run of the whole universe on purpose (a nightly), cut to the budget."""
    head = event.head_sha or "installed"
    return select(
        SelectionRequest(
            facts=unanalysed(head, head, source_kind="installed"),
            universe=universe,
            costs=costs_for(universe, backend=backend, history=history),
            backend=backend,
            force_all=f"{event.event} run: the whole universe",
            budget_seconds=budget_seconds,
        )
    )


def _release_step(
    event: UpstreamEvent,
    revs: tuple[str, str],
    *,
    backend: Backend,
    specs: Sequence[Path],
    upstream: Path | None,
    upstream_cache: Path | None,
    budget_seconds: float | None,
    history: History | None,
    learn_later: LearnLater | None = None,
) -> RunPlan | None:
    """A release replay planned as ``relay replay`` plans it, in the head release's
    environment; None when the release step cannot be read (the caller plans everything)."""
    try:
        release = plan_release(
            revs[0],
            revs[1],
            backend=backend.name,
            specs=specs,
            upstream=upstream,
            cache_dir=upstream_cache,
            budget_seconds=budget_seconds,
            history=history,
            learn_later=learn_later,
        )
    except UpstreamError as exc:
        log.warning("cannot read the release step %s -> %s: %s", *revs, exc)
        return None
    step = decide_environment(
        event,
        installed_version=torch_build(),
        release_version=(release.plan.head_resolved or revs[1]).split("+", 1)[0],
    )
    return _run_plan(release.plan, release.universe, backend, specs, step)


def _checkout_note(upstream: Path | None, head: str | None) -> str:
    """Why the checkout cannot lay the head's files over (empty when it can, or none is set)."""
    if upstream is None or head is None:
        return ""
    try:
        GitCheckout(upstream).resolve(head)
    except UpstreamError as exc:
        return f"the upstream checkout cannot serve head {head[:12]} ({exc})"
    return ""


def _changed_paths(upstream: Path | None, revs: tuple[str, str] | None) -> list[str]:
    """The files base..head touches in the checkout (none when it cannot be read: the planning
    below says why)."""
    if upstream is None or revs is None:
        return []
    try:
        checkout = GitCheckout(upstream)
        changes = checkout.changed_files(checkout.resolve(revs[0]), checkout.resolve(revs[1]))
    except UpstreamError:
        return []
    return [c.path for c in changes]


def _run_plan(
    plan: SelectionPlan,
    universe: Universe,
    backend: Backend,
    specs: Sequence[Path],
    under_test: UpstreamUnderTest,
) -> RunPlan:
    log.info("selection: %s", plan.summary())
    return RunPlan.for_selection(
        plan,
        {v.test_id: v.node_id for v in universe.variants},
        runner=backend.runner_config(specs),
        upstream=under_test,
    )
