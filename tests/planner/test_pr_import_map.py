"""A pull request's plan uses the traced import map of the torch build its job runs, as a release
step does: with the map learned, a change to a function that only the traced runs tie to an op
selects that op's variants; without it the plan says the map is missing (and queues its learning
when given a learner, never learns it while planning)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from backends import get_backend
from backends.base import package_dir, torch_build
from inventory.importmap import map_key
from planner import events
from planner.model import RunPlan
from selector import Universe
from selector.signals.imports import IMPORT_MAP_VERSION
from store import caches
from wire.github.events import UpstreamEvent

#: a private helper of torch/functional.py: no op is named after it, no path rule maps it
HELPER = "_meshgrid"
HEADER = "def _meshgrid(*tensors, indexing: str | None):\n"
UNIT = f"torch/functional.py::{HELPER}"


@pytest.fixture
def change(tmp_path: Path, small_upstream: Any) -> tuple[Path, str, str]:
    """A checkout whose base holds the installed torch's functional.py and whose head changes
    the body of ``_meshgrid`` only."""
    torch_dir = package_dir("torch")
    assert torch_dir is not None
    functional = (torch_dir / "functional.py").read_text()
    assert HEADER in functional, "the installed torch's _meshgrid moved"
    repo = small_upstream.UpstreamRepo.create(
        tmp_path,
        {
            "torch/__init__.py": "",
            "torch/functional.py": functional,
            "aten/src/ATen/native/native_functions.yaml": "- func: add\n",
        },
    )
    base = repo.git("rev-parse", "HEAD").strip()
    head = repo.commit(
        {"torch/functional.py": functional.replace(HEADER, HEADER + "    tensors = tensors\n")}
    )
    return repo.path, base, head


@pytest.fixture
def universe(small_upstream: Any, monkeypatch: pytest.MonkeyPatch) -> Universe:
    """The small generated universe as the bundled suites of the installed torch (its import
    map is keyed by that build); the planner plans over it."""
    generated = small_upstream.make_universe()
    uni = Universe(
        generated.variants, label="bundled", kind="bundled", key=f"{torch_build()}-spyre1"
    )
    monkeypatch.setattr(events, "universe_from_inventory", lambda **_: uni)
    return uni


def _plan(checkout: Path, base: str, head: str, **kwargs: Any) -> RunPlan:
    event = UpstreamEvent(
        delivery_id="d-map",
        event="pull_request",
        repo="pytorch/pytorch",
        pr_number=9,
        base_sha=base,
        head_sha=head,
    )
    return events.plan_event(
        event, backend=get_backend("spyre"), specs=[], upstream=checkout, **kwargs
    )


def _impact_notes(planned: RunPlan) -> list[str]:
    assert planned.selection is not None
    [impact] = [s for s in planned.selection.funnel if s.stage == "impact"]
    return impact.notes


def _learn(uni: Universe, op: str) -> Path:
    """The traced map a learning leaves (inventory.importmap's file): one traced test per op and
    module of ``uni``; ``_meshgrid`` was called by ``op``'s only."""
    traced: dict[str, str] = {}
    for v in sorted(uni.variants, key=lambda v: v.test_id):
        traced.setdefault(str(v.op or v.module), v.test_id)
    tests = sorted(traced.values())
    build, files, version = map_key(uni) or ("", "", "")
    path = caches.cache_dir("selector") / f"importmap-{build}-{files}-spyre{version}-traced.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "version": IMPORT_MAP_VERSION,
                "key": "k",
                "tests_run": len(tests),
                "modules": ["torch/__init__.py", "torch/functional.py"],
                "tests": tests,
                "calls": {UNIT: [tests.index(traced[op])]},
            }
        )
    )
    return path


def test_a_pull_request_plan_uses_the_learned_map_and_says_when_it_is_absent(
    change: tuple[Path, str, str], universe: Universe, fresh_host: Path
) -> None:
    checkout, base, head = change
    queued: list[str] = []
    cold = _plan(checkout, base, head, learn_later=lambda: queued.append("learn"))
    assert cold.upstream.kind == "overlay", cold.upstream.reason
    build = torch_build()
    said = (
        f"import map not learned for torch {build} / backend spyre1; learning in the "
        "background (this plan is made without the import-map and traced-coverage signals; a "
        "later job uses them)"
    )
    assert _impact_notes(cold)[0] == said
    assert queued == ["learn"]
    assert cold.selection is not None
    assert not any(w.startswith("traced-coverage:") for w in cold.selection.explained.get(UNIT, []))
    assert not (fresh_host / "selector").exists()  # nothing was learned while planning

    _learn(universe, "nn.functional.gelu")
    warm = _plan(checkout, base, head, learn_later=lambda: queued.append("learn"))
    assert queued == ["learn"]  # nothing queued again
    assert warm.selection is not None
    assert not any("import map" in n for n in _impact_notes(warm))
    assert (
        f"traced-coverage: {HELPER}: called by the traced tests of 1 op(s)/module(s), 4 variant(s)"
        in warm.selection.explained[UNIT]
    )
    reached = {
        t.test_id
        for t in warm.selection.tests
        if any(f"{HELPER} (modified) is called by the traced test of op:" in r for r in t.reasons)
    }
    assert reached == {v.test_id for v in universe.variants if v.op == "nn.functional.gelu"}


def test_a_planner_without_a_learner_neither_learns_nor_queues_and_says_so(
    change: tuple[Path, str, str], universe: Universe, fresh_host: Path
) -> None:
    checkout, base, head = change
    planned = _plan(checkout, base, head)
    assert _impact_notes(planned)[0] == (
        f"import map not learned for torch {torch_build()} / backend spyre1; its learning is "
        "not queued by this planner (this plan is made without the import-map and "
        "traced-coverage signals)"
    )
    assert not (fresh_host / "selector").exists()


def test_a_job_on_another_torch_build_uses_no_map_and_says_so(
    change: tuple[Path, str, str], universe: Universe, fresh_host: Path
) -> None:
    checkout, base, head = change
    _learn(universe, "add")
    planned = _plan(checkout, base, head, overlay_base="2.14.1")
    assert (planned.upstream.kind, planned.upstream.torch_version) == ("overlay", "2.14.1")
    assert _impact_notes(planned)[0] == (
        f"import map not used: the job runs torch 2.14.1, the maps are learned from runs of the "
        f"installed torch {torch_build()} (this plan is made without the import-map and "
        "traced-coverage signals)"
    )
