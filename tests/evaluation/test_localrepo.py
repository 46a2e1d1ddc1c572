"""The local upstream repository (evaluation.localrepo) from a small fake torch package: one
commit of its Python files and the wheel's YAML at their checkout paths, made once per build,
the same SHA on every host; a file committed on a branch changes only that file."""

from __future__ import annotations

import subprocess
from pathlib import Path

from evaluation.localrepo import commit_file, local_upstream, read_base
from upstream import GitCheckout


def _fake_wheel(root: Path) -> tuple[Path, Path]:
    torch = root / "site" / "torch"
    (torch / "nn" / "__pycache__").mkdir(parents=True)
    (torch / "__init__.py").write_text("VERSION = 1\n")
    (torch / "nn" / "functional.py").write_text("def relu(x):\n    return x\n")
    (torch / "nn" / "__pycache__" / "functional.cpython-311.pyc").write_bytes(b"\0")
    (torch / "_C.so").write_bytes(b"\0ELF")
    torchgen = root / "site" / "torchgen"
    (torchgen / "packaged" / "ATen" / "native").mkdir(parents=True)
    (torchgen / "packaged" / "ATen" / "native" / "native_functions.yaml").write_text(
        "- func: add\n"
    )
    return torch, torchgen


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def test_the_repository_holds_the_wheels_python_files_in_one_commit(tmp_path: Path) -> None:
    torch, torchgen = _fake_wheel(tmp_path)
    repo = local_upstream(
        tmp_path / "a", torch_dir=torch, torch_build="9.9+gitabc", torchgen_dir=torchgen
    )
    files = set(_git(repo.path, "ls-tree", "-r", "--name-only", repo.base).split())
    assert files == {
        "torch/__init__.py",
        "torch/nn/functional.py",
        "aten/src/ATen/native/native_functions.yaml",
    }
    assert _git(repo.path, "rev-list", "--count", "HEAD").strip() == "1"
    GitCheckout(repo.path)  # recognised as a PyTorch checkout
    again = local_upstream(
        tmp_path / "a", torch_dir=torch, torch_build="9.9+gitabc", torchgen_dir=torchgen
    )
    assert again == repo
    elsewhere = local_upstream(
        tmp_path / "b", torch_dir=torch, torch_build="9.9+gitabc", torchgen_dir=torchgen
    )
    assert elsewhere.base == repo.base  # reproducible commits
    other = local_upstream(
        tmp_path / "a", torch_dir=torch, torch_build="9.9+gitdef", torchgen_dir=torchgen
    )
    assert other.path != repo.path  # keyed by the torch build


def test_a_branch_changes_only_its_file(tmp_path: Path) -> None:
    torch, torchgen = _fake_wheel(tmp_path)
    repo = local_upstream(tmp_path / "r", torch_dir=torch, torch_build="9.9", torchgen_dir=torchgen)
    text = read_base(repo, "torch/nn/functional.py")
    sha = commit_file(
        repo,
        branch="catch/m001",
        path="torch/nn/functional.py",
        content=text.replace("return x", "return None"),
        message="m001",
    )
    assert _git(repo.path, "rev-parse", "catch/m001").strip() == sha
    assert _git(repo.path, "diff", "--name-only", repo.base, sha).split() == [
        "torch/nn/functional.py"
    ]
    assert _git(repo.path, "rev-parse", "HEAD").strip() == repo.base  # main and the work tree stay
    assert (repo.path / "torch/nn/functional.py").read_text() == text
