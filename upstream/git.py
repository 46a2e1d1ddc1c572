"""A PyTorch git checkout as an upstream source: revisions are commits, tags and branches."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path

from upstream.base import (
    GIT_LAYOUT,
    FileChange,
    FileStatus,
    NotAPytorchCheckoutError,
    ResolvedRevision,
    SourceKind,
    SourceLayout,
    UnknownRevisionError,
    UpstreamError,
    UpstreamFileNotFoundError,
)

# Paths that every PyTorch checkout has; a repository without them is something else.
CHECKOUT_MARKERS = ("torch/__init__.py", "aten/src/ATen/native/native_functions.yaml")

_STATUS = {"A": FileStatus.added, "D": FileStatus.removed, "M": FileStatus.modified,
           "T": FileStatus.modified}


class GitCheckout:
    """Reads revisions of a PyTorch checkout through the ``git`` command line.

    Nothing is checked out or modified: files are read from the object database, so any
    commit, tag (``v2.13.0``) or branch (``release/2.14``, ``viable/strict``, also found as
    ``origin/<name>``) can be used whatever the work tree holds.
    """

    kind: SourceKind = "git"
    layout: SourceLayout = GIT_LAYOUT

    def __init__(self, path: str | Path, *, git: str = "git") -> None:
        self.path = Path(path).expanduser()
        self._git = git
        if not self.path.is_dir():
            raise NotAPytorchCheckoutError(f"{self.path}: no such directory (expected a PyTorch checkout)")
        try:
            top = self._run("rev-parse", "--show-toplevel").strip()
        except UpstreamError as exc:
            raise NotAPytorchCheckoutError(f"{self.path}: not a git work tree ({exc})") from None
        self.path = Path(top)
        missing = [m for m in CHECKOUT_MARKERS if not (self.path / m).is_file()]
        if missing:
            raise NotAPytorchCheckoutError(
                f"{self.path}: not a PyTorch checkout (missing {', '.join(missing)})"
            )

    def __repr__(self) -> str:
        return f"GitCheckout({str(self.path)!r})"

    def _run(self, *args: str, input_bytes: bytes | None = None) -> str:
        return self._run_bytes(*args, input_bytes=input_bytes).decode("utf-8", "replace")

    def _run_bytes(self, *args: str, input_bytes: bytes | None = None) -> bytes:
        proc = subprocess.run(
            [self._git, "-C", str(self.path), *args],
            input=input_bytes,
            capture_output=True,
            check=False,
        )
        if proc.returncode != 0:
            message = proc.stderr.decode("utf-8", "replace").strip() or f"exit {proc.returncode}"
            raise UpstreamError(f"git {' '.join(args[:2])}: {message}")
        return proc.stdout

    def resolve(self, revision: str) -> ResolvedRevision:
        if not revision or revision.startswith("-"):
            raise UnknownRevisionError(f"{revision!r} is not a revision")
        for candidate in (revision, f"origin/{revision}"):
            proc = subprocess.run(
                [self._git, "-C", str(self.path), "rev-parse", "--verify", "--quiet",
                 f"{candidate}^{{commit}}"],
                capture_output=True, text=True, check=False,
            )
            if proc.returncode == 0:
                sha = proc.stdout.strip()
                detail = f"commit {sha}" + ("" if candidate == revision else f" via {candidate}")
                return ResolvedRevision(kind="git", requested=revision, resolved=sha,
                                        detail=detail, location=str(self.path))
        raise UnknownRevisionError(
            f"unknown revision {revision!r} in {self.path} (not a commit, tag or branch)"
        )

    def list_files(self, revision: ResolvedRevision, prefix: str = "") -> list[str]:
        args = ["ls-tree", "-r", "--name-only", "-z", revision.resolved]
        if prefix:
            args += ["--", prefix]
        out = self._run(*args)
        return sorted(p for p in out.split("\0") if p and p.startswith(prefix))

    def read_file(self, revision: ResolvedRevision, path: str) -> bytes:
        found = self.read_files(revision, [path])
        if path not in found:
            raise UpstreamFileNotFoundError(f"{path}: not in {revision.label}")
        return found[path]

    def read_files(self, revision: ResolvedRevision, paths: Iterable[str]) -> dict[str, bytes]:
        wanted = list(dict.fromkeys(paths))
        if not wanted:
            return {}
        request = "".join(f"{revision.resolved}:{p}\n" for p in wanted).encode()
        out = self._run_bytes("cat-file", "--batch", input_bytes=request)
        result: dict[str, bytes] = {}
        pos = 0
        for path in wanted:
            end = out.index(b"\n", pos)
            header = out[pos:end].split()
            pos = end + 1
            if len(header) == 3 and header[1] in (b"blob",):
                size = int(header[2])
                result[path] = out[pos:pos + size]
                pos += size + 1
            elif len(header) == 3:  # a tree or another object: skip its body
                pos += int(header[2]) + 1
            # "<name> missing": nothing follows
        return result

    def changed_files(self, base: ResolvedRevision, head: ResolvedRevision) -> list[FileChange]:
        out = self._run("diff", "--name-status", "--no-renames", "-z", base.resolved,
                        head.resolved)
        fields = [f for f in out.split("\0") if f]
        changes = []
        for status, path in zip(fields[::2], fields[1::2], strict=True):
            changes.append(FileChange(path=path, status=_STATUS.get(status[0], FileStatus.modified)))
        return sorted(changes, key=lambda c: c.path)
