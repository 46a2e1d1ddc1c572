"""A job never waits for the import map: on a cold cache the release step is planned without
it, its selection says which signal was missing and why, and the learning is queued; the next
job, once the map is learned, uses it. The map's learning takes one learner at a time."""

from __future__ import annotations

import fcntl
import json
from pathlib import Path
from typing import Any

import pytest

from config.broker import PLAN_QUEUE, TASK_LEARN_IMPORT_MAP, celery_config
from config.settings import Settings
from inventory.importmap import ImportMapBusy, learn_import_map, map_key
from planner import release
from selector import Universe
from selector.signals.imports import IMPORT_MAP_VERSION
from store import caches

#: a module the universe's runs never import, added at head
LONELY = "torch/_lonely.py"


@pytest.fixture
def step(tmp_path: Path, small_upstream: Any) -> tuple[Any, Any, Universe]:
    """The source and facts of a step that adds a module, and a bundled-like base universe."""
    from upstream import GitCheckout
    from upstream.changes import compute_change_facts

    repo = small_upstream.UpstreamRepo.create(tmp_path)
    repo.commit({LONELY: "def lonely():\n    return 2\n"})
    source = GitCheckout(repo.path)
    facts = compute_change_facts(source, source.resolve("base"), source.resolve("HEAD"))
    base = small_upstream.make_universe()
    installed = Universe(base.variants, label="b", kind="bundled", key="2.13.0+cpu-spyre1")
    return source, facts, installed


def _impact_notes(planned: release.ReleasePlan) -> list[str]:
    [impact] = [s for s in planned.plan.funnel if s.stage == "impact"]
    return impact.notes


def _by_import_map(planned: release.ReleasePlan) -> list[str]:
    return [
        unit
        for unit, why in planned.plan.explained.items()
        if any(w.startswith("import-map:") for w in why)
    ]


def test_a_cold_job_does_not_wait_for_the_map_says_so_and_the_next_uses_it(
    step: tuple[Any, Any, Universe], fresh_host: Path
) -> None:
    source, facts, installed = step
    queued: list[str] = []

    def plan() -> release.ReleasePlan:
        return release.release_plan(
            source, facts, installed=installed, learn_later=lambda: queued.append("learn")
        )

    cold = plan()
    assert queued == ["learn"]
    said = (
        "import map not learned for torch 2.13.0+cpu / backend spyre1; learning in the "
        "background (this plan is made without the import-map and traced-coverage signals; a "
        "later job uses them)"
    )
    assert _impact_notes(cold)[0] == said  # the selection's explanation, first
    assert said in cold.notes
    assert _by_import_map(cold) == []
    assert not (fresh_host / "selector").exists()  # nothing was learned while planning

    # what the queued learning leaves (inventory.importmap.learn_import_map's file): the runs
    # imported the base's modules, not the one added at head
    build, files, version = map_key(installed) or ("", "", "")
    learned = caches.cache_dir("selector") / f"importmap-{build}-{files}-spyre{version}-traced.json"
    learned.parent.mkdir(parents=True)
    modules = ["torch/__init__.py", "torch/_decomp/decompositions.py"]
    learned.write_text(
        json.dumps({"version": IMPORT_MAP_VERSION, "key": "k", "tests_run": 4, "modules": modules})
    )

    warm = plan()
    assert queued == ["learn"]  # nothing queued again
    assert not any("import map not learned" in n for n in _impact_notes(warm) + warm.notes)
    assert [u for u in _by_import_map(warm) if u.startswith(LONELY)]


def test_a_map_that_cannot_be_queued_says_so(
    step: tuple[Any, Any, Universe], fresh_host: Path
) -> None:
    _, _, installed = step

    def broker_down() -> None:
        raise ConnectionRefusedError("no broker")

    notes: list[str] = []
    assert release.learned_import_map(installed, notes, learn_later=broker_down) is None
    assert notes == [
        "import map not learned for torch 2.13.0+cpu / backend spyre1; its learning could not be "
        "queued (ConnectionRefusedError) (this plan is made without the import-map and "
        "traced-coverage signals; a later job uses them)"
    ]


def test_one_learner_at_a_time(
    step: tuple[Any, Any, Universe], fresh_host: Path, tmp_path: Path
) -> None:
    """A second learner in the background gives up at once while another holds the map's OS
    lock (it would otherwise hold a planner process for the whole run); nothing is run."""
    _, _, installed = step
    folder = tmp_path / "maps"
    folder.mkdir()
    with (folder / ".importmap-k-traced.json.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(ImportMapBusy, match="being learned by another process"):
            learn_import_map(installed.variants, key="k", sweep=1, cache_dir=folder, wait=False)
    assert sorted(p.name for p in folder.iterdir()) == [".importmap-k-traced.json.lock"]


def test_the_learning_goes_to_the_planner_workers() -> None:
    routes = celery_config(Settings())["task_routes"]
    assert routes[TASK_LEARN_IMPORT_MAP] == {"queue": PLAN_QUEUE}
