"""The downstream registry: the allowlist from a file or a URL (with the policy file), reloaded
when either changes; a broken reload keeps the last good set and says why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fanout.registry import Registry, RegistryError


def test_file_reloaded_on_change_and_broken_reload_keeps_the_last_good(tmp_path: Path) -> None:
    allow, policy = tmp_path / "allow.yml", tmp_path / "policy.yml"
    allow.write_text("L2:\n  - org/a\n")
    policy.write_text("")
    registry = Registry(allowlist_source=str(allow), policy_path=policy, interval=0)
    first = registry.current()
    assert [d.repo for d in first.downstreams] == ["org/a"] and first.error is None

    allow.write_text("L2:\n  - org/a\n  - org/b\n")
    assert [d.repo for d in registry.current().downstreams] == ["org/a", "org/b"]

    policy.write_text("downstreams:\n  org/b:\n    drafts: maybe\n")
    broken = registry.current()
    assert [d.repo for d in broken.downstreams] == ["org/a", "org/b"]
    assert broken.error == f"{policy}:3: org/b.drafts: expected true or false"

    policy.write_text("downstreams:\n  org/b:\n    drafts: false\n")
    fixed = registry.current()
    assert fixed.error is None and fixed.get("org/b") is not None
    assert fixed.get("org/b").policy.drafts is False  # type: ignore[union-attr]


def test_a_broken_file_at_start_is_an_error_with_lines(tmp_path: Path) -> None:
    allow = tmp_path / "allow.yml"
    allow.write_text("L2:\n  - nope\n")
    with pytest.raises(RegistryError) as info:
        Registry(allowlist_source=str(allow))
    assert info.value.problems == [f"{allow}:2: L2: 'nope' is not an owner/name repository"]
    with pytest.raises(RegistryError) as missing:
        Registry(allowlist_source=str(tmp_path / "none.yml"))
    assert missing.value.problems == [
        f"{tmp_path / 'none.yml'}:1: cannot read: No such file or directory"
    ]


def test_allowlist_by_url_with_etag(fake_github: Any) -> None:
    path = "/pytorch/pytorch/main/.github/allowlist.yml"
    fake_github.files[path] = "L1:\n  - org/a\n"
    url = fake_github.url + path
    registry = Registry(allowlist_source=url, interval=0)
    assert [d.repo for d in registry.current().downstreams] == ["org/a"]
    fetches = [c for c in fake_github.calls if c.path == path]
    assert [c.status for c in fetches] == [200, 304]  # unchanged: GitHub's 304 for our ETag
    fake_github.files[path] = "L1:\n  - org/a\nL4:\n  - org/gate\n"
    assert [d.repo for d in registry.current().downstreams] == ["org/a", "org/gate"]
    del fake_github.files[path]
    gone = registry.current()
    assert gone.error == f"{url}:1: cannot fetch: HTTP 401"  # no such file, no token
    assert [d.repo for d in gone.downstreams] == ["org/a", "org/gate"]


def test_a_url_reload_in_the_background_never_waits_on_the_fetch(fake_github: Any) -> None:
    """The web service's registry: a slow allowlist URL is fetched by a thread of its own; the
    request that found the set stale gets the last good set at once."""
    import time

    path = "/pytorch/pytorch/main/.github/allowlist.yml"
    fake_github.files[path] = "L1:\n  - org/a\n"
    url = fake_github.url + path
    registry = Registry(allowlist_source=url, interval=0, background=True)
    fake_github.files[path] = "L1:\n  - org/a\nL4:\n  - org/gate\n"
    fake_github.file_delay[path] = 1.5
    started = time.monotonic()
    assert [d.repo for d in registry.current().downstreams] == ["org/a"]  # the last good set
    assert time.monotonic() - started < 0.5  # not the 1.5 s fetch
    deadline = time.monotonic() + 10
    while registry.current().get("org/gate") is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [d.repo for d in registry.current().downstreams] == ["org/a", "org/gate"]
