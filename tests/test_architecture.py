"""The architecture is a checked contract: the import-linter contracts in pyproject.toml (layers,
no cycles, a pure selector, the workers' stages in order) hold, and no module of ours grows past
600 lines."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 600


def _packages() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return list(config["tool"]["importlinter"]["root_packages"])


def test_import_contracts_are_kept() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run(
        [str(lint_imports), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_every_package_is_in_the_contract_and_installed() -> None:
    """A new top-level package must join the layers (and the wheel), or nothing checks it."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    ours = {
        p.name
        for p in ROOT.iterdir()
        if (p / "__init__.py").is_file() and p.name not in ("tests", "benchmarks")
    }
    assert ours == set(_packages())
    layered = {
        name.strip()
        for layer in config["tool"]["importlinter"]["contracts"][0]["layers"]
        for name in layer.split("|")
    }
    assert layered == ours
    included = {p.rstrip("*") for p in config["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert included == ours


def test_no_module_is_over_600_lines() -> None:
    long = [
        f"{path.relative_to(ROOT)}: {n} lines"
        for package in _packages()
        for path in sorted((ROOT / package).rglob("*.py"))
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    ]
    assert long == []
