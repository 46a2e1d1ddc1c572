"""A second virtual environment with another torch release: the head of a release step.

``ensure_env("2.14.1")`` makes ``RELAY_VAR_DIR/envs/torch-2.14.1/`` once and reuses it
afterwards:

1. ``python -m venv --without-pip`` with the running interpreter;
2. one ``pip install`` by the running interpreter's pip into the new one (``--python``) of the
   torch wheel (taken from the upstream wheel cache of :class:`upstream.ReleasedWheels`, so a
   wheel already fetched for ``relay upstream diff`` is not downloaded again; its own
   dependencies come from the package index pip is configured with) and the packages the
   bundled suites need at run time (``RUNTIME_PACKAGES``), under a constraints file that pins
   every other distribution to the version installed in the running environment, so only torch
   (and what torch itself brings) differs. ``--no-compile``: a module is compiled when it is
   first imported, not the thousands torch ships and no test imports. Measured on 2 cores
   (docs/benchmarks.md): the torch 2.14.1 CUDA wheel's 5.4 GB in about 2 minutes instead of
   over 4, and no second pip installed by ``venv`` (10 to 30 s);
3. a ``.pth`` file that puts the project root on the environment's path. The project is not
   installed: its own metadata pins ``torch==2.13.0``, and its service dependencies (FastAPI,
   Celery, ...) are not needed to collect or run the suites;
4. a check in the new interpreter: ``spyre_stack.register()`` builds the C++ core into the
   environment's own ``torch_extensions`` folder (``SPYRE_EXTENSIONS_DIR``, see
   :attr:`HeadEnv.env`) and a tensor is made on the ``spyre`` device;
5. a marker file, written last, holding the plan's key and the torch build. A later call with
   the same key returns at once; a missing marker (an interrupted creation) or another key
   (other pins) makes the folder again from scratch.

An environment moved to another checkout's ``RELAY_VAR_DIR/envs`` (``mv``, or a copy) is not
made again when only the project root differs (the marker's ``install_key``: everything
installed is the same): its ``.pth`` file is replaced to name the new root and the check runs
again (the C++ core of that checkout's ``spyre_stack`` is built there when its sources differ),
seconds instead of minutes and gigabytes.

Every command's output goes to ``relay-env.log`` in the environment. A file lock serialises
concurrent callers for one version.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from backends.base import PROJECT_ROOT
from config.settings import get_settings

log = logging.getLogger(__name__)

# Bump when what the plan installs changes: environments made by an older plan are made again
# (not when only how it installs the same distributions does, as --no-compile did).
ENV_FORMAT = 1
DEFAULT_ROOT = Path("var/envs")  # RELAY_VAR_DIR's default; see default_root()
MARKER = "relay-env.json"
LOG_NAME = "relay-env.log"
PTH_NAME = "crcr_relay_project.pth"
EXTENSIONS = "torch_extensions"
# What the bundled suites and the collection plugins import besides torch and the standard
# library (found by collecting and running every suite in a bare environment).
RUNTIME_PACKAGES = (
    "numpy", "PyYAML", "pytest", "pytest-timeout", "expecttest", "hypothesis",
    "pydantic",  # backends.base (the backend seam the check and the collection import)
)
# What building the spyre C++ core needs besides torch: torch.utils.cpp_extension imports
# setuptools, which torch 2.10 declares only for Python >= 3.12 (2.11 and later always). Unpinned
# (a release bounds it itself) and not in the key: every environment made before it was listed
# has it (its check built the core), so listing it changes none of them.
BUILD_PACKAGES = ("setuptools",)
# Never pinned from the running environment: torch is the point, the project is not installed,
# pip keeps the version venv gave it, and a release bounds its own build tools (torch 2.12.1
# requires setuptools<82, which a pin to this environment's newer one made unsatisfiable).
UNPINNED = frozenset({"torch", "crcr-relay", "pip", "setuptools"})

# The check also imports what the bundled suites import from torch's testing package: the
# install compiled nothing (--no-compile), so this writes the bytecode every later process of
# the environment reads (the step runs with bytecode writing on, see EnvPlan.steps).
CHECK_SCRIPT = """\
import json
import spyre_stack
spyre_stack.register()
import torch
import torch.testing._internal.common_device_type
import torch.testing._internal.common_methods_invocations
import torch.testing._internal.common_modules
import torch.testing._internal.common_utils
from backends.base import torch_build
t = torch.ones(2, device="spyre") * 2
assert t.device.type == "spyre", t.device
print(json.dumps({"torch_build": torch_build(), "torch": torch.__version__,
                  "result": t.cpu().tolist(), "spyre_stack": spyre_stack.__file__}))
"""


class HeadEnvError(Exception):
    """The environment could not be made; the message says which step and where the log is."""


def _normalize(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def current_pins(exclude: frozenset[str] = UNPINNED) -> dict[str, str]:
    """name -> version of every distribution installed in the running environment."""
    pins: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name and _normalize(name) not in exclude:
            pins[_normalize(name)] = dist.version
    return dict(sorted(pins.items()))


@dataclass(frozen=True)
class Step:
    """One command of the plan, run in ``cwd`` with ``env`` added to the environment."""

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class EnvPlan:
    """Everything ``ensure_env`` would do for one torch version, computed without running it."""

    version: str
    directory: Path
    base_python: str
    pins: Mapping[str, str]
    packages: tuple[str, ...]
    project_root: Path

    @property
    def python(self) -> Path:
        return self.directory / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        major, minor = sys.version_info[:2]
        return self.directory / "lib" / f"python{major}.{minor}" / "site-packages"

    @property
    def extensions_dir(self) -> Path:
        return self.directory / EXTENSIONS

    @property
    def constraints_file(self) -> Path:
        return self.directory / "constraints.txt"

    @property
    def marker(self) -> Path:
        return self.directory / MARKER

    @property
    def log(self) -> Path:
        return self.directory / LOG_NAME

    def _identity(self) -> list[object]:
        return [
            ENV_FORMAT,
            self.version,
            os.path.realpath(self.base_python),  # .venv/bin/python and python3: one
            dict(self.pins),
            self.packages,
        ]

    def key(self) -> str:
        """What makes two environments the same: what is installed and the project root."""
        text = json.dumps([*self._identity(), str(self.project_root)], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def install_key(self) -> str:
        """What is installed, without the project root: an environment with another root and
        this install key is re-pointed (:func:`ensure_env`), not made again."""
        text = json.dumps(self._identity(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def constraints_text(self) -> str:
        return "".join(f"{name}=={version}\n" for name, version in self.pins.items())

    def steps(self, torch_requirement: str) -> list[Step]:
        """The commands, in order. ``torch_requirement`` is a wheel path or ``torch==X``."""
        return [
            Step("venv", (self.base_python, "-m", "venv", "--without-pip", str(self.directory))),
            Step(
                "install",
                (
                    self.base_python,
                    "-m",
                    "pip",
                    "--python",
                    str(self.python),
                    "install",
                    "--disable-pip-version-check",
                    "--no-input",
                    "--no-compile",
                    "-c",
                    str(self.constraints_file),
                    torch_requirement,
                    *self.packages,
                    *BUILD_PACKAGES,
                ),
            ),
            Step(
                "check",
                (str(self.python), "-P", "-c", CHECK_SCRIPT),
                # empty: bytecode is written even where the caller's shell turned it off
                env={"SPYRE_EXTENSIONS_DIR": str(self.extensions_dir), "PYTHONDONTWRITEBYTECODE": ""},
            ),
        ]

    def read_marker(self, *, moved: bool = False) -> dict[str, str] | None:
        """The marker's content when it belongs to this plan and the interpreter is there;
        ``moved``: when it was made with everything this plan installs for another project
        root (its ``install_key``)."""
        try:
            data = json.loads(self.marker.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict):
            return None
        field, want = ("install_key", self.install_key()) if moved else ("key", self.key())
        if data.get(field) != want:
            return None
        return data if self.python.exists() else None

    def write_marker(self, data: Mapping[str, str]) -> dict[str, str]:
        """Write the marker whole (a temporary file renamed): this plan's keys and ``data``."""
        marker = {
            **data,
            "key": self.key(),
            "install_key": self.install_key(),
            "project_root": str(self.project_root),
        }
        tmp = self.marker.with_name(f".{self.marker.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(marker, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(self.marker)
        return marker

    def write_pth(self) -> None:
        """The ``.pth`` naming the project root, replaced (not rewritten in place: a copy of the
        environment made with hard links keeps its own)."""
        self.site_packages.mkdir(parents=True, exist_ok=True)
        tmp = self.site_packages / f".{PTH_NAME}.{os.getpid()}.tmp"
        tmp.write_text(f"{self.project_root}\n", encoding="utf-8")
        tmp.replace(self.site_packages / PTH_NAME)


def default_root() -> Path:
    """Where environments are made unless told: ``RELAY_VAR_DIR/envs`` (the shard workers', the
    release fingerprints' and ``relay replay``'s one place)."""
    return get_settings().var_dir / "envs"


def plan_env(
    version: str,
    *,
    root: Path | None = None,
    base_python: str | None = None,
    pins: Mapping[str, str] | None = None,
    packages: Sequence[str] = RUNTIME_PACKAGES,
    project_root: Path = PROJECT_ROOT,
) -> EnvPlan:
    version = version.strip().removeprefix("v")
    if not version or "/" in version:
        raise HeadEnvError(f"{version!r} is not a torch version")
    return EnvPlan(
        version=version,
        directory=(Path(root or default_root()) / f"torch-{version}").absolute(),
        base_python=base_python or sys.executable,
        pins=dict(sorted((pins if pins is not None else current_pins()).items())),
        packages=tuple(packages),
        project_root=Path(project_root).resolve(),
    )


@dataclass(frozen=True)
class HeadEnv:
    """A ready environment: run its ``python`` with ``env`` as the process environment."""

    version: str
    directory: Path
    python: Path
    torch_build: str
    log: Path
    extensions_dir: Path
    created: bool  # False when an existing environment was reused
    seconds: float = 0.0
    moved_from: str = ""  # the project root a reused environment was re-pointed from

    @property
    def env(self) -> dict[str, str]:
        """The process environment for every command run with this interpreter: the current one
        with the environment's bin first and its own C++ extension build folder."""
        return command_env(self.directory, self.extensions_dir)


# an interpreter of another environment must not see these from the running one
_NOT_INHERITED = frozenset({"PYTHONHOME", "PYTHONPATH", "VIRTUAL_ENV", "__PYVENV_LAUNCHER__"})


def command_env(
    directory: Path, extensions_dir: Path, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    env = {
        k: v for k, v in (os.environ if base is None else base).items() if k not in _NOT_INHERITED
    }
    env["VIRTUAL_ENV"] = str(directory)
    env["PATH"] = os.pathsep.join([str(directory / "bin"), env.get("PATH", "")])
    env["SPYRE_EXTENSIONS_DIR"] = str(extensions_dir)
    return env


Runner = Callable[[Step, Path], str]


def run_step(step: Step, log_path: Path) -> str:
    """Run one step, appending its output to the log; return its stdout. Raises HeadEnvError."""
    env = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
    env.update(step.env)
    start = time.perf_counter()
    with log_path.open("a", encoding="utf-8") as fh:
        shown = " ".join("<script>" if "\n" in arg else arg for arg in step.argv)
        fh.write(f"\n$ {shown}\n")
        fh.flush()
        proc = subprocess.run(
            step.argv,
            cwd=PROJECT_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=fh,
            text=True,
            check=False,
        )
        fh.write(proc.stdout)
        fh.write(f"[{step.name}: exit {proc.returncode} in {time.perf_counter() - start:.1f} s]\n")
    if proc.returncode != 0:
        raise HeadEnvError(f"step {step.name!r} failed (exit {proc.returncode}); see {log_path}")
    return proc.stdout


def wheel_for(version: str, *, cache_dir: Path | None = None, offline: bool = False) -> Path:
    """The torch wheel for ``version`` from the upstream wheel cache, fetched once if missing."""
    from upstream import ReleasedWheels, UpstreamError

    try:
        resolved = ReleasedWheels(cache_dir, offline=offline).resolve(version)
    except UpstreamError as exc:
        raise HeadEnvError(f"torch {version} is not installable here: {exc}") from None
    assert resolved.location
    return Path(resolved.location)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an OS lock on ``path`` (made on demand): it dies with its process."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_env(
    version: str,
    *,
    root: Path | None = None,
    wheel: Path | str | None = None,
    wheel_cache: Path | None = None,
    offline: bool = False,
    plan: EnvPlan | None = None,
    runner: Runner = run_step,
) -> HeadEnv:
    """Make (once) and return the environment with torch ``version`` under ``root``.

    ``wheel`` names the torch wheel (or any pip requirement) to install; by default it comes from
    the upstream wheel cache (``wheel_cache``; ``offline`` never asks the index for it). An
    environment that differs only by its project root (moved from another checkout) is
    re-pointed at this one (:func:`_repoint`).
    """
    plan = plan or plan_env(version, root=root)
    with locked(plan.directory.parent / f".torch-{plan.version}.lock"):
        marker = plan.read_marker()
        if marker is not None:
            if "install_key" not in marker:  # made before the marker had it
                marker = plan.write_marker(marker)
            return _head_env(plan, marker, created=False)
        moved = plan.read_marker(moved=True)
        if moved is not None:
            try:
                return _repoint(plan, moved, runner)
            except HeadEnvError as exc:
                log.warning("re-pointing %s failed (%s); making it again", plan.directory, exc)
        requirement = (
            str(wheel)
            if wheel
            else str(wheel_for(plan.version, cache_dir=wheel_cache, offline=offline))
        )
        return _create(plan, requirement, runner)


def _create(plan: EnvPlan, requirement: str, runner: Runner) -> HeadEnv:
    """Make the environment from scratch (whatever is in its folder is removed first)."""
    start = time.perf_counter()
    if plan.directory.exists():
        log.info("removing the unfinished or outdated environment %s", plan.directory)
        shutil.rmtree(plan.directory)
    plan.directory.mkdir(parents=True)
    plan.log.write_text(
        f"relay head environment torch {plan.version}, key {plan.key()}\n", encoding="utf-8"
    )
    checked = ""
    for step in plan.steps(requirement):
        if step.name == "install":
            plan.constraints_file.write_text(plan.constraints_text(), encoding="utf-8")
        if step.name == "check":
            plan.write_pth()
        log.info("torch %s environment: %s", plan.version, step.name)
        out = runner(step, plan.log)
        if step.name == "check":
            checked = out
    facts = _check_facts(checked, plan)
    seconds = time.perf_counter() - start
    marker = plan.write_marker(
        {
            "version": plan.version,
            "torch_build": facts["torch_build"],
            "torch": facts.get("torch", ""),
            "requirement": requirement,
            "seconds": f"{seconds:.1f}",
        }
    )
    return _head_env(plan, marker, created=True, seconds=seconds)


def _repoint(plan: EnvPlan, marker: Mapping[str, str], runner: Runner) -> HeadEnv:
    """An environment moved from another checkout: name this project root in its ``.pth`` and
    run the check again (it builds this checkout's C++ core when its sources differ)."""
    start = time.perf_counter()
    old_root = str(marker.get("project_root") or "another checkout")
    with plan.log.open("a", encoding="utf-8") as fh:
        fh.write(f"\nre-pointed from {old_root} to {plan.project_root}, key {plan.key()}\n")
    plan.write_pth()
    check = next(s for s in plan.steps(str(marker.get("requirement", ""))) if s.name == "check")
    facts = _check_facts(runner(check, plan.log), plan)
    if facts["torch_build"] != marker.get("torch_build"):
        raise HeadEnvError(
            f"the check printed torch build {facts['torch_build']}, the marker says "
            f"{marker.get('torch_build')}"
        )
    seconds = time.perf_counter() - start
    new = plan.write_marker({**marker, "moved_from": old_root})
    return _head_env(plan, new, created=False, seconds=seconds, moved_from=old_root)


def _check_facts(output: str, plan: EnvPlan) -> dict[str, str]:
    for line in reversed(output.strip().splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("torch_build"):
            return {k: str(v) for k, v in data.items()}
    raise HeadEnvError(f"the check printed no torch build; see {plan.log}")


def _head_env(
    plan: EnvPlan,
    marker: Mapping[str, str],
    *,
    created: bool,
    seconds: float = 0.0,
    moved_from: str = "",
) -> HeadEnv:
    return HeadEnv(
        version=plan.version,
        directory=plan.directory,
        python=plan.python,
        torch_build=str(marker["torch_build"]),
        log=plan.log,
        extensions_dir=plan.extensions_dir,
        created=created,
        seconds=seconds,
        moved_from=moved_from,
    )
