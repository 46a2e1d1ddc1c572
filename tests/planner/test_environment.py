"""The planner's decision of the upstream under test, per event kind (pure, in-process)."""

from __future__ import annotations

from typing import Any

import pytest

from backends import get_backend
from planner import plan_event
from planner.environment import decide_environment, head_wheel_for, is_compiled
from wire.github.events import UpstreamEvent

INSTALLED = "2.13.0+gitabcdef012345"
NO_WAY = (
    "no upstream checkout (RELAY_UPSTREAM_PATH) and no head wheel (RELAY_HEAD_WHEEL): "
    "the change cannot be tested here"
)


def event(kind: str, **kw: Any) -> UpstreamEvent:
    return UpstreamEvent(delivery_id="d-1", event=kind, repo="pytorch/pytorch", **kw)


PR = {"pr_number": 5, "base_sha": "b" * 40, "head_sha": "h" * 40}
PUSH = {"before_sha": "b" * 40, "after_sha": "a" * 40, "ref": "refs/heads/main"}


def test_a_release_step_runs_its_head_release_in_its_own_environment() -> None:
    step = event("periodic", base_ref="2.13", head_ref="2.14")
    chosen = decide_environment(step, installed_version=INSTALLED, release_version="2.14.1")
    assert (chosen.kind, chosen.torch_version, chosen.runs) == ("release", "2.14.1", True)
    assert chosen.reason == "release step 2.13 -> 2.14: torch 2.14.1 in its own environment"
    # unresolved (the wheels could not be read): the step's head as the event names it
    assert decide_environment(step, installed_version=INSTALLED).torch_version == "2.14"


def test_a_release_that_is_the_installed_torch_is_named_so() -> None:
    step = event("periodic", base_ref="2.12", head_ref="2.13")
    chosen = decide_environment(step, installed_version=INSTALLED, release_version="2.13.0")
    assert (chosen.kind, chosen.torch_version, chosen.torch_build) == (
        "installed",
        "2.13.0",
        INSTALLED,
    )
    assert chosen.describe() == f"torch {INSTALLED} (the installed torch)"


def test_a_nightly_runs_on_the_installed_torch() -> None:
    chosen = decide_environment(event("nightly", head_sha="c" * 40), installed_version=INSTALLED)
    assert (chosen.kind, chosen.reason) == (
        "installed",
        "nightly run of the whole universe on the installed torch",
    )


@pytest.mark.parametrize("fields", [PR, PUSH], ids=["pull_request", "push"])
def test_a_change_with_a_checkout_runs_in_an_overlay_of_its_head(fields: dict[str, Any]) -> None:
    kind = "pull_request" if "pr_number" in fields else "push"
    head = fields.get("head_sha") or fields["after_sha"]
    chosen = decide_environment(
        event(kind, **fields),
        installed_version=INSTALLED,
        checkout=True,
        changed_paths=[
            "torch/_refs/__init__.py",
            "aten/src/ATen/native/BinaryOps.cpp",
            "aten/src/ATen/native/native_functions.yaml",
            "torch/csrc/Module.cpp",
        ],
    )
    assert (chosen.kind, chosen.head_sha, chosen.torch_version) == ("overlay", head, None)
    assert chosen.compiled_not_covered == [
        "aten/src/ATen/native/BinaryOps.cpp",
        "aten/src/ATen/native/native_functions.yaml",
        "torch/csrc/Module.cpp",
    ]
    assert chosen.reason == (
        f"the head's torch/**.py laid over torch {INSTALLED}; 3 compiled file(s) changed that "
        "no overlay can test"
    )
    based = decide_environment(
        event(kind, **fields), installed_version=INSTALLED, checkout=True, overlay_base="2.14.1"
    )
    assert (based.torch_version, based.compiled_not_covered) == ("2.14.1", [])


def test_a_configured_head_wheel_wins_over_the_overlay() -> None:
    wheel = head_wheel_for(
        "https://ci.example/pr-{pr}/torch-{sha}.whl", event("pull_request", **PR)
    )
    assert wheel == f"https://ci.example/pr-5/torch-{'h' * 40}.whl"
    chosen = decide_environment(
        event("pull_request", **PR),
        installed_version=INSTALLED,
        checkout=True,
        head_wheel=wheel,
        changed_paths=["aten/src/ATen/native/BinaryOps.cpp"],
    )
    assert (chosen.kind, chosen.head_wheel, chosen.compiled_not_covered) == (
        "head-wheel",
        wheel,
        [],
    )
    assert head_wheel_for(None, event("pull_request", **PR)) is None


@pytest.mark.parametrize("fields", [PR, PUSH], ids=["pull_request", "push"])
def test_no_checkout_and_no_head_wheel_runs_nothing(fields: dict[str, Any]) -> None:
    kind = "pull_request" if "pr_number" in fields else "push"
    chosen = decide_environment(event(kind, **fields), installed_version=INSTALLED)
    assert (chosen.kind, chosen.runs, chosen.reason) == ("none", False, NO_WAY)
    assert chosen.describe() == f"nothing run: {NO_WAY}"
    smoke = decide_environment(
        event(kind, **fields), installed_version=INSTALLED, smoke_untested=True
    )
    assert (smoke.kind, smoke.smoke, smoke.runs) == ("installed", True, True)
    assert smoke.describe().endswith("smoke run only, the change itself is not tested")


@pytest.mark.parametrize(
    ("path", "compiled"),
    [
        ("aten/src/ATen/native/Foo.cpp", True),
        ("c10/core/Device.h", True),
        ("torch/csrc/autograd/init.cpp", True),
        ("tools/autograd/derivatives.yaml", True),
        ("CMakeLists.txt", True),
        ("torch/_refs/__init__.py", False),
        ("test/test_ops.py", False),
        ("torch/nn/functional.py", False),
    ],
)
def test_which_changes_need_a_build(path: str, compiled: bool) -> None:
    assert is_compiled(path) is compiled


def test_a_pull_request_without_checkout_is_planned_as_nothing_to_run() -> None:
    """The plan of such an event has no shard and names why (no selection is made)."""
    backend = get_backend("spyre")
    planned = plan_event(event("pull_request", **PR), backend=backend, specs=[])
    assert (planned.shards, planned.selection, planned.upstream.kind) == ([], None, "none")
    assert planned.stored()["plan"]["upstream_under_test"]["reason"] == NO_WAY
    assert (planned.base_rev, planned.head_rev) == ("b" * 40, "h" * 40)


def test_a_head_missing_from_the_checkout_runs_nothing_and_says_so(overlay_upstream: Any) -> None:
    missing = {"pr_number": 5, "base_sha": overlay_upstream.base, "head_sha": "f" * 40}
    planned = plan_event(
        event("pull_request", **missing),
        backend=get_backend("spyre"),
        specs=[],
        upstream=overlay_upstream.repo.path,
    )
    assert (planned.shards, planned.upstream.kind) == ([], "none")
    assert planned.upstream.reason.startswith(
        "the upstream checkout cannot serve head ffffffffffff (unknown revision"
    )
    assert planned.upstream.reason.endswith(
        "and no head wheel (RELAY_HEAD_WHEEL): the change cannot be tested here"
    )
