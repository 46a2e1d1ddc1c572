"""A local upstream git repository made from a torch build's own Python files, so that faults
can be committed on branches and sent to the relay as pull requests with real SHAs
(``RELAY_UPSTREAM_PATH`` names it).

:func:`local_upstream` makes, once per torch build, ``<var>/eval/upstream-<key>/``: a git work
tree whose single commit (branch ``main``) holds every ``torch/**.py`` of the torch package
given (the base wheel's), beside the wheel's copies of ``native_functions.yaml`` and
``derivatives.yaml`` at their checkout paths (``torchgen/packaged/``: a PyTorch checkout is
recognised by them, and the change facts read them). The overlay of a branch of this repository
over that same torch lays over exactly the files the branch changed.

:func:`commit_file` commits one changed file on a new branch from the base without touching the
work tree (plumbing through a temporary index), so makers of different branches never race.
Everything goes through plain ``git`` subprocesses; an OS lock serialises makers of one
repository and a marker written last says it is complete.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from upstream.headenv import locked

REPO_FORMAT = 1
MARKER = "relay-local-upstream"  # inside .git: written when the base commit exists
BRANCH = "main"
#: checkout path -> path inside the ``torchgen`` package of the same wheel
YAML_FILES = {
    "aten/src/ATen/native/native_functions.yaml": "packaged/ATen/native/native_functions.yaml",
    "tools/autograd/derivatives.yaml": "packaged/autograd/derivatives.yaml",
}
#: commits are reproducible: the same build gives the same SHAs on every host
IDENTITY = {
    "GIT_AUTHOR_NAME": "relay",
    "GIT_AUTHOR_EMAIL": "relay@localhost",
    "GIT_COMMITTER_NAME": "relay",
    "GIT_COMMITTER_EMAIL": "relay@localhost",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+0000",
}


class LocalRepoError(Exception):
    """git failed while making or extending the local upstream repository."""


@dataclass(frozen=True)
class LocalUpstream:
    path: Path  # the work tree (RELAY_UPSTREAM_PATH)
    base: str  # the commit holding the base wheel's files
    torch_build: str


def git(
    repo: Path, *args: str, data: bytes | None = None, env: dict[str, str] | None = None
) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), *args],
        input=data,
        capture_output=True,
        check=False,
        env={**os.environ, **IDENTITY, **(env or {})},
    )
    if proc.returncode != 0:
        message = proc.stderr.decode("utf-8", "replace").strip() or f"exit {proc.returncode}"
        raise LocalRepoError(f"git {' '.join(args[:2])}: {message}")
    return proc.stdout.decode("utf-8", "replace")


def repo_dir(root: Path, torch_build: str) -> Path:
    key = hashlib.sha256(f"{REPO_FORMAT}\0{torch_build}".encode()).hexdigest()[:12]
    return Path(root).absolute() / f"upstream-{key}"


def local_upstream(
    root: Path, *, torch_dir: Path, torch_build: str, torchgen_dir: Path | None = None
) -> LocalUpstream:
    """The repository of ``torch_dir``'s Python files under ``root`` (made once per build)."""
    path = repo_dir(root, torch_build)
    with locked(path.parent / f".{path.name}.lock"):
        marker = path / ".git" / MARKER
        if marker.is_file():
            return LocalUpstream(path, marker.read_text(encoding="utf-8").strip(), torch_build)
        if path.exists():
            shutil.rmtree(path)  # an unfinished one
        path.mkdir(parents=True)
        _copy_tree(torch_dir, path / "torch")
        if torchgen_dir is not None:
            for target, source in YAML_FILES.items():
                if (torchgen_dir / source).is_file():
                    (path / target).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(torchgen_dir / source, path / target)
        git(path, "init", "--quiet", "--initial-branch", BRANCH)
        git(path, "add", "--all")
        git(
            path,
            "commit",
            "--quiet",
            "--no-verify",
            "-m",
            f"torch {torch_build}: the wheel's Python files",
        )
        base = git(path, "rev-parse", "HEAD").strip()
        marker.write_text(base + "\n", encoding="utf-8")
        return LocalUpstream(path, base, torch_build)


def _copy_tree(source: Path, target: Path) -> None:
    """Every ``*.py`` under ``source`` (no bytecode, no binaries) into ``target``."""
    for folder, dirs, files in os.walk(source):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel = Path(folder).relative_to(source)
        for name in sorted(files):
            if name.endswith(".py") and not Path(folder, name).is_symlink():
                (target / rel).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(Path(folder, name), target / rel / name)


def commit_file(repo: LocalUpstream, *, branch: str, path: str, content: str, message: str) -> str:
    """A commit on ``branch`` (made or moved) whose parent is the base and which changes only
    ``path`` to ``content``; its SHA. The work tree and ``main`` are left alone."""
    blob = git(repo.path, "hash-object", "-w", "--stdin", data=content.encode("utf-8")).strip()
    with tempfile.TemporaryDirectory(prefix="relay-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(repo.path, "read-tree", repo.base, env=env)
        mode = "100644"
        git(repo.path, "update-index", "--cacheinfo", f"{mode},{blob},{path}", env=env)
        tree = git(repo.path, "write-tree", env=env).strip()
    sha = git(repo.path, "commit-tree", tree, "-p", repo.base, "-m", message).strip()
    git(repo.path, "update-ref", f"refs/heads/{branch}", sha)
    return sha


def read_base(repo: LocalUpstream, path: str) -> str:
    """``path``'s text at the base commit."""
    return git(repo.path, "show", f"{repo.base}:{path}")
