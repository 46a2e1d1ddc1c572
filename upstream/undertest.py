"""The upstream under test: which PyTorch a job's shards run in, named in the plan and said on
the verdict.

The planner decides an :class:`UpstreamUnderTest` from the event (:mod:`planner.environment`);
the plan carries it to the runner; each shard worker resolves it on its own disk
(:func:`resolve_environment`) into a :class:`RunEnvironment`, an interpreter and its process
environment:

- ``installed``: the torch of the worker's own interpreter (no environment is made);
- ``release``: that release's wheel in its own virtual environment
  (:func:`upstream.headenv.ensure_env`, the one the release fingerprints use), or the installed
  interpreter when it has that release;
- ``head-wheel``: a configured wheel of the head commit (a path or URL) in its own environment;
- ``overlay``: a base release's interpreter with the head commit's ``torch/**.py`` laid over its
  torch package (:mod:`upstream.overlay`), made once per head SHA;
- ``none``: nothing can test the change; no shard runs and the job concludes ``neutral``.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from backends.base import package_dir, torch_build
from upstream.headenv import ensure_env
from upstream.overlay import ensure_overlay

#: the environment key of the worker's own interpreter (the pool a worker warms at boot)
INSTALLED_KEY = "installed"
UnderTestKind = Literal["installed", "release", "head-wheel", "overlay", "none"]


class UpstreamUnderTest(BaseModel):
    """What a job tests, as the planner names it and the worker completes it (``torch_build``
    and ``files_laid_over`` are known once an environment is resolved)."""

    kind: UnderTestKind = "installed"
    torch_version: str | None = None  # the release the environment has (the overlay's base)
    torch_build: str | None = None  # version and git hash, read in the environment
    head_sha: str | None = None  # overlay / head wheel: the upstream head commit
    head_wheel: str | None = None  # head-wheel: the wheel's path or URL
    files_laid_over: int | None = None  # overlay: head files that differ from the base's
    compiled_not_covered: list[str] = Field(default_factory=list)
    smoke: bool = False  # a change no environment can test, run on the installed torch anyway
    reason: str = ""

    @property
    def runs(self) -> bool:
        return self.kind != "none"

    def key(self) -> str:
        """Names the environment (not what was learned about it): shards with one key share
        a warm pool, shards with another never do."""
        if self.kind == "installed":
            return INSTALLED_KEY
        parts = [self.kind, self.torch_version or "", self.head_sha or "", self.head_wheel or ""]
        return "/".join(parts)

    def describe(self) -> str:
        """One line for the check run, the callback and the page."""
        build = self.torch_build or self.torch_version or "?"
        if self.kind == "none":
            return f"nothing run: {self.reason}"
        if self.kind == "installed":
            text = f"torch {build} (the installed torch)"
            if self.smoke:
                text += "; smoke run only, the change itself is not tested"
        elif self.kind == "release":
            text = f"torch {build} in its own environment"
        elif self.kind == "head-wheel":
            text = f"torch {build} from the head wheel of {(self.head_sha or '?')[:12]}"
        else:
            laid = "?" if self.files_laid_over is None else str(self.files_laid_over)
            text = (
                f"torch {build} with {laid} Python file(s) of head "
                f"{(self.head_sha or '?')[:12]} laid over"
            )
        if self.compiled_not_covered:
            shown = ", ".join(self.compiled_not_covered[:5])
            more = len(self.compiled_not_covered) - 5
            text += f"; compiled changes not tested: {shown}" + (f" (+{more} more)" if more > 0 else "")
        return text


def installed_under_test(reason: str = "") -> UpstreamUnderTest:
    """The torch of this interpreter, named as such."""
    build = torch_build()
    return UpstreamUnderTest(torch_version=build.split("+", 1)[0], torch_build=build, reason=reason)


@dataclass(frozen=True)
class RunEnvironment:
    """An interpreter and the process environment to start it with."""

    python: str
    env: dict[str, str]
    torch_build: str
    files_laid_over: int | None = None
    extra: dict[str, str] = field(default_factory=dict)


def installed_environment() -> RunEnvironment:
    return RunEnvironment(python=sys.executable, env=dict(os.environ), torch_build=torch_build())


def _release_env(
    version: str, *, envs: Path, wheel: str | None = None, wheel_cache: Path | None = None
) -> RunEnvironment:
    if wheel is None and torch_build().split("+")[0] == version.split("+")[0]:
        return installed_environment()
    env = ensure_env(version, root=envs, wheel=wheel, wheel_cache=wheel_cache)
    return RunEnvironment(python=str(env.python), env=env.env, torch_build=env.torch_build)


def resolve_environment(
    under_test: UpstreamUnderTest,
    *,
    envs: Path,
    checkout: Path | None = None,
    wheel_cache: Path | None = None,
) -> RunEnvironment:
    """The interpreter ``under_test`` names, made on this host when missing (once: the makers
    are keyed and locked), under ``envs`` (``RELAY_VAR_DIR/envs``)."""
    kind = under_test.kind
    if kind == "none":
        raise ValueError(f"nothing to run in: {under_test.reason}")
    if kind == "installed":
        return installed_environment()
    if kind == "release":
        assert under_test.torch_version, "a release environment names its version"
        return _release_env(under_test.torch_version, envs=envs, wheel_cache=wheel_cache)
    if kind == "head-wheel":
        assert under_test.head_wheel and under_test.head_sha
        name = "head-" + hashlib.sha256(
            f"{under_test.head_sha}\0{under_test.head_wheel}".encode()
        ).hexdigest()[:16]
        return _release_env(name, envs=envs, wheel=under_test.head_wheel)
    if checkout is None or not under_test.head_sha:
        raise ValueError("an overlay needs the upstream checkout (RELAY_UPSTREAM_PATH)")
    base = (
        _release_env(under_test.torch_version, envs=envs, wheel_cache=wheel_cache)
        if under_test.torch_version
        else installed_environment()
    )
    torch_dir = _torch_dir(base)
    overlay = ensure_overlay(
        checkout, under_test.head_sha, base_torch=torch_dir, root=envs, base_build=base.torch_build
    )
    env = dict(base.env)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(overlay.directory), env.get("PYTHONPATH", "")) if p
    )
    return RunEnvironment(
        python=base.python,
        env=env,
        torch_build=base.torch_build,
        files_laid_over=overlay.laid_over,
        extra={"overlay": str(overlay.directory)},
    )


def _torch_dir(env: RunEnvironment) -> Path:
    """The torch package folder of ``env``'s interpreter."""
    if env.python == sys.executable:
        found = package_dir("torch")
        if found is None:
            raise ValueError("torch is not installed in this environment")
        return found
    major, minor = sys.version_info[:2]
    return Path(env.python).parent.parent / "lib" / f"python{major}.{minor}" / "site-packages" / "torch"
