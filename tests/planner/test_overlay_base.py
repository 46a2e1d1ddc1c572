"""The release an overlay lays a head over: the newest ``vX.Y.Z`` tag the merge base of
base..head descends from in the checkout (a tiny local git repository), or the configured one."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from planner.environment import decide_environment, overlay_base_for
from upstream.overlay import OverlayError, base_release
from wire.github.events import UpstreamEvent

INSTALLED = "2.13.0+gitabcdef012345"


class Repo:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir()
        self.git("init", "-q", "-b", "main")
        self.git("config", "user.email", "t@example.com")
        self.git("config", "user.name", "t")

    def git(self, *args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(self.path), *args], check=True, capture_output=True, text=True
        ).stdout.strip()

    def commit(self, name: str, *tags: str) -> str:
        (self.path / "torch").mkdir(exist_ok=True)
        (self.path / "torch" / f"{name}.py").write_text(f"NAME = {name!r}\n")
        self.git("add", "-A")
        self.git("commit", "-q", "-m", name)
        for tag in tags:
            self.git("tag", tag)
        return self.git("rev-parse", "HEAD")


@pytest.fixture
def history(tmp_path: Path) -> dict[str, Any]:
    """main: v2.9.0 -> v2.13.0 -> v2.14.0-rc1 -> fork; release/2.14 (off v2.13.0) holds v2.14.0;
    a feature branch off ``fork``; main then merges release/2.14 (v2.14.0 becomes an ancestor
    of main's tip, not of the feature's merge base)."""
    repo = Repo(tmp_path / "pytorch")
    repo.commit("one", "v2.9.0")
    repo.commit("two", "v2.13.0")
    repo.git("checkout", "-q", "-b", "release/2.14")
    repo.commit("release", "v2.14.0")
    repo.git("checkout", "-q", "main")
    repo.commit("three", "v2.14.0-rc1", "ciflow/trunk/123")
    fork = repo.commit("fork")
    repo.git("checkout", "-q", "-b", "feature")
    head = repo.commit("feature")
    repo.git("checkout", "-q", "main")
    repo.git("merge", "-q", "--no-edit", "release/2.14")
    tip = repo.git("rev-parse", "HEAD")
    return {"repo": repo, "fork": fork, "head": head, "tip": tip}


def test_the_base_is_the_newest_release_the_merge_base_descends_from(
    history: dict[str, Any],
) -> None:
    repo = history["repo"]
    # the pull request's base moved on (it merged v2.14.0), the head forked before: the merge
    # base is the fork, whose newest release ancestor is v2.13.0 (not v2.9.0 by text order, not
    # the release candidate, not v2.14.0 on its release branch)
    found = base_release(repo.path, history["tip"], history["head"])
    assert (found.version, found.merge_base) == ("2.13.0", history["fork"])
    assert (
        found.detail
        == f"v2.13.0, the newest release the merge base {history['fork'][:12]} descends from"
    )
    # a head that forked after the merge: v2.14.0 is now an ancestor
    repo.git("checkout", "-q", "-b", "later", history["tip"])
    later = repo.commit("later")
    assert base_release(repo.path, history["tip"], later).version == "2.14.0"


def test_no_release_ancestor_keeps_the_installed_torch_and_says_why(tmp_path: Path) -> None:
    repo = Repo(tmp_path / "pytorch")
    base = repo.commit("base", "v2.14.0-rc1")
    head = repo.commit("head")
    found = base_release(repo.path, base, head)
    assert found.version is None
    chosen, note = overlay_base_for(None, repo.path, (base, head))
    assert chosen is None
    assert (
        note
        == f"the installed torch (no release tag (vX.Y.Z) is an ancestor of the merge base {base[:12]})"
    )
    with pytest.raises(OverlayError, match="no merge base"):
        base_release(repo.path, base, "f" * 40)


def test_a_configured_base_wins_and_the_job_says_how_the_base_was_chosen(
    history: dict[str, Any],
) -> None:
    repo, revs = history["repo"], (history["tip"], history["head"])
    assert overlay_base_for("2.12.1", repo.path, revs) == (
        "2.12.1",
        "2.12.1, configured (RELAY_OVERLAY_BASE)",
    )
    assert overlay_base_for(None, None, revs) == (None, "")  # no checkout: nothing to read
    version, note = overlay_base_for(None, repo.path, revs)
    event = UpstreamEvent(
        delivery_id="d-1",
        event="pull_request",
        repo="pytorch/pytorch",
        pr_number=5,
        base_sha=history["tip"],
        head_sha=history["head"],
    )
    chosen = decide_environment(
        event,
        installed_version=INSTALLED,
        checkout=True,
        overlay_base=version,
        overlay_base_note=note,
    )
    assert (chosen.kind, chosen.torch_version) == ("overlay", "2.13.0")
    assert chosen.reason == (
        "the head's torch/**.py laid over torch 2.13.0 (base: v2.13.0, the newest release the "
        f"merge base {history['fork'][:12]} descends from)"
    )
