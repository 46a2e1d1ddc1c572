"""Where the inventory's test files come from, and which backend they are collected for.

Two kinds of test source share one interface:

* :class:`BundledSuites`: the project's own device-generic suites in ``spyre_stack/conformance``
  (used when no PyTorch checkout is given);
* :class:`CheckoutTests`: test files of a real PyTorch checkout (``test/test_ops.py`` ...),
  collected against the installed torch's test databases.

A :class:`Backend` says how to make ``instantiate_device_type_tests`` generate its classes in the
collection subprocess: environment variables and pytest plugins. Backends are registered by name
in ``BACKENDS``.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class InventoryError(Exception):
    """A clear, user-facing problem with an inventory request."""


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
        raise InventoryError("torch is not installed in this environment")
    text = (root / "version.py").read_text(encoding="utf-8")
    version = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", text, re.M)
    git = re.search(r"^git_version\s*=\s*['\"]([^'\"]+)", text, re.M)
    return f"{version.group(1) if version else '?'}+git{git.group(1)[:12] if git else '?'}"


@dataclass(frozen=True)
class Backend:
    """How to collect device-generic tests for one device."""

    name: str  # the device token in variant names: spyre, cpu
    env: Mapping[str, str]
    plugins: tuple[str, ...] = ()
    package: str | None = None  # its sources make up the backend version
    exclude_from_version: tuple[str, ...] = ()
    default_specs: tuple[Path, ...] = ()  # the backend's own spec files, used when none are given

    def pytest_command(
        self, options: list[str], targets: list[str], *, python: str | None = None
    ) -> list[str]:
        """A pytest run of ``targets`` for this backend in a fresh interpreter (``python``, by
        default this one): quiet, no cache, the simulator's one-time UserWarnings ignored,
        ``options`` (our own plugins and their flags), then the backend's plugins."""
        cmd = [python or sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        cmd += ["-W", "ignore::UserWarning", *options]
        for plugin in self.plugins:
            cmd += ["-p", plugin]
        return cmd + targets

    @property
    def class_suffix(self) -> str:
        only_for = self.env.get("PYTORCH_TESTING_DEVICE_ONLY_FOR", self.name)
        return only_for.upper()

    def version(self) -> str:
        if self.package is None:
            return f"{self.name}:torch-{torch_build()}"
        root = package_dir(self.package)
        if root is None:
            raise InventoryError(f"backend package {self.package!r} is not importable")
        files = [
            p
            for p in root.rglob("*")
            if p.suffix in {".py", ".yaml", ".yml", ".cpp", ".h"}
            and p.is_file()
            and "__pycache__" not in p.parts
            and not any(part in self.exclude_from_version for part in p.relative_to(root).parts)
        ]
        return f"{self.name}:{hash_files(files, root=root)[:16]}"


def _spyre() -> Backend:
    env = {"PYTORCH_TESTING_DEVICE_ONLY_FOR": "privateuse1"}
    base = package_dir("spyre_stack")
    device_base = base / "testing" / "device_base.py" if base else None
    if device_base is not None and device_base.is_file():
        env["TORCH_TEST_DEVICES"] = str(device_base)
    return Backend(
        name="spyre",
        env=env,
        plugins=("spyre_stack.testing.pytest_plugin",),
        package="spyre_stack",
        # the bundled suites are the inventory's revision, not the backend's version
        exclude_from_version=("conformance",),
        default_specs=tuple(p for p in (PROJECT_ROOT / "testspecs" / "spyre",) if p.is_dir()),
    )


def _cpu() -> Backend:
    return Backend(name="cpu", env={"PYTORCH_TESTING_DEVICE_ONLY_FOR": "cpu"})


BACKENDS: dict[str, Callable[[], Backend]] = {"spyre": _spyre, "cpu": _cpu}


def get_backend(name: str) -> Backend:
    try:
        return BACKENDS[name]()
    except KeyError:
        raise InventoryError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}") from None


@dataclass(frozen=True)
class BundledSuites:
    """The project's conformance suites (all of them, or the named ones)."""

    suites: tuple[str, ...] = ()
    kind: str = field(default="bundled", init=False)

    @property
    def root(self) -> Path:
        return PROJECT_ROOT

    def _table(self) -> dict[str, Path]:
        from spyre_stack.conformance import suite_files

        return suite_files()

    def files(self) -> dict[str, Path]:
        table = self._table()
        unknown = sorted(set(self.suites) - set(table))
        if unknown:
            raise InventoryError(
                f"unknown suite(s) {', '.join(unknown)}; bundled suites: {', '.join(table)}"
            )
        return {k: v for k, v in table.items() if not self.suites or k in self.suites}

    def targets(self) -> list[str]:
        return [p.relative_to(self.root).as_posix() for p in self.files().values()]

    def suite_of(self, file: str) -> str:
        for name, path in self._table().items():
            if path.relative_to(self.root).as_posix() == file:
                return name
        return Path(file).stem

    def revision(self) -> str:
        from spyre_stack.conformance import SUITE_DIR

        return "bundled:" + hash_files(SUITE_DIR.glob("*.py"), root=SUITE_DIR)[:16]

    def describe(self) -> str:
        return "bundled suites" + (f" {', '.join(self.suites)}" if self.suites else "")


@dataclass(frozen=True)
class CheckoutTests:
    """Test files of a PyTorch checkout, given relative to its root (``test/test_ops.py``)."""

    root: Path
    files_: tuple[str, ...]
    kind: str = field(default="checkout", init=False)

    def __post_init__(self) -> None:
        root = Path(self.root)
        if not (root / "test").is_dir() or not (root / "torch").is_dir():
            raise InventoryError(f"{root} is not a PyTorch checkout (no torch/ and test/ folders)")
        missing = [f for f in self.files_ if not (root / f).is_file()]
        if missing:
            raise InventoryError(f"no such test file(s) in {root}: {', '.join(missing)}")
        if not self.files_:
            raise InventoryError("name at least one test file of the checkout")

    def files(self) -> dict[str, Path]:
        return {Path(f).stem: Path(self.root) / f for f in self.files_}

    def targets(self) -> list[str]:
        return list(self.files_)

    def suite_of(self, file: str) -> str:
        return Path(file).stem

    def revision(self) -> str:
        head = "nogit"
        with contextlib.suppress(OSError, subprocess.CalledProcessError):
            head = subprocess.run(
                ["git", "-C", str(self.root), "rev-parse", "HEAD"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
        paths = [Path(self.root) / f for f in self.files_]
        return f"{head}:{hash_files(paths, root=Path(self.root))[:16]}"

    def describe(self) -> str:
        return f"{self.root} ({', '.join(self.files_)})"


def ci_file_key(file: str) -> str:
    """test-times.json names files relative to test/ without ``.py``: ``test/nn/test_x.py`` -> ``nn/test_x``."""
    rel = file.removeprefix("test/")
    return rel.removesuffix(".py")
