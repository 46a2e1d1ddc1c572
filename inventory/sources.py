"""Where the inventory's test files come from.

Two kinds of test source share one interface:

* :class:`BundledSuites`: the project's own device-generic suites in ``spyre_stack/conformance``
  (used when no PyTorch checkout is given);
* :class:`CheckoutTests`: test files of a real PyTorch checkout (``test/test_ops.py`` ...),
  collected against the installed torch's test databases.

Which device they are collected for is a backend's business (:mod:`backends`).
"""

from __future__ import annotations

import contextlib
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from backends.base import PROJECT_ROOT, hash_files


class InventoryError(Exception):
    """A clear, user-facing problem with an inventory request."""


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
