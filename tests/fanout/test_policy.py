"""The policy file (our extension of CRCR's allowlist) and each of its admission filters."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from fanout import policy
from fanout.model import Subject
from fanout.role import subject_of
from wire.crcr import allowlist
from wire.github.events import normalize, push_files

ALLOW = """
L1:
  - org/events-only
L2:
  - org/plain
  - org/narrow: {events: [push], oncalls: [a]}
L3:
  spyre:
    org/device: [b]
L4:
  - org/gate
"""


def _downstreams(policy_text: str) -> dict[str, Any]:
    entries = allowlist.parse(ALLOW, path="allow.yml")
    return {d.repo: d for d in policy.parse(policy_text, entries=entries, path="policy.yml")}


def _pr(example_events: Path, name: str = "opened", **changes: Any) -> tuple[Subject, dict]:
    payload = json.loads((example_events / f"pull_request.{name}.json").read_text())
    payload = copy.deepcopy(payload)
    pr = payload["pull_request"]
    for key, value in changes.items():
        if key == "base_ref":
            pr["base"]["ref"] = value
        elif key == "labels":
            pr["labels"] = [{"name": n} for n in value]
        else:
            pr[key] = value
    event = normalize(event="pull_request", payload=payload, delivery_id="d1")
    return subject_of(event, None), payload


def test_defaults_are_crcr(example_events: Path) -> None:
    ds = _downstreams("")
    subject, _ = _pr(example_events)
    got = {repo: policy.admit(d, subject).admitted for repo, d in ds.items()}
    # every level gets PR events; the allowlist's own event list still narrows
    assert got == {
        "org/events-only": True,
        "org/plain": True,
        "org/narrow": False,
        "org/device": True,
        "org/gate": True,
    }
    assert (
        policy.admit(ds["org/narrow"], subject).reason == "the allowlist gives org/narrow only push"
    )


POLICY = """
version: 1
defaults:
  start_timeout: 1800
downstreams:
  org/plain:
    events: [pull_request]
    actions: [opened, synchronize]
    branches: [main, "release/*"]
    drafts: false
    author_trust: trusted
    paths: ["aten/**", "torch/*.py"]
    nightly: "0 2 * * *"
    max_in_flight: 3
  org/gate:
    merged_only: true
"""


@pytest.mark.parametrize(
    ("changes", "name", "admitted", "reason"),
    [
        (
            {
                "author_association": "MEMBER",
                "head": {"repo": {"full_name": "pytorch/pytorch"}, "sha": "a" * 40, "ref": "x"},
            },
            "opened",
            True,
            "paths checked at send",
        ),
        (
            {"author_association": "MEMBER"},
            "opened",
            False,
            "a pull request from a fork waits for a maintainer's ciflow/crcr/* label",
        ),
        (
            {"author_association": "MEMBER", "labels": ["ciflow/crcr/spyre"]},
            "opened",
            True,
            "paths checked at send",
        ),
        (
            {"author_association": "MEMBER", "labels": ["ciflow/crcr/x"], "draft": True},
            "opened",
            False,
            "the policy skips draft pull requests",
        ),
        (
            {"labels": ["ciflow/crcr/x"], "base_ref": "feature/x"},
            "opened",
            False,
            "branch 'feature/x' matches none of main, release/*",
        ),
        (
            {"labels": ["ciflow/crcr/x"], "base_ref": "release/2.14"},
            "opened",
            True,
            "paths checked at send",
        ),
        (
            {"labels": ["ciflow/crcr/x"]},
            "closed",
            False,
            "pull_request action 'closed' is not in the policy's actions",
        ),
    ],
)
def test_each_pull_request_filter(
    example_events: Path, changes: dict, name: str, admitted: bool, reason: str
) -> None:
    ds = _downstreams(POLICY)
    subject, _ = _pr(example_events, name, **changes)
    decision = policy.admit(ds["org/plain"], subject)
    assert (decision.admitted, decision.reason) == (admitted, reason)


def test_paths_once_files_are_known(example_events: Path) -> None:
    ds = _downstreams(POLICY)
    subject, _ = _pr(example_events, labels=["ciflow/crcr/x"])
    hit = subject_of(subject.event, ["docs/x.md", "torch/functional.py"])
    miss = subject_of(subject.event, ["docs/x.md", "torch/nn/x.py"])
    assert policy.admit(ds["org/plain"], hit).reason == "admitted"
    assert policy.admit(ds["org/plain"], miss).reason == (
        "no changed file matches aten/**, torch/*.py"
    )


def test_merged_only(example_events: Path) -> None:
    ds = _downstreams(POLICY)
    opened, _ = _pr(example_events, "opened")
    merged, _ = _pr(example_events, "closed", merged=True)
    assert (
        policy.admit(ds["org/gate"], opened).reason == "the policy takes merged pull requests only"
    )
    assert policy.admit(ds["org/gate"], merged).admitted


def test_labeled_backfills_only_l3_of_that_device(example_events: Path) -> None:
    ds = _downstreams("")
    subject, _ = _pr(example_events, "labeled")
    label = next(lb for lb in subject.event.labels if lb.startswith("ciflow/crcr/"))
    got = {repo for repo, d in ds.items() if policy.admit(d, subject).admitted}
    assert got == ({"org/device"} if label == "ciflow/crcr/spyre" else set())


def test_push_branches_and_files(example_events: Path) -> None:
    ds = _downstreams(
        "downstreams:\n  org/narrow:\n    branches: [main]\n    paths: ['torch/**']\n"
    )
    payload = json.loads((example_events / "push.main.json").read_text())
    event = normalize(event="push", payload=payload, delivery_id="p1")
    files = push_files(payload)
    subject = subject_of(event, files)
    decision = policy.admit(ds["org/narrow"], subject)
    touches_torch = any(f.startswith("torch/") for f in files or [])
    assert decision.admitted is touches_torch
    other = subject_of(event.model_copy(update={"ref": "refs/heads/dev"}), files)
    assert policy.admit(ds["org/narrow"], other).reason == "branch 'dev' matches none of main"


def test_policy_values_reach_the_downstream() -> None:
    ds = _downstreams(POLICY)
    plain = ds["org/plain"].policy
    assert (plain.start_timeout, plain.max_in_flight, plain.nightly, plain.line) == (
        1800,
        3,
        "0 2 * * *",
        6,
    )
    assert ds["org/gate"].policy.start_timeout == 1800  # the defaults apply to everyone


def test_every_policy_problem_with_its_line() -> None:
    text = (
        "version: 2\n"
        "downstreams:\n"
        "  org/unknown: {}\n"
        "  org/plain:\n"
        "    drafts: sometimes\n"
        "    nightly: '0 2 * *'\n"
        "    run_timeout: -5\n"
        "    author_trust: everyone\n"
        "    target: lambda\n"
        "    events: [deploy]\n"
        "    colour: red\n"
        "extra: 1\n"
    )
    with pytest.raises(policy.PolicyError) as info:
        policy.parse(text, entries=allowlist.parse(ALLOW), path="p.yml")
    assert info.value.problems == [
        "p.yml:1: version: only 1 is known",
        "p.yml:3: 'org/unknown' is not in the allowlist (the policy says how a listed downstream is served)",
        "p.yml:5: org/plain.drafts: expected true or false",
        "p.yml:6: org/plain.nightly: '0 2 * *' is not a crontab of five fields (minute hour day month weekday)",
        "p.yml:7: org/plain.run_timeout: expected a positive number of seconds or jobs",
        "p.yml:8: org/plain.author_trust: expected 'any' or 'trusted'",
        "p.yml:9: org/plain.target: expected 'github' or 'runner'",
        "p.yml:10: org/plain.events: unknown events ['deploy']",
        "p.yml:11: org/plain.colour: unknown key (expected one of actions, author_trust, branches, drafts, events, max_in_flight, merged_only, nightly, paths, repository_id, run_timeout, start_timeout, target, trust_label_prefix, workflow)",
        "p.yml:12: unknown key 'extra' (expected version, defaults, downstreams)",
    ]


@pytest.mark.parametrize(
    ("glob", "path", "hit"),
    [
        ("torch/*.py", "torch/functional.py", True),
        ("torch/*.py", "torch/nn/x.py", False),
        ("aten/**", "aten/src/ATen/native/x.cpp", True),
        ("**/*.yaml", "aten/src/ATen/native/native_functions.yaml", True),
        ("**/*.yaml", "top.yaml", True),
        ("release/*", "release/2.14", True),
        ("release/*", "release/2.14/x", False),
        ("ma?n", "main", True),
    ],
)
def test_globs(glob: str, path: str, hit: bool) -> None:
    assert bool(policy.glob_regex(glob).match(path)) is hit


def test_a_check_run_rerun_goes_to_its_downstream_only(example_events: Path) -> None:
    ds = _downstreams("")
    payload = json.loads((example_events / "check_run.rerequested.json").read_text())
    event = normalize(event="check_run", payload=payload, delivery_id="r1")
    event = event.model_copy(update={"check_name": "crcr/org/gate/upstream-tests"})
    subject = subject_of(event, None)
    got = {repo: policy.admit(d, subject).reason for repo, d in ds.items()}
    assert got["org/gate"] == "re-run of crcr/org/gate/upstream-tests"
    assert got["org/plain"] == "the re-run of 'crcr/org/gate/upstream-tests' is not for org/plain"
    assert sum(policy.admit(d, subject).admitted for d in ds.values()) == 1
