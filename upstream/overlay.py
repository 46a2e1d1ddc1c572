"""A head commit's Python files of ``torch/`` laid over a release's binaries (the idea of
PyTorch's ``tools/nightly.py``), made once per head SHA and base torch build.

``ensure_overlay(checkout, sha, base_torch=..., root=envs)`` makes
``envs/overlay-<sha12>-<key>/torch/``: a package folder that shadows the base's ``torch`` when
the folder is first on ``PYTHONPATH``. Every ``torch/**.py`` of the head commit whose content
differs from the base's file is copied (written from git); every other entry is a symbolic link
to the base's (a whole sub-folder when nothing in it changed), so the base's compiled modules,
libraries and generated files load as they are. A file the base has and the head commit lacks
stays (the wheel has generated files no checkout holds). A marker written last holds the count
of files laid over; an OS file lock serialises makers of one overlay, and an unfinished folder
(no marker) is made again. Overlays whose marker is older than a sweeper's cut-off are removed by
:func:`remove_overlays`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from upstream.headenv import locked

OVERLAY_FORMAT = 1
MARKER = "relay-overlay.json"
PREFIX = "overlay-"
#: a final release's tag (``v2.14.1``); release candidates and pre-releases are not bases
RELEASE_TAG = re.compile(r"^v(\d+)\.(\d+)\.(\d+)$")


class OverlayError(Exception):
    """The overlay could not be made (an unknown commit, an unreadable checkout)."""


@dataclass(frozen=True)
class Overlay:
    directory: Path  # put first on PYTHONPATH
    head_sha: str
    laid_over: int
    created: bool


def _git(checkout: Path, *args: str, data: bytes | None = None) -> bytes:
    proc = subprocess.run(
        ["git", "-C", str(checkout), *args], input=data, capture_output=True, check=False
    )
    if proc.returncode != 0:
        message = proc.stderr.decode("utf-8", "replace").strip() or f"exit {proc.returncode}"
        raise OverlayError(f"git {' '.join(args[:2])}: {message}")
    return proc.stdout


def head_python_files(checkout: Path, sha: str) -> dict[str, str]:
    """``torch/``-relative path -> blob id of every ``torch/**.py`` at ``sha``."""
    out = _git(checkout, "ls-tree", "-r", "-z", sha, "--", "torch/")
    files: dict[str, str] = {}
    for entry in out.split(b"\0"):
        if not entry:
            continue
        meta, _, path = entry.decode("utf-8", "surrogateescape").partition("\t")
        mode, kind, blob = meta.split()
        if kind == "blob" and mode != "120000" and path.endswith(".py"):
            files[path.removeprefix("torch/")] = blob
    return files


def blob_id(path: Path) -> str | None:
    """git's blob id of a file's content (None when there is no such file)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def changed_files(checkout: Path, sha: str, base_torch: Path) -> dict[str, str]:
    """The head's Python files whose content differs from ``base_torch``'s: path -> blob id."""
    return {
        rel: blob
        for rel, blob in head_python_files(checkout, sha).items()
        if blob_id(base_torch / rel) != blob
    }


def read_blobs(checkout: Path, blobs: Iterable[str]) -> dict[str, bytes]:
    wanted = list(dict.fromkeys(blobs))
    if not wanted:
        return {}
    out = _git(checkout, "cat-file", "--batch", data="".join(f"{b}\n" for b in wanted).encode())
    found: dict[str, bytes] = {}
    pos = 0
    for blob in wanted:
        end = out.index(b"\n", pos)
        header = out[pos:end].split()
        pos = end + 1
        if len(header) == 3:
            size = int(header[2])
            found[blob] = out[pos : pos + size]
            pos += size + 1
    return found


@dataclass(frozen=True)
class BaseRelease:
    """The release an overlay lays a head over, as found from the checkout's history."""

    version: str | None  # "2.14.1"; None: no release tag is an ancestor
    merge_base: str
    detail: str


def base_release(checkout: Path, base: str, head: str) -> BaseRelease:
    """The newest release (a ``vX.Y.Z`` tag) the merge base of ``base`` and ``head`` descends
    from: the binaries the head's Python files were written against."""
    try:
        merge = _git(checkout, "merge-base", base, head).decode().strip()
    except OverlayError as exc:
        raise OverlayError(
            f"no merge base of {base[:12]} and {head[:12]} in {checkout}: {exc}"
        ) from None
    tags = _git(checkout, "tag", "--merged", merge, "--list", "v*").decode().split()
    found = sorted(
        (tuple(int(n) for n in m.groups()), tag) for tag in tags if (m := RELEASE_TAG.match(tag))
    )
    if not found:
        return BaseRelease(
            None, merge, f"no release tag (vX.Y.Z) is an ancestor of the merge base {merge[:12]}"
        )
    tag = found[-1][1]
    return BaseRelease(
        tag.removeprefix("v"),
        merge,
        f"{tag}, the newest release the merge base {merge[:12]} descends from",
    )


def overlay_dir(root: Path, sha: str, base_build: str) -> Path:
    key = hashlib.sha256(f"{OVERLAY_FORMAT}\0{base_build}".encode()).hexdigest()[:8]
    return Path(root).absolute() / f"{PREFIX}{sha[:12]}-{key}"


def ensure_overlay(
    checkout: Path, sha: str, *, base_torch: Path, root: Path, base_build: str
) -> Overlay:
    """The overlay of commit ``sha`` of ``checkout`` over the torch package at ``base_torch``
    (made once; later calls read its marker)."""
    try:
        full = _git(checkout, "rev-parse", "--verify", "--quiet", f"{sha}^{{commit}}").decode()
    except OverlayError:
        raise OverlayError(f"{sha}: not a commit in {checkout}") from None
    full = full.strip()
    directory = overlay_dir(root, full, base_build)
    with locked(directory.parent / f".{directory.name}.lock"):
        marker = _read_marker(directory)
        if marker is not None:
            _touch(directory)
            return Overlay(directory, full, int(str(marker["laid_over"])), created=False)
        if directory.exists():
            shutil.rmtree(directory)
        changed = changed_files(checkout, full, base_torch)
        contents = read_blobs(checkout, changed.values())
        (directory / "torch").mkdir(parents=True)
        _lay(directory / "torch", base_torch, {rel: contents[b] for rel, b in changed.items()})
        data = {
            "format": OVERLAY_FORMAT,
            "head_sha": full,
            "base_torch": str(base_torch),
            "base_build": base_build,
            "laid_over": len(changed),
            "files": sorted(changed),
        }
        tmp = directory / f".{MARKER}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        tmp.replace(directory / MARKER)
        return Overlay(directory, full, len(changed), created=True)


def _lay(target: Path, base: Path, files: dict[str, bytes]) -> None:
    """``target`` mirrors ``base`` by links, with ``files`` (relative paths) written instead."""
    dirty = {p.as_posix() for rel in files for p in Path(rel).parents if p.as_posix() != "."}

    def mirror(rel: str) -> None:
        src = base / rel if rel else base
        for entry in os.scandir(src):
            sub = f"{rel}/{entry.name}" if rel else entry.name
            if sub in files:
                continue  # written below
            if entry.name == "__pycache__" and rel in dirty | {""}:
                continue  # the base's bytecode would be rewritten for the head's sources
            if sub in dirty and entry.is_dir(follow_symlinks=False):
                (target / sub).mkdir()
                mirror(sub)
            else:
                (target / sub).symlink_to(Path(entry.path).absolute())

    mirror("")
    for rel, content in files.items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


def _read_marker(directory: Path) -> dict[str, object] | None:
    try:
        data = json.loads((directory / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == OVERLAY_FORMAT else None


def _touch(directory: Path) -> None:
    with contextlib.suppress(OSError):
        os.utime(directory / MARKER)


def remove_overlays(root: Path, *, keep: Iterable[str], older_than_seconds: float) -> list[Path]:
    """Remove the overlays under ``root`` no job needs: neither of a head SHA in ``keep`` nor
    used within ``older_than_seconds`` (the marker's time; a later use refreshes it)."""
    wanted = {sha[:12] for sha in keep}
    removed: list[Path] = []
    cutoff = time.time() - older_than_seconds
    for directory in sorted(Path(root).glob(f"{PREFIX}*")):
        if not directory.is_dir() or directory.name[len(PREFIX) :].split("-")[0] in wanted:
            continue
        marker = directory / MARKER
        used = marker.stat().st_mtime if marker.exists() else directory.stat().st_mtime
        if used > cutoff:
            continue
        with locked(directory.parent / f".{directory.name}.lock"):
            shutil.rmtree(directory, ignore_errors=True)
        (directory.parent / f".{directory.name}.lock").unlink(missing_ok=True)
        removed.append(directory)
    return removed
