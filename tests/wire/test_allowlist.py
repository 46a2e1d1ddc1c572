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
        "L1: 'not-a-repo' is not an owner/name repository",
        "org/b: unknown keys ['x']",
        "org/b: unknown events ['deploy']",
        "unknown level 'L9' (expected one of L1, L2, L3, L4)",
        "org/a appears in L1 and L2",
    ]
    assert str(info.value).startswith("allow.yml: ")
