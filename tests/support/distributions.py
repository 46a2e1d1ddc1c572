"""A distribution installed for one test, laid out the way pip lays out a wheel: a folder on
``sys.path`` with the distribution's modules and a ``NAME-VERSION.dist-info`` holding its
``METADATA`` and ``entry_points.txt``. :mod:`importlib.metadata` finds it as it finds any other;
nothing of the product knows it is a test's."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest


@dataclass
class Distributions:
    root: Path
    monkeypatch: pytest.MonkeyPatch
    modules: list[str] = field(default_factory=list)

    def install(
        self,
        name: str,
        *,
        modules: Mapping[str, str],
        entry_points: Mapping[str, Mapping[str, str]],
    ) -> Path:
        """``name`` 1.0 with ``modules`` (module name -> source) declaring ``entry_points``
        (group -> entry-point name -> ``module:attr``); returns its folder on ``sys.path``."""
        site = self.root / f"site-{name}"
        info = site / f"{name}-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        lines: list[str] = []
        for group, points in entry_points.items():
            lines += [f"[{group}]", *(f"{k} = {v}" for k, v in points.items()), ""]
        (info / "entry_points.txt").write_text("\n".join(lines))
        for module, source in modules.items():
            (site / f"{module}.py").write_text(source)
            self.modules.append(module)
        self.monkeypatch.syspath_prepend(str(site))
        return site

    def forget(self) -> None:
        for module in self.modules:
            sys.modules.pop(module, None)


def distributions(root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Distributions]:
    installed = Distributions(root, monkeypatch)
    try:
        yield installed
    finally:
        installed.forget()
