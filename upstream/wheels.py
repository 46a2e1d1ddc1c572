"""Released torch wheels as an upstream source: revisions are release versions.

``2.13`` means the newest 2.13.x the package index offers, ``2.14.1`` that exact release.
Wheels are fetched once with ``pip download --no-deps`` into a cache directory (pip's own
configuration decides the index: a local one on this machine, PyPI elsewhere) and read as zip
archives without being installed. File digests come from the zip directory (CRC-32 and size),
so listing the files that differ between two releases does not decompress anything.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from upstream.base import (
    WHEEL_LAYOUT,
    FileChange,
    FileStatus,
    ResolvedRevision,
    SourceKind,
    SourceLayout,
    UnknownRevisionError,
    UpstreamError,
    UpstreamFileNotFoundError,
    VersionNotFoundError,
)

DIST = "torch"
_REQUEST = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?(?:\+([0-9A-Za-z.]+))?$")
# name-version[-build tag]-python-abi-platform.whl (PEP 427): a build tag starts with a digit
# (PyPI's torch 2.10.0 is torch-2.10.0-3-cp311-cp311-manylinux_2_28_x86_64.whl)
_WHEEL = re.compile(
    r"^torch-(\d+)\.(\d+)\.(\d+)(?:\+([0-9A-Za-z.]+))?(?:-(\d+)[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$"
)


def default_cache_dir() -> Path:
    """Where wheels and computed change facts are kept unless a caller says otherwise."""
    return Path.home() / ".cache" / "crcr-relay" / "upstream"


def _version_key(match: re.Match[str]) -> tuple[int, int, int, str, int]:
    """Release, local label, then build number (a rebuilt wheel of one release ranks higher)."""
    return (int(match[1]), int(match[2]), int(match[3]), match[4] or "", int(match[5] or 0))


def _wheel_version(match: re.Match[str]) -> str:
    base = f"{match[1]}.{match[2]}.{match[3]}"
    return f"{base}+{match[4]}" if match[4] else base


def _matches(request: re.Match[str], wheel: re.Match[str]) -> bool:
    if (request[1], request[2]) != (wheel[1], wheel[2]):
        return False
    if request[3] is not None and request[3] != wheel[3]:
        return False
    return request[4] is None or request[4] == wheel[4]


class ReleasedWheels:
    """Torch release wheels in a cache directory, fetched on demand with pip.

    ``pip_command`` / ``pip_args`` / ``pip_env`` let callers point pip elsewhere (tests use a
    find-links directory of small wheels); by default the running interpreter's pip with its
    normal configuration is used. ``offline=True`` never calls pip and resolves from the cache.
    ``progress`` receives a line for each step of a download (pip's own progress lines).
    """

    kind: SourceKind = "wheels"
    layout: SourceLayout = WHEEL_LAYOUT

    def __init__(
        self,
        cache_dir: str | Path | None = None,
        *,
        offline: bool = False,
        pip_command: Sequence[str] | None = None,
        pip_args: Sequence[str] = (),
        pip_env: Mapping[str, str] | None = None,
        timeout: float = 1800.0,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
        self.wheel_dir = self.cache_dir / "wheels"
        self.offline = offline
        self._pip = list(pip_command) if pip_command else [sys.executable, "-m", "pip"]
        self._pip_args = list(pip_args)
        self._pip_env = dict(pip_env) if pip_env is not None else None
        self._timeout = timeout
        self._progress = progress or (lambda _: None)
        self._zips: dict[str, zipfile.ZipFile] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ReleasedWheels({str(self.cache_dir)!r})"

    # -- resolution ---------------------------------------------------------------------

    def cached_wheels(self) -> list[Path]:
        if not self.wheel_dir.is_dir():
            return []
        found = [(m, p) for p in self.wheel_dir.glob("torch-*.whl") if (m := _WHEEL.match(p.name))]
        return [p for _, p in sorted(found, key=lambda mp: _version_key(mp[0]))]

    def _newest_cached(self, request: re.Match[str]) -> Path | None:
        hits = [p for p in self.cached_wheels() if _matches(request, _WHEEL.match(p.name))]  # type: ignore[arg-type]
        return hits[-1] if hits else None

    def resolve(self, revision: str) -> ResolvedRevision:
        request = _REQUEST.match(revision.strip().removeprefix("v"))
        if request is None:
            raise UnknownRevisionError(
                f"{revision!r} is not a torch release version (expected e.g. 2.13 or 2.14.1)"
            )
        exact = request[3] is not None
        wheel: Path | None = None
        how = ""
        if self.offline or exact:
            wheel = self._newest_cached(request)
            how = "from the cache"
        if wheel is None:
            if self.offline:
                raise VersionNotFoundError(
                    f"no cached torch wheel matches {revision!r} in {self.wheel_dir}; "
                    "--offline forbids asking the package index (run without --offline to "
                    "download it)"
                )
            wheel = self._download(revision.strip().removeprefix("v"), request)
            how = "from the package index"
        self._check_zip(wheel)
        match = _WHEEL.match(wheel.name)
        assert match is not None
        version = _wheel_version(match)
        newest = "" if exact else f"newest {request[1]}.{request[2]}.x, "
        return ResolvedRevision(
            kind="wheels", requested=revision, resolved=version,
            detail=f"{newest}{wheel.name} {how}", location=str(wheel),
        )

    def _download(self, text: str, request: re.Match[str]) -> Path:
        spec = f"{DIST}=={text}" if request[3] is not None else f"{DIST}=={text}.*"
        if request[4] is not None and request[3] is None:
            spec = f"{DIST}=={request[1]}.{request[2]}.*"
        self.wheel_dir.mkdir(parents=True, exist_ok=True)
        cmd = [*self._pip, "download", "--no-deps", "--only-binary", ":all:",
               "--disable-pip-version-check", "--dest", str(self.wheel_dir), *self._pip_args, spec]
        self._progress(f"downloading {spec} from the package index (pip download)")
        started = time.monotonic()
        try:
            returncode, output = self._run_pip(cmd)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise UpstreamError(f"pip download {spec} failed: {exc}") from None
        if returncode != 0:
            if "No matching distribution" in output or "ResolutionImpossible" in output:
                raise VersionNotFoundError(
                    f"the package index offers no torch release matching {text!r} "
                    f"(pip download {spec})"
                )
            tail = "\n".join(output.strip().splitlines()[-5:])
            raise UpstreamError(f"pip download {spec} failed:\n{tail}")
        named = re.findall(r"(?:Saved|File was already downloaded)\s+(\S+\.whl)", output)
        for name in reversed(named):
            path = Path(name)
            path = path if path.is_absolute() else Path.cwd() / path
            if (m := _WHEEL.match(path.name)) and _matches(request, m) and path.is_file():
                got = self.wheel_dir / path.name if (self.wheel_dir / path.name).is_file() else path
                size = got.stat().st_size / 1e6
                took = time.monotonic() - started
                how = "already in the cache" if "File was already" in output else "saved"
                self._progress(f"{how}: {got.name} ({size:,.0f} MB, {took:.0f} s)")
                return got
        wheel = self._newest_cached(request)
        if wheel is None:
            raise UpstreamError(f"pip download {spec} succeeded but left no torch wheel in {self.wheel_dir}")
        return wheel

    def _run_pip(self, cmd: list[str]) -> tuple[int, str]:
        """Run pip, passing its progress lines on as they come; (exit status, all output)."""
        lines: list[str] = []
        deadline = time.monotonic() + self._timeout
        with subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self._pip_env
        ) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                text = line.strip()
                if text.startswith(("Collecting", "Downloading", "Saved", "File was already")):
                    self._progress(f"pip: {text}")
                if time.monotonic() > deadline:
                    proc.kill()
                    raise subprocess.TimeoutExpired(cmd, self._timeout)
            returncode = proc.wait()
        return returncode, "".join(lines)

    def _check_zip(self, wheel: Path) -> None:
        try:
            self._zip_for(str(wheel))
        except zipfile.BadZipFile:
            wheel.unlink(missing_ok=True)
            raise UpstreamError(f"{wheel}: damaged wheel removed from the cache; try again") from None

    # -- reading ------------------------------------------------------------------------

    def _zip_for(self, location: str) -> zipfile.ZipFile:
        with self._lock:
            zf = self._zips.get(location)
            if zf is None:
                zf = zipfile.ZipFile(location)
                self._zips[location] = zf
            return zf

    def _zip(self, revision: ResolvedRevision) -> zipfile.ZipFile:
        if revision.kind != "wheels" or not revision.location:
            raise UpstreamError(f"{revision.label} was not resolved by a wheel source")
        return self._zip_for(revision.location)

    def close(self) -> None:
        with self._lock:
            for zf in self._zips.values():
                zf.close()
            self._zips.clear()

    def digests(self, revision: ResolvedRevision) -> dict[str, str]:
        """path -> content digest from the zip directory (CRC-32 and size), without reading."""
        return {
            info.filename: f"{info.CRC:08x}:{info.file_size}"
            for info in self._zip(revision).infolist()
            if _is_source(info.filename)
        }

    def list_files(self, revision: ResolvedRevision, prefix: str = "") -> list[str]:
        return sorted(p for p in self.digests(revision) if p.startswith(prefix))

    def read_file(self, revision: ResolvedRevision, path: str) -> bytes:
        zf = self._zip(revision)
        if not _is_source(path):
            raise UpstreamFileNotFoundError(f"{path}: not in torch {revision.resolved}")
        try:
            with self._lock:
                return zf.read(path)
        except KeyError:
            raise UpstreamFileNotFoundError(f"{path}: not in torch {revision.resolved}") from None

    def read_files(self, revision: ResolvedRevision, paths: Iterable[str]) -> dict[str, bytes]:
        result = {}
        for path in paths:
            try:
                result[path] = self.read_file(revision, path)
            except UpstreamFileNotFoundError:
                continue
        return result

    def changed_files(self, base: ResolvedRevision, head: ResolvedRevision) -> list[FileChange]:
        old, new = self.digests(base), self.digests(head)
        changes = [FileChange(path=p, status=FileStatus.removed) for p in old.keys() - new.keys()]
        changes += [FileChange(path=p, status=FileStatus.added) for p in new.keys() - old.keys()]
        changes += [
            FileChange(path=p, status=FileStatus.modified)
            for p in old.keys() & new.keys() if old[p] != new[p]
        ]
        return sorted(changes, key=lambda c: c.path)


def _is_source(name: str) -> bool:
    """Wheel members that belong to the tree: not directories, not the dist-info metadata."""
    if name.endswith("/"):
        return False
    top = name.split("/", 1)[0]
    return not top.endswith((".dist-info", ".data"))
