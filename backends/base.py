"""What a backend driver is: how to make PyTorch's device-generic tests run on one device.

A backend names its device token (``spyre``, ``cpu``), the environment and pytest plugins that
make ``instantiate_device_type_tests`` generate its classes, its own spec files, what a warm pool
imports once, and its device-time hook (an estimate of a variant's duration before it ever ran,
and the pytest user property its plugin records the simulated device time in). Everything that
starts pytest for a backend goes through :meth:`Backend.pytest_args` and :func:`fresh_pytest`:
the one place the command line is written.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, Field

#: The project's root: pytest's rootdir for the bundled suites, the harness's working folder.
PROJECT_ROOT = Path(__file__).resolve().parent.parent

#: Imported once by a warm pool so no test process pays for them: torch, the device-generic test
#: machinery and the OpInfo / ModuleInfo databases (a backend adds its own registration).
TORCH_TEST_PRELOAD = (
    "torch",
    "torch.testing._internal.common_utils",
    "torch.testing._internal.common_device_type",
    "torch.testing._internal.common_methods_invocations",
    "torch.testing._internal.common_modules",
)

#: The testspecs pytest plugin, which applies spec files to the collected variants.
SPEC_PLUGIN = "testspecs.pytest_plugin"
#: one syntax-tree cache for all the failure reports of a run (backends/tbcache.py)
TB_CACHE_PLUGIN = "backends.tbcache"


class BackendError(Exception):
    """A clear, user-facing problem with a backend (unknown name, package not importable)."""


#: the file :func:`fresh_pytest` starts pytest from (why not ``-m pytest``: its docstring)
PYTEST_MAIN = Path(__file__).resolve().parent / "pytest_main.py"


def fresh_pytest(args: Sequence[str], *, python: str | Path | None = None) -> list[str]:
    """``python -P backends/pytest_main.py ARGS``: pytest in a fresh interpreter (``python``,
    by default this one), started from a file rather than ``-m pytest`` (upstream's tests walk
    the stack, which costs 16 times more from ``runpy``'s frames: :mod:`backends.pytest_main`)."""
    return [str(python or sys.executable), "-P", str(PYTEST_MAIN), *args]


def hash_files(paths: Iterable[Path], *, root: Path | None = None) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        name = path.relative_to(root).as_posix() if root else path.as_posix()
        digest.update(name.encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def package_dir(package: str) -> Path | None:
    spec = find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def torch_build() -> str:
    """The installed torch's version and git revision, read without importing torch."""
    root = package_dir("torch")
    if root is None:
        raise BackendError("torch is not installed in this environment")
    text = (root / "version.py").read_text(encoding="utf-8")
    version = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", text, re.M)
    git = re.search(r"^git_version\s*=\s*['\"]([^'\"]+)", text, re.M)
    return f"{version.group(1) if version else '?'}+git{git.group(1)[:12] if git else '?'}"


#: a stored recipe names a path inside the project by this token; each worker resolves it to
#: its own install (:meth:`RunnerConfig.portable`, :meth:`RunnerConfig.resolved`)
PROJECT_TOKEN = "${RELAY_PROJECT}"
#: ... and a spec file from outside the project by its content: ``${RELAY_SPEC:<sha256>/<name>}``
_SPEC_TOKEN = re.compile(r"\$\{RELAY_SPEC:([0-9a-f]{64})/([^/}]+)\}")


class RunnerConfig(BaseModel):
    """How the shard runner starts pytest for a backend: the folder it runs in, the arguments
    (plugins, spec files), the environment and the modules a warm pool imports once.

    As a plan stores it (:meth:`portable`) it holds no host's absolute path: paths inside the
    project start with :data:`PROJECT_TOKEN`, spec files from elsewhere are carried by content in
    ``spec_files``; a worker runs :meth:`resolved`."""

    rootdir: str
    pytest_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    preload: list[str] = Field(default_factory=list)
    # the pytest user property in which the backend's plugin records a test's device time (us)
    device_time_property: str | None = None
    # spec files from outside the project, by content: "<sha256>/<file name>" -> text
    spec_files: dict[str, str] = Field(default_factory=dict)

    def portable(self, *, project: Path = PROJECT_ROOT) -> RunnerConfig:
        """This recipe as a plan stores it: every path inside ``project`` as
        ``${RELAY_PROJECT}/...``, every spec file (``--spec``, TESTSPECS_SPECS) outside it by
        content (a folder by its ``*.yaml`` files), so another host resolves it against its own
        install."""
        from testspecs.loader import spec_files

        files = dict(self.spec_files)

        def spec(value: str) -> list[str]:
            path = Path(value)
            if not path.is_absolute() or path.is_relative_to(project) or not path.exists():
                return [value]
            return [_carried(f, files) for f in spec_files([path])]

        args = _respec(self.pytest_args, spec)
        env = dict(self.env)
        if env.get("TESTSPECS_SPECS"):
            env["TESTSPECS_SPECS"] = ":".join(
                one for part in env["TESTSPECS_SPECS"].split(":") if part for one in spec(part)
            )
        root = re.compile(re.escape(str(project)) + r"(?=/|:|$)")

        def token(text: str) -> str:
            return root.sub(lambda _: PROJECT_TOKEN, text)

        return self.model_copy(
            update={
                "rootdir": token(self.rootdir),
                "pytest_args": [token(a) for a in args],
                "env": {k: token(v) for k, v in env.items()},
                "spec_files": files,
            }
        )

    def resolved(self, *, spec_dir: Path, project: Path = PROJECT_ROOT) -> RunnerConfig:
        """A stored recipe on this host: :data:`PROJECT_TOKEN` is ``project`` (this install),
        each carried spec file is written once under ``spec_dir/<sha256>/`` (made on demand)
        and named there. A recipe without tokens comes back as it is."""
        for key, text in self.spec_files.items():
            target = spec_dir / key
            if not target.is_file():
                target.parent.mkdir(parents=True, exist_ok=True)
                partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
                partial.write_text(text, encoding="utf-8")
                os.replace(partial, target)  # whole or absent, whoever else writes it

        def local(text: str) -> str:
            text = text.replace(PROJECT_TOKEN, str(project))
            return _SPEC_TOKEN.sub(lambda m: str(spec_dir / m.group(1) / m.group(2)), text)

        return self.model_copy(
            update={
                "rootdir": local(self.rootdir),
                "pytest_args": [local(a) for a in self.pytest_args],
                "env": {k: local(v) for k, v in self.env.items()},
                "spec_files": {},
            }
        )


def _carried(path: Path, files: dict[str, str]) -> str:
    """``path``'s content kept in ``files``; the token that names it."""
    text = path.read_text(encoding="utf-8")
    key = f"{hashlib.sha256(text.encode()).hexdigest()}/{path.name}"
    files[key] = text
    return "${RELAY_SPEC:" + key + "}"


def _respec(args: list[str], spec: Callable[[str], list[str]]) -> list[str]:
    """``args`` with each ``--spec VALUE`` pair repeated for every file ``spec(VALUE)`` names."""
    out: list[str] = []
    i = 0
    while i < len(args):
        if args[i] == "--spec" and i + 1 < len(args):
            for one in spec(args[i + 1]):
                out += ["--spec", one]
            i += 2
        else:
            out.append(args[i])
            i += 1
    return out


class VariantLike(Protocol):
    """What a duration estimate reads of a test variant (selector.model.Variant)."""

    @property
    def op(self) -> str | None: ...
    @property
    def module(self) -> str | None: ...
    @property
    def dtype(self) -> str | None: ...
    @property
    def base(self) -> str: ...


class DurationEstimate(Protocol):
    """Seconds a variant is expected to take before it ever ran (the budget stage's prior)."""

    @property
    def source(self) -> str: ...

    def seconds(self, v: Any) -> float: ...


@dataclass(frozen=True)
class FlatEstimate:
    """The same duration for every variant: for a backend without a cost model."""

    per_test: float = 0.05
    source: str = "flat-estimate"

    def seconds(self, v: Any) -> float:
        return self.per_test


@dataclass(frozen=True)
class Backend:
    """How to collect and run device-generic tests for one device."""

    name: str  # the device token in variant names: spyre, cpu
    env: Mapping[str, str]
    plugins: tuple[str, ...] = ()
    package: str | None = None  # its sources make up the backend version
    exclude_from_version: tuple[str, ...] = ()
    default_specs: tuple[Path, ...] = ()  # the backend's own spec files, used when none are given
    # imported once by a warm pool (``module`` or ``module:function`` to call)
    preload: tuple[str, ...] = TORCH_TEST_PRELOAD
    device_time_property: str | None = None
    # a TORCH_TEST_DEVICES file whose TEST_CLASS a spec extends (None: upstream's own bases)
    device_base: Path | None = None
    run_env: Mapping[str, str] = field(default_factory=dict)  # extra environment of test runs
    # environment variables that change what a test does on the device (a run is keyed by them)
    outcome_env: tuple[str, ...] = ()

    def pytest_args(
        self,
        *,
        plugins: Sequence[str] = (),
        options: Sequence[str] = (),
        specs: Sequence[Path | str] = (),
        rootdir: Path | str | None = None,
        targets: Sequence[str] = (),
    ) -> list[str]:
        """pytest's arguments for a run of ``targets`` on this backend: quiet, no cache, the
        warnings plugin off (our own pytest settings must not turn a device test's warning into
        an error), failure reports sharing their parsed modules (:mod:`backends.tbcache`), the
        backend's plugins, the spec plugin with ``specs`` when given, then our
        ``plugins`` and their ``options``."""
        args = ["-q", "-p", "no:cacheprovider", "-p", "no:warnings", "-p", TB_CACHE_PLUGIN]
        if rootdir is not None:
            args += ["--rootdir", str(rootdir)]
        for plugin in self.plugins:
            args += ["-p", plugin]
        if specs:
            args += ["-p", SPEC_PLUGIN, "--spec-device", self.name]
            if self.device_base is not None:
                args += ["--spec-device-base", str(self.device_base)]
            for path in specs:
                args += ["--spec", str(Path(path).resolve())]
        for plugin in plugins:
            args += ["-p", plugin]
        return [*args, *options, *targets]

    def runner_config(
        self, specs: Sequence[Path | str] = (), *, rootdir: Path = PROJECT_ROOT
    ) -> RunnerConfig:
        """The shard runner's recipe: the same arguments, and the environment a warm pool needs
        before it imports the device-generic machinery (the spec's device base included)."""
        from testspecs.apply import SpecConfig
        from testspecs.pytest_plugin import DEVICE_BASE_FILE

        env = {**self.env, **self.run_env}
        if specs:
            base = str(self.device_base) if self.device_base is not None else None
            resolved = [str(Path(p).resolve()) for p in specs]
            env.update(SpecConfig(resolved, device=self.name, backend_base=base).env())
            env["TORCH_TEST_DEVICES"] = DEVICE_BASE_FILE
        return RunnerConfig(
            rootdir=str(rootdir),
            pytest_args=self.pytest_args(specs=specs, rootdir=rootdir),
            env=env,
            preload=list(self.preload),
            device_time_property=self.device_time_property,
        )

    def settings(self, env: Mapping[str, str]) -> str:
        """The :attr:`outcome_env` variables ``env`` sets, as ``NAME=value`` joined by commas
        ("" when it sets none: the backend's defaults, which its version already names)."""
        return ",".join(
            f"{name}={env[name].strip().lower()}"
            for name in self.outcome_env
            if env.get(name, "").strip()
        )

    def duration_estimate(self) -> DurationEstimate:
        """The device-time hook: seconds a variant without history is expected to take."""
        return FlatEstimate()

    @property
    def class_suffix(self) -> str:
        only_for = self.env.get("PYTORCH_TESTING_DEVICE_ONLY_FOR", self.name)
        return only_for.upper()

    def version(self) -> str:
        """What the inventory's cache is keyed by besides torch: a digest of the backend's own
        sources, or the torch build for a backend with no package of its own."""
        if self.package is None:
            return f"{self.name}:torch-{torch_build()}"
        root = package_dir(self.package)
        if root is None:
            raise BackendError(f"backend package {self.package!r} is not importable")
        files = [
            p
            for p in root.rglob("*")
            if p.suffix in {".py", ".yaml", ".yml", ".cpp", ".h"}
            and p.is_file()
            and "__pycache__" not in p.parts
            and not any(part in self.exclude_from_version for part in p.relative_to(root).parts)
        ]
        return f"{self.name}:{hash_files(files, root=root)[:16]}"
