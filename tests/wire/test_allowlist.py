"""CRCR's allowlist grammar (``.github/allowlist.yml``): every documented shape, every problem."""

from __future__ import annotations

import pytest

from wire.crcr import allowlist
from wire.crcr.allowlist import AllowlistEntry, AllowlistError, Level


def test_parses_every_documented_shape(allowlist_sample: str) -> None:
    entries = allowlist.parse(allowlist_sample)
    assert entries == [
        AllowlistEntry("org/repo-a", Level.L1),
        AllowlistEntry("org/repo-b", Level.L1, oncalls=("oncall1", "oncall2")),
        AllowlistEntry(
            "org/repo-c", Level.L2, oncalls=("someone",), events=("pull_request", "nightly")
        ),
        AllowlistEntry("org/repo-d", Level.L3, oncalls=("oncall3",), device="some-device"),
    ]


def test_all_problems_at_once() -> None:
    text = "L1:\n  - org/a\n  - not-a-repo\nL2:\n  - org/a\n  - org/b: {events: [deploy], x: 1}\nL9: []\n"
    with pytest.raises(AllowlistError) as info:
        allowlist.parse(text, path="allow.yml")
    assert info.value.problems == [
        "allow.yml:3: L1: 'not-a-repo' is not an owner/name repository",
        "allow.yml:6: org/b: unknown keys ['x']",
        "allow.yml:6: org/b: unknown events ['deploy']",
        "allow.yml:7: unknown level 'L9' (expected one of L1, L2, L3, L4)",
        "allow.yml:5: org/a appears in L1 (line 2) and L2",
    ]
    assert str(info.value).startswith("allow.yml:3: ")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("L1: [", "a.yml:1: not valid YAML: expected the node content, but found '<stream end>'"),
        ("- org/a\n", "a.yml:1: the top level must be a mapping of levels L1-L4"),
        ("L2:\n  - org/a\nL1: 3\n", "a.yml:3: L1: expected a list of repositories"),
        ("L3:\n  dev:\n    - [org/a]\n", "a.yml:3: L3: cannot read entry ['org/a']"),
        ("L2:\n  - org/a: {events: push}\n", "a.yml:2: org/a: events must be a list"),
    ],
)
def test_each_problem_names_its_line(text: str, problem: str) -> None:
    with pytest.raises(AllowlistError) as info:
        allowlist.parse(text, path="a.yml")
    assert info.value.problems == [problem]


def test_entries_know_their_line(allowlist_sample: str) -> None:
    assert [e.line for e in allowlist.parse(allowlist_sample)] == [3, 4, 6, 9]
