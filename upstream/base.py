"""The interface every upstream source implements, and the values it hands out.

An *upstream source* is where PyTorch's tree comes from: a git checkout (revisions are commits,
tags, branches) or released torch wheels (revisions are release versions). Callers first
``resolve`` a revision string to a :class:`ResolvedRevision` that names exactly what was used
(a commit sha, a wheel version and file), then list and read files at it, and ask the source for
the files that differ between two resolved revisions.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

SourceKind = Literal["git", "wheels"]


class UpstreamError(Exception):
    """Base class of every error an upstream source raises; the message is for a person."""


class UnknownRevisionError(UpstreamError):
    """The revision string names nothing in this source."""


class VersionNotFoundError(UpstreamError):
    """The package index does not offer a torch release matching the requested version."""


class NotAPytorchCheckoutError(UpstreamError):
    """The path given as a checkout is missing, not a git work tree, or lacks PyTorch's layout."""


class UpstreamFileNotFoundError(UpstreamError, KeyError):
    """The file does not exist at that revision."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class SourceLayout(BaseModel):
    """Where a source keeps the files change analysis needs (paths differ between kinds)."""

    model_config = ConfigDict(frozen=True)

    native_functions: str
    derivatives: str
    testing_internal: str = "torch/testing/_internal"


GIT_LAYOUT = SourceLayout(
    native_functions="aten/src/ATen/native/native_functions.yaml",
    derivatives="tools/autograd/derivatives.yaml",
)
WHEEL_LAYOUT = SourceLayout(
    native_functions="torchgen/packaged/ATen/native/native_functions.yaml",
    derivatives="torchgen/packaged/autograd/derivatives.yaml",
)


class ResolvedRevision(BaseModel):
    """A revision pinned to exactly one tree.

    ``resolved`` is immutable for the tree: a full commit sha for git, the exact release
    version (``2.13.0+cpu``) for wheels. ``detail`` says how it was found, for people.
    """

    model_config = ConfigDict(frozen=True)

    kind: SourceKind
    requested: str
    resolved: str
    detail: str = ""
    location: str = ""

    @property
    def label(self) -> str:
        short = self.resolved[:12] if self.kind == "git" else self.resolved
        if self.requested in (self.resolved, short):
            return short
        return f"{self.requested} ({short})"


class FileStatus(StrEnum):
    added = "added"
    removed = "removed"
    modified = "modified"


class FileChange(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: str
    status: FileStatus


@runtime_checkable
class UpstreamSource(Protocol):
    """One upstream source; every method takes a revision resolved by ``resolve``."""

    kind: SourceKind
    layout: SourceLayout

    def resolve(self, revision: str) -> ResolvedRevision:
        """Pin a revision string; raises UnknownRevisionError / VersionNotFoundError."""
        ...

    def list_files(self, revision: ResolvedRevision, prefix: str = "") -> list[str]:
        """Every file path (posix, relative to the tree root) under ``prefix``, sorted."""
        ...

    def read_file(self, revision: ResolvedRevision, path: str) -> bytes:
        """The file's bytes; raises UpstreamFileNotFoundError."""
        ...

    def read_files(self, revision: ResolvedRevision, paths: Iterable[str]) -> dict[str, bytes]:
        """Several files at once (missing ones are left out of the result)."""
        ...

    def changed_files(self, base: ResolvedRevision, head: ResolvedRevision) -> list[FileChange]:
        """Files added, removed or modified from ``base`` to ``head``, sorted by path."""
        ...
