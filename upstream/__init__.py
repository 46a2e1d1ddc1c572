"""Upstream sources: where PyTorch's tree at a revision comes from (git checkout or wheels)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from upstream.base import (
    GIT_LAYOUT,
    WHEEL_LAYOUT,
    FileChange,
    FileStatus,
    NotAPytorchCheckoutError,
    ResolvedRevision,
    SourceLayout,
    UnknownRevisionError,
    UpstreamError,
    UpstreamFileNotFoundError,
    UpstreamSource,
    VersionNotFoundError,
)
from upstream.git import GitCheckout
from upstream.wheels import ReleasedWheels, default_cache_dir

__all__ = [
    "GIT_LAYOUT",
    "WHEEL_LAYOUT",
    "FileChange",
    "FileStatus",
    "GitCheckout",
    "NotAPytorchCheckoutError",
    "ReleasedWheels",
    "ResolvedRevision",
    "SourceLayout",
    "UnknownRevisionError",
    "UpstreamError",
    "UpstreamFileNotFoundError",
    "UpstreamSource",
    "VersionNotFoundError",
    "default_cache_dir",
    "open_source",
]


def open_source(
    upstream: str | Path | None = None,
    *,
    cache_dir: str | Path | None = None,
    offline: bool = False,
    progress: Callable[[str], None] | None = None,
) -> UpstreamSource:
    """A git checkout when ``upstream`` is a path, released wheels otherwise (``progress``
    hears about downloads)."""
    if upstream:
        return GitCheckout(upstream)
    return ReleasedWheels(cache_dir, offline=offline, progress=progress)
