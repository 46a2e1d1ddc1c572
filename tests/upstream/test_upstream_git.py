"""GitCheckout on a generated PyTorch-layout repository: revisions, files, diffs, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from upstream import (
    FileStatus,
    GitCheckout,
    NotAPytorchCheckoutError,
    UnknownRevisionError,
    UpstreamFileNotFoundError,
    UpstreamSource,
    open_source,
)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory, release_trees: Any) -> Path:
    return release_trees.make_checkout(tmp_path_factory.mktemp("upstream") / "pytorch")


@pytest.fixture(scope="module")
def source(checkout: Path) -> GitCheckout:
    return GitCheckout(checkout)


def test_is_an_upstream_source(source: GitCheckout, checkout: Path) -> None:
    assert isinstance(source, UpstreamSource)
    assert isinstance(open_source(checkout), GitCheckout)


@pytest.mark.parametrize("revision", ["v2.13.0", "viable/strict", "main"])
def test_tags_and_branches_resolve_to_the_base_commit(source: GitCheckout, checkout: Path,
                                                      revision: str, release_trees: Any) -> None:
    rev = source.resolve(revision)
    assert rev.kind == "git"
    assert rev.resolved == release_trees.git(checkout, "rev-parse", "v2.13.0^{commit}")
    assert rev.requested == revision
    assert len(rev.resolved) == 40


def test_branch_with_slash_tag_and_short_sha_resolve(source: GitCheckout, checkout: Path, release_trees: Any) -> None:
    head_sha = release_trees.git(checkout, "rev-parse", "release/2.14")
    assert source.resolve("release/2.14").resolved == head_sha
    assert source.resolve("v2.14.0").resolved == head_sha
    assert source.resolve(head_sha[:10]).resolved == head_sha
    assert source.resolve("release/2.14").label == f"release/2.14 ({head_sha[:12]})"


def test_list_and_read_files_at_each_revision(source: GitCheckout, release_trees: Any) -> None:
    base, head = source.resolve("v2.13.0"), source.resolve("v2.14.0")
    assert source.list_files(base) == sorted(release_trees.BASE)
    assert source.list_files(head) == sorted(release_trees.HEAD)
    assert source.list_files(head, "torch/testing/") == sorted(
        p for p in release_trees.HEAD if p.startswith("torch/testing/"))
    assert source.read_file(base, release_trees.NATIVE).decode() == release_trees.BASE[release_trees.NATIVE]
    assert source.read_file(head, release_trees.NATIVE).decode() == release_trees.HEAD[release_trees.NATIVE]
    both = source.read_files(head, ["torch/new_module.py", "torch/old.py", "torch"])
    assert both == {"torch/new_module.py": release_trees.HEAD["torch/new_module.py"].encode()}


def test_reading_a_missing_file_says_where(source: GitCheckout) -> None:
    base = source.resolve("v2.13.0")
    with pytest.raises(UpstreamFileNotFoundError, match=r"torch/new_module.py: not in v2.13.0"):
        source.read_file(base, "torch/new_module.py")


def test_changed_files_come_from_git(source: GitCheckout, release_trees: Any) -> None:
    changes = source.changed_files(source.resolve("v2.13.0"), source.resolve("release/2.14"))
    assert {c.path: c.status.value for c in changes} == release_trees.EXPECTED_FILES
    assert [c.path for c in changes] == sorted(release_trees.EXPECTED_FILES)
    assert source.changed_files(source.resolve("main"), source.resolve("viable/strict")) == []
    back = source.changed_files(source.resolve("v2.14.0"), source.resolve("v2.13.0"))
    assert {c.path for c in back if c.status == FileStatus.added} == {"torch/old.py"}


@pytest.mark.parametrize("revision", ["v9.9.9", "release/9.9", "deadbeef" * 5, "-p", ""])
def test_unknown_revision_is_a_clear_error(source: GitCheckout, revision: str) -> None:
    with pytest.raises(UnknownRevisionError, match="revision"):
        source.resolve(revision)


def test_a_missing_path_is_not_a_checkout(tmp_path: Path) -> None:
    with pytest.raises(NotAPytorchCheckoutError, match="no such directory"):
        GitCheckout(tmp_path / "nope")


def test_a_plain_directory_is_not_a_checkout(tmp_path: Path) -> None:
    (tmp_path / "torch").mkdir()
    with pytest.raises(NotAPytorchCheckoutError, match="not a git work tree"):
        GitCheckout(tmp_path)


def test_a_git_repository_without_pytorch_layout_is_not_a_checkout(tmp_path: Path, release_trees: Any) -> None:
    release_trees.git(tmp_path, "init", "-q")
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("")
    with pytest.raises(NotAPytorchCheckoutError,
                       match=r"not a PyTorch checkout \(missing aten/src/ATen/native/native_functions.yaml\)"):
        GitCheckout(tmp_path)


def test_a_subdirectory_means_its_checkout(checkout: Path) -> None:
    assert GitCheckout(checkout / "torch" / "nn").path == checkout


def test_a_branch_known_only_on_the_remote_resolves_through_origin(checkout: Path,
                                                                   tmp_path: Path, release_trees: Any) -> None:
    clone = tmp_path / "clone"
    release_trees.git(tmp_path, "clone", "-q", str(checkout), str(clone))
    source = GitCheckout(clone)
    rev = source.resolve("release/2.14")
    assert rev.resolved == release_trees.git(checkout, "rev-parse", "release/2.14")
    assert rev.detail.endswith("via origin/release/2.14")
    assert source.resolve("v2.14.0").resolved == rev.resolved
